"""Normalisations: statistics computes, then one elementwise compute over ``x``.

Statistics are corrected two-pass (a mean, then the mean of the deviations and of their squares;
see ``moments``)
and kept in f32 (f64 for f64 inputs) whatever the element type of ``x``; a statistic is
computed once per row into a small buffer, so the final pass is a multiply-add per element.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ....dialects.graph.base import norm_axis
from ....dialects.structured.builder import Expr, KernelBuilder, TensorRef
from ....ir.types import DType
from .reduce import ReduceLayout, acc_dtype, count_value, elementwise, reduce_over
from .registry import LoweringContext, broadcast_read, lowering

Read = Callable[[list[Expr]], Expr]


def stats_dtype(dtype: DType) -> DType:
    return DType.f64 if dtype is DType.f64 else DType.f32


def moments(kb: KernelBuilder, layout: ReduceLayout, read: Read, dtype: DType,
            epsilon: float) -> tuple[TensorRef, TensorRef, TensorRef]:
    """Mean, its correction and ``1 / sqrt(var + epsilon)`` of ``read`` over the layout's
    reduced axes; the centred value is ``(x - mean) - corr``.

    Corrected two-pass statistics: ``corr`` is the mean of the deviations ``d = x - mean``
    (0 in exact arithmetic) and ``var = mean(d*d) - corr**2`` (``mean(d*d)`` itself where that
    overflowed to +inf).  The correction makes the
    centring exact for a constant row however the C compiler rounds: when ``x`` is a product
    recomputed at each read, gcc's default -ffp-contract=fast may turn ``x - mean`` into
    ``fma(a, b, -mean)``, which is the rounding error of ``a*b`` rather than 0 (amplified by
    ``1/sqrt(var + eps)``); every read of ``d`` is contracted alike, so ``d - corr`` cancels."""
    n = layout.count
    rows = layout.out_shape
    total = reduce_over(kb, layout, "add", dtype, lambda src, _: read(src))
    mean = elementwise(kb, rows, dtype, lambda *r: total[r] / count_value(kb, n, dtype))

    def deviation(src, res):
        return read(src) - mean.read(res)

    def squared_deviation(src, res):
        d = deviation(src, res)
        return d * d

    dsum = reduce_over(kb, layout, "add", dtype, deviation)
    corr = elementwise(kb, rows, dtype, lambda *r: dsum[r] / count_value(kb, n, dtype))
    var = reduce_over(kb, layout, "add", dtype, squared_deviation)

    def rstd_of(*r):
        # mean(d*d) >= corr**2, so corr**2 overflows only where mean(d*d) is already +inf; then
        # the variance is +inf (1/sqrt: 0, as onnxruntime and torch give), not inf - inf = NaN
        v = var[r] / count_value(kb, n, dtype)
        return (v.eq(float("inf")).select(v, v - corr[r] * corr[r]) + epsilon).apply("rsqrt")

    rstd = elementwise(kb, rows, dtype, rstd_of)
    return mean, corr, rstd


def normalize(ctx: LoweringContext, layout: ReduceLayout, read: Read, stat_index: Callable[[Sequence[Expr]], list],
              affine: Callable[[Sequence[Expr], Expr], Expr] | None = None) -> TensorRef:
    """``affine(i, (x[i] - mean) * rstd)`` over the shape of ``x`` (operand 0), with the
    statistics of ``read`` over ``layout`` found at ``stat_index(i)``."""
    x, kb, out_dt = ctx.inputs[0], ctx.kb, ctx.out_dtype()
    dt = stats_dtype(out_dt)
    mean, corr, rstd = moments(kb, layout, read, dt, ctx.attrs.get("epsilon", 1e-5))

    def body(*i):
        s = stat_index(i)
        y = ((x.read(i).cast(dt) - mean.read(s)) - corr.read(s)) * rstd.read(s)
        return affine(i, y) if affine is not None else y

    return elementwise(kb, x.shape, out_dt, body)


def channel_affine(scale: TensorRef, bias: TensorRef, dtype: DType):
    """``y * scale[c] + bias[c]`` on channel axis 1."""
    return lambda i, y: y * scale[i[1]].cast(dtype) + bias[i[1]].cast(dtype)


def _cast_read(t: TensorRef, dtype: DType) -> Read:
    return lambda idx: t.read(idx).cast(dtype)


@lowering("graph.layer_norm")
def lower_layer_norm(ctx: LoweringContext):
    x = ctx.inputs[0]
    rank = len(x.shape)
    axis = norm_axis(ctx.attrs.get("axis", -1), rank)
    dt = stats_dtype(ctx.out_dtype())
    layout = ReduceLayout(x.shape, tuple(range(axis, rank)), keepdims=False)
    params = ctx.inputs[1:]
    inner = x.shape[axis:]

    def affine(i, y):
        for k, t in enumerate(params):          # scale, then bias
            v = broadcast_read(t, i[axis:], inner).cast(dt)
            y = y * v if k == 0 else y + v
        return y

    return [normalize(ctx, layout, _cast_read(x, dt), layout.project, affine if params else None)]


@lowering("graph.instance_norm")
def lower_instance_norm(ctx: LoweringContext):
    x, scale, bias = ctx.inputs
    dt = stats_dtype(ctx.out_dtype())
    layout = ReduceLayout(x.shape, tuple(range(2, len(x.shape))), keepdims=False)
    return [normalize(ctx, layout, _cast_read(x, dt), layout.project, channel_affine(scale, bias, dt))]


@lowering("graph.group_norm")
def lower_group_norm(ctx: LoweringContext):
    """Statistics over x viewed as (N, G, C/G, *spatial), reduced over all but (N, G)."""
    x, scale, bias = ctx.inputs
    dt = stats_dtype(ctx.out_dtype())
    groups = ctx.attrs["num_groups"]
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    cg = c // groups
    layout = ReduceLayout((n, groups, cg) + tuple(spatial), tuple(range(2, 3 + len(spatial))), keepdims=False)

    def read(v):
        return x.read([v[0], v[1] * cg + v[2]] + list(v[3:])).cast(dt)

    return [normalize(ctx, layout, read, lambda i: [i[0], i[1] // cg], channel_affine(scale, bias, dt))]


@lowering("graph.batch_norm")
def lower_batch_norm(ctx: LoweringContext):
    """Per channel ``a = scale / sqrt(var + eps)``, ``b = bias - mean * a`` (two small
    computes), then ``x * a[c] + b[c]``."""
    x, scale, bias, mean, var = ctx.inputs
    kb, out_dt = ctx.kb, ctx.out_dtype()
    dt = acc_dtype(out_dt)
    eps = ctx.attrs.get("epsilon", 1e-5)
    channels = (x.shape[1],)
    a = elementwise(kb, channels, dt, lambda c: scale[c].cast(dt) / (var[c].cast(dt) + eps).apply("sqrt"))
    b = elementwise(kb, channels, dt, lambda c: bias[c].cast(dt) - mean[c].cast(dt) * a[c])
    return [elementwise(kb, x.shape, out_dt, lambda *i: x.read(i).cast(dt) * a[i[1]] + b[i[1]])]
