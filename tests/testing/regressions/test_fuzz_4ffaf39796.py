"""Differential-fuzzer regression 4ffaf39796: cpu shape (AveragePool).

Found by python -m tensorforge.testing.fuzz --seed 9191 --cases 20000 --batch 16 and minimised; when found:
    s9191b709c8 [cpu] shape s9191b709c8_averag13: shape [1, 1, 0, 0] != [1, 1, 1, 1] (ops AveragePool; specials -)

AveragePool, VALID, a dilated window wider than the input: the spec gives no window (0),
onnxruntime truncates the negative span / stride to 0 and gives one; an onnxruntime
deviation (fuzz_check.pool_unlike_spec).
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
        helper.make_node('AveragePool', ['in12'], ['averag13'], kernel_shape=[2, 2], strides=[2, 2], dilations=[1, 2], auto_pad='VALID', count_include_pad=0),
    ]
    inputs = [helper.make_tensor_value_info('in12', 1, [1, 1, 1, 2])]
    outputs = [helper.make_tensor_value_info('averag13', 1, [1, 1, 1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-2.0999999046325684, 1.190000057220459], dtype=np.float32).reshape((1, 1, 1, 2)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_4ffaf39796(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
