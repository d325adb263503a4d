"""Differential-fuzzer regression db6e6fbfe2: interpreter error (LogSoftmax).

Found by python -m tensorforge.testing.fuzz --seed 100 --cases 8000 --batch 16 and minimised; when found:
    s100b153c10 [interpreter] error : IRError: interpreting 'graph.log_softmax' at LogSoftmax_0 failed: ValueError: zero-size array to reduction operation maximum which has no identity at ir/interpreter.py:190 (ops LogSoftmax; specials -)
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
        helper.make_node('LogSoftmax', ['in1'], ['logsof2'], axis=0),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [0, 1])]
    outputs = [helper.make_tensor_value_info('logsof2', 1, [0, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [
    np.array([], dtype=np.float32).reshape((0, 1)),
]


def test_fuzz_db6e6fbfe2():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
