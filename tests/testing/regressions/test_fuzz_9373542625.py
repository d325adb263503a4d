"""Differential-fuzzer regression 9373542625: interpreter value (LogSoftmax,Mod).

Found by python -m tensorforge.testing.fuzz --seed 7171 --cases 20000 --batch 16 and minimised; when found:
    s7171b499c2 [interpreter] value s7171b499c2_mod12: 2/2 differ, e.g. at [0, 0, 0]: got np.float32(0.2647798), expected np.float32(0.6180402) (rtol 1.0e-04, atol 1.14e-05) (ops LogSoftmax,Mod; specials huge)

fmod(1e30, y) with y a LogSoftmax output: one ulp of y changes the remainder over its whole
range, and the interpreter's LogSoftmax differs from onnxruntime's in the last bit.  Not a bug:
the fuzzer reports it as "ill-conditioned" (fuzz_check.ill_conditioned).
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
        helper.make_node('LogSoftmax', ['in4'], ['logsof5'], axis=-2),
        helper.make_node('Mod', ['in11', 'logsof5'], ['mod12'], fmod=1),
    ]
    inputs = [helper.make_tensor_value_info('in4', 1, [1, 2, 1]), helper.make_tensor_value_info('in11', 1, [])]
    outputs = [helper.make_tensor_value_info('mod12', 1, [1, 2, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.03417608141899109, -0.13842613995075226], dtype=np.float32).reshape((1, 2, 1)),
    np.array([1.0000000150474662e+30], dtype=np.float32).reshape(()),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_9373542625(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
