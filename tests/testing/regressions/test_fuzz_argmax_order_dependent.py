"""Differential-fuzzer regression cb7166a426: cpu value (ArgMax,MatMul).

Found by python -m tensorforge.testing.fuzz --seed 14141 --cases 20000 --batch 16 and minimised; when found:
    s14141b699c7 [cpu] value s14141b699c7_argmax16: 1/3 differ, e.g. at [0, 0, 0]: got np.int64(0), expected np.int64(2) (ops ArgMax,MatMul; specials -tiny,huge,inf,tiny)
The MatMul sums inf with products that overflow float32: onnxruntime gets -inf, tensorforge NaN
(both order-dependent), and ArgMax then picks the NaN (index 0, as torch) or skips the -inf (index
2).  Reported as order-dependent (fuzz_check.arg_unsettled), never open.
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
        helper.make_node('MatMul', ['in7', 'transp10'], ['matmul11']),
        helper.make_node('ArgMax', ['matmul11'], ['argmax16'], axis=-2, keepdims=1, select_last_index=0),
    ]
    inputs = [helper.make_tensor_value_info('in7', 1, [1, 3, 8]), helper.make_tensor_value_info('transp10', 1, [1, 8, 3])]
    outputs = [helper.make_tensor_value_info('argmax16', 7, [1, 1, 3])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-1.1200000047683716, inf, 0.6000000238418579, -1.159999966621399, 1.0000000150474662e+30, -0.8700000047683716, -0.949999988079071, -1.0000000031710769e-30, -0.12999999523162842, 1.0000000031710769e-30, -1.3700000047683716, 1.0000000150474662e+30, -1.0299999713897705, 0.12999999523162842, -0.009999999776482582, -0.12999999523162842, 0.6399999856948853, -0.10000000149011612, -1.7799999713897705, 0.2199999988079071, 0.6499999761581421, -0.8199999928474426, 0.9399999976158142, 0.10999999940395355], dtype=np.float32).reshape((1, 3, 8)),
    np.array([1.2699999809265137, 0.8500000238418579, -0.5799999833106995, -0.5400000214576721, 1.4700000286102295, 0.3799999952316284, 0.10000000149011612, 0.36000001430511475, 0.8199999928474426, 0.6700000166893005, 1.399999976158142, 0.28999999165534973, 1.0000000150474662e+30, -0.12999999523162842, 0.5699999928474426, -0.75, 0.18000000715255737, 0.33000001311302185, 1.2999999523162842, -0.18000000715255737, 0.8700000047683716, -0.5400000214576721, 0.4300000071525574, -0.17000000178813934], dtype=np.float32).reshape((1, 8, 3)),
]


def test_fuzz_argmax_order_dependent():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []


def test_fuzz_argmax_order_dependent_is_classified_not_hidden():
    from tensorforge.testing.fuzz_check import case_from_model, check_cases
    from tensorforge.testing.fuzz_known import DEVIATION_KINDS
    found = check_cases([case_from_model(build(), FEEDS)], None, ('cpu', 'interpreter'))
    assert all(m.kind in DEVIATION_KINDS for m in found), found
