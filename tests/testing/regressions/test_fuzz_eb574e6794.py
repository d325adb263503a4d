"""Differential-fuzzer regression eb574e6794: cpu value (LayerNormalization,Selu).

Found by python -m tensorforge.testing.fuzz --seed 7 --first-batch 5 --cases 16 --batch 16 (case 1) and minimised; when found:
    s7b5c1 [cpu] value s7b5c1_layern5: 1/1 differ, e.g. at [0, 0, 0, 0]: got np.float32(0.18996762), expected np.float32(0.19) (rtol 1.0e-04, atol 1.22e-05) (ops LayerNormalization,Selu; specials -)
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
        helper.make_node('Selu', ['in1'], ['selu2']),
        helper.make_node('LayerNormalization', ['selu2', 'c3', 'in4'], ['layern5'], axis=3, epsilon=1e-06),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 1, 1]), helper.make_tensor_value_info('in4', 1, [1])]
    outputs = [helper.make_tensor_value_info('layern5', 1, [1, 1, 1, 1])]
    inits = [
        numpy_helper.from_array(np.array([-1.2819188833236694], dtype=np.float32).reshape((1,)), 'c3'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [
    np.array([1.0199999809265137], dtype=np.float32).reshape((1, 1, 1, 1)),
    np.array([0.1899999976158142], dtype=np.float32).reshape((1,)),
]


# LayerNormalization over one element: x - mean(x) is exactly 0 in onnxruntime and the interpreter,
# so the result is the bias.  Natively gcc's default -ffp-contract=fast turns the centring
# ``t4 - mean`` (t4 = selu(x) * 1.0507, a rounded product kept in a local) into
# fma(elu(x), 1.0507, -mean): the exact product minus its rounding = 2.5e-8, which
# 1/sqrt(var + 1e-6) = 1000 amplifies to a 1.7e-4 relative error.  The same C built with
# -ffp-contract=off gives 0.19 exactly.  Fixed without turning contraction off: the statistics
# are corrected two-pass (lower/to_structured/norm.py moments), centring as (x - mean) - mean(x - mean),
# which cancels however each copy of x - mean is contracted.
def test_fuzz_eb574e6794():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
