"""Differential-fuzzer regression: ReduceLogSumExp of a row holding +inf gave NaN (inf - inf in
the max shift) on both targets where ONNX gives +inf; a row of -inf gave NaN for -inf.
Found by python -m tensorforge.testing.fuzz --seed 7 (batch 8, case 7); fixed in
frontends/onnx_ops/reduce.py (a non-finite maximum shifts by 0).
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from tensorforge.testing.fuzz_check import check_model  # noqa: E402

nan, inf = np.nan, np.inf


def build():
    nodes = [helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])],
                              [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [np.array([[1, inf, 2], [-inf, -inf, -inf], [nan, 1, 2], [1e30, -1e30, 3], [0.5, -0.25, 2]], np.float32)]


def test_fuzz_logsumexp_inf():
    assert check_model(build(), FEEDS, targets=("cpu", "interpreter")) == []
