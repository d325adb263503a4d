"""Kernels over symbolic shapes: lowered once, compiled once, run at many sizes (docs/dynamic_shapes.md).

Each test builds a graph function whose argument types hold symbolic dims, lowers it to kernels
(``lower_function``, as the compile path does), schedules each kernel with the default schedule,
emits C with the ``tf_dims`` parameter, compiles the whole file once, then calls the kernels
through ctypes at several bindings of the symbols and compares with NumPy.  No compiler runs
after the first build (``toolchain.stats``).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pytest

from tensorforge.codegen.c.emit_loop import PRELUDE, FunctionEmitter
from tensorforge.codegen.c.toolchain import compile_c, stats
from tensorforge.ir import Module, tensor, verify
from tensorforge.ir.symbolic import SymbolRange, SymbolTable, evaluate_shape, set_symbol_table
from tensorforge.ir.types import DType
from tensorforge.passes.lower.graph_to_kernels import lower_function
from tensorforge.passes.lower.structured_to_loop import lower_kernel
from tensorforge.schedule.default import default_schedule

THREADS = 2


@dataclass
class Step:
    """One kernel call of the lowered function: C name, operand and result values."""

    name: str
    operands: list
    results: list


class SymbolicProgram:
    """A graph function over symbolic shapes, lowered and compiled once; ``run`` executes it at the
    symbol values implied by the inputs' shapes (a tiny stand-in for the model entry)."""

    def __init__(self, arg_types: Sequence, build: Callable, ranges: Sequence[SymbolRange],
                 fusion: str | None = None, threads: int = THREADS, schedule: Callable | None = None):
        m = Module()
        f = m.add_function("main", list(arg_types))
        table = SymbolTable(ranges)
        set_symbol_table(f, table)
        outs = build(f.builder(), list(f.args))
        f.set_return(list(outs) if isinstance(outs, (list, tuple)) else [outs])
        verify(m)
        lower_function(f, None, fusion)
        self.func, self.order = f, list(table.ranges)
        self.texts, self.steps = [], []
        for k, op in enumerate(o for o in f.body if o.name == "structured.kernel"):
            fn = lower_kernel(op)
            verify(fn)
            if schedule is None:
                default_schedule(fn, threads, check=True)
            else:
                schedule(fn)
            verify(fn)
            name = f"sk{k}"
            self.texts.append(FunctionEmitter(fn, name, static=False, symbols=self.order).emit())
            self.steps.append(Step(name, list(op.operands), list(op.results)))
        before = stats.compiler_runs
        self.lib = compile_c(PRELUDE + "\n".join(self.texts), name="symbolic_kernels").lib
        self.compiler_runs = stats.compiler_runs - before

    @property
    def source(self) -> str:
        return "\n".join(self.texts)

    def bind(self, inputs: Sequence[np.ndarray]) -> dict[str, int]:
        env: dict[str, int] = {}
        for a, x in zip(self.func.args, inputs):
            for d, n in zip(a.type.shape, x.shape):
                if isinstance(d, str) and d in self.order:
                    env.setdefault(d, n)
        return env

    def run(self, *inputs: np.ndarray, env: dict[str, int] | None = None) -> list[np.ndarray]:
        env = env or self.bind(inputs)
        dims = (ctypes.c_int64 * max(1, len(self.order)))(*[env[s] for s in self.order])
        vals: dict[int, np.ndarray] = {}
        for a, x in zip(self.func.args, inputs):
            assert x.shape == evaluate_shape(a.type.shape, env), (x.shape, a.type)
            vals[id(a)] = np.ascontiguousarray(x)
        for op in self.func.body:
            if op.name == "graph.constant":
                vals[id(op.results[0])] = np.ascontiguousarray(op.attributes["value"].array)
        for st in self.steps:
            outs = [np.empty(evaluate_shape(r.type.shape, env), r.type.dtype.np) for r in st.results]
            args = [vals[id(v)].ctypes.data_as(ctypes.c_void_p) for v in st.operands]
            args += [o.ctypes.data_as(ctypes.c_void_p) for o in outs] + [dims]
            getattr(self.lib, st.name)(*args)
            for r, o in zip(st.results, outs):
                vals[id(r)] = o
        return [vals[id(v)] for v in self.func.outputs]


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def gelu(x):
    from math import erf, sqrt
    return (0.5 * x * (1 + np.vectorize(lambda v: erf(v / sqrt(2)))(x.astype(np.float64)))).astype(np.float32)


def softmax(x, axis=-1):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


B, S = SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512, hint=32)
SIZES = [(1, 1), (3, 17), (17, 3), (2, 64), (64, 5)]


# ---- elementwise ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fusion", [None, "fuse"])
def test_broadcast_add_gelu(fusion):
    """Broadcast add then GELU on (b, s, 64): one generic kernel for all sizes, NaN/Inf propagate."""
    prog = SymbolicProgram([tensor(("b", "s", 64)), tensor((64,))],
                           lambda b, a: b.create("graph.gelu", [b.create("graph.add", a).results[0]]).results[0],
                           [B, S], fusion=fusion)
    assert "tf_sym_b" in prog.source and "tf_dims" in prog.source
    rng = np.random.default_rng(0)
    runs = stats.compiler_runs
    for b, s in SIZES:
        x, y = rand(rng, b, s, 64), rand(rng, 64)
        x[0, 0, :3] = [np.nan, np.inf, -np.inf]
        (got,) = prog.run(x, y)
        np.testing.assert_allclose(got, gelu(x + y), rtol=1e-5, atol=1e-6)
    assert stats.compiler_runs == runs


def _op(name: str, **attrs):
    """A build function applying one graph op to all arguments."""
    return lambda b, a: b.create(name, a, attrs).results[0]


def _check(prog: SymbolicProgram, make_inputs: Callable, reference: Callable, sizes=SIZES,
           rtol: float = 1e-5, atol: float = 1e-6) -> None:
    rng = np.random.default_rng(1)
    runs = stats.compiler_runs
    for size in sizes:
        inputs = make_inputs(rng, *size)
        outs = prog.run(*inputs, env={k: v for k, v in zip(("b", "s"), size) if k in prog.order})
        refs = reference(*inputs)
        refs = refs if isinstance(refs, (list, tuple)) else [refs]
        for got, want in zip(outs, refs):
            assert got.shape == want.shape, (size, got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"sizes {size}")
    assert stats.compiler_runs == runs, "a size change ran the C compiler"


# ---- reductions and normalisations -----------------------------------------------------------------
def test_softmax_last_axis_symbolic_rows():
    """Softmax over a symbolic row length (b, 4, s, s): the row statistics run over tf_sym_s."""
    prog = SymbolicProgram([tensor(("b", 4, "s", "s"))], _op("graph.softmax", axis=-1), [B, S])

    def inputs(rng, b, s):
        x = rand(rng, b, 4, s, s) * 4
        x[0, 0, 0, 0] = -np.inf
        if s > 1:
            x[-1, 1, 0, :] = -np.inf       # a fully masked row: NaN like NumPy
        return [x]

    with np.errstate(invalid="ignore"):
        _check(prog, inputs, softmax, rtol=1e-5, atol=1e-6)


def test_layer_norm_rows_of_symbolic_count():
    """layer_norm on (b*s, 64) and (b, s, 64) with scale and bias."""
    for shape in [("b*s", 64), ("b", "s", 64)]:
        prog = SymbolicProgram([tensor(shape), tensor((64,)), tensor((64,))],
                               _op("graph.layer_norm", axis=-1, epsilon=1e-5), [B, S])

        def inputs(rng, b, s, shape=shape):
            lead = (b * s,) if len(shape) == 2 else (b, s)
            return [rand(rng, *lead, 64), rand(rng, 64), rand(rng, 64)]

        def ref(x, g, beta):
            x64 = x.astype(np.float64)
            m = x64.mean(-1, keepdims=True)
            v = ((x64 - m) ** 2).mean(-1, keepdims=True)
            return ((x64 - m) / np.sqrt(v + 1e-5) * g + beta).astype(np.float32)

        _check(prog, inputs, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axes,keepdims", [((1,), False), ((1,), True), ((0, 1), False)])
def test_reduce_sum_and_mean_over_symbolic_axes(axes, keepdims):
    """Sums over the symbolic s axis (and b and s) of (b, s, 16); a mean divides by the run-time count."""
    for name, fn in (("graph.reduce_sum", np.sum), ("graph.reduce_mean", np.mean)):
        prog = SymbolicProgram([tensor(("b", "s", 16))], _op(name, axes=axes, keepdims=keepdims), [B, S])
        _check(prog, lambda rng, b, s: [rand(rng, b, s, 16)],
               lambda x: fn(x.astype(np.float64), axis=axes, keepdims=keepdims).astype(np.float32),
               rtol=1e-4, atol=1e-4)


# ---- data movement -----------------------------------------------------------------------------------
def test_transpose_heads():
    """(b, s, 4, 16) -> (b, 4, s, 16), the attention head split: a tiled transpose over symbolic s."""
    prog = SymbolicProgram([tensor(("b", "s", 4, 16))], _op("graph.transpose", perm=(0, 2, 1, 3)), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b, s, 4, 16)], lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3)))


def test_transpose_last_two_symbolic():
    """(b, s, 48) -> (b, 48, s): strided reads along a symbolic loop."""
    prog = SymbolicProgram([tensor(("b", "s", 48))], _op("graph.transpose", perm=(0, 2, 1)), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b, s, 48)], lambda x: np.ascontiguousarray(x.transpose(0, 2, 1)))


@pytest.mark.parametrize("src,dst", [(("b", "s", 64), (-1, 64)), (("b", "s", 64), ("b", "s", 4, 16)),
                                     (("b*s", 64), ("b", "s", 64)), (("b", "s", 4, 16), ("b", "s", 64))])
def test_reshape(src, dst):
    """Merging and splitting symbolic dims: flat index maps with run-time strides."""
    prog = SymbolicProgram([tensor(src)], _op("graph.reshape", shape=dst), [B, S])
    out_t = prog.func.outputs[0].type
    rng = np.random.default_rng(2)
    runs = stats.compiler_runs
    for b, s in SIZES:
        env = {"b": b, "s": s}
        x = rand(rng, *evaluate_shape(src, env))
        (got,) = prog.run(x, env=env)
        np.testing.assert_array_equal(got, x.reshape(evaluate_shape(out_t.shape, env)))
    assert stats.compiler_runs == runs


@pytest.mark.parametrize("starts,ends,steps", [((1,), (2 ** 62,), (1,)), ((0,), (-1,), (1,)),
                                               ((0,), (3,), (1,)), ((0,), (2 ** 62,), (2,))])
def test_slice_of_symbolic_axis(starts, ends, steps):
    """Slices of the s axis of (b, s, 8): to the end, to -1, to min(3, s), every second element."""
    prog = SymbolicProgram([tensor(("b", "s", 8))],
                           _op("graph.slice", starts=starts, ends=ends, axes=(1,), steps=steps), [B, S])
    sl = slice(starts[0], None if ends[0] >= 2 ** 62 else ends[0], steps[0])
    sizes = [(b, s) for b, s in SIZES if s > starts[0] and (ends[0] != -1 or s > 1)]
    _check(prog, lambda rng, b, s: [rand(rng, b, s, 8)], lambda x: np.ascontiguousarray(x[:, sl]), sizes=sizes)


def test_embedding_with_symbolic_ids():
    """Embedding lookup of (b, s) ids in a (100, 32) table: out of range ids are clamped."""
    prog = SymbolicProgram([tensor((100, 32)), tensor(("b", "s"), DType.i64)], _op("graph.embedding"), [B, S])

    def inputs(rng, b, s):
        return [rand(rng, 100, 32), rng.integers(0, 100, (b, s)).astype(np.int64)]

    _check(prog, inputs, lambda t, ids: t[ids])


def test_gather_rows_of_symbolic_table():
    """gather along axis 0 of an (s, 16) table with (b,) indices (negative ones wrap by s)."""
    prog = SymbolicProgram([tensor(("s", 16)), tensor(("b",), DType.i64)], _op("graph.gather", axis=0), [B, S])

    def inputs(rng, b, s):
        return [rand(rng, s, 16), rng.integers(-s, s, (b,)).astype(np.int64)]

    _check(prog, inputs, lambda x, i: x[np.where(i < 0, i + x.shape[0], i)])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_symbolic_axis(mode):
    """Pads of (b, s, 8): 2 before and 1 after on s, 1 after on the last axis; constant mode
    bounds-checks against the run-time s."""
    pads = (0, 2, 0, 0, 1, 1)
    prog = SymbolicProgram([tensor(("b", "s", 8))], _op("graph.pad", pads=pads, mode=mode, value=-7.0), [B, S])
    np_mode = {"constant": "constant", "edge": "edge", "reflect": "reflect"}[mode]
    kw = {"constant_values": -7.0} if mode == "constant" else {}
    sizes = [(b, s) for b, s in SIZES if mode != "reflect" or s > 2]
    _check(prog, lambda rng, b, s: [rand(rng, b, s, 8)],
           lambda x: np.pad(x, ((0, 0), (2, 1), (0, 1)), mode=np_mode, **kw), sizes=sizes)


def test_concat_along_symbolic_axis():
    """concat of (b, s, 8) and (b, 3, 8) on axis 1: the second piece starts at the run-time s."""
    prog = SymbolicProgram([tensor(("b", "s", 8)), tensor(("b", 3, 8))], _op("graph.concat", axis=1), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b, s, 8), rand(rng, b, 3, 8)],
           lambda x, y: np.concatenate([x, y], axis=1))


def test_concat_of_two_symbolic_pieces():
    """concat of (b, s, 8) and (b, s, 8) on axis 1 (KV-cache style): output s*2."""
    prog = SymbolicProgram([tensor(("b", "s", 8)), tensor(("b", "s", 8))], _op("graph.concat", axis=1), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b, s, 8), rand(rng, b, s, 8)],
           lambda x, y: np.concatenate([x, y], axis=1))


# ---- structured level and IR text ----------------------------------------------------------------
def test_structured_interpreter_and_text_round_trip():
    """The structured kernel of a symbolic softmax evaluates in NumPy at any size; its loop.func
    (symbolic ``ub``, ``scalar.dim``, ``tf.symbols``) prints and parses back unchanged."""
    from tensorforge.dialects.structured.interpret import run_kernel
    from tensorforge.ir.parser import parse_module
    from tensorforge.ir.printer import print_module

    prog = SymbolicProgram([tensor(("b", "s", 48))], _op("graph.transpose", perm=(0, 2, 1)), [B, S])
    kernel = next(o for o in prog.func.body if o.name == "structured.kernel")
    x = rand(np.random.default_rng(3), 3, 5, 48)
    (got,) = run_kernel(kernel, [x])
    np.testing.assert_array_equal(got, x.transpose(0, 2, 1))
    fn = lower_kernel(kernel)
    assert fn.attributes["tf.symbols"] == prog.func.attributes["tf.symbols"]
    assert {op.attributes["ub"] for op in fn.walk() if op.name == "loop.for"} == {"b", "s", 48}
    text = print_module(prog.func.parent_op)
    again = parse_module(text)
    assert print_module(again) == text


# ---- schedule primitives on symbolic loops -------------------------------------------------------
def _steps(fn):
    return [op for op in fn.walk() if op.name == "loop.if"]


def test_split_of_symbolic_loop_guards_unless_divisor_is_known():
    """split('0.1', 8) of the s loop: guarded for s in 1..512, unguarded when s is a multiple of 8;
    both compute the same numbers at every allowed size."""
    from tensorforge.schedule.primitives import Schedule

    for s_range, guarded, sizes in ((S, True, SIZES), (SymbolRange("s", 8, 512, divisor=8, hint=32), False,
                                                       [(1, 8), (3, 16), (2, 64)])):
        seen = []

        def sched(fn, seen=seen):
            sc = Schedule(fn)
            _, inner = sc.split("0.1", 8)
            sc.vectorize("0.2")
            sc.unroll(inner, 4)
            seen.append(bool(_steps(fn)))

        prog = SymbolicProgram([tensor(("b", "s", 16)), tensor((16,))], _op("graph.mul"), [B, s_range],
                               schedule=sched)
        assert seen == [guarded]
        _check(prog, lambda rng, b, s: [rand(rng, b, s, 16), rand(rng, 16)], lambda x, y: x * y, sizes=sizes)


def test_fuse_tile_and_parallel_of_symbolic_loops():
    """fuse(b, s) reads s at run time (iv // s, iv % s); a tiled transpose guards both tiles."""
    from tensorforge.schedule.primitives import Schedule

    def sched(fn):
        sc = Schedule(fn)
        t = sc.fuse("0.0", "0.1")
        sc.parallel(t)
        sc.tile("0.2", "0.3", 16, 8)

    prog = SymbolicProgram([tensor(("b", 12, "s", "s"))], _op("graph.transpose", perm=(0, 2, 3, 1)), [B, S],
                           schedule=sched)
    _check(prog, lambda rng, b, s: [rand(rng, b, 12, s, s)],
           lambda x: np.ascontiguousarray(x.transpose(0, 2, 3, 1)), sizes=[(1, 1), (3, 17), (2, 40)])


def test_trace_recorded_at_hint_size_replays_on_symbolic_kernel():
    """The default schedule's trace of the static kernel at the hint sizes (b=8, s=32) replays on
    the symbolic kernel (the auto-tuner's records), and the result is right at other sizes."""
    from tensorforge.schedule.trace import replay

    build = _op("graph.softmax", axis=-1)
    static = SymbolicProgram([tensor((8, 4, 32, 32))], build, [])
    fn0 = lower_kernel(next(o for o in static.func.body if o.name == "structured.kernel"))
    trace = default_schedule(fn0, THREADS).trace
    assert len(trace) > 0
    replayed = []

    def sched(fn):
        replay(fn, trace)
        replayed.append(True)

    prog = SymbolicProgram([tensor(("b", 4, "s", "s"))], build, [B, S], schedule=sched)
    assert replayed == [True]
    _check(prog, lambda rng, b, s: [rand(rng, b, 4, s, s)], softmax)


def test_symbolic_local_buffers_heap_and_stack():
    """cache_write rows of a symbolic length live on the heap (no upper bound) or on the stack at the
    declared bound; both give the column sums of (b, s, 16) over b."""
    from tensorforge.schedule.primitives import Schedule

    for s_range, heap in ((SymbolRange("s", 1, None, hint=32), True), (S, False)):
        def sched(fn):
            sc = Schedule(fn)
            sc.cache_write("0", None)
            sc.reorder("0.2", "0.0", "0.1")

        prog = SymbolicProgram([tensor(("b", "s", 16))], _op("graph.reduce_sum", axes=(0,)), [B, s_range],
                               schedule=sched)
        assert ("aligned_alloc" in prog.source) == heap
        _check(prog, lambda rng, b, s: [rand(rng, b, s, 16)], lambda x: x.sum(0), rtol=1e-5, atol=1e-5)


# ---- contractions and windows on the generic loop path ---------------------------------------------
def test_matmul_and_batch_matmul_generic_path():
    """(b*s, 64) @ (64, 24) and the attention scores (b, 4, s, 16) @ (b, 4, 16, s) on the generic
    loop path (the default contraction schedule: no register tile over a symbolic extent)."""
    prog = SymbolicProgram([tensor(("b*s", 64)), tensor((64, 24))], _op("graph.matmul"), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b * s, 64), rand(rng, 64, 24)], lambda a, w: a @ w,
           rtol=1e-4, atol=1e-4)
    prog = SymbolicProgram([tensor(("b", 4, "s", 16)), tensor(("b", 4, 16, "s"))], _op("graph.matmul"), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b, 4, s, 16), rand(rng, b, 4, 16, s)], lambda q, k: q @ k,
           rtol=1e-4, atol=1e-4)


def test_conv_and_pool_with_symbolic_batch():
    """conv2d 3x3 pad 1 and a 2x2 max pool over (b, 3, 10, 10): only the batch is symbolic."""
    w = np.random.default_rng(4).standard_normal((8, 3, 3, 3)).astype(np.float32)

    def build(b, a):
        c = b.create("graph.conv", [a[0], b.graph.constant(w)], {"pads": (1, 1, 1, 1)}).results[0]
        return b.create("graph.max_pool", [c], {"kernel": (2, 2), "strides": (2, 2)}).results[0]

    def ref(x):
        n = x.shape[0]
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.stack([xp[:, :, i:i + 10, j:j + 10] for i in range(3) for j in range(3)], axis=2)
        y = np.einsum("nckhw,ock->nohw", cols, w.reshape(8, 3, 9))
        return y.reshape(n, 8, 5, 2, 5, 2).max(axis=(3, 5))

    prog = SymbolicProgram([tensor(("b", 3, 10, 10))], build, [B])
    _check(prog, lambda rng, b, s: [rand(rng, b, 3, 10, 10)], ref, rtol=1e-4, atol=1e-4)


def test_argmax_and_cumsum_over_symbolic_axis():
    prog = SymbolicProgram([tensor(("b", "s"))], _op("graph.argmax", axis=1, keepdims=False), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b, s)], lambda x: x.argmax(1))
    prog = SymbolicProgram([tensor(("b", "s"))], _op("graph.cumsum", axis=1), [B, S])
    _check(prog, lambda rng, b, s: [rand(rng, b, s)], lambda x: np.cumsum(x, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pads", [(0, 0), (1, 1)])
def test_conv1d_and_avg_pool_over_symbolic_length(pads):
    """A 1-D conv (k=3, stride 2) and an average pool (k=2, count_include_pad off) over a symbolic
    sequence: output lengths are floordiv expressions, windows bounds-checked where not provable."""
    w = np.random.default_rng(5).standard_normal((4, 2, 3)).astype(np.float32)

    def build(b, a):
        c = b.create("graph.conv", [a[0], b.graph.constant(w)], {"pads": pads, "strides": (2,)}).results[0]
        return b.create("graph.avg_pool", [c], {"kernel": (2,), "pads": (1, 0)}).results[0]

    def ref(x):
        xp = np.pad(x, ((0, 0), (0, 0), pads))
        n = (xp.shape[2] - 3) // 2 + 1
        y = np.stack([np.einsum("ncK,ocK->no", xp[:, :, 2 * t:2 * t + 3], w) for t in range(n)], axis=2)
        yp = np.pad(y, ((0, 0), (0, 0), (1, 0)), constant_values=np.nan)
        m = (n + 1 - 2) // 1 + 1
        win = np.stack([yp[:, :, t:t + 2] for t in range(m)], axis=2)
        return np.nanmean(win, axis=3).astype(np.float32)

    prog = SymbolicProgram([tensor((2, 2, "s"))], build, [S])
    _check(prog, lambda rng, b, s: [rand(rng, 2, 2, s)], ref, sizes=[(1, 3), (1, 6), (1, 17), (1, 40)],
           rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_over_symbolic_sequence(causal):
    """graph.attention on q, k, v of (b, 4, s, 16): scores, softmax and the weighted sum over run-time s."""
    prog = SymbolicProgram([tensor(("b", 4, "s", 16))] * 3, _op("graph.attention", causal=causal), [B, S])

    def ref(q, k, v):
        sc = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / 4.0
        if causal:
            s = q.shape[2]
            sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
        return (softmax(sc) @ v).astype(np.float32)

    _check(prog, lambda rng, b, s: [rand(rng, b, 4, s, 16) for _ in range(3)], ref, rtol=1e-4, atol=1e-5)


def test_topk_over_bounded_symbolic_axis():
    """topk(k=3) along s (declared max 512 <= the native limit): values and indices."""
    prog = SymbolicProgram([tensor(("b", "s"))], lambda b, a: list(b.create("graph.topk", a, {"k": 3, "axis": 1}).results),
                           [B, S])
    sizes = [(b, s) for b, s in SIZES if s >= 3]

    def ref(x):
        idx = np.argsort(-x, axis=1, kind="stable")[:, :3]
        return [np.take_along_axis(x, idx, 1), idx]

    _check(prog, lambda rng, b, s: [rand(rng, b, s)], ref, sizes=sizes)
