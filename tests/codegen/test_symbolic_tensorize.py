"""Tensorized contractions over symbolic sizes: compile once, run at any batch / sequence length.

Each case builds one ``structured.kernel`` over symbolic dims (as lowering and fusion make them:
a contraction, then an elementwise chain), lets the tensorizer write its C with the dynamic
signature (``tf_dims`` last, docs/dynamic_shapes.md), compiles that once and calls it at several
sizes, comparing with float64 NumPy / torch within 1e-4 relative.  The harness stands in for the
model's ``tf_run_dyn`` entry: it calls the one kernel with the dims, so these tests do not depend
on the memory plan or the runtime.  The compiler must not run again when the sizes change.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from tensorforge.codegen.c import toolchain
from tensorforge.codegen.c.emit_loop import PRELUDE, c_type
from tensorforge.codegen.c.tensorize import KERNEL_NAME, Tensorizer
from tensorforge.codegen.target import Target
from tensorforge.dialects.structured.builder import KernelBuilder
from tensorforge.ir import DType, Module, tensor, verify
from tensorforge.ir.symbolic import SymbolRange, SymbolTable, evaluate_shape, set_symbol_table, symbol_table_of

RTOL = 1e-4


class KernelHarness:
    """One tensorized kernel of ``func`` compiled as a library with an exported caller
    ``tf_call(void* const* buffers, const int64_t* dims)`` (kernel operands, then its result).
    A function without symbols gets the static kernel (``dims`` unused): the speed baseline."""

    def __init__(self, func, tensorizer: Tensorizer | None = None):
        self.func = func
        self.symbols = list(symbol_table_of(func).ranges)
        self.kernel = next(op for op in func.body if op.name == "structured.kernel")
        prepared = (tensorizer or Tensorizer(Target.host())).prepare(func)
        self.plan = prepared.plans.get(id(self.kernel))
        assert self.plan is not None, "the kernel was not tensorized"
        text = prepared.emit(self.kernel, self.symbols)
        assert text is not None and ("const int64_t* restrict tf_dims" in text) == bool(self.symbols)
        self.source = text
        arg_index = {id(a): i for i, a in enumerate(func.args)}
        self.operands: list[int | np.ndarray] = []      # function input index, or a constant array
        for i, v in enumerate(self.kernel.operands):
            packed = prepared.operand_weight(self.kernel, i)
            if packed is not None:
                self.operands.append(np.ascontiguousarray(packed, dtype=np.float32))
            elif v.op is not None and v.op.name == "graph.constant":
                self.operands.append(np.ascontiguousarray(v.op.attributes["value"].array))
            else:
                self.operands.append(arg_index[id(v)])
        n = len(self.kernel.operands)
        params = [f"(const {'float' if isinstance(o, np.ndarray) and o.dtype == np.float32 else c_type(v.type)}*)b[{i}]"
                  for i, (o, v) in enumerate(zip(self.operands, self.kernel.operands))]
        out_t = c_type(self.kernel.results[0].type)
        call = ", ".join(params + [f"({out_t}*)b[{n}]"] + (["dims"] if self.symbols else []))
        src = (PRELUDE + "#ifdef _OPENMP\n#include <omp.h>\n#endif\n" + text.replace(KERNEL_NAME, "tf_kernel", 1)
               + f"\nvoid tf_call(void* const* b, const int64_t* dims) {{ (void)dims; tf_kernel({call}); }}\n")
        self.lib = toolchain.compile_c(src, Target.host(), name="symbolic_tensorize").lib
        self.lib.tf_call.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)]

    def __call__(self, inputs: list[np.ndarray], env: dict[str, int]) -> np.ndarray:
        out_shape = evaluate_shape(self.kernel.results[0].type.shape, env)
        out = np.full(out_shape, np.nan, dtype=np.float32)
        bufs = [o if isinstance(o, np.ndarray) else np.ascontiguousarray(inputs[o]) for o in self.operands]
        ptrs = (ctypes.c_void_p * (len(bufs) + 1))(*[b.ctypes.data for b in bufs], out.ctypes.data)
        dims = (ctypes.c_int64 * max(1, len(self.symbols)))(*[env[s] for s in self.symbols])
        self.lib.tf_call(ptrs, dims)
        return out


def _function(arg_types, symbols: list[SymbolRange]):
    m = Module()
    f = m.add_function("main", arg_types)
    set_symbol_table(f, SymbolTable(symbols))
    return m, f


def _finish(m, f, kb, outputs, operands):
    op = kb.ret(outputs, operands)
    f.builder().insert(op)
    f.set_return([op.results[0]])
    verify(m)
    return f


def _close(got: np.ndarray, want: np.ndarray, k: int) -> None:
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5 * math.sqrt(k) * float(np.abs(want).max() + 1))


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU in float64."""
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))


# ---- linear layers ---------------------------------------------------------------------------


def _linear_gelu(x_shape: tuple, symbols: list[SymbolRange], k: int = 64, n: int = 96):
    """main(x) = gelu(x @ W + bias) as one kernel; x's last axis is K, the others symbolic rows."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    x_t = tensor(x_shape, DType.f32)
    m, f = _function([x_t], symbols)
    b = f.builder()
    W, B = b.graph.constant(w), b.graph.constant(bias)
    rows = x_shape[:-1]
    out = rows + (n,)
    kb = KernelBuilder("linear_gelu", [x_t, W.type, B.type])
    xr, wr, br = kb.inputs
    nr = len(rows)
    acc = kb.compute(out + (k,), "p" * (nr + 1) + "r", DType.f32,
                     lambda *ax: xr[ax[:nr] + (ax[-1],)] * wr[ax[-1], ax[nr]], combiner="add")
    e1 = kb.compute(out, "p" * (nr + 1), DType.f32, lambda *i: acc[i] + br[i[-1]])
    e2 = kb.compute(out, "p" * (nr + 1), DType.f32, lambda *i: e1[i].apply("gelu", approximate="none"))
    _finish(m, f, kb, [e2], [f.args[0], W, B])
    return f, w, bias


@pytest.mark.parametrize("x_shape,symbols,sizes", [
    (("b*s", 64), [SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512, hint=128)],
     [{"b": 1, "s": 1}, {"b": 3, "s": 7}, {"b": 17, "s": 5}, {"b": 2, "s": 128}, {"b": 8, "s": 160}]),
    (("b", "s", 64), [SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512, hint=128)],
     [{"b": 1, "s": 1}, {"b": 3, "s": 17}, {"b": 17, "s": 3}, {"b": 8, "s": 33}]),
], ids=["rows_b*s", "b_s_rows"])
def test_linear_bias_gelu_any_rows(x_shape, symbols, sizes):
    f, w, bias = _linear_gelu(x_shape, symbols)
    h = KernelHarness(f)
    assert h.plan.kind == "gemm" and h.plan.packed_args       # weights packed at compile time
    assert "tf_sym_b" in h.source and "tfe_" in h.source
    # one call site per form (one GEMM per thread; threaded; one thread), chosen per call from the sizes
    assert h.source.count("_prepacked((tf_sym_b") == 3 and "tf_mnk * tf_count >=" in h.source
    runs = toolchain.stats.compiler_runs
    rng = np.random.default_rng(1)
    for env in sizes:
        shape = tuple(env[d] if isinstance(d, str) and d in env else d for d in x_shape)
        if x_shape[0] == "b*s":
            shape = (env["b"] * env["s"], 64)
        x = rng.standard_normal(shape, dtype=np.float32)
        want = _gelu(x.astype(np.float64) @ w + bias)
        _close(h([x], env), want, 64)
    assert toolchain.stats.compiler_runs == runs


# ---- attention's batch matmuls -----------------------------------------------------------------

ATTN_SYMBOLS = [SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512, hint=128)]
ATTN_SIZES = [{"b": 1, "s": 1}, {"b": 2, "s": 7}, {"b": 3, "s": 17}, {"b": 1, "s": 130}]


def _batch_matmul(a_shape, b_shape, out_shape, k, read_a, read_b, scale: float | None):
    """main(a, b) = (a @ b) [* scale] over symbolic batch / rows / columns / depth, one kernel."""
    a_t, b_t = tensor(a_shape, DType.f32), tensor(b_shape, DType.f32)
    m, f = _function([a_t, b_t], ATTN_SYMBOLS)
    kb = KernelBuilder("bmm", [a_t, b_t])
    ar, br = kb.inputs
    acc = kb.compute(out_shape + (k,), "pppp" + "r", DType.f32,
                     lambda *ax: read_a(ar, ax) * read_b(br, ax), combiner="add")
    outs = [acc]
    if scale is not None:
        outs = [kb.compute(out_shape, "pppp", DType.f32, lambda *i: acc[i] * kb.const(scale, DType.f32))]
    return _finish(m, f, kb, outs, [f.args[0], f.args[1]])


def test_attention_scores_qk_transposed_symbolic_seq():
    """[b, 12, s, 64] @ [b, 12, 64, s] * 0.125: M = N = s, K = 64, batch b*12."""
    f = _batch_matmul(("b", 12, "s", 64), ("b", 12, 64, "s"), ("b", 12, "s", "s"), 64,
                      lambda a, x: a[x[0], x[1], x[2], x[4]], lambda b, x: b[x[0], x[1], x[4], x[3]], 0.125)
    h = KernelHarness(f)
    assert h.plan.kind == "gemm" and not h.plan.packed_args
    rng = np.random.default_rng(2)
    runs = toolchain.stats.compiler_runs
    for env in ATTN_SIZES:
        b, s = env["b"], env["s"]
        q = rng.standard_normal((b, 12, s, 64), dtype=np.float32)
        kt = rng.standard_normal((b, 12, 64, s), dtype=np.float32)
        _close(h([q, kt], env), (q.astype(np.float64) @ kt) * 0.125, 64)
    assert toolchain.stats.compiler_runs == runs


def test_attention_scores_k_read_transposed():
    """q @ k^T with k stored [b, 12, s, 64] (the GEMM's B read column-major)."""
    f = _batch_matmul(("b", 12, "s", 64), ("b", 12, "s", 64), ("b", 12, "s", "s"), 64,
                      lambda a, x: a[x[0], x[1], x[2], x[4]], lambda b, x: b[x[0], x[1], x[3], x[4]], None)
    h = KernelHarness(f)
    rng = np.random.default_rng(3)
    for env in ATTN_SIZES:
        b, s = env["b"], env["s"]
        q = rng.standard_normal((b, 12, s, 64), dtype=np.float32)
        k = rng.standard_normal((b, 12, s, 64), dtype=np.float32)
        _close(h([q, k], env), q.astype(np.float64) @ k.transpose(0, 1, 3, 2), 64)


def test_attention_probs_times_values_symbolic_depth():
    """[b, 12, s, s] @ [b, 12, s, 64]: K = s is a runtime value, B is packed per call."""
    f = _batch_matmul(("b", 12, "s", "s"), ("b", 12, "s", 64), ("b", 12, "s", 64), "s",
                      lambda a, x: a[x[0], x[1], x[2], x[4]], lambda b, x: b[x[0], x[1], x[4], x[3]], None)
    h = KernelHarness(f)
    rng = np.random.default_rng(4)
    for env in ATTN_SIZES:
        b, s = env["b"], env["s"]
        p = rng.standard_normal((b, 12, s, s), dtype=np.float32)
        v = rng.standard_normal((b, 12, s, 64), dtype=np.float32)
        _close(h([p, v], env), p.astype(np.float64) @ v, s)


# ---- convolutions with a symbolic batch ----------------------------------------------------------

BATCH = [SymbolRange("batch", 1, 64, hint=8)]
BATCH_SIZES = [1, 3, 17, 64]


def _conv_bn_relu(c: int, hw: int, o: int, k: int, stride: int, batch: int | str = "batch"):
    """main(x[batch, c, hw, hw]) = relu(conv(x, W, stride, pad k//2) + shift[o]) as one kernel (the
    BatchNorm folded into W and a per-channel shift, as the graph passes leave it)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((o, c, k, k), dtype=np.float32) / np.float32(math.sqrt(c * k * k))
    shift = rng.standard_normal(o, dtype=np.float32)
    pad = k // 2
    oh = (hw + 2 * pad - k) // stride + 1
    x_t = tensor((batch, c, hw, hw), DType.f32)
    m, f = _function([x_t], BATCH if isinstance(batch, str) else [])
    b = f.builder()
    W, S = b.graph.constant(w), b.graph.constant(shift)
    kb = KernelBuilder("conv_bn_relu", [x_t, W.type, S.type])
    xr, wr, sr = kb.inputs
    out = (batch, o, oh, oh)
    acc = kb.compute(out + (c, k, k), "pppprrr", DType.f32,
                     lambda n, oc, y, xx, ci, a, bb: xr.read([n, ci, y * stride + a - pad, xx * stride + bb - pad],
                                                             pad=0.0) * wr[oc, ci, a, bb], combiner="add")
    e1 = kb.compute(out, "pppp", DType.f32, lambda *i: acc[i] + sr[i[1]])
    e2 = kb.compute(out, "pppp", DType.f32, lambda *i: e1[i].apply("relu"))
    _finish(m, f, kb, [e2], [f.args[0], W, S])
    return f, w, shift


CONV_CASES = [  # (channels, size, out channels, kernel, stride)
    (16, 14, 24, 3, 1),
    (16, 15, 24, 3, 2),
    (32, 7, 40, 1, 1),
    (32, 9, 24, 1, 2),
]
KIND = {"im2col": "conv", "fold": "fold", "direct": "direct", "winograd": "winograd"}


def _applies(algorithm: str, k: int, stride: int) -> bool:
    return {"direct": stride == 1, "winograd": stride == 1 and k == 3}.get(algorithm, True)


@pytest.mark.parametrize("algorithm", ["im2col", "fold", "direct", "winograd"])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"c{c[0]}_{c[1]}x{c[1]}_o{c[2]}_k{c[3]}_s{c[4]}")
def test_conv_bn_relu_symbolic_batch(algorithm, case):
    torch = pytest.importorskip("torch")
    from tests.codegen.test_conv_algorithms import forced_algorithm
    c, hw, o, k, stride = case
    if not _applies(algorithm, k, stride):
        pytest.skip(f"{algorithm} does not apply to k={k} stride={stride}")
    f, w, shift = _conv_bn_relu(c, hw, o, k, stride)
    tuning = forced_algorithm(algorithm)
    h = KernelHarness(f, Tensorizer(Target.host(), tuning.params_for))
    assert h.plan.kind in (KIND[algorithm], "gemm")           # a 1x1 stride-1 conv is a plain GEMM
    assert h.plan.kind == KIND[algorithm] or (k == 1 and stride == 1)
    runs = toolchain.stats.compiler_runs
    rng = np.random.default_rng(6)
    for n in BATCH_SIZES:
        x = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
        ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                         stride=stride, padding=k // 2).numpy()
        want = np.maximum(ref + shift[None, :, None, None], 0)
        _close(h([x], {"batch": n}), want, c * k * k)
    assert toolchain.stats.compiler_runs == runs


# ---- what stays on the loop path -------------------------------------------------------------------


def test_symbolic_image_size_is_not_tensorized():
    """A convolution over symbolic H and W has no static per-image geometry: the loop path takes it."""
    x_t = tensor((2, 8, "h", "h"), DType.f32)
    m, f = _function([x_t], [SymbolRange("h", 3, 64, hint=16)])
    b = f.builder()
    W = b.graph.constant(np.ones((16, 8, 3, 3), np.float32))
    kb = KernelBuilder("conv", [x_t, W.type])
    xr, wr = kb.inputs
    acc = kb.compute((2, 16, "h", "h", 8, 3, 3), "pppprrr", DType.f32,
                     lambda n, o, y, xx, c, a, bb: xr.read([n, c, y + a - 1, xx + bb - 1], pad=0.0) * wr[o, c, a, bb],
                     combiner="add")
    _finish(m, f, kb, [acc], [f.args[0], W])
    kernel = next(op for op in f.body if op.name == "structured.kernel")
    assert Tensorizer(Target.host()).plan(kernel, {1}, symbol_table_of(f)) is None


def test_kernel_reading_an_undeclared_symbol_falls_back():
    """``Prepared.emit`` returns None (the loop path) rather than C reading an unknown ``tf_dims`` slot."""
    f, _, _ = _linear_gelu(("b", "s", 64), [SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512, hint=128)])
    kernel = next(op for op in f.body if op.name == "structured.kernel")
    prepared = Tensorizer(Target.host()).prepare(f)
    assert prepared.emit(kernel, ["b"]) is None
    text = prepared.emit(kernel, ["s", "b"])          # the model's order decides the slots
    assert "tf_sym_s = tf_dims[0]" in text and "tf_sym_b = tf_dims[1]" in text


def test_static_kernel_in_a_dynamic_model_only_gains_the_dims_parameter():
    """Every kernel of a model with symbols takes ``tf_dims`` (``tf_run_dyn`` passes it to all); a
    kernel without symbolic sizes keeps its static body, declares no ``tf_sym_`` local, and runs."""
    table = [SymbolRange("b", 1, 64, hint=8)]
    f, w, bias = _linear_gelu((40, 64), table)
    kernel = next(op for op in f.body if op.name == "structured.kernel")
    prepared = Tensorizer(Target.host()).prepare(f)
    static, dynamic = prepared.emit(kernel), prepared.emit(kernel, ["b"])
    assert "tf_sym_" not in dynamic
    assert dynamic == static.replace(" restrict out0)", " restrict out0, const int64_t* restrict tf_dims)")
    x = np.random.default_rng(10).standard_normal((40, 64), dtype=np.float32)
    _close(KernelHarness(f)([x], {"b": 5}), _gelu(x.astype(np.float64) @ w + bias), 64)


# ---- whole models through the compiler (tf_run_dyn) ---------------------------------------------


def _native(build, arg_types, symbols):
    """A graph module main(args) = build(builder, *args) compiled once with ``build_native``."""
    from tensorforge.codegen.c.build import build_native
    m, f = _function(arg_types, symbols)
    b = f.builder()
    f.set_return(list(build(b, *f.args)))
    verify(m)
    native, src = build_native(m)
    return native, src


def test_model_linear_gelu_and_attention_any_batch_and_sequence():
    """x[b, s, 64] -> gelu(x @ W + bias) -> q @ q^T over heads: compiled once, run at several (b, s)."""
    rng = np.random.default_rng(8)
    w = rng.standard_normal((64, 96), dtype=np.float32) / np.float32(8)
    bias = rng.standard_normal(96, dtype=np.float32)

    def build(b, x):
        y = b.graph.gelu(b.graph.add(b.graph.matmul(x, b.graph.constant(w)), b.graph.constant(bias)))
        yt = b.create("graph.transpose", [y], {"perm": (0, 2, 1)}).results[0]
        return [y, b.create("graph.batch_matmul", [y, yt], {}).results[0]]

    native, src = _native(build, [tensor(("b", "s", 64), DType.f32)], ATTN_SYMBOLS)
    assert "tf_run_dyn" in src and "tf_sym_s" in src
    kinds = list(native.layout.schedules.values())
    assert len(kinds) == 2 and all(k.startswith("tensorized: gemm") for k in kinds)     # both GEMMs
    runs = toolchain.stats.compiler_runs
    for env in ATTN_SIZES:
        x = rng.standard_normal((env["b"], env["s"], 64), dtype=np.float32)
        y = _gelu(x.astype(np.float64) @ w + bias)
        got_y, got_s = native.run([x])
        _close(got_y, y, 64)
        _close(got_s, y @ y.transpose(0, 2, 1), 96)
    assert toolchain.stats.compiler_runs == runs


@pytest.mark.parametrize("stride", [1, 2])
def test_model_conv_relu_any_batch(stride):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    w = rng.standard_normal((24, 16, 3, 3), dtype=np.float32) / np.float32(12)
    bias = rng.standard_normal(24, dtype=np.float32)

    def build(b, x):
        y = b.create("graph.conv", [x, b.graph.constant(w), b.graph.constant(bias)],
                     {"strides": (stride, stride), "pads": (1, 1, 1, 1)}).results[0]
        return [b.graph.relu(y)]

    native, src = _native(build, [tensor(("batch", 16, 14, 14), DType.f32)], BATCH)
    assert "tf_sym_batch" in src
    assert all(k.startswith("tensorized") for k in native.layout.schedules.values())
    runs = toolchain.stats.compiler_runs
    for n in BATCH_SIZES:
        x = rng.standard_normal((n, 16, 14, 14), dtype=np.float32)
        ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                         torch.tensor(bias, dtype=torch.float64), stride=stride, padding=1).numpy()
        _close(native.run([x])[0], np.maximum(ref, 0), 144)
    assert toolchain.stats.compiler_runs == runs
