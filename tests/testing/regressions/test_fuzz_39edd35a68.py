"""Differential-fuzzer regression 39edd35a68: interpreter inf (Clip,Reciprocal).

Found by python -m tensorforge.testing.fuzz --seed 10101 --cases 20000 --batch 16 and minimised; when found:
    s10101b88c4 [interpreter] inf s10101b88c4_recipr9: 1/1 differ, e.g. at [0, 0, 0]: got np.float32(inf), expected np.float32(-inf) (ops Clip,Reciprocal; specials -0)

Clip(-0.0, min=0): the interpreter's np.maximum gave +0.0 (NumPy returns the second operand
for equal values); onnxruntime, torch.clamp and the native kernel keep -0.0 (compare-and-select).
Reciprocal then showed +inf against -inf.
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
        helper.make_node('Clip', ['in1', 'c2', 'c3'], ['clip4']),
        helper.make_node('Reciprocal', ['clip4'], ['recipr9']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 1])]
    outputs = [helper.make_tensor_value_info('recipr9', 1, [1, 1, 1])]
    inits = [
        numpy_helper.from_array(np.array([0.0], dtype=np.float32).reshape(()), 'c2'),
        numpy_helper.from_array(np.array([200.0], dtype=np.float32).reshape(()), 'c3'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.0], dtype=np.float32).reshape((1, 1, 1)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_39edd35a68(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
