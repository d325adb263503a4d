"""Differential-fuzzer regression cb30322656: cpu error (Gemm with an empty (3, 0) B, i.e. N = 0;
fixed in passes/fusion/inline.py: decide_inline divided the epilogue parameter's recompute cost by
the contraction's work, 0 for an empty GEMM domain; the work now counts at least 1, as the
element count beside it does).
Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --batch 16 and minimised; when found:
    s4242b851c12 [cpu] error : ZeroDivisionError: float division by zero at passes/fusion/inline.py:147 (ops Gemm,IsInf,Transpose; specials -)
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
        helper.make_node('Gemm', ['in1', 'c2', 'c3'], ['gemm4'], transA=0, transB=0, alpha=0.79, beta=-0.47),
        helper.make_node('Transpose', ['gemm4'], ['transp6'], perm=[1, 0]),
        helper.make_node('IsInf', ['transp6'], ['isinf7'], detect_negative=1, detect_positive=0),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 3])]
    outputs = [helper.make_tensor_value_info('isinf7', 9, [0, 1])]
    inits = [
        numpy_helper.from_array(np.array([], dtype=np.float32).reshape((3, 0)), 'c2'),
        numpy_helper.from_array(np.array([0.5964434146881104], dtype=np.float32).reshape((1,)), 'c3'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([1.3700000047683716, 0.3100000023841858, -0.44999998807907104], dtype=np.float32).reshape((1, 3)),
]


def test_fuzz_cb30322656():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
