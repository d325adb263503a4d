"""ONNX Attention (opset 23) with grouped-query heads, packed heads, a KV cache and masks: the
forms that ``graph.attention`` expresses import as that one op, KV heads not repeated, and
agree with onnxruntime in the interpreter and in native code."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.frontends.onnx import import_onnx  # noqa: E402


def _attention_model(kw: dict, inputs: list, n_out: int = 1):
    names = [n for n, _, _ in inputs]
    outs = ["y", "present_k", "present_v"][:n_out]
    node = helper.make_node("Attention", names, outs, **kw)
    graph = helper.make_graph([node], "gqa", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs if n],
                              [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


def _ort(m, feeds) -> list:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _op_names(m) -> list[str]:
    return [op.name for op in import_onnx(m).main.body]


CASES = {
    "4d_gqa_causal": ({"is_causal": 1}, [("q", (2, 4, 5, 8)), ("k", (2, 2, 5, 8)), ("v", (2, 2, 5, 8))], None),
    "3d_packed_gqa_bool_mask": ({"q_num_heads": 4, "kv_num_heads": 2},
                                [("q", (2, 3, 32)), ("k", (2, 6, 16)), ("v", (2, 6, 16))], "bool"),
    "4d_gqa_past_additive_mask": ({}, [("q", (1, 4, 2, 8)), ("k", (1, 2, 2, 8)), ("v", (1, 2, 2, 8)),
                                       ("mask", (2, 5)), ("past_k", (1, 2, 3, 8)), ("past_v", (1, 2, 3, 8))], "float"),
}


def _case(name, rng):
    kw, shapes, mask = CASES[name]
    inputs, feeds = [], {}
    for n, s in shapes:
        if n == "mask":
            continue
        feeds[n] = rng.standard_normal(s).astype(np.float32)
        inputs.append((n, T.FLOAT, s))
    if mask is not None:
        q_len = shapes[0][1][-2] if len(shapes[0][1]) == 4 else shapes[0][1][1]
        kv_len = (shapes[1][1][-2] if len(shapes[1][1]) == 4 else shapes[1][1][1]) + \
            sum(s[-2] for n, s in shapes if n == "past_k")
        if mask == "bool":
            feeds["mask"] = rng.random((q_len, kv_len)) > 0.3
            feeds["mask"][:, 0] = True
        else:
            feeds["mask"] = rng.standard_normal((q_len, kv_len)).astype(np.float32)
        inputs.insert(3, ("mask", T.BOOL if mask == "bool" else T.FLOAT, feeds["mask"].shape))
    n_out = 3 if "past_k" in feeds else 1
    return _attention_model(kw, inputs, n_out), feeds


@pytest.mark.parametrize("name", list(CASES))
def test_gqa_attention_is_one_graph_attention_without_repeat(name, rng):
    m, _ = _case(name, rng)
    body = import_onnx(m).main.body
    names = [op.name for op in body]
    assert names.count("graph.attention") == 1 and "graph.softmax" not in names
    # K and V are read in place: the only repeat allowed is of the (B, Hkv, 1, Dv) row that a
    # runtime mask's fully masked query rows give (ONNX's 0 @ V, see _zero_masked_rows)
    for op in body:
        if op.name == "graph.expand":
            assert op.results[0].type.shape[-2] == 1, op


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
@pytest.mark.parametrize("name", list(CASES))
def test_gqa_attention_matches_onnxruntime(name, target, rng):
    m, feeds = _case(name, rng)
    cm = tensorforge.compile(m, target=target)
    names = [i.name for i in m.graph.input]
    ours = cm.run(*[feeds[n] for n in names])
    refs = _ort(m, feeds)
    assert len(ours) == len(refs)
    for o, r in zip(ours, refs):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)


def test_forms_outside_graph_attention_still_decompose_with_repeated_heads(rng):
    """Causal with a cache is bottom-right aligned (graph.attention's causal is top-left): the
    definition is written out, with the KV heads repeated for it."""
    shapes = [("q", (1, 4, 2, 8)), ("k", (1, 2, 2, 8)), ("v", (1, 2, 2, 8)), ("past_k", (1, 2, 3, 8)),
              ("past_v", (1, 2, 3, 8))]
    inputs = [(n, T.FLOAT, s) for n, s in shapes]
    inputs.insert(3, ("", T.FLOAT, None))                # no mask
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes}
    m = _attention_model({"is_causal": 1}, inputs, n_out=3)
    assert "graph.attention" not in _op_names(m)
    ours = tensorforge.compile(m, target="interpreter").run(*[feeds[n] for n, _ in shapes])
    for o, r in zip(ours, _ort(m, feeds)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)
