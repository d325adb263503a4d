"""ONNX ``FlexAttention`` (domain ``ai.onnx.preview``): the ONNX node test cases, and modifier
subgraphs / GQA / softmax precision against ``onnx.reference``, in the interpreter and natively."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnx.reference.ops.aionnx_preview.op_flex_attention")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.backend.test.loader import load_model_tests  # noqa: E402

from tensorforge.errors import UnsupportedOpError  # noqa: E402
from tensorforge.frontends.onnx import import_onnx  # noqa: E402
from tensorforge.frontends.onnx_backend import check_node_case  # noqa: E402

from tests.frontends.onnx_ref_util import check_against_reference  # noqa: E402

PREVIEW = "ai.onnx.preview"
TARGETS = ("interpreter", "cpu")

_CASES = {c.name: c for c in load_model_tests(kind="node") if c.name.startswith("test_flexattention")}
# A few node cases, one per feature: subgraph-built causal mask, prob_mod, GQA, f16, f64.
NODE_CASES = ["test_flexattention_causal_mask", "test_flexattention_prob_mod", "test_flexattention_gqa",
              "test_flexattention_fp16", "test_flexattention_double"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", NODE_CASES)
def test_node_case(name, target):
    if name not in _CASES:
        pytest.skip(f"{name} is not in this onnx version's node tests")
    status, detail = check_node_case(_CASES[name], target=target)
    assert status == "pass", detail


def _graph(name, nodes, dtype, inits=()):
    io = lambda n: helper.make_tensor_value_info(n, dtype, ["B", "H", "L", "S"])  # noqa: E731
    return helper.make_graph(nodes, name, [io("x")], [io("y")], list(inits))


def _flex_model(q, k, v, **attrs):
    elem = helper.np_dtype_to_tensor_dtype(q.dtype)
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain=PREVIEW, **attrs)
    graph = helper.make_graph(
        [node], "flex",
        [helper.make_tensor_value_info(n, elem, a.shape) for n, a in (("q", q), ("k", k), ("v", v))],
        [helper.make_tensor_value_info("y", elem, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid(PREVIEW, 1)],
                             ir_version=10)


def _qkv(rng, hq=4, hk=2, L=5, S=7, E=8, Ev=6, dtype=np.float32):
    return (rng.standard_normal((2, hq, L, E)).astype(dtype), rng.standard_normal((2, hk, S, E)).astype(dtype),
            rng.standard_normal((2, hk, S, Ev)).astype(dtype))


def test_gqa_both_modifiers_and_scale():
    """GQA with a soft-cap score_mod and a prob_mod that reads another op of the importer (Sqrt)."""
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng)
    score_mod = _graph("cap", [helper.make_node("Div", ["x", "c"], ["t"]), helper.make_node("Tanh", ["t"], ["u"]),
                               helper.make_node("Mul", ["u", "c"], ["y"])], T.FLOAT,
                       [helper.make_tensor("c", T.FLOAT, [], [2.0])])
    prob_mod = _graph("sqrt", [helper.make_node("Sqrt", ["x"], ["y"])], T.FLOAT)
    m = _flex_model(q, k, v, scale=0.3, score_mod=score_mod, prob_mod=prob_mod)
    check_against_reference(m, {"q": q, "k": k, "v": v}, rtol=1e-5, atol=1e-5, targets=TARGETS)


def test_softmax_precision_double_for_f16():
    """An f16 model whose scores are modified and normalised in f64, as softmax_precision asks."""
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, hq=2, hk=2, dtype=np.float16)
    score_mod = _graph("bias", [helper.make_node("Add", ["x", "b"], ["y"])], T.DOUBLE,
                       [helper.make_tensor("b", T.DOUBLE, [], [0.25])])
    m = _flex_model(q, k, v, softmax_precision=T.DOUBLE, score_mod=score_mod)
    check_against_reference(m, {"q": q, "k": k, "v": v}, rtol=2e-3, atol=2e-3, targets=TARGETS)


def test_default_domain_is_not_flex_attention():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, hq=2, hk=2)
    m = _flex_model(q, k, v)
    m.graph.node[0].domain = ""
    with pytest.raises(UnsupportedOpError, match="ai.onnx.preview"):
        import_onnx(m)


def test_other_preview_domain_ops_still_rejected():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, hq=2, hk=2)
    m = _flex_model(q, k, v)
    m.graph.node[0].op_type = "Relu"
    with pytest.raises(UnsupportedOpError, match="only the default ONNX domain"):
        import_onnx(m)
