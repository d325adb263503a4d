"""Differential-fuzzer regression: constant Pad on cpu read 0 for rows inside the input.

Found by python -m tensorforge.testing.fuzz --seed 5151 --cases 20000 --jobs 2; when found:
    s5151b1089c1 [cpu] value s5151b1089c1_pad4: 4/14 differ, e.g. at [2, 0]: got np.float32(0.0), expected np.float32(2.6800218) (ops BatchNormalization,Neg,Pad,Split; specials -)
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from tensorforge.testing.fuzz_check import check_model  # noqa: E402


def build():
    nodes = [helper.make_node('Pad', ['x', 'p', 'v'], ['y'], mode='constant'),
             helper.make_node('Neg', ['x'], ['z'])]
    inputs = [helper.make_tensor_value_info('x', 1, [5, 2])]
    outputs = [helper.make_tensor_value_info('y', 1, [7, 2]), helper.make_tensor_value_info('z', 1, [5, 2])]
    inits = [numpy_helper.from_array(np.array([2, 0, 0, 0], np.int64), 'p'),
             numpy_helper.from_array(np.array(-0.36, np.float32), 'v')]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [np.arange(1, 11, dtype=np.float32).reshape(5, 2)]


# The padded read was ``(v >= 0 && v < 5 && i >= 0 && i < 2) ? x[...] : pad``; gcc 12.2 at -O3
# -march=znver1 vectorised the && chain wrongly (rows 2 and 3 of the result read 0).  The
# condition is now written with & on the 0/1 compares, as the NaN-safe compares already were.
def test_fuzz_pad_bounds_and():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
