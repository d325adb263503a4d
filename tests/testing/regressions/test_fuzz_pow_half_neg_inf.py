"""Differential-fuzzer regression: Pow(x, 0.5) at x = -inf and -0.0 on the interpreter.

Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --jobs 2 (batch 1249); when found:
    s4242b1249c14 [interpreter] nan s4242b1249c14_log10: 1/20 differ, e.g. at [3, 1]: got np.float32(nan), expected np.float32(inf) (ops Abs,LayerNormalization,Log,Mean,Pow,Sigmoid,Transpose; specials -inf,nan)
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from tensorforge.testing.fuzz_check import check_model  # noqa: E402

nan, inf = np.nan, np.inf


def build():
    nodes = [helper.make_node('Pow', ['x', 'half'], ['p']),
             helper.make_node('Reciprocal', ['p'], ['y'])]
    inputs = [helper.make_tensor_value_info('x', 1, [6])]
    outputs = [helper.make_tensor_value_info('p', 1, [6]), helper.make_tensor_value_info('y', 1, [6])]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), 'half')]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [np.array([-inf, -0.0, 0.0, 4.0, -1.0, nan], dtype=np.float32)]


# NumPy evaluates x ** 0.5 as sqrt(x): sqrt(-inf) is NaN and sqrt(-0.0) is -0.0, where C99 pow
# (native code, onnxruntime, PyTorch) gives +inf and +0.0 (so 1/p is +inf, not -inf).
def test_fuzz_pow_half_neg_inf():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
