"""The PyTorch frontend: torch.export -> core ATen -> graph ops, and the torch.compile backend.

Numerics are checked against eager PyTorch with the relative error max|out - ref| / max|ref|
(<= 1e-4; float32 reassociation gives ~1e-6 in practice).
"""
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorforge  # noqa: E402
import tensorforge.models as zoo  # noqa: E402
from tensorforge.errors import TensorforgeError, UnsupportedOpError  # noqa: E402
from tensorforge.frontends.torch import import_torch, tensorforge_backend  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")   # torch.export internals

SMALL = ["mlp_small", "resnet18_small", "resnet50_small", "mobilenet_v2_small", "efficientnet_b0_small",
         "bert_tiny", "gpt2_tiny"]
RTOL = 1e-4
INTERP = {"target": "interpreter"}


def _flat(out):
    if hasattr(out, "to_tuple"):              # transformers ModelOutput
        out = out.to_tuple()
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_matches(got, want, rtol=RTOL):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g.detach() if hasattr(g, "detach") else g), w.detach().numpy()
        assert g.shape == w.shape
        err = np.abs(g - w).max() / np.abs(w).max()
        assert err <= rtol, f"relative error {err:.2e} > {rtol}"


def eager(module, inputs):
    with torch.no_grad():
        return module(*inputs)


def compile_and_check(module, inputs):
    """tensorforge.compile (native CPU target) and the imported graph in the reference
    interpreter (compile leaves it unchanged) both match eager PyTorch."""
    compiled = tensorforge.compile(module, inputs)
    want = eager(module, inputs)
    assert_matches(compiled(*inputs), want)
    assert_matches(tensorforge.compile(compiled.module, target="interpreter")(*inputs), want)
    return compiled, want


# ---- the zoo through tensorforge.compile and through torch.compile -------------------------

@pytest.mark.parametrize("name", SMALL)
def test_zoo_model_compiles_and_matches_eager(name):
    module, inputs = zoo.get(name, batch=2)
    compiled, want = compile_and_check(module, inputs)
    # User inputs only (weights are constants), with their own types: int64 ids stay i64;
    # tuple outputs come out flattened in the model's order.
    func = compiled.module.main
    assert [(a.type.shape, a.type.dtype.np) for a in func.args] == [(tuple(x.shape), x.numpy().dtype) for x in inputs]
    assert [v.type.shape for v in func.outputs] == [tuple(w.shape) for w in _flat(want)]
    assert all(op.name.startswith(("graph.", "func.")) for op in func.body)


@pytest.mark.parametrize("name", SMALL)
def test_zoo_model_through_torch_compile_backend(name):
    torch._dynamo.reset()
    module, inputs = zoo.get(name, batch=2)
    compiled = torch.compile(module, backend="tensorforge", options=INTERP)
    out = compiled(*inputs)
    assert all(isinstance(o, torch.Tensor) for o in _flat(out))
    assert_matches(out, eager(module, inputs))


def test_backend_freezes_weights_and_keeps_user_inputs(monkeypatch):
    """Parameters become constants; only the model's own inputs remain arguments."""
    import tensorforge.api

    seen = []
    real_compile = tensorforge.api.compile
    monkeypatch.setattr(tensorforge.api, "compile", lambda m, *a, **k: seen.append(m) or real_compile(m, *a, **k))
    torch._dynamo.reset()
    module, inputs = zoo.get("mlp_small", batch=3)
    out = torch.compile(module, backend=tensorforge_backend)(*inputs)         # native CPU target
    assert_matches(out, eager(module, inputs))
    (imported,) = seen
    assert [str(a.type) for a in imported.main.args] == ["tensor<3x784xf32>"]
    assert sum(op.name == "graph.constant" for op in imported.main.body) >= 6   # 3 weights, 3 biases


def test_backend_replays_buffer_mutations():
    """A forward that updates a buffer: AOT autograd returns the new value and writes it back."""
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1))

        def forward(self, x):
            self.count.add_(1)
            return x * self.count

    torch._dynamo.reset()
    module, x = Counter(), torch.randn(4)
    compiled = torch.compile(module, backend="tensorforge", options=INTERP)
    np.testing.assert_allclose(compiled(x).numpy(), x.numpy())
    np.testing.assert_allclose(compiled(x).numpy(), 2 * x.numpy())
    assert module.count.item() == 2


def test_backend_recompiles_per_shape_with_dynamic_false_and_goes_symbolic_on_automatic_dynamic():
    module, inputs = zoo.get("mlp_small", batch=2)
    other = (torch.randn(3, 784),)
    torch._dynamo.reset()
    static = torch.compile(module, backend="tensorforge", options=INTERP, dynamic=False)
    assert_matches(static(*inputs), eager(module, inputs))
    assert_matches(static(*other), eager(module, other))
    torch._dynamo.reset()
    automatic = torch.compile(module, backend="tensorforge", options=INTERP)
    automatic(*inputs)
    assert_matches(automatic(*other), eager(module, other))    # recompiled with a symbolic batch


# ---- the importer itself -------------------------------------------------------------------

class _Kitchen(torch.nn.Module):
    """Many ATen ops in one export; several outputs (checks output order too)."""

    def __init__(self):
        super().__init__()
        self.conv_t = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
        self.gn = torch.nn.GroupNorm(1, 3)

    def forward(self, x, idx):
        a = torch.nn.functional.pad(x, (1, 2, 0, 1), value=0.5)
        b = torch.nn.functional.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        c = torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")
        d = torch.nn.functional.interpolate(x, size=(10, 12), mode="bilinear", align_corners=False)
        e = torch.nn.functional.hardswish(x) + torch.nn.functional.silu(x) - torch.clamp(x, -0.5, 0.3)
        f = torch.where(x > 0, x, 0.1 * x).cumsum(dim=-1)
        g = x[:, :, idx][:, 1:, ::2] + x[:, 2:3, idx[:2], :].mean()
        h = torch.cat([x.flatten(1), x.sum(dim=(2, 3)), x.amax(dim=1).flatten(1)], dim=1)
        i = torch.div(idx * 7 - 5, 3, rounding_mode="floor") + torch.div(idx * 7 - 5, 3, rounding_mode="trunc")
        j = torch.topk(x.flatten(1), 4).values + x.var(dim=1).flatten(1)[:, :4] + x.argmax(dim=-1)[:, 0, :4]
        k = self.conv_t(x) + torch.nn.functional.leaky_relu(self.conv_t(x), 0.2)
        m = self.gn(x) * torch.rsqrt(x.abs() + 1) + torch.nn.functional.log_softmax(x, dim=1)
        return a, b, c, d, e, f, g, h, i, j, k, m


class _Pantry(torch.nn.Module):
    """Indexing, scatter-by-assignment, flips and norms: the ops that models reach through views."""

    def forward(self, x, rows, cols):
        a = x[:, rows, cols] + x[rows, :, cols].sum()             # adjacent / split advanced indices
        y = x.clone()
        y[:, 1:3] = 0.25                                           # slice_scatter
        y[0] = x[1] * 2                                            # select_scatter / copy
        b = torch.flip(y, [0, 2]) + torch.maximum(x, -x.mean())
        c = x.max(dim=1, keepdim=True).values * x.min(dim=2, keepdim=True)[0] + x.max()
        d = torch.nn.functional.normalize(x, dim=-1) + torch.log2(x.abs() + 1)
        e = torch.tril(x[0]) - torch.triu(x[1], 1)
        return a, b, c, d, e


OP_SUITES = {
    "kitchen": (_Kitchen, lambda: (torch.randn(2, 3, 5, 6), torch.tensor([4, 0, -1, 2]))),
    "pantry": (_Pantry, lambda: (torch.randn(4, 5, 6), torch.tensor([[0, 3], [2, -1]]), torch.tensor([1, -2]))),
}


@pytest.mark.parametrize("suite", sorted(OP_SUITES))
def test_many_ops_match_eager(suite):
    make, make_inputs = OP_SUITES[suite]
    torch.manual_seed(0)
    compile_and_check(make().eval(), make_inputs())


def test_every_handler_names_a_real_aten_overload():
    """``op.overload`` in ATen, ``namespace.op.overload`` elsewhere (PT2E's quantized_decomposed)."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines the quantized_decomposed ops)

    from tensorforge.frontends.torch import supported_ops

    for name in supported_ops():
        *namespace, op, overload = name.split(".")
        ops = getattr(torch.ops, namespace[0]) if namespace else torch.ops.aten
        assert hasattr(getattr(ops, op), overload), name


def test_sdpa_is_kept_as_one_attention_op():
    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    mask = torch.rand(6, 6) > 0.3
    mask[:, 0] = True
    inputs = (q, k, v, mask)
    compiled, _ = compile_and_check(Sdpa(), inputs)
    names = [op.name for op in compiled.module.main.body]
    assert names.count("graph.attention") == 1 and "graph.softmax" not in names


def test_unsupported_op_names_the_aten_op_node_and_source_line():
    class UsesAtan2(torch.nn.Module):
        def forward(self, x, y):
            return torch.atan2(x, y) + 1

    with pytest.raises(UnsupportedOpError) as info:
        import_torch(UsesAtan2(), (torch.randn(3), torch.randn(3)))
    msg = str(info.value)
    assert "aten.atan2.default" in msg
    assert "FX node 'atan2'" in msg
    assert "test_torch.py" in msg and "torch.atan2(x, y)" in msg


def test_training_mode_batch_norm_says_to_call_eval():
    module, inputs = zoo.get("resnet18_small", batch=2)
    module.train()
    with pytest.raises(TensorforgeError, match=r"eval\(\)"):
        import_torch(module, inputs)


# ---- transformers models (test-only extra) -------------------------------------------------

def _hf_models():
    transformers = pytest.importorskip("transformers", reason="transformers is in the 'dev' extra")
    torch.manual_seed(0)
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64)).eval()
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False,
        bos_token_id=0, eos_token_id=0)).eval()
    ids = torch.randint(0, 512, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    return {"bert": (bert, (ids, mask)), "gpt2": (gpt2, (ids,))}


@pytest.mark.parametrize("which", ["bert", "gpt2"])
def test_transformers_model_compiles_and_matches(which):
    compile_and_check(*_hf_models()[which])


@pytest.mark.parametrize("which", ["bert", "gpt2"])
def test_transformers_model_through_torch_compile_backend(which):
    module, inputs = _hf_models()[which]
    torch._dynamo.reset()
    out = torch.compile(module, backend="tensorforge", options=INTERP)(*inputs)
    assert_matches(out.last_hidden_state, eager(module, inputs).last_hidden_state)


# ---- registration --------------------------------------------------------------------------

def _python(code: str) -> str:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_tensorforge_imports_without_torch_and_without_importing_it():
    assert _python("import sys; sys.modules['torch'] = None; import tensorforge; print('ok')") == "ok"
    assert _python("import sys, tensorforge; print('torch' in sys.modules)") == "False"


def test_backend_is_registered_and_discoverable():
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import _COMPILER_FNS, lookup_backend
    from tensorforge.frontends.torch import register_backend

    # Without Dynamo loaded, torch finds the backend through this entry point ...
    assert "tensorforge" in entry_points(group="torch_dynamo_backends").names
    # ... and once Dynamo is loaded, the hook that ``import tensorforge`` runs registers it directly.
    register_backend()
    assert _COMPILER_FNS["tensorforge"] is tensorforge_backend
    assert lookup_backend("tensorforge") is tensorforge_backend


def test_shapes_for_a_torch_module_is_an_error_not_ignored():
    """``shapes=`` binds ONNX dims; for a PyTorch module it would silently do nothing."""
    model, inputs = zoo.get("mlp_small")
    with pytest.raises(TensorforgeError, match="takes its shapes from example_inputs"):
        tensorforge.compile(model, inputs, shapes={"batch": 4})
