"""Differential-fuzzer regression c243b717b6: cpu value (Erf,Floor).

Found by python -m tensorforge.testing.fuzz --seed 7171 --cases 20000 --batch 16 and minimised; when found:
    s7171b1221c9 [cpu] value s7171b1221c9_floor3: 1/1 differ, e.g. at [0, 0, 0, 0]: got np.float32(1.0), expected np.float32(0.0) (rtol 1.0e-04, atol 1.36e-05) (ops Erf,Floor; specials -)

Floor(Erf(3.79)): erf(3.79) = 1 - 1.1e-7 rounds to 0.99999988; the vectorised tf_erff (a few ulps,
vmath.py) gives 1.0, and Floor turns that ulp into 1 against 0.  The Floor input lies within
Erf's tolerance of the step: the fuzzer reports it as "ill-conditioned"
(fuzz_check.ill_conditioned).
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
        helper.make_node('Erf', ['in1'], ['erf2']),
        helper.make_node('Floor', ['erf2'], ['floor3']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 1, 1])]
    outputs = [helper.make_tensor_value_info('floor3', 1, [1, 1, 1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([3.7919507026672363], dtype=np.float32).reshape((1, 1, 1, 1)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_c243b717b6(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
