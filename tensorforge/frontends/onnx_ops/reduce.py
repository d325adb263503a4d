"""Reductions, arg-reductions, softmax family, cumulative sums and TopK.

ReduceL1/L2/LogSum/LogSumExp/SumSquare are compositions of graph reductions; softmax before
opset 13 flattens the input to 2-D at ``axis``, which is a reshape around the graph op.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from .common import ints_operand, is_static, norm_axes, norm_axis, prod
from .context import ImportContext, OnnxNode
from .registry import handles

# op type -> (opset from which axes are an input, value of a reduction over no elements)
_REDUCE = {
    "ReduceSum": (13, 0.0), "ReduceMean": (18, np.nan), "ReduceMax": (18, -np.inf), "ReduceMin": (18, np.inf),
    "ReduceProd": (18, 1.0), "ReduceL1": (18, 0.0), "ReduceL2": (18, 0.0), "ReduceSumSquare": (18, 0.0),
    "ReduceLogSum": (18, -np.inf), "ReduceLogSumExp": (18, -np.inf),
}
_DIRECT = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}


def _empty_value(ctx: ImportContext, x: Value, fill: float, out_shape: tuple) -> Value:
    dtype = ctx.dtype(x)
    if not dtype.is_float:
        if np.isinf(fill):
            info = np.iinfo(dtype.np) if dtype.is_int else None
            fill = (info.min if fill < 0 else info.max) if info is not None else fill > 0
        elif np.isnan(fill):
            fill = 0
    return ctx.const(np.full(out_shape, fill).astype(dtype.np), dtype)


@handles(*_REDUCE)
def reduce(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    since, empty_fill = _REDUCE[node.op_type]
    rank = ctx.rank(x)
    axes = ints_operand(ctx, node, 1, "axes", since, "the reduced axes")
    keepdims = bool(node.attr("keepdims", 1))
    noop = node.attr("noop_with_empty_axes", 0) if node.opset >= since else 0
    if not axes:
        if noop:
            return ctx.op("identity", x)
        axes = tuple(range(rank))
    axes = tuple(sorted(set(norm_axes(node, axes, rank))))
    shape = ctx.shape(x)
    if any(shape[a] == 0 for a in axes) and is_static(shape):
        out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)
        return _empty_value(ctx, x, empty_fill, out)
    kw = dict(axes=axes, keepdims=keepdims)
    t = node.op_type

    def red(name: str, y: Value, **over) -> Value:
        # a rank-0 tensor is reduced over no axis: each reduction is the value itself
        return ctx.op("identity", y) if rank == 0 else ctx.op(name, y, **{**kw, **over})
    if t in _DIRECT:
        return red(_DIRECT[t], x)
    if t == "ReduceL1":
        return red("reduce_sum", ctx.op("abs", x))
    if t == "ReduceSumSquare":
        return red("reduce_sum", ctx.op("mul", x, x))
    if t == "ReduceL2":
        return ctx.op("sqrt", red("reduce_sum", ctx.op("mul", x, x)))
    if t == "ReduceLogSum":
        return ctx.op("log", red("reduce_sum", x))
    # ReduceLogSumExp, shifted by the maximum so that exp cannot overflow; an infinite (or NaN)
    # maximum shifts by 0 instead, as inf - inf would turn a +inf result into NaN.
    m = red("reduce_max", x, keepdims=True)
    m = ctx.op("select", ctx.op("lt", ctx.op("abs", m), ctx.scalar(np.inf, m)), m, ctx.scalar(0.0, m))
    s = red("reduce_sum", ctx.op("exp", ctx.op("sub", x, m)))
    if not keepdims and rank:
        m = ctx.op("squeeze", m, axes=axes)
    return ctx.op("add", ctx.op("log", s), m)


@handles("ArgMax", "ArgMin")
def arg_reduce(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    axis = norm_axis(node, node.attr("axis", 0), ctx.rank(x))
    return ctx.op("argmax" if node.op_type == "ArgMax" else "argmin", x, axis=axis,
                  keepdims=bool(node.attr("keepdims", 1)), select_last_index=bool(node.attr("select_last_index", 0)))


def _softmax_like(ctx: ImportContext, node: OnnxNode, body) -> Value:
    """Applies ``body(x, axis)``; before opset 13 the op works on x flattened to 2-D at ``axis``."""
    x = node.required(0)
    rank = ctx.rank(x)
    if node.opset >= 13:
        return body(x, norm_axis(node, node.attr("axis", -1), rank))
    axis = norm_axis(node, node.attr("axis", 1), rank)
    if axis == rank - 1:
        return body(x, axis)
    shape = ctx.static_shape(x, f"{node.op_type} before opset 13 (flattening at axis {axis})")
    flat = ctx.op("reshape", x, shape=(prod(shape[:axis]), prod(shape[axis:])))
    return ctx.op("reshape", body(flat, 1), shape=shape)


@handles("Softmax", "LogSoftmax")
def softmax(ctx: ImportContext, node: OnnxNode) -> Value:
    name = "softmax" if node.op_type == "Softmax" else "log_softmax"
    return _softmax_like(ctx, node, lambda x, axis: ctx.op(name, x, axis=axis))


@handles("Hardmax")
def hardmax(ctx: ImportContext, node: OnnxNode) -> Value:
    def body(x: Value, axis: int) -> Value:
        depth = ctx.shape(x)[axis]
        if not isinstance(depth, int):
            raise node.unsupported("Hardmax needs a static size on its axis")
        idx = ctx.op("argmax", x, axis=axis, keepdims=False)
        return ctx.op("one_hot", idx, depth=depth, axis=axis, on_value=1.0, off_value=0.0, dtype=ctx.dtype(x))
    return _softmax_like(ctx, node, body)


@handles("CumSum")
def cumsum(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    axis = norm_axis(node, int(ctx.const_scalar(node.required(1), "axis")), ctx.rank(x))
    return ctx.op("cumsum", x, axis=axis, exclusive=bool(node.attr("exclusive", 0)),
                  reverse=bool(node.attr("reverse", 0)))


@handles("TopK")
def topk(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.required(0)
    k = node.attr("k") if node.opset < 10 else int(ctx.const_scalar(node.required(1), "K"))
    axis = norm_axis(node, node.attr("axis", -1), ctx.rank(x))
    largest = bool(node.attr("largest", 1)) if node.opset >= 11 else True
    sorted_ = bool(node.attr("sorted", 1)) if node.opset >= 11 else True
    values, indices = ctx.op("topk", x, k=k, axis=axis, largest=largest, sorted=sorted_)
    return [values, indices]


_MAX_UNROLLED_CUMPROD = 256


@handles("CumProd")
def cumprod(ctx: ImportContext, node: OnnxNode) -> Value:
    """Running products, unrolled along the (static, short) axis: no graph op computes them."""
    x = node.required(0)
    rank = ctx.rank(x)
    axis = norm_axis(node, int(ctx.const_scalar(node.required(1), "axis")), rank)
    n = ctx.shape(x)[axis]
    if not isinstance(n, int) or n > _MAX_UNROLLED_CUMPROD:
        raise node.unsupported(f"the scanned axis must be static and at most {_MAX_UNROLLED_CUMPROD} long, got {n}")
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))
    if n == 0:
        return ctx.op("identity", x)
    order = list(reversed(range(n))) if reverse else list(range(n))
    parts: dict[int, Value] = {}
    acc = None
    for i in order:
        if exclusive:
            shape = list(ctx.shape(x))
            shape[axis] = 1
            parts[i] = acc if acc is not None else ctx.const(np.ones(shape, ctx.dtype(x).np), ctx.dtype(x))
        item = ctx.op("slice", x, starts=(i,), ends=(i + 1,), axes=(axis,), steps=(1,))
        acc = item if acc is None else ctx.op("mul", acc, item)
        if not exclusive:
            parts[i] = acc
    return ctx.op("concat", [parts[i] for i in range(n)], axis=axis)
