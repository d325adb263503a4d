"""The PyTorch frontend with symbolic shapes: ``compile(..., dynamic_shapes=)`` and
``torch.compile(..., dynamic=True)``.

One compile serves every size in the declared range: each test compiles once and runs several
sizes, comparing with eager PyTorch by the relative error max|out - ref| / max|ref| <= 1e-4.
The interpreter runs the symbolic graph (the native backend's symbolic kernels are separate work).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorforge  # noqa: E402
import tensorforge.models as zoo  # noqa: E402
from tensorforge.errors import UnsupportedOpError  # noqa: E402
from tensorforge.frontends.torch import tensorforge_backend  # noqa: E402
from tensorforge.frontends.torch_symbolic import sympy_to_expr  # noqa: E402
from tensorforge.ir.symbolic import as_dim, symbol_table_of  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

Dim = torch.export.Dim
RTOL = 1e-4
BATCH = Dim("batch", min=1, max=64)
SEQ = Dim("seq", min=1, max=512)


def eager(module, inputs):
    with torch.no_grad():
        out = module(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_matches(got, want):
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), w.detach().numpy()
        assert g.shape == w.shape
        err = np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)
        assert err <= RTOL, f"relative error {err:.2e} > {RTOL}"


def compile_dynamic(module, example, spec):
    return tensorforge.compile(module, example, target="interpreter", dynamic_shapes=spec)


def ranges(cm) -> dict:
    return {r.name: (r.lo, r.hi, r.hint) for r in symbol_table_of(cm.func).ranges.values()}


# ---- models -------------------------------------------------------------------------------------

class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1))
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


class TinyEncoder(torch.nn.Module):
    """Hand-written attention block whose sizes flow through the graph as SymInts: reshape to
    heads, a positional table sliced to the sequence length, a causal mask from ``arange(seq)``,
    and a mean over the sequence that divides by the length as a value."""

    def __init__(self, d=32, heads=4, max_len=64):
        super().__init__()
        self.heads = heads
        self.pos = torch.nn.Parameter(torch.randn(max_len, d) * 0.1)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 64), torch.nn.GELU(), torch.nn.Linear(64, d))

    def forward(self, x):
        b, t, d = x.shape
        x = x + self.pos[:t]
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for y in self.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        i = torch.arange(t)
        scores = scores.masked_fill(i[None, :] > i[:, None], float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.proj(a))
        x = self.ln2(x + self.ff(x))
        return x, x.sum(1) / t


# ---- tensorforge.compile(..., dynamic_shapes=) -------------------------------------------------

def test_mlp_dynamic_batch_one_compile_many_sizes():
    module, example = zoo.get("mlp_small", batch=2)
    cm = compile_dynamic(module, example, {"x": {0: BATCH}})
    assert cm.func.args[0].type.shape == ("batch", 784)
    assert ranges(cm) == {"batch": (1, 64, 2)}
    for b in (1, 5, 64):
        x = (torch.randn(b, 784),)
        assert_matches(cm(*x), eager(module, x))


def test_cnn_dynamic_batch():
    torch.manual_seed(0)
    module = SmallCNN().eval()
    cm = compile_dynamic(module, (torch.randn(2, 3, 16, 16),), ({0: BATCH},))
    assert ranges(cm) == {"batch": (1, 64, 2)}
    assert cm.output_types[0].shape == ("batch", 10)
    for b in (1, 3, 8):
        x = (torch.randn(b, 3, 16, 16),)
        assert_matches(cm(*x), eager(module, x))


def test_attention_block_dynamic_batch_and_sequence():
    torch.manual_seed(0)
    module = TinyEncoder().eval()
    seq = Dim("seq", min=1, max=64)
    cm = compile_dynamic(module, (torch.randn(2, 5, 32),), {"x": {0: BATCH, 1: seq}})
    assert cm.func.args[0].type.shape == ("batch", "seq", 32)
    assert ranges(cm) == {"batch": (1, 64, 2), "seq": (1, 64, 5)}
    for b, t in ((1, 1), (3, 7), (2, 64)):
        x = (torch.randn(b, t, 32),)
        assert_matches(cm(*x), eager(module, x))


def test_transformer_encoder_layer_dynamic_batch_and_sequence():
    torch.manual_seed(0)
    module = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    cm = compile_dynamic(module, (torch.randn(2, 5, 32),), {"src": {0: BATCH, 1: SEQ}})
    assert ranges(cm) == {"batch": (1, 64, 2), "seq": (1, 512, 5)}
    for b, t in ((1, 1), (3, 7), (2, 40)):
        x = (torch.randn(b, t, 32),)
        assert_matches(cm(*x), eager(module, x))


def test_zoo_bert_tiny_dynamic_batch_and_sequence():
    from tensorforge.models.bert import padding_mask, token_inputs

    module, example = zoo.get("bert_tiny", batch=2)
    seq = Dim("seq", min=2, max=64)        # bert_tiny has 64 positions
    cm = compile_dynamic(module, example, ({0: BATCH, 1: seq}, {0: BATCH, 1: seq}))
    assert ranges(cm) == {"batch": (1, 64, 2), "seq": (2, 64, 32)}
    g = torch.Generator().manual_seed(3)
    for b, t in ((1, 2), (3, 7), (2, 64)):
        x = (token_inputs(b, g, 1000, t), padding_mask(b, g, t))
        assert_matches(cm(*x), eager(module, x))


def test_unnamed_dynamic_dims_keep_torchs_symbol_and_range():
    module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    cm = compile_dynamic(module, (torch.randn(3, 8),), {"input": {0: Dim.AUTO}})
    ((name, (lo, hi, hint)),) = ranges(cm).items()
    assert cm.func.args[0].type.shape == (name, 8)
    assert (lo, hi, hint) == (2, None, 3)          # export's 0/1 specialisation: unbounded from 2
    x = (torch.randn(11, 8),)
    assert_matches(cm(*x), eager(module, x))


def test_data_dependent_sizes_are_refused_with_a_clear_error():
    class NonZero(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x)

    with pytest.raises(tensorforge.TensorforgeError, match="nonzero"):
        compile_dynamic(NonZero().eval(), (torch.randn(3, 4),), {"x": {0: BATCH}})


# ---- sympy -> dims ------------------------------------------------------------------------------

def test_sympy_size_expressions_become_canonical_dims():
    import sympy
    from torch.utils._sympy.functions import CeilDiv, FloorDiv, Max, Min, ModularIndexing, PythonMod

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    names = {s0: "batch", s1: "seq"}.__getitem__
    cases = {
        2 * s0 * s1 + 3: "2*batch*seq+3",
        FloorDiv(s1 - 1, 2) + 1: "(seq-1)//2+1",
        FloorDiv(4 * s1, 2): "2*seq",
        CeilDiv(s1, 4): "(seq+3)//4",
        PythonMod(s1, 8): "seq%8",
        ModularIndexing(s1, 2, 4): "(seq//2)%4",
        Max(s1, 1): "seq",                       # sympy knows s1 >= 1
        Min(s1, 512): "min(512,seq)",
        s0 ** 2: "batch*batch",
    }
    for expr, want in cases.items():
        assert as_dim(sympy_to_expr(expr, names)) == as_dim(want), expr
    with pytest.raises(UnsupportedOpError, match="symbolic size"):
        sympy_to_expr(FloorDiv(s0, s1), names)


# ---- torch.compile(..., dynamic=True) --------------------------------------------------------------

def _counting_backend(calls: list):
    def backend(gm, example_inputs):
        calls.append(gm)
        return tensorforge_backend(gm, example_inputs, options={"target": "interpreter"})
    return backend


def test_torch_compile_dynamic_true_compiles_once_for_every_batch():
    module, _ = zoo.get("mlp_small")
    calls: list = []
    torch._dynamo.reset()
    compiled = torch.compile(module, backend=_counting_backend(calls), dynamic=True)
    for b in (2, 5, 33):
        x = (torch.randn(b, 784),)
        assert_matches(compiled(*x).detach(), eager(module, x))
    assert len(calls) == 1


def test_torch_compile_automatic_dynamic_recompiles_once_then_covers_all_sizes():
    torch.manual_seed(0)
    module = TinyEncoder().eval()
    calls: list = []
    torch._dynamo.reset()
    compiled = torch.compile(module, backend=_counting_backend(calls))
    for b, t in ((2, 5), (3, 7), (4, 9), (2, 16)):
        x = (torch.randn(b, t, 32),)
        assert_matches([o.detach() for o in compiled(*x)], eager(module, x))
    assert len(calls) == 2               # static first, then one symbolic graph for the rest


class CachedAttention(torch.nn.Module):
    """One decoding step with a KV cache passed as separate key and value tensors (as
    transformers' DynamicCache is): torch does not relate their lengths, tensorforge must."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)

    def forward(self, x, past_k, past_v):
        b, t, d = x.shape
        q, k, v = (y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for y in self.qkv(x).chunk(3, dim=-1))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return out[:, :, -1:], k, v


def test_torch_compile_kv_cache_step_unifies_key_and_value_lengths():
    torch.manual_seed(0)
    module = CachedAttention().eval()
    calls: list = []
    torch._dynamo.reset()
    compiled = torch.compile(module, backend=_counting_backend(calls), dynamic=True)
    from torch.fx.experimental import _config as shape_config
    with shape_config.patch(use_duck_shape=False):       # one symbol per input axis, as in a cache
        for length in (3, 4, 9):
            x = (torch.randn(2, 1, 16), torch.randn(2, 2, length, 8), torch.randn(2, 2, length, 8))
            assert_matches([o.detach() for o in compiled(*x)], eager(module, x))
    assert len(calls) == 1
    placeholders = [n.meta["example_value"] for n in calls[0].graph.find_nodes(op="placeholder")]
    assert len({str(v) for v in placeholders if isinstance(v, torch.SymInt)}) >= 3   # b, len(k), len(v)...


class ScaledAttention(torch.nn.Module):
    """A Python float attribute passed to an op as a C++ double (as Llama's attention scale is)."""

    def __init__(self):
        super().__init__()
        self.scale = 0.25

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=self.scale) * 2.0


def test_torch_compile_dynamic_float_attribute_costs_no_extra_backend_invocation():
    # Dynamo lifts the float into an input; AOT specialises it and would restart the frame,
    # invoking the backend twice.  The backend absorbs the restart; a new value still recompiles.
    torch.manual_seed(0)
    module = ScaledAttention().eval()
    calls: list = []
    torch._dynamo.reset()
    compiled = torch.compile(module, backend=_counting_backend(calls), dynamic=True)
    for length in (3, 6, 11):
        x = tuple(torch.randn(1, 2, length, 8) for _ in range(3))
        assert_matches(compiled(*x).detach(), eager(module, x))
    assert len(calls) == 1
    module.scale = 0.7
    x = tuple(torch.randn(1, 2, 5, 8) for _ in range(3))
    assert_matches(compiled(*x).detach(), eager(module, x))
    assert len(calls) == 2


def test_dynamic_shapes_is_refused_for_models_that_are_not_torch_modules():
    module, example = zoo.get("mlp_small")
    graph = tensorforge.compile(module, example, target="interpreter").module
    with pytest.raises(tensorforge.TensorforgeError, match="dynamic_shapes= is torch.export's spec"):
        tensorforge.compile(graph, target="interpreter", dynamic_shapes={"x": {0: BATCH}})
