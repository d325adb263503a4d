"""Differential-fuzzer regression 2d56487759: cpu inf (Elu,Reciprocal).

Found by python -m tensorforge.testing.fuzz --seed 200 --cases 3200 --batch 16 and minimised; when found:
    s200b77c10 [cpu] inf s200b77c10_recipr3: 1/1 differ, e.g. at [0, 0]: got np.float32(inf), expected np.float32(-inf) (ops Elu,Reciprocal; specials -0)
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
        helper.make_node('Elu', ['in1'], ['elu2'], alpha=0.349),
        helper.make_node('Reciprocal', ['elu2'], ['recipr3']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1])]
    outputs = [helper.make_tensor_value_info('recipr3', 1, [1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [
    np.array([-0.0], dtype=np.float32).reshape((1, 1)),
]


# Signed zero: onnxruntime's Elu returns x itself for x >= 0, so Elu(-0.0) = -0.0 and
# Reciprocal gives -inf; tensorforge (interpreter and native) computes alpha*(exp(x)-1) = +0.0.
def test_fuzz_2d56487759():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
