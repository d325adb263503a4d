"""Differential-fuzzer regression 899ed5797d: interpreter error (AveragePool,Mul).

Found by python -m tensorforge.testing.fuzz --seed 7171 --cases 20000 --batch 16 and minimised; when found:
    s7171b1163c7 [interpreter] error : FrontendError: ONNX node 'Mul_1' (Mul, opset 23): 'graph.mul' at Mul_1: shapes (1, 1, 0, 0), (1, 2) do not broadcast (operands: tensor<1x1x0x0xf32>, tensor<1x2xf32>) at frontends/onnx_ops/importer.py:229 (ops AveragePool,Mul; specials -)

AveragePool with a window wider than its input on both axes (dilation 2, VALID): the ONNX spec's
floor(span / stride) + 1 gives no window, onnxruntime and ONNX's C++ shape inference truncate
the negative span / stride to 0 and give one, and the fuzzer built the Mul on that size.  Under
the spec the graph does not broadcast, and tensorforge says so at import: an onnxruntime
deviation (fuzz_check.pool_unlike_spec; docs/numerics.md, pooling output sizes).
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
        helper.make_node('AveragePool', ['in1'], ['averag2'], kernel_shape=[2, 2], strides=[2, 2], dilations=[1, 2], auto_pad='VALID', count_include_pad=0),
        helper.make_node('Mul', ['averag2', 'mod5'], ['mul6']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 1, 2]), helper.make_tensor_value_info('mod5', 1, [1, 2])]
    outputs = [helper.make_tensor_value_info('mul6', 1, [1, 1, 1, 2])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([1.3899999856948853, 0.12999999523162842], dtype=np.float32).reshape((1, 1, 1, 2)),
    np.array([0.12999999523162842, -1.1399999856948853], dtype=np.float32).reshape((1, 2)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_899ed5797d(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
    import tensorforge
    from tensorforge.errors import TensorforgeError
    with pytest.raises(TensorforgeError, match="do not broadcast"):
        tensorforge.compile(build(), target=target)
