"""Differential-fuzzer regression a70b5bd5c6: cpu value (Pad).

Found by python -m tensorforge.testing.fuzz --seed 11111 --cases 20000 --batch 16 and minimised; when found:
    s11111b1146c11 [cpu] value s11111b1146c11_pad12: 4/18 differ, e.g. at [4, 0]: got np.float32(0.0), expected np.float32(0.97) (rtol 1.0e-04, atol 1.00e-05) (ops Pad; specials -)
gcc 12 -O3 with AVX2 if-converted the padded read ``(in bounds) ? x[i] : 2.17`` of the fully unrolled
9x2 loop into two masked loads, and gave the second load the first one's mask: input rows 2 and 3
read 0 (also with -mtune=generic).  Kernels with padded reads are now compiled without loop
if-conversion on gcc < 13 (emit_loop TF_NO_IF_CONVERT).
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
        helper.make_node('Pad', ['in9', 'c10', 'c11'], ['pad12'], mode='constant'),
    ]
    inputs = [helper.make_tensor_value_info('in9', 1, [5, 2])]
    outputs = [helper.make_tensor_value_info('pad12', 1, [9, 2])]
    inits = [
        numpy_helper.from_array(np.array([2, 0, 2, 0], dtype=np.int64).reshape((4,)), 'c10'),
        numpy_helper.from_array(np.array([2.1700000762939453], dtype=np.float32).reshape(()), 'c11'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([1.25, -0.11999999731779099, 2.8299999237060547, -0.7099999785423279, 0.9700000286102295, -0.8100000023841858, 0.8799999952316284, -0.6100000143051147, 1.340000033378601, -0.8600000143051147], dtype=np.float32).reshape((5, 2)),
]


def test_fuzz_pad_unrolled_mask():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
