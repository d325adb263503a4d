"""Differential-fuzzer regression: a mean over an empty set (ReduceMean of an empty Slice).

Found by python -m tensorforge.testing.fuzz --seed 5151 --cases 20000 --jobs 2 (s5151b80c8).
ONNX leaves a reduction over an empty set undefined for ReduceMean; tensorforge gives
0 / 0 = NaN as torch.mean and NumPy do, onnxruntime gives 0.  The fuzzer reports it as a
documented deviation (fuzz_check.empty_mean_upstream) and docs/numerics.md states it.
"""
import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.testing.fuzz_check import case_from_model, check_cases  # noqa: E402
from tensorforge.testing.fuzz_known import DEVIATION_KINDS, DOCUMENTED_KIND  # noqa: E402


def _model(pool: bool = True):
    """ReduceMean of x[1:0] and (``pool``) GlobalAveragePool of a (1, 1, 5, 0) slice, which
    onnxruntime refuses to run."""
    nodes = [helper.make_node("Slice", ["x", "s", "e"], ["empty"]),                 # x[1:0]
             helper.make_node("ReduceMean", ["empty", "axes"], ["m"], keepdims=1),
             helper.make_node("Softsign", ["m"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", T.FLOAT, [1])]
    if pool:
        nodes += [helper.make_node("Reshape", ["x", "shape"], ["x4"]),
                  helper.make_node("Slice", ["x4", "s", "e", "axes3"], ["wide0"]),
                  helper.make_node("GlobalAveragePool", ["wide0"], ["g"])]
        outputs.append(helper.make_tensor_value_info("g", T.FLOAT, [1, 1, 1, 1]))
    inits = [numpy_helper.from_array(np.array([1], np.int64), "s"),
             numpy_helper.from_array(np.array([0], np.int64), "e"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([3], np.int64), "axes3"),
             numpy_helper.from_array(np.array([1, 1, 5, 1], np.int64), "shape")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [5])], outputs,
                              [i for i in inits if pool or i.name in ("s", "e", "axes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_mean_of_nothing_is_nan(target):
    import torch
    x = np.array([0.5, -1.0, 2.0, 0.25, 3.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # no "Mean of empty slice" from the interpreter
        y, g = tensorforge.compile(_model(), target=target)(x)
    assert np.isnan(y).all() and y.shape == (1,)
    assert np.isnan(g).all() and g.shape == (1, 1, 1, 1)
    assert torch.isnan(torch.from_numpy(x)[1:0].mean())


def test_fuzzer_reports_it_as_documented():
    x = np.array([0.5, -1.0, 2.0, 0.25, 3.0], np.float32)
    case = case_from_model(_model(pool=False), [x])
    # onnx.reference gives NaN too here (an onnxruntime deviation); in the fuzzer's case it could
    # not run the graph, so the rule must stand without the tie-break
    found = check_cases([case], None, ("interpreter", "cpu"), tiebreak=False)
    assert found and all(m.kind == DOCUMENTED_KIND for m in found)
    assert all(m.kind in DEVIATION_KINDS for m in check_cases([case], None, ("interpreter",)))
