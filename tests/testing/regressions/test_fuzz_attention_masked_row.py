"""Differential-fuzzer regression: ONNX Attention with a fully masked query row whose score is
+inf (a key holding -inf times a negative query entry).

Found by python -m tensorforge.testing.fuzz --seed 5151 --cases 20000 --jobs 2 (s5151b288c14).
ONNX decides a fully masked row on the mask bias and gives it probabilities 0, so the row is
``0 @ V`` (NaN only in a column of V holding an infinity); ``graph.attention`` follows torch,
whose ``score + -inf`` is NaN there.  The ONNX importer now applies ONNX's rule.  A row that is
not masked but whose scores are all -inf gives 0 in onnx.reference, torch and tensorforge alike
(onnxruntime gives NaN: the fuzzer reports that one as an onnxruntime deviation).
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto as T, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tensorforge  # noqa: E402

inf = np.inf


def _model(mask_type):
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], is_causal=1)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("q", T.FLOAT, [1, 1, 3, 2]),
        helper.make_tensor_value_info("k", T.FLOAT, [1, 1, 2, 2]),
        helper.make_tensor_value_info("v", T.FLOAT, [1, 1, 2, 2]),
        helper.make_tensor_value_info("m", mask_type, [3, 2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 1, 3, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
@pytest.mark.parametrize("mask_kind", ["additive", "bool"])
def test_fully_masked_row_is_zero_times_v(target, mask_kind):
    q = np.array([[[[-1.0, 0.5], [2.0, 0.5], [-1.5, 1.0]]]], np.float32)
    k = np.array([[[[-inf, 0.25], [0.5, -0.5]]]], np.float32)   # key 0 scores +inf / -inf
    v = np.array([[[[1.0, 2.0], [-inf, 3.0]]]], np.float32)      # column 0 of V holds -inf
    allowed = np.array([[True, True], [True, True], [False, False]])   # row 2 masked everywhere
    if mask_kind == "bool":
        m, model = allowed, _model(T.BOOL)
    else:
        m, model = np.where(allowed, 0.0, -inf).astype(np.float32), _model(T.FLOAT)
    want = ReferenceEvaluator(model).run(None, {"q": q, "k": k, "v": v, "m": m})[0]
    got = tensorforge.compile(model, target=target)(q, k, v, m)
    # row 0: causal, sees key 0 only, score +inf -> NaN softmax; row 1 sees keys 0, 1 with
    # score -inf for key 0 -> plain softmax over key 1; row 2 fully masked -> 0 @ V
    assert np.isnan(want[0, 0, 2, 0]) and want[0, 0, 2, 1] == 0.0
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_constant_mask_without_a_dead_row_adds_no_guard():
    """The guard costs nothing when the mask is a constant that leaves every row a key."""
    from onnx import numpy_helper
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"])
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("q", T.FLOAT, [1, 1, 3, 2]),
        helper.make_tensor_value_info("k", T.FLOAT, [1, 1, 2, 2]),
        helper.make_tensor_value_info("v", T.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", T.FLOAT, [1, 1, 3, 2])],
        [numpy_helper.from_array(np.array([[0, -inf], [0, 0], [-inf, 0]], np.float32), "m")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    cm = tensorforge.compile(model, target="interpreter")
    ops = [op.name for op in tensorforge.import_model(model).walk()]
    assert "graph.attention" in ops and "graph.select" not in ops
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 1, 3, 2), (1, 1, 2, 2), (1, 1, 2, 2)))
    want = ReferenceEvaluator(model).run(None, {"q": q, "k": k, "v": v})[0]
    np.testing.assert_allclose(cm(q, k, v), want, rtol=1e-5, atol=1e-6)
