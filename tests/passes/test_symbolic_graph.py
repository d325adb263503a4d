"""Graph level with symbolic dims: shape inference, the default pipeline, fusion and the
interpreter on BERT-like and ResNet-like graphs whose batch (and sequence) are symbols."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorforge.dialects.graph.base import broadcast_shapes
from tensorforge.errors import ShapeError
from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.ir.pass_manager import PassManager
from tensorforge.ir.symbolic import SymbolRange, SymbolTable, hints_from, set_symbol_table
from tensorforge.passes.pipeline import optimize

RNG = np.random.default_rng(7)
HIDDEN, HEADS = 64, 4
HEAD = HIDDEN // HEADS


def _w(*shape: int) -> np.ndarray:
    return (RNG.normal(size=shape) * 0.2).astype(np.float32)


# ---- a BERT encoder layer ---------------------------------------------------------------------
class BertWeights:
    def __init__(self):
        self.wq, self.wk, self.wv, self.wo = (_w(HIDDEN, HIDDEN) for _ in range(4))
        self.bq, self.bk, self.bv, self.bo = (_w(HIDDEN) for _ in range(4))
        self.gamma, self.beta = _w(HIDDEN) + 1.0, _w(HIDDEN)


def build_bert(w: BertWeights, heads_shape=("b", "s", HEADS, HEAD)) -> Module:
    """matmul + bias projections, heads by reshape/transpose, batch matmul, softmax, residual,
    layernorm, gelu: the graph torch.export gives for one encoder layer."""
    m = Module()
    f = m.add_function("main", [tensor(("b", "s", HIDDEN))])
    set_symbol_table(f, SymbolTable([SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512, hint=128)]))
    g = f.builder().graph
    x = f.args[0]

    def proj(v, wt, bias):
        return g.add(g.matmul(v, g.constant(wt)), g.constant(bias))

    def heads(v):
        return g.transpose(g.reshape(v, shape=heads_shape), perm=(0, 2, 1, 3))

    q, k, v = heads(proj(x, w.wq, w.bq)), heads(proj(x, w.wk, w.bk)), heads(proj(x, w.wv, w.bv))
    scores = g.mul(g.matmul(q, g.transpose(k, perm=(0, 1, 3, 2))), g.constant(np.float32(1 / math.sqrt(HEAD))))
    ctx = g.matmul(g.softmax(scores, axis=-1), v)
    ctx = g.reshape(g.transpose(ctx, perm=(0, 2, 1, 3)), shape=(-1, HIDDEN))
    out = proj(ctx, w.wo, w.bo)
    h = g.add(g.reshape(x, shape=(-1, HIDDEN)), out)
    h = g.layer_norm(h, g.constant(w.gamma), g.constant(w.beta))
    f.set_return([g.reshape(g.gelu(h), shape=("b", "s", HIDDEN))])
    return m


def bert_numpy(w: BertWeights, x: np.ndarray) -> np.ndarray:
    from scipy.special import erf
    b, s, _ = x.shape

    def heads(v):
        return v.reshape(b, s, HEADS, HEAD).transpose(0, 2, 1, 3)

    q, k, v = heads(x @ w.wq + w.bq), heads(x @ w.wk + w.bk), heads(x @ w.wv + w.bv)
    sc = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HEAD)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = (p @ v).transpose(0, 2, 1, 3).reshape(b * s, HIDDEN)
    h = x.reshape(b * s, HIDDEN) + ctx @ w.wo + w.bo
    mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    h = (h - mu) / np.sqrt(var + 1e-5) * w.gamma + w.beta
    return (0.5 * h * (1 + erf(h / math.sqrt(2)))).reshape(b, s, HIDDEN)


def _types(m: Module) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op in m.main.body:
        for r in op.results:
            out.setdefault(op.name, []).append(str(r.type))
    return out


def test_bert_layer_types_are_canonical_expressions():
    t = _types(build_bert(BertWeights()))
    assert 'tensor<?x?x4x16xf32, "b,s">' in t["graph.reshape"]
    assert 'tensor<?x64xf32, "b*s">' in t["graph.reshape"]            # -1 resolved to b*s
    assert 'tensor<?x4x?x?xf32, "b,s,s">' in t["graph.softmax"]
    assert t["graph.layer_norm"] == ['tensor<?x64xf32, "b*s">']


@pytest.mark.parametrize("b,s", [(1, 1), (2, 7), (3, 16)])
def test_bert_layer_through_the_default_pipeline_matches_numpy(b, s):
    w = BertWeights()
    m = build_bert(w)
    optimize(m, "cpu")
    verify(m)
    x = RNG.normal(size=(b, s, HIDDEN)).astype(np.float32)
    (y,) = interpret(m, x)
    assert y.shape == (b, s, HIDDEN)
    np.testing.assert_allclose(y, bert_numpy(w, x), rtol=1e-4, atol=1e-4)


# ---- conv-bn-relu-pool-flatten-linear ----------------------------------------------------------
class ConvWeights:
    def __init__(self):
        self.w = _w(8, 3, 3, 3)
        self.scale, self.shift = np.abs(_w(8)) + 0.5, _w(8)
        self.mean, self.var = _w(8), np.abs(_w(8)) + 0.5
        self.fc, self.fc_b = _w(10, 8 * 8 * 8), _w(10)


def build_convnet(w: ConvWeights, image=("n", 3, 32, 32)) -> Module:
    m = Module()
    f = m.add_function("main", [tensor(image)])
    g = f.builder().graph
    y = g.conv(f.args[0], g.constant(w.w), strides=(2, 2), pads=(1, 1, 1, 1))
    y = g.batch_norm(y, *(g.constant(p) for p in (w.scale, w.shift, w.mean, w.var)))
    y = g.max_pool(g.relu(y), kernel=(2, 2), strides=(2, 2))
    y = g.flatten(y, axis=1)
    f.set_return([g.gemm(y, g.constant(w.fc), g.constant(w.fc_b), trans_b=True)])
    return m


def convnet_numpy(w: ConvWeights, x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + 32:2, j:j + 32:2] for i in range(3) for j in range(3)], -1)  # n,3,16,16,9
    y = np.einsum("nchwk,ock->nohw", cols, w.w.reshape(8, 3, 9))
    y = (y - w.mean[:, None, None]) / np.sqrt(w.var[:, None, None] + 1e-5) * w.scale[:, None, None] \
        + w.shift[:, None, None]
    y = np.maximum(y, 0).reshape(n, 8, 8, 2, 8, 2).max(axis=(3, 5))
    return y.reshape(n, -1) @ w.fc.T + w.fc_b


@pytest.mark.parametrize("n", [1, 3])
def test_convnet_through_the_default_pipeline_matches_numpy(n):
    w = ConvWeights()
    m = build_convnet(w)
    optimize(m, "cpu")
    verify(m)
    names = [op.name for op in m.main.body if op.name != "graph.constant"]
    assert "graph.batch_norm" not in names                           # folded into the conv
    assert str(m.main.outputs[0].type) == 'tensor<?x10xf32, "n">'
    x = RNG.normal(size=(n, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(interpret(m, x)[0], convnet_numpy(w, x), rtol=1e-4, atol=1e-4)


def test_symbolic_image_size_gives_floordiv_output_sizes():
    m = Module()
    f = m.add_function("main", [tensor(("n", 3, "h", "h"))])
    g = f.builder().graph
    y = g.conv(f.args[0], g.constant(_w(4, 3, 3, 3)), strides=(2, 2), pads=(1, 1, 1, 1))
    z = g.max_pool(y, kernel=(3, 3), strides=(2, 2), ceil_mode=True)
    f.set_return([g.flatten(z, axis=1)])
    assert str(y.type) == 'tensor<?x4x?x?xf32, "n,(h-1)//2+1,(h-1)//2+1">'
    optimize(m, "cpu")
    verify(m)
    for h in (7, 8, 13):
        x = RNG.normal(size=(2, 3, h, h)).astype(np.float32)
        out = interpret(m, x)[0]
        o = (h - 1) // 2 + 1
        p = min(-(-(o - 3) // 2) + 1, -(-o // 2))
        assert out.shape == (2, 4 * p * p)


# ---- fusion ------------------------------------------------------------------------------------
def test_fusion_runs_on_symbolic_graphs_with_hint_costs():
    m = build_bert(BertWeights())
    optimize(m, "cpu")
    before = sum(1 for op in m.main.body if op.name.startswith("graph.") and op.name != "graph.constant")
    PassManager.parse("fuse").run(m)
    verify(m)
    kernels = [op for op in m.main.body if op.name == "structured.kernel"]
    assert 0 < len(kernels) < before
    assert str(m.main.outputs[0].type) == 'tensor<?x?x64xf32, "b,s">'


def test_costs_use_hints_not_one():
    m = Module()
    f = m.add_function("main", [tensor(("b", "s", HIDDEN))])
    y = f.builder().graph.matmul(f.args[0], f.builder().graph.constant(_w(HIDDEN, HIDDEN)))
    op = y.op
    with hints_from(SymbolTable([SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512, hint=128)])):
        cost = op.opdef.cost([v.type for v in op.operands], [y.type], op.attributes)
    assert cost.flops == 2.0 * 8 * 128 * HIDDEN * HIDDEN
    assert cost.bytes == 4 * (2 * 8 * 128 * HIDDEN + HIDDEN * HIDDEN)


# ---- inference rules --------------------------------------------------------------------------
def test_broadcasting_of_symbols():
    assert broadcast_shapes(("b", 1, 4), (1, "s", 4)) == ("b", "s", 4)
    assert broadcast_shapes(("b*s", 4), ("s*b", 1)) == ("b*s", 4)
    with pytest.raises(ShapeError, match="'b' and 's' are different symbolic sizes"):
        broadcast_shapes(("b", 4), ("s", 4))


def test_shape_ops_with_expressions():
    m = Module()
    f = m.add_function("main", [tensor(("b", "s", 8)), tensor(("b", 3, 8))])
    g = f.builder().graph
    x, c = f.args
    assert g.concat(x, c, axis=1).type == tensor(("b", "s+3", 8))
    assert g.reshape(x, shape=("b", -1)).type == tensor(("b", "8*s"))
    assert g.reshape(x, shape=(-1, 4, 2)).type == tensor(("b*s", 4, 2))
    assert g.flatten(x, axis=2).type == tensor(("b*s", 8))
    assert g.slice(x, starts=(-1,), ends=(2 ** 63 - 1,), axes=(1,), steps=(1,)).type == tensor(("b", 1, 8))
    assert g.slice(x, starts=(0,), ends=(16,), axes=(1,), steps=(1,)).type == tensor(("b", "min(16,s)", 8))
    assert g.pad(x, pads=(0, 1, 0, 0, 2, 0)).type == tensor(("b", "s+3", 8))
    assert g.tile(x, repeats=(1, 2, 1)).type == tensor(("b", "2*s", 8))
    with pytest.raises(ShapeError, match="does not divide"):
        g.reshape(x, shape=(-1, 3))
    with pytest.raises(ShapeError, match="different symbolic sizes"):
        g.batch_matmul(x, g.transpose(x, perm=(1, 2, 0)))


def test_shape_of_a_symbolic_tensor_stays_an_op():
    m = Module()
    f = m.add_function("main", [tensor(("b", 4))])
    g = f.builder().graph
    f.set_return([g.shape_of(f.args[0])])
    optimize(m, "cpu")
    assert [op.name for op in m.main.body][:1] == ["graph.shape_of"]
    np.testing.assert_array_equal(interpret(m, np.zeros((5, 4), np.float32))[0], [5, 4])


def test_interpreter_binds_and_checks_symbols():
    m = Module()
    f = m.add_function("main", [tensor(("b", 4)), tensor(("2*b", 4))])
    set_symbol_table(f, SymbolTable([SymbolRange("b", 1, 8)]))
    g = f.builder().graph
    f.set_return([g.concat(*f.args, axis=0)])
    a, b = np.ones((3, 4), np.float32), np.zeros((6, 4), np.float32)
    assert interpret(m, a, b)[0].shape == (9, 4)
    with pytest.raises(ShapeError, match=r"axis 0 for b = 3"):
        interpret(m, a, np.zeros((5, 4), np.float32))
    with pytest.raises(ShapeError, match=r"'b' = 9, outside its range 1..8"):
        interpret(m, np.ones((9, 4), np.float32), np.zeros((18, 4), np.float32))
