"""Differential-fuzzer regression b9661a5ff3: cpu inf (Mul,Reciprocal).

Found by python -m tensorforge.testing.fuzz --seed 11111 --cases 20000 --batch 16 and minimised; when found:
    s11111b287c6 [cpu] inf s11111b287c6_mul3: 1/1 differ, e.g. at [0, 0, 0, 0]: got np.float32(1.0), expected np.float32(inf) (ops Mul,Reciprocal; specials denorm)
The graph simplifier rewrote ``mul(reciprocal(x), x)`` into ``div(x, x)``, which is 1 where IEEE
arithmetic (and onnxruntime) gives inf: 1 / 1e-40 overflows.  The rule is gone (no simplification
may change a float result outside fast-math).
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
        helper.make_node('Reciprocal', ['in1'], ['recipr2']),
        helper.make_node('Mul', ['recipr2', 'in1'], ['mul3']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 1, 1])]
    outputs = [helper.make_tensor_value_info('mul3', 1, [1, 1, 1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([9.99994610111476e-41], dtype=np.float32).reshape((1, 1, 1, 1)),
]


def test_fuzz_mul_reciprocal_denormal():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
