"""Differential-fuzzer regression 0c78814649: cpu error (ReduceL2 of a rank-0 tensor; fixed in
frontends/onnx_ops/reduce.py: a scalar is reduced over no axis, so no graph.reduce_* is emitted).

Found by python -m tensorforge.testing.fuzz --seed 7 --first-batch 14 --cases 16 --batch 16 (case 15) and minimised; when found:
    s7b14c15 [cpu] error : ShapeError: 'structured.compute': reduction axes need a combiner and vice versa (operands: ) at ir/builder.py:42 (ops ReduceL2; specials -)
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
        helper.make_node('ReduceL2', ['in1'], ['reduce2'], keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [])]
    outputs = [helper.make_tensor_value_info('reduce2', 1, [])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [
    np.array([0.75], dtype=np.float32).reshape(()),
]


def test_fuzz_0c78814649():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
