"""transformers models (random weights, small configs) through tensorforge.compile and torch.compile.

Decoders return a ``ModelOutput`` holding a ``DynamicCache``: the importer flattens it for the
graph and the compiled model rebuilds it for torch callers, so every output tensor, the KV
cache included, is compared with eager.  Llama uses grouped-query attention (4 query heads,
2 KV heads) both through SDPA (``graph.attention`` reads each KV head for its query heads) and
through the eager path (``repeat_kv``: expand + reshape, then matmul / softmax / matmul).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree

import tensorforge
from tensorforge.passes.fusion.explain import explain_fusion

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

SEQ = 8
_COMPILED: dict = {}


def _ids(vocab: int = 128) -> torch.Tensor:
    return torch.randint(0, vocab, (1, SEQ), generator=torch.Generator().manual_seed(1))


def _llama(cls_name: str, attn: str):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=4, hidden_size=64, intermediate_size=128,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                   max_position_embeddings=64, attn_implementation=attn)
    return getattr(transformers, cls_name)(cfg).eval()


def _compiled(key, build):
    """One compile per model for the whole module (export alone takes seconds)."""
    if key not in _COMPILED:
        model = build()
        _COMPILED[key] = model, tensorforge.compile(model, (_ids(),))
    return _COMPILED[key]


def assert_matches_eager(out, ref, rtol: float = 1e-4) -> None:
    """Same container type and every tensor within ``rtol`` of the eager one (relative to the
    tensor's largest magnitude)."""
    assert type(out) is type(ref)
    got, want = pytree.tree_leaves(out), pytree.tree_leaves(ref)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert isinstance(g, torch.Tensor) and g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=rtol, atol=rtol * max(w.abs().max().item(), 1e-6))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("cls_name", ["LlamaModel", "LlamaForCausalLM"])
def test_llama_gqa_matches_eager_with_kv_cache(cls_name, attn):
    model, cm = _compiled((cls_name, attn), lambda: _llama(cls_name, attn))
    ids = _ids()
    with torch.no_grad():
        ref = model(ids)
    out = cm(ids)
    assert_matches_eager(out, ref)
    cache = out.past_key_values
    assert type(cache) is transformers.DynamicCache and len(cache.layers) == 4
    assert cache.layers[0].keys.shape == (1, 2, SEQ, 16)          # the 2 KV heads, not repeated
    main = out.last_hidden_state if cls_name == "LlamaModel" else out.logits
    assert main.shape == ((1, SEQ, 64) if cls_name == "LlamaModel" else (1, SEQ, 128))


def test_llama_sdpa_keeps_one_attention_op_per_layer_without_repeat():
    _, cm = _compiled(("LlamaModel", "sdpa"), lambda: _llama("LlamaModel", "sdpa"))
    ops = [op for op in cm.module.main.body if op.name == "graph.attention"]
    assert len(ops) == 4
    for op in ops:
        assert op.operands[0].type.shape[1] == 4 and op.operands[1].type.shape[1] == 2


def _op_of(label: str) -> str:
    """``k23:neg#0`` -> ``neg``: the graph op a lowered kernel came from."""
    return label.split(":", 1)[1].split("#", 1)[0]


def test_llama_layers_fuse_rmsnorm_into_one_kernel_and_rope_with_its_neighbours():
    _, cm = _compiled(("LlamaModel", "sdpa"), lambda: _llama("LlamaModel", "sdpa"))
    log = explain_fusion(cm.module).log
    groups = [[_op_of(lab) for lab in g.labels] for g in log.groups]
    norms = [g for g in groups if "reduce_mean" in g]
    assert len(norms) == 2 * 4 + 1                  # pow (as mul), mean, add eps, rsqrt, mul: one kernel each
    assert all({"mul", "add", "rsqrt"} <= set(g) for g in norms)
    rope = [g for g in groups if "neg" in g]
    assert len(rope) == 4                           # q and k of a layer: slice, neg, concat, mul, add together
    assert all(g.count("neg") == 2 and g.count("concat") == 2 and {"mul", "add"} <= set(g) for g in rope)
    assert log.kernels_after <= 1 + 10 * 4          # per layer: 2 norms, 3 GEMMs + 1 more, RoPE, attention, ...
    assert all(lab.count("#") <= 1 for g in log.groups for lab in g.labels), "a kernel was split twice"


def test_numpy_callers_run_and_saved_models_get_flat_outputs(tmp_path):
    model, cm = _compiled(("LlamaModel", "sdpa"), lambda: _llama("LlamaModel", "sdpa"))
    ids = _ids()
    with torch.no_grad():
        want = [t.numpy() for t in pytree.tree_leaves(model(ids))]
    flat = cm(ids.numpy())
    assert isinstance(flat, tuple) and len(flat) == len(want) == 1 + 2 * 4
    for g, w in zip(flat, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * np.abs(w).max())
    assert [r.shape for r in cm.run(ids)] == [w.shape for w in want]
    cm.save(tmp_path / "llama.tfm", include_graph=False)
    loaded = tensorforge.load(tmp_path / "llama.tfm")
    out = loaded(ids)                                   # torch in, a flat tuple of torch tensors out
    assert isinstance(out, tuple) and all(isinstance(t, torch.Tensor) for t in out)
    np.testing.assert_allclose(out[0].numpy(), want[0], rtol=1e-4, atol=1e-4 * np.abs(want[0]).max())


def test_gpt2_model_matches_eager():
    def build():
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32)
        return transformers.GPT2Model(cfg).eval()
    model, cm = _compiled("gpt2", build)
    with torch.no_grad():
        ref = model(_ids())
    assert_matches_eager(cm(_ids()), ref)


def test_bert_model_matches_eager():
    def build():
        torch.manual_seed(0)
        cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, vocab_size=128, max_position_embeddings=32)
        return transformers.BertModel(cfg).eval()
    model, cm = _compiled("bert", build)
    with torch.no_grad():
        ref = model(_ids())
    out = cm(_ids())
    assert_matches_eager(out, ref)
    assert out.pooler_output.shape == (1, 64)


def test_torch_compile_llama_static_shapes_matches_eager():
    model = _llama("LlamaForCausalLM", "sdpa")
    ids = _ids()
    with torch.no_grad():
        ref = model(ids)
        out = torch.compile(model, backend="tensorforge", dynamic=False)(ids)
    assert_matches_eager(out, ref)
