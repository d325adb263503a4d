"""Differential-fuzzer regression 47458f4a53: cpu nan (Mean,ReduceMin).

Found by python -m tensorforge.testing.fuzz --seed 6161 --cases 20000 --batch 16 and minimised; when found:
    s6161b1159c4 [cpu] nan s6161b1159c4_mean8: 2/3 differ, e.g. at [0, 0, 0]: got np.float32(nan), expected np.float32(0.65) (ops Mean,ReduceMin; specials nan)

onnxruntime's ReduceMin drops the NaN here (0.65); tensorforge, torch.amin and onnx.reference give
NaN.  The tie-break could not settle it: onnx 1.23's reference Mean fails when its first operand
is the smaller one of a broadcast.  The fuzzer's evaluator now has a fixed Mean
(fuzz_check._evaluator), and this is an onnxruntime deviation.
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402,F401

from tensorforge.testing.fuzz_check import check_model  # noqa: E402

nan, inf = np.nan, np.inf


def build():
    nodes = [
        helper.make_node('ReduceMin', ['clip4', 'c6'], ['reduce7'], keepdims=1),
        helper.make_node('Mean', ['reduce7', 'clip4'], ['mean8']),
    ]
    inputs = [helper.make_tensor_value_info('clip4', 1, [1, 1, 3])]
    outputs = [helper.make_tensor_value_info('mean8', 1, [1, 1, 3])]
    inits = [
        numpy_helper.from_array(np.array([0, 1, 2], dtype=np.int64).reshape((3,)), 'c6'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([0.6499999761581421, nan, 0.6499999761581421], dtype=np.float32).reshape((1, 1, 3)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_47458f4a53(target):
    import tensorforge
    assert check_model(build(), FEEDS, targets=(target,)) == []
    got = tensorforge.compile(build(), target=target)(*FEEDS)
    assert np.isnan(got).all()
