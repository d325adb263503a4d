"""Differential-fuzzer regression 292b695934: cpu nan (Attention).

Found by python -m tensorforge.testing.fuzz --seed 11111 --cases 20000 --batch 16 and minimised; when found:
    s11111b776c3 [cpu] nan s11111b776c3_attent13: 1/4 differ, e.g. at [1, 0, 0, 0]: got np.float32(nan), expected np.float32(-0.21) (ops Attention; specials -huge,huge)
The query-key products hold -1e60 and +1e60 in one dot product, which overflow float32: the score
is NaN when each product is rounded first (tensorforge's cpu kernel), -inf under an FMA chain
(onnx.reference and the interpreter: the row is then fully masked, output 0), and onnxruntime
gives yet another value.  ONNX fixes neither summation order nor FMA use, so the fuzzer reports it
as order-dependent (fuzz_check.cancelling_overflow), never open; the same inputs at 1e15 (no
overflow) must still agree.
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
        helper.make_node('Attention', ['in10', 'in11', 'in12'], ['attent13'], is_causal=1),
    ]
    inputs = [helper.make_tensor_value_info('in10', 1, [2, 1, 2, 3]), helper.make_tensor_value_info('in11', 1, [2, 1, 5, 3]), helper.make_tensor_value_info('in12', 1, [2, 1, 5, 1])]
    outputs = [helper.make_tensor_value_info('attent13', 1, [2, 1, 2, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([0.1899999976158142, -1.2699999809265137, 0.0, 0.07999999821186066, 0.20000000298023224, -0.5, -1.0000000150474662e+30, -1.0000000150474662e+30, 1.0000000150474662e+30, 0.03999999910593033, 0.09000000357627869, -0.009999999776482582], dtype=np.float32).reshape((2, 1, 2, 3)),
    np.array([1.0399999618530273, -1.2200000286102295, 0.3799999952316284, -0.5, -0.07000000029802322, -0.800000011920929, 0.5, -1.0800000429153442, 0.5, 0.5, 1.1100000143051147, -0.8399999737739563, -0.8899999856948853, 2.2699999809265137, -0.9599999785423279, 1.0000000150474662e+30, -1.0000000150474662e+30, 2.299999952316284, 0.12999999523162842, -0.5899999737739563, -0.5899999737739563, 0.49000000953674316, 0.12999999523162842, -0.6200000047683716, -0.33000001311302185, -0.9599999785423279, 0.7599999904632568, 0.2800000011920929, 1.0000000150474662e+30, 0.1599999964237213], dtype=np.float32).reshape((2, 1, 5, 3)),
    np.array([-0.4300000071525574, 0.05000000074505806, 0.14000000059604645, 1.2100000381469727, 1.0700000524520874, 0.03999999910593033, 0.15000000596046448, -0.7699999809265137, -0.009999999776482582, 1.559999942779541], dtype=np.float32).reshape((2, 1, 5, 1)),
]


def test_fuzz_attention_cancelling_overflow():
    from tensorforge.testing.fuzz_check import case_from_model, check_cases
    from tensorforge.testing.fuzz_known import ORDER_KIND

    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
    found = check_cases([case_from_model(build(), FEEDS)], None, ('cpu', 'interpreter'))
    assert all(m.kind == ORDER_KIND for m in found), found


def test_without_overflow_every_runtime_agrees():
    tame = [np.where(np.abs(f) > 1e20, np.sign(f) * 1e15, f).astype(np.float32) for f in FEEDS]
    from tensorforge.testing.fuzz_check import case_from_model, check_cases, cancelling_overflow, reference
    case = case_from_model(build(), tame)
    assert check_cases([case], None, ('cpu', 'interpreter')) == []
    assert not cancelling_overflow(case, reference(case), case.outputs[0])
    wild = case_from_model(build(), FEEDS)
    assert cancelling_overflow(wild, reference(wild), wild.outputs[0])
