"""Differential-fuzzer regression 970d8ff61b: cpu value (AveragePool).

Found by python -m tensorforge.testing.fuzz --seed 9191 --cases 20000 --batch 16 and minimised; when found:
    s9191b909c1 [cpu] value s9191b909c1_averag7: 2/2 differ, e.g. at [0, 0, 0, 0]: got np.float32(-0.37), expected np.float32(-0.14) (rtol 1.0e-04, atol 1.07e-05) (ops AveragePool; specials -)

AveragePool, SAME_UPPER with dilation 2: the spec pads for the dilated extent
((out - 1) * stride + (k - 1) * d + 1 - in), onnxruntime pads as if there were no dilation,
so its windows start one row early; tensorforge follows the spec (and torch's
padding='same').  An onnxruntime deviation (fuzz_check.pool_unlike_spec).
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
        helper.make_node('AveragePool', ['in6'], ['averag7'], kernel_shape=[2, 1], strides=[2, 2], dilations=[2, 1], auto_pad='SAME_UPPER', ceil_mode=1),
    ]
    inputs = [helper.make_tensor_value_info('in6', 1, [1, 1, 3, 1])]
    outputs = [helper.make_tensor_value_info('averag7', 1, [1, 1, 2, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.20999999344348907, -0.3700000047683716, -0.07000000029802322], dtype=np.float32).reshape((1, 1, 3, 1)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_970d8ff61b(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
