"""Small structured kernels for schedule tests, and running a loop.func as native C."""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from tensorforge.codegen.c.emit_loop import PRELUDE, emit_function
from tensorforge.codegen.c.toolchain import compile_c
from tensorforge.dialects.structured.builder import KernelBuilder
from tensorforge.dialects.structured.interpret import run_kernel
from tensorforge.ir.core import Block, Operation
from tensorforge.ir.types import DType, TensorType
from tensorforge.passes.lower.structured_to_loop import lower_kernel

F32 = DType.f32


def _close(kb: KernelBuilder, outs) -> Operation:
    return kb.ret(outs, Block([a.type for a in kb.block.args]).args)


def matmul(m: int, n: int, k: int) -> Operation:
    """C[i, j] = sum_k A[i, k] * B[k, j]: compute 0, loops 0.0 (i), 0.1 (j), 0.2 (k)."""
    kb = KernelBuilder("matmul", [TensorType((m, k), F32), TensorType((k, n), F32)])
    a, b = kb.inputs
    c = kb.compute((m, n, k), "ppr", F32, lambda i, j, r: a[i, r] * b[r, j], combiner="add")
    return _close(kb, [c])


def row_max(m: int, n: int) -> Operation:
    """y[i] = max_j x[i, j] (a reduction with a non-additive combiner)."""
    kb = KernelBuilder("rowmax", [TensorType((m, n), F32)])
    (x,) = kb.inputs
    y = kb.compute((m, n), "pr", F32, lambda i, j: x[i, j], combiner="max")
    return _close(kb, [y])


def col_sum(m: int, n: int) -> Operation:
    """y[j] = sum_i x[i, j] * 2 (reduction axis outside the parallel one in the domain)."""
    kb = KernelBuilder("colsum", [TensorType((m, n), F32)])
    (x,) = kb.inputs
    y = kb.compute((m, n), "rp", F32, lambda i, j: x[i, j] * 2.0, combiner="add")
    return _close(kb, [y])


def elementwise_chain(m: int, n: int) -> Operation:
    """t0 = x * 2 + 1; t1 = exp(-t0); out = t1 * y + t0 (three computes, two intermediates)."""
    kb = KernelBuilder("chain", [TensorType((m, n), F32), TensorType((m, n), F32)])
    x, y = kb.inputs
    t0 = kb.compute((m, n), "pp", F32, lambda i, j: x[i, j] * 2.0 + 1.0)
    t1 = kb.compute((m, n), "pp", F32, lambda i, j: (-t0[i, j]).apply("exp"))
    out = kb.compute((m, n), "pp", F32, lambda i, j: t1[i, j] * y[i, j] + t0[i, j])
    return _close(kb, [out])


def softmax(m: int, n: int) -> Operation:
    """Row softmax as three computes: max (0), sum of exp (1), normalise (2)."""
    kb = KernelBuilder("softmax", [TensorType((m, n), F32)])
    (x,) = kb.inputs
    mx = kb.compute((m, n), "pr", F32, lambda i, j: x[i, j], combiner="max")
    sm = kb.compute((m, n), "pr", F32, lambda i, j: (x[i, j] - mx[i]).apply("exp"), combiner="add")
    y = kb.compute((m, n), "pp", F32, lambda i, j: (x[i, j] - mx[i]).apply("exp") / sm[i])
    return _close(kb, [y])


def two_stage(m: int, n: int) -> Operation:
    """A 2-stage softmax-like kernel: s[i] = sum_j exp(x[i, j]) (0); y[i, j] = exp(x[i, j]) / s[i] (1)."""
    kb = KernelBuilder("twostage", [TensorType((m, n), F32)])
    (x,) = kb.inputs
    s = kb.compute((m, n), "pr", F32, lambda i, j: x[i, j].apply("exp"), combiner="add")
    y = kb.compute((m, n), "pp", F32, lambda i, j: x[i, j].apply("exp") / s[i])
    return _close(kb, [y])


def inputs_for(kernel: Operation, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.type.shape).astype(np.float32) for a in kernel.regions[0].blocks[0].args]


def build(fn: Operation, name: str = "kernel"):
    """Compiles a loop.func; returns a callable taking input arrays and returning output arrays."""
    src = PRELUDE + emit_function(fn, "tf_kernel", static=False)
    lib = compile_c(src, name=name)
    cfn = lib.function("tf_kernel")
    args = fn.regions[0].blocks[0].args
    n_in = fn.attributes["num_inputs"]
    out_types = [a.type for a in args[n_in:]]

    def call(*xs: np.ndarray, outs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        ins = [np.ascontiguousarray(x, dtype=t.type.dtype.np) for x, t in zip(xs, args[:n_in])]
        res = list(outs) if outs is not None else [np.empty(t.shape, t.dtype.np) for t in out_types]
        cfn(*[ctypes.c_void_p(a.ctypes.data) for a in ins + res])
        return res

    call.source = src
    return call


def check_numerics(kernel: Operation, fn: Operation, tol: float = 1e-5, seed: int = 0) -> None:
    """Compiled ``fn`` agrees with the structured interpreter on ``kernel`` within ``tol`` (max abs error
    relative to the reference's scale)."""
    xs = inputs_for(kernel, seed)
    want = run_kernel(kernel, xs)
    got = build(fn, kernel.attributes["sym_name"])(*xs)
    for w, g in zip(want, got):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))


def lowered(kernel: Operation) -> Operation:
    return lower_kernel(kernel)


def conv1d(n: int, taps: int) -> Operation:
    """y[i] = sum_r x[i + r - taps // 2] * w[r], zero padded: reads with ``pad`` (bounds-checked)."""
    kb = KernelBuilder("conv1d", [TensorType((n,), F32), TensorType((taps,), F32)])
    x, w = kb.inputs
    y = kb.compute((n, taps), "pr", F32, lambda i, r: x.read([i + r - taps // 2], pad=0.0) * w[r], combiner="add")
    return _close(kb, [y])


def scheduled(kernel: Operation, steps, tol: float = 1e-5):
    """Lowers ``kernel``, applies ``steps(schedule)``, checks the compiled result; returns the schedule."""
    from tensorforge.schedule import Schedule

    s = Schedule(lowered(kernel))
    steps(s)
    check_numerics(kernel, s.fn, tol)
    return s


def c_source(fn: Operation) -> str:
    return emit_function(fn, "tf_kernel", static=False)
