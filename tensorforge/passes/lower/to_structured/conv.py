"""conv and conv_transpose as reductions over (input channels of the group, kernel offsets).

Both are direct (gather) formulations with one output element per parallel point, so they
are exact and need no scratch buffers; the fast path for large convolutions is a separate
micro-kernel lowering.  Padding is a bounds-checked read (``pad=0``), emitted only when some
window can leave the input.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ....dialects.graph.base import Window
from ....dialects.structured.builder import Expr, KernelBuilder, TensorRef
from ....ir.rewrite import constant_value
from ....ir.symbolic import Dim, dim_add, dim_mul, dim_sub
from ....ir.types import DType
from .reduce import acc_dtype, elementwise
from .registry import LoweringContext, lowering


def window_source(win: Window, out: Sequence[Expr], kernel: Sequence[Expr]) -> list[Expr]:
    """Input position read by output position ``out`` at kernel offset ``kernel``, per spatial
    axis: ``out * stride + kernel * dilation - pad_begin`` (may fall in the padding)."""
    return [o * s + k * d - pb for o, k, s, d, pb in
            zip(out, kernel, win.strides, win.dilations, win.pads_begin)]


def window_inside(win: Window, sizes: Sequence[Dim], out: Sequence[Dim]) -> bool:
    """True when every window of every output position lies within the unpadded input, so
    reads need no bounds check.  Over symbolic sizes only when provable: the last window's end
    minus the size simplifies to a constant <= 0 (``(s-3)*1 + 3 - s``); else reads are checked."""
    def fits(o: Dim, s: int, ext: int, n: Dim) -> bool:
        slack = dim_sub(dim_add(dim_mul(dim_sub(o, 1), s), ext), n)
        return isinstance(slack, int) and slack <= 0

    return all(pb == 0 and fits(o, s, ext, n) for pb, o, s, ext, n in
               zip(win.pads_begin, out, win.strides, win.extents, sizes))


def bias_epilogue(kb: KernelBuilder, acc: TensorRef, out_dtype: DType, bias: TensorRef | None) -> TensorRef:
    """``acc + bias[channel]`` (channel axis 1), converted to the result type; ``acc`` itself
    when there is nothing to do."""
    if bias is None and acc.dtype is out_dtype:
        return acc
    dt = acc.dtype

    def body(*i):
        v = acc[i]
        return v + bias[i[1]].cast(dt) if bias is not None else v

    return elementwise(kb, acc.shape, out_dtype, body)


def _operands(ctx: LoweringContext) -> tuple[TensorRef, TensorRef, TensorRef | None]:
    ins = ctx.inputs
    return ins[0], ins[1], ins[2] if len(ins) > 2 else None


def _reduction_domain(out: Sequence[int], c_per_group: int, kernel: Sequence[int]) -> tuple[tuple, str]:
    """(N, O, *out spatial) parallel, then (input channel in group, *kernel) reduced."""
    dom = tuple(out) + (c_per_group,) + tuple(kernel)
    return dom, "p" * len(out) + "r" * (1 + len(kernel))


def _finite_constant(w) -> bool:
    """The weight is a compile-time constant with no NaN/Inf: a padding tap's product is then an
    exact +-0, which the sum may skip (see ``lower_conv``)."""
    c = constant_value(w)
    return c is not None and c.dtype.kind == "f" and bool(np.isfinite(c).all())


def _inside(src: Sequence[Expr], sizes: Sequence[Dim]) -> Expr:
    """The read at ``src`` falls within the unpadded input (every spatial axis)."""
    hit = None
    for q, size in zip(src, sizes):
        h = (q >= 0) & (q < size)
        hit = h if hit is None else hit & h
    return hit


@lowering("graph.conv")
def lower_conv(ctx: LoweringContext):
    """``y[n, o, p] = sum over c, k of x[n, g*Cg + c, p*s + k*d - pb] * w[o, c, k]``, g = o // Og.

    A padding tap reads 0, and ``0 * w`` must be computed in general (``0 * inf`` is NaN, and
    torch propagates a NaN/Inf weight to every output, padded taps included).  With constant
    finite weights it is an exact +-0, and the tap adds ``-0.0`` instead (``inside ? x*w : -0.0``):
    ``s + -0.0`` is ``s`` for every ``s`` under IEEE, so gcc drops the tap wherever it knows it
    reads padding (unrolled loops over small maps), which ``-ffast-math`` did by folding ``0 * w``."""
    x, w, b = _operands(ctx)
    out, out_dt = ctx.out_shape(), ctx.out_dtype()
    dt = acc_dtype(out_dt)
    kernel = w.shape[2:]
    win = Window(kernel, ctx.attrs)
    groups, cg = ctx.attrs.get("groups", 1), w.shape[1]
    og = w.shape[0] // groups
    nsp = len(kernel)
    pad = None if window_inside(win, x.shape[2:], out[2:]) else 0.0
    skip_padding = pad is not None and _finite_constant(ctx.op.operands[1])

    def body(*ax):
        n, o, sp, c, ks = ax[0], ax[1], ax[2:2 + nsp], ax[2 + nsp], ax[3 + nsp:]
        ch = (o // og) * cg + c if groups > 1 else c
        src = window_source(win, sp, ks)
        xv = x.read([n, ch] + src, pad=pad)
        v = xv.cast(dt) * w.read([o, c] + list(ks)).cast(dt)
        if skip_padding:
            v = _inside(src, x.shape[2:]).select(v, -0.0)
        return v

    dom, its = _reduction_domain(out, cg, kernel)
    acc = ctx.kb.compute(dom, its, dt, body, combiner="add")
    return [bias_epilogue(ctx.kb, acc, out_dt, b)]


@lowering("graph.conv_transpose")
def lower_conv_transpose(ctx: LoweringContext):
    """Gather form of the adjoint: output position ``p`` takes input position ``i`` at kernel
    offset ``k`` when ``i*s + k*d - pb == p``, i.e. ``i = (p + pb - k*d) / s`` where that
    divides exactly; taps at positions outside the input are selected away (not multiplied
    as 0, which a NaN/Inf weight would turn into NaN).  ``output_padding`` only widens the
    output (its extra positions see no input), so it is already in the result shape."""
    x, w, b = _operands(ctx)
    out, out_dt = ctx.out_shape(), ctx.out_dtype()
    dt = acc_dtype(out_dt)
    kernel = w.shape[2:]
    nsp = len(kernel)
    win = Window(kernel, ctx.attrs)
    groups = ctx.attrs.get("groups", 1)
    cg, og = x.shape[1] // groups, w.shape[1]

    def body(*ax):
        n, o, sp, c, ks = ax[0], ax[1], ax[2:2 + nsp], ax[2 + nsp], ax[3 + nsp:]
        src, hits = [], []
        for p, k, s, d, pb, size in zip(sp, ks, win.strides, win.dilations, win.pads_begin, x.shape[2:]):
            t = p + pb - k * d
            q = t // s
            src.append(q)
            if s > 1:
                hits.append((t % s).eq(0))
            # Only real taps count: an out-of-range input position must not multiply its
            # weight (the padded read's 0 times a NaN/Inf weight would be NaN).
            hits.append((q >= 0) & (q < size))
        ch = (o // og) * cg + c if groups > 1 else c
        oc = o % og if groups > 1 else o
        v = x.read([n, ch] + src, pad=0.0).cast(dt) * w.read([ch, oc] + list(ks)).cast(dt)
        if hits:
            hit = hits[0]
            for h in hits[1:]:
                hit = hit & h
            v = hit.select(v, 0.0)
        return v

    dom, its = _reduction_domain(out, cg, kernel)
    acc = ctx.kb.compute(dom, its, dt, body, combiner="add")
    return [bias_epilogue(ctx.kb, acc, out_dt, b)]
