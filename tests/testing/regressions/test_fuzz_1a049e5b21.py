"""Differential-fuzzer regression 1a049e5b21: cpu value (Log,Reciprocal,Softplus).

Found by python -m tensorforge.testing.fuzz --seed 8181 --cases 20000 --batch 16 and minimised; when found:
    s8181b455c8 [cpu] value s8181b455c8_recipr16: 1/1 differ, e.g. at [0, 0, 0]: got np.float32(-0.0), expected np.float32(-0.010001691) (rtol 1.0e-04, atol 2.96e-04) (ops Log,Reciprocal,Softplus; specials -)

Softplus(-100) = log1p(exp(-100)) = 3.7e-44, a float32 denormal; the vectorised tf_expf clamped
its argument at -88.5 and built 2^k from the exponent bits, so below the normal range it gave
0, and Log of the softplus -inf (then Reciprocal -0.0).  tf_expf now builds 2^k as two normal
halves and goes down to -104: results in the denormal range are denormals (vmath.py).
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
        helper.make_node('Softplus', ['clip12'], ['softpl13']),
        helper.make_node('Log', ['softpl13'], ['log15']),
        helper.make_node('Reciprocal', ['log15'], ['recipr16']),
    ]
    inputs = [helper.make_tensor_value_info('clip12', 1, [1, 1, 1])]
    outputs = [helper.make_tensor_value_info('recipr16', 1, [1, 1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [
    np.array([-100.0], dtype=np.float32).reshape((1, 1, 1)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_1a049e5b21(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
