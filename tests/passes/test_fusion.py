"""The fusion engine's parts: inlining at the structured level, merging and splitting kernels,
post-dominators and cycles, the kind rules, the cost model's vetoes and the decision log, and
fused modules compiled to native code.

Numerical checks compare against the unfused module (graph interpreter) or the kernel before
the transformation (structured interpreter); tolerances 1e-5 relative unless stated.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorforge
from tensorforge.dialects.structured.builder import KernelBuilder
from tensorforge.dialects.structured.interpret import run_kernel
from tensorforge.dialects.structured.ops import KernelView
from tensorforge.errors import PassError
from tensorforge.ir import Module, tensor, verify
from tensorforge.ir.interpreter import run_function
from tensorforge.ir.opdef import FusionKind
from tensorforge.ir.pass_manager import PassManager
from tensorforge.ir.types import DType
from tensorforge.passes.fusion import FusionLog, fuse_function, inline_compute, simplify_kernel
from tensorforge.passes.fusion.analysis import EXIT, KernelGraph, kernels_of
from tensorforge.passes.fusion.cost import Machine, live_values, row_footprint
from tensorforge.passes.fusion.evaluate import run_lowered
from tensorforge.passes.fusion.kinds import kernel_kind, structural_kind
from tensorforge.passes.fusion.merge import split_outputs
from tensorforge.passes.lower.graph_to_kernels import FUSION_ATTR, fusion_default, lower_ops

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def kernel_module(name, shapes, build):
    """A function whose body is one kernel built by ``build(kb, *inputs) -> outputs``."""
    m = Module()
    f = m.add_function("main", [tensor(s) for s in shapes])
    kb = KernelBuilder(name, [a.type for a in f.args])
    outs = build(kb, *kb.inputs)
    k = kb.ret(outs, list(f.args))
    f.body.append(k)
    f.set_return(list(k.results))
    verify(m)
    return m, k


def graph_module(shapes, build):
    m = Module()
    f = m.add_function("main", [tensor(s) for s in shapes])
    outs = build(f.builder().graph, *f.args)
    f.set_return(list(outs) if isinstance(outs, (list, tuple)) else [outs])
    verify(m)
    return m


def check_fused(m, rng, pipeline="fuse", target=None, **machine):
    """Fuses a copy of ``m``; asserts it computes what ``m`` does; returns (fused module, log)."""
    work = m.clone()
    opts = " ".join(f"{k.replace('_', '-')}={v}" for k, v in machine.items())
    log = fuse_function(work.main, target, pipeline + (f"{{{opts}}}" if opts else ""))
    verify(work)
    inputs = [rng.uniform(-2, 2, size=a.type.shape).astype(np.float32) for a in m.main.args]
    for g, w in zip(run_lowered(work.main, inputs), run_function(m.main, inputs)):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return work, log


def n_kernels(m) -> int:
    return len(kernels_of(m.main))


# ---- inline_compute -------------------------------------------------------------------------------
def test_inline_transpose_into_reduction(rng):
    def build(kb, x):
        t = kb.compute((6, 4), "pp", DType.f32, lambda i, j: x[j, i])
        return [kb.compute((6, 4), "pr", DType.f32, lambda i, j: t[i, j] * t[i, j], combiner="add")]
    _, k = kernel_module("tsum", [(4, 6)], build)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = run_kernel(k, [x])[0]
    transpose = KernelView(k).computes[0].op
    assert inline_compute(k, transpose) == 2          # both reads replaced
    verify(k)
    assert len(KernelView(k).computes) == 1 and transpose.parent is None
    np.testing.assert_allclose(run_kernel(k, [x])[0], want, rtol=RTOL)
    np.testing.assert_allclose(want, (x.T * x.T).sum(axis=1), rtol=RTOL)


def test_inline_into_padded_read_keeps_the_pad(rng):
    """The consumer reads the intermediate with pad=0 outside [0, n): after substitution the
    expression is evaluated at clamped indices and the pad selected outside."""
    def build(kb, x):
        e = kb.compute((5,), "p", DType.f32, lambda i: x[i].apply("exp") + 1.0)
        return [kb.compute((7,), "p", DType.f32, lambda i: e.read([i - 1], pad=0.0))]
    _, k = kernel_module("shift", [(5,)], build)
    x = rng.standard_normal(5).astype(np.float32)
    want = run_kernel(k, [x])[0]
    np.testing.assert_allclose(want, np.concatenate([[0], np.exp(x) + 1, [0]]), rtol=RTOL)
    inline_compute(k, KernelView(k).computes[0].op)
    verify(k)
    assert len(KernelView(k).computes) == 1
    np.testing.assert_allclose(run_kernel(k, [x])[0], want, rtol=RTOL)


def test_inline_keep_leaves_a_returned_compute(rng):
    def build(kb, x):
        e = kb.compute((3,), "p", DType.f32, lambda i: x[i] * 2.0)
        return [e, kb.compute((3,), "p", DType.f32, lambda i: e[i] + 1.0)]
    _, k = kernel_module("keep", [(3,)], build)
    x = rng.standard_normal(3).astype(np.float32)
    want = run_kernel(k, [x])
    inline_compute(k, KernelView(k).computes[0].op, keep=True)
    assert len(KernelView(k).computes) == 2
    for g, w in zip(run_kernel(k, [x]), want):
        np.testing.assert_allclose(g, w, rtol=RTOL)


def test_inline_refuses_a_reduction():
    _, k = kernel_module("sum", [(4, 3)], lambda kb, x: [kb.compute((4, 3), "pr", DType.f32,
                                                                     lambda i, j: x[i, j], combiner="add")])
    with pytest.raises(PassError, match="only parallel computes"):
        inline_compute(k, KernelView(k).computes[0].op)


def test_simplify_reuses_an_expensive_value_read_twice(rng):
    """exp read by two computes stays a buffer; a cheap negation read once is substituted."""
    def build(kb, x):
        e = kb.compute((4, 8), "pp", DType.f32, lambda i, j: x[i, j].apply("exp"))
        s = kb.compute((4, 8), "pr", DType.f32, lambda i, j: e[i, j], combiner="add")
        n = kb.compute((4, 8), "pp", DType.f32, lambda i, j: -x[i, j])
        return [kb.compute((4, 8), "pp", DType.f32, lambda i, j: e[i, j] / s[i] + n[i, j])]
    _, k = kernel_module("reuse", [(4, 8)], build)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    want = run_kernel(k, [x])[0]
    assert simplify_kernel(k) == 1
    assert len(KernelView(k).computes) == 3
    np.testing.assert_allclose(run_kernel(k, [x])[0], want, rtol=RTOL)


# ---- kinds, merge, split, graph analysis ------------------------------------------------------------
def test_lowering_records_the_op_definitions_kind():
    m = graph_module([(4, 8), (8, 3)], lambda g, x, w: g.softmax(g.matmul(g.relu(x), w)))
    lower_ops(m.main)
    kinds = [k.attributes[FUSION_ATTR] for k in kernels_of(m.main)]
    assert kinds == ["elementwise", "out_elementwise_fusable", "reduction"]
    for k in kernels_of(m.main):          # the structure says the same where the op does not
        assert structural_kind(k) == kernel_kind(k)


def test_split_outputs_gives_one_kernel_per_result(rng):
    m = graph_module([(4, 6)], lambda g, x: g.split(x, axis=1, sizes=(2, 4)))
    lower_ops(m.main)
    (k,) = kernels_of(m.main)
    assert len(k.results) == 2
    parts = split_outputs(k)
    verify(m)
    assert [len(p.results) for p in parts] == [1, 1]
    x = rng.standard_normal((4, 6)).astype(np.float32)
    got = run_lowered(m.main, [x])
    np.testing.assert_array_equal(got[0], x[:, :2])
    np.testing.assert_array_equal(got[1], x[:, 2:])


def test_post_dominators_and_cycles():
    """a -> b -> d, a -> c -> d: d post-dominates a; merging a with d alone would skip b and c."""
    m = graph_module([(4, 4)], lambda g, x: (lambda a: g.add(g.exp(a), g.cumsum(a, axis=1)))(g.neg(x)))
    lower_ops(m.main)
    graph = KernelGraph(m.main)
    a, b, c, d = graph.kernels
    ipdom = graph.post_dominators()
    assert ipdom[id(a)] is d and ipdom[id(b)] is d and ipdom[id(c)] is d and ipdom[id(d)] is EXIT
    assert graph.closes_cycle([a, d]) in (b, c)
    assert graph.closes_cycle([a, b, c, d]) is None
    assert graph.paths_between(a, d) == [a, b, c, d]


# ---- decisions, reasons and vetoes ------------------------------------------------------------------
def _reasons(log: FusionLog) -> str:
    return "\n".join(d.reason for d in log.rejected)


def test_log_records_the_kind_rules(rng):
    m = graph_module([(4, 6), (6, 5), (5, 3)],
                     lambda g, x, a, b: g.softmax(g.matmul(g.matmul(g.tanh(x), a), b)))
    fused, log = check_fused(m, rng, "fuse-vertical")
    assert n_kernels(fused) == 4
    reasons = _reasons(log)
    assert "one GEMM/conv per kernel" in reasons
    assert "only data movement" in reasons
    assert "a reduction after a contraction" in reasons
    assert "decisions:" in log.dump() and "rejected" in log.dump()


def test_cycle_is_rejected_with_its_reason(rng):
    m = graph_module([(4, 8)], lambda g, x: (lambda e: g.add(e, g.cumsum(e, axis=1)))(g.exp(x)))
    fused, log = check_fused(m, rng, "fuse")
    assert n_kernels(fused) == 3
    assert "would make a cycle through" in _reasons(log)
    assert "opaque" in _reasons(log)


def test_register_pressure_veto(rng):
    def many_live(g, x):
        fs = [g.exp(x), g.tanh(x), g.sigmoid(x), g.sin(x), g.cos(x), g.abs(x), g.erf(x), g.neg(x), g.relu(x),
              g.silu(x)]
        acc = fs[-1]
        for f in reversed(fs[:-1]):
            acc = g.mul(f, acc)
        return acc
    m = graph_module([(4, 16)], many_live)
    fused, log = check_fused(m, rng, "fuse-vertical", vector_registers=32)
    assert n_kernels(fused) == 1
    (k,) = kernels_of(fused.main)
    assert live_values(KernelView(k).computes[0]) > 8
    small, log = check_fused(m, rng, "fuse-vertical", vector_registers=6)
    assert n_kernels(small) > 1
    assert "register pressure" in _reasons(log)
    for k in kernels_of(small.main):
        assert all(live_values(cv) <= 6 for cv in KernelView(k).computes)


def test_cache_footprint_veto(rng):
    m = graph_module([(4, 512)], lambda g, x: g.sub(x, g.reduce_max(x, axes=(1,), keepdims=True)))
    fused, _ = check_fused(m, rng, "fuse-vertical")
    (k,) = kernels_of(fused.main)
    assert row_footprint(k) == 512 * 4
    apart, log = check_fused(m, rng, "fuse-vertical", cache_bytes=1024)
    assert n_kernels(apart) == 2
    assert "cache footprint" in _reasons(log)


def test_kernel_size_veto(rng):
    m = graph_module([(4, 8)], lambda g, x: g.exp(g.tanh(g.sigmoid(g.erf(x)))))
    fused, log = check_fused(m, rng, "fuse-vertical", max_kernel_ops=4)
    assert n_kernels(fused) > 1
    assert "kernel size" in _reasons(log)


def test_machine_reads_the_target():
    from tensorforge.codegen.target import Target
    t = Target.host().replace(vector_registers=8, l2=4096)
    m = Machine.of(t)
    assert (m.vector_registers, m.cache_bytes) == (8, 4096)
    assert Machine.of(t, vector_registers=32).vector_registers == 32


def test_pass_manager_runs_fusion_passes_by_name(rng):
    m = graph_module([(4, 8), (8,)], lambda g, x, b: g.exp(g.relu(g.add(x, b))))
    work = m.clone()
    PassManager.parse("lower-structured,fuse-vertical,fuse-category", verify_each=True).run(work)
    assert n_kernels(work) == 1
    x, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(run_lowered(work.main, [x, b])[0], np.exp(np.maximum(x + b, 0)), rtol=RTOL)


def test_fuse_function_rejects_other_passes():
    m = graph_module([(4,)], lambda g, x: g.exp(x))
    with pytest.raises(PassError, match="not a fusion pass"):
        fuse_function(m.main, None, "fuse,dce")


# ---- native code ------------------------------------------------------------------------------------
def _native_pair(m, rng, atol=1e-5):
    """Compiles ``m`` with and without fusion; both must match the interpreter."""
    inputs = [rng.uniform(-2, 2, size=a.type.shape).astype(np.float32) for a in m.main.args]
    want = run_function(m.main, inputs)
    models = {}
    for mode in ("none", "fuse"):
        with fusion_default(mode):
            models[mode] = tensorforge.compile(m, passes=False)
        got = models[mode].run(*inputs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol, err_msg=f"native, fusion={mode}")
    return models["none"].native.build["kernels"], models["fuse"].native.build["kernels"]


def test_native_fused_norm_activation_residual(rng):
    m = graph_module([(2, 16, 64), (64,), (64,)],
                     lambda g, x, s, b: g.add(g.gelu(g.layer_norm(x, s, b, axis=-1)), x))
    before, after = _native_pair(m, rng)
    assert (before, after) == (3, 1)


def test_native_fused_conv_bn_relu_residual(rng):
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    stats = [rng.uniform(0.5, 1.5, 8).astype(np.float32) for _ in range(4)]

    def block(g, x):
        y = g.conv(x, g.constant(w), pads=(1, 1, 1, 1))
        y = g.batch_norm(y, *[g.constant(s) for s in stats])
        return g.relu(g.add(y, x))
    before, after = _native_pair(graph_module([(1, 8, 10, 10)], block), rng, atol=1e-4)
    assert (before, after) == (4, 1)


def test_native_fused_attention(rng):
    ws = [rng.standard_normal((16, 16)).astype(np.float32) * 0.3 for _ in range(3)]

    def attn(g, x):
        q, k, v = (g.matmul(x, g.constant(w)) for w in ws)
        return g.matmul(g.softmax(g.matmul(q, g.transpose(k, perm=(1, 0))), axis=-1), v)
    before, after = _native_pair(graph_module([(12, 16)], attn), rng)
    assert before == 7 and after == 4


def test_native_fused_reuse_and_category(rng):
    def multi(g, x, y):
        e = g.exp(x)
        return [e, g.add(e, g.reduce_max(x, axes=(1,), keepdims=True)), g.neg(y), g.abs(y)]
    before, after = _native_pair(graph_module([(6, 10), (5,)], multi), rng)
    assert after < before


def test_sibling_convs_concatenate_their_weights(rng):
    ws = [rng.standard_normal((c, 4, 1, 1)).astype(np.float32) for c in (3, 5)]
    bs = [rng.standard_normal(c).astype(np.float32) for c in (3, 5)]
    m = graph_module([(1, 4, 6, 6)], lambda g, x: [g.conv(x, g.constant(w), g.constant(b)) for w, b in zip(ws, bs)])
    fused, log = check_fused(m, rng, "fuse-horizontal")
    (concat,) = [d for d in log.decisions if d.strategy == "concat"]
    assert concat.fused and len(concat.subjects) == 2
    convs = [k for k in kernels_of(fused.main) if kernel_kind(k) == FusionKind.OUT_ELEMENTWISE_FUSABLE]
    assert len(convs) == 1 and convs[0].results[0].type.shape == (1, 8, 6, 6)
