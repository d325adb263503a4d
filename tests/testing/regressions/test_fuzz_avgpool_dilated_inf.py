"""Differential-fuzzer regression: dilated AveragePool over a window holding -inf gave NaN.

Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --jobs 2 (batch 1242); when found:
    s4242b1242c0 [cpu] nan s4242b1242c0_averag4: 3/32 differ, e.g. at [1, 0, 1]: got np.float32(nan), expected np.float32(-inf) (ops Abs,AveragePool; specials -0,-huge,-inf,inf,nan,tiny)
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from tensorforge.testing.fuzz_check import check_model  # noqa: E402

nan, inf = np.nan, np.inf


def build(count_include_pad: int):
    nodes = [helper.make_node('AveragePool', ['x'], ['y'], kernel_shape=[3], strides=[2], dilations=[2],
                              pads=[2, 2], count_include_pad=count_include_pad)]
    inputs = [helper.make_tensor_value_info('x', 1, [1, 2, 7])]
    outputs = [helper.make_tensor_value_info('y', 1, [1, 2, 4])]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)


FEEDS = [np.array([[[-3.37, -3.13, 2.56, 1.10, -inf, 1.98, 3.08],
                    [2.91, inf, 2.77, -1.0, nan, 5.35, -0.0]]], dtype=np.float32)]


# A dilated window is imported as a depthwise convolution with a kernel of ones; the divisor
# (count of taps inside the input) was the same convolution over x * 0 + 1, which is NaN where x
# is +-inf.  The divisor is now a constant computed from the window geometry.
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_fuzz_avgpool_dilated_inf(count_include_pad):
    assert check_model(build(count_include_pad), FEEDS, targets=('cpu', 'interpreter')) == []
