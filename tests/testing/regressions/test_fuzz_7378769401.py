"""Differential-fuzzer regression 7378769401: cpu nan (ConvTranspose).

Found by python -m tensorforge.testing.fuzz --seed 200 --cases 3200 --batch 16 and minimised; when found:
    s200b105c2 [cpu] nan s200b105c2_convtr8: 1/2 differ, e.g. at [0, 0, 1]: got np.float32(nan), expected np.float32(-0.16250005) (ops ConvTranspose; specials nan)
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
        helper.make_node('ConvTranspose', ['in6', 'in7'], ['convtr8'], strides=[1]),
    ]
    inputs = [helper.make_tensor_value_info('in6', 1, [1, 4, 1]), helper.make_tensor_value_info('in7', 1, [4, 1, 2])]
    outputs = [helper.make_tensor_value_info('convtr8', 1, [1, 1, 2])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.3700000047683716, -0.28999999165534973, -0.36000001430511475, -0.12999999523162842], dtype=np.float32).reshape((1, 4, 1)),
    np.array([0.8899999856948853, -0.12999999523162842, nan, -1.840000033378601, 0.09000000357627869, 1.5399999618530273, -0.12999999523162842, 1.4600000381469727], dtype=np.float32).reshape((4, 1, 2)),
]


# Native ConvTranspose: a NaN (or Inf) in one weight tap w[c,0,0] turns output [0,0,1] (which only
# reads taps w[:,0,1]) into NaN; onnxruntime and the interpreter keep it finite.  Looks like
# padded/zero-inserted taps multiplied in (0 * NaN).  Part of the native NaN/Inf work.
def test_fuzz_7378769401():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
