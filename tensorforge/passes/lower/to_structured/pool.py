"""Pooling: a reduction over each kernel window, and the global forms as axis reductions.

Windows that reach into the padding (explicit pads, or the overhang of a ceil-mode last
window) read the reduction's neutral value there: the lowest value for max, 0 for the sum
of an average, whose divisor is then the count of positions the op's rule counts.
"""
from __future__ import annotations

from typing import Sequence

from ....dialects.graph.base import Window
from ....dialects.structured.builder import Expr
from ....ir.symbolic import dim_add, dim_mul, dim_sub
from .conv import window_inside, window_source
from .reduce import ReduceLayout, acc_dtype, elementwise, lowest, mean_of, reduce_over
from .registry import LoweringContext, lowering


def _window(ctx: LoweringContext) -> Window:
    return Window(ctx.attrs["kernel"], ctx.attrs)


def _window_sum(ctx: LoweringContext, win: Window, combiner: str, dtype, pad: float):
    """``combine over k of x[n, c, window_source(p, k)]`` over the result (N, C, *out)."""
    x, out = ctx.inputs[0], ctx.out_shape()
    nsp = len(win.kernel)
    guard = None if window_inside(win, x.shape[2:], out[2:]) else pad

    def body(*ax):
        n, c, sp, ks = ax[0], ax[1], ax[2:2 + nsp], ax[2 + nsp:]
        return x.read([n, c] + window_source(win, sp, ks), pad=guard).cast(dtype)

    return ctx.kb.compute(tuple(out) + win.kernel, "p" * len(out) + "r" * nsp, dtype, body, combiner)


@lowering("graph.max_pool")
def lower_max_pool(ctx: LoweringContext):
    dt = ctx.out_dtype()
    return [_window_sum(ctx, _window(ctx), "max", dt, lowest(dt))]


def _counted_span(win: Window, i: int, size: int, include_pad: bool) -> tuple[int, int]:
    """The input positions on spatial axis ``i`` that count in an average's divisor."""
    return (-win.pads_begin[i], dim_add(size, win.pads_end[i])) if include_pad else (0, size)


def _window_count(win: Window, sizes: Sequence[int], out: Sequence[int], include_pad: bool,
                  positions: Sequence[Expr]) -> Expr | int:
    """The divisor at output ``positions``: the product over axes of the window's overlap with
    the counted span; a plain int when every window lies inside it."""
    count: Expr | int = 1
    for i, (p, n, o) in enumerate(zip(positions, sizes, out)):
        lo, hi = _counted_span(win, i, n, include_pad)
        s, k, pb = win.strides[i], win.kernel[i], win.pads_begin[i]
        if -pb >= lo and _provably_le(dim_add(dim_sub(dim_mul(dim_sub(o, 1), s), pb), k), hi):
            count = count * k
            continue
        start = p * s - pb
        count = ((start + k).min(hi) - start.max(lo)) * count
    return count


def _provably_le(a, b) -> bool:
    """``a <= b`` for every value of the symbols (the difference simplifies to a constant)."""
    slack = dim_sub(a, b)
    return isinstance(slack, int) and slack <= 0


@lowering("graph.avg_pool")
def lower_avg_pool(ctx: LoweringContext):
    x, out, out_dt = ctx.inputs[0], ctx.out_shape(), ctx.out_dtype()
    dt = acc_dtype(out_dt)
    win = _window(ctx)
    total = _window_sum(ctx, win, "add", dt, 0.0)
    include = ctx.attrs.get("count_include_pad", False)

    def body(*ax):
        count = _window_count(win, x.shape[2:], out[2:], include, ax[2:])
        divisor = float(count) if isinstance(count, int) else count.cast(dt)
        return total[ax] / divisor

    return [elementwise(ctx.kb, out, out_dt, body)]


def _global_layout(ctx: LoweringContext) -> ReduceLayout:
    shape = ctx.inputs[0].shape
    return ReduceLayout(shape, tuple(range(2, len(shape))), keepdims=True)


@lowering("graph.global_avg_pool")
def lower_global_avg_pool(ctx: LoweringContext):
    return [mean_of(ctx.kb, _global_layout(ctx), ctx.inputs[0].read, ctx.out_dtype())]


@lowering("graph.global_max_pool")
def lower_global_max_pool(ctx: LoweringContext):
    x = ctx.inputs[0]
    return [reduce_over(ctx.kb, _global_layout(ctx), "max", ctx.out_dtype(), lambda src, _: x.read(src))]

