"""Differential-fuzzer regression 0fcc1738de: cpu value (Pad,Pow).

Found by python -m tensorforge.testing.fuzz --seed 100 --cases 8000 --batch 16 and minimised; when found:
    s100b268c4 [cpu] value s100b268c4_pad11: 2/6 differ, e.g. at [0, 0, 0]: got np.float32(4.558e-41), expected np.float32(-1.77) (rtol 1.0e-04, atol 1.05e-04) (ops Pad,Pow; specials -)
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
        helper.make_node('Pow', ['in6', 'c7'], ['pow8']),
        helper.make_node('Pad', ['pow8', 'c9', 'c10'], ['pad11'], mode='constant'),
    ]
    inputs = [helper.make_tensor_value_info('in6', 1, [1, 2, 4])]
    outputs = [helper.make_tensor_value_info('pad11', 1, [1, 3, 2])]
    inits = [
        numpy_helper.from_array(np.array([-1.0], dtype=np.float32).reshape(()), 'c7'),
        numpy_helper.from_array(np.array([1, -1, -1, -1, 2, -1], dtype=np.int64).reshape((6,)), 'c9'),
        numpy_helper.from_array(np.array([-1.7699999809265137], dtype=np.float32).reshape(()), 'c10'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [
    np.array([-0.10999999940395355, 0.6299999952316284, 0.18000000715255737, -1.4800000190734863, 1.600000023841858, 1.4900000095367432, 0.009999999776482582, -1.4900000095367432], dtype=np.float32).reshape((1, 2, 4)),
]


# Native constant-mode Pad whose pads crop one side and extend the other (pads [1,-1,-1,-1,2,-1])
# fills the extended positions with 0 or stale arena values (seen: 1.1e-44, 4.5e-41, 0.03)
# instead of the pad value; the interpreter agrees with onnxruntime.  Found 5 times in 8000 graphs.
def test_fuzz_0fcc1738de():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
