"""Indexing ops: Gather, GatherElements, GatherND, OneHot, Resize and Upsample.

GatherND is a gather on the data flattened over the indexed axes, with the linear index
computed by graph arithmetic.  Resize maps onto ``graph.resize`` (explicit output sizes); the
ONNX variants it cannot express exactly (scales that differ from out/in, antialiasing when
downsampling, ``exclude_outside``, ``tf_crop_and_resize``) are rejected.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from ...ir.symbolic import dim_add
from ...ir.types import DType
from .common import norm_axes, norm_axis, prod
from .context import ImportContext, OnnxNode
from .registry import handles


@handles("Gather")
def gather(ctx: ImportContext, node: OnnxNode) -> Value:
    x, idx = node.required(0), node.required(1)
    axis = norm_axis(node, node.attr("axis", 0), ctx.rank(x))
    _bound_positions(ctx, idx, ctx.shape(x)[axis], axis)
    return ctx.op("gather", x, idx, axis=axis)


_MOVES = frozenset({"graph.identity", "graph.reshape", "graph.unsqueeze", "graph.squeeze", "graph.flatten",
                    "graph.cast", "graph.expand"})


def _bound_positions(ctx: ImportContext, idx: Value, size, axis: int) -> None:
    """Indices that are ``Range(start, start + n)`` with a symbolic ``n`` (positions of a
    sequence, ``wpe(arange(seq))``) read a table of ``size`` rows: the model only runs while
    ``start + n <= size``, which the symbol's range is narrowed to (``ImportContext.require_le``)
    instead of reading past the table."""
    while idx.op is not None and idx.op.name in _MOVES:
        idx = idx.op.operands[0]
    op = idx.op
    if op is None or op.name != "graph.iota" or isinstance(op.attributes["size"], int):
        return
    start, step = op.attributes["start"], op.attributes["step"]
    if step != 1 or start < 0 or float(start) != int(start):
        return
    end = dim_add(op.attributes["size"], int(start))
    ctx.require_le(end, size, f"the gather of positions 0..{end}-1 from axis {axis} (size {size})")


@handles("GatherElements")
def gather_elements(ctx: ImportContext, node: OnnxNode) -> Value:
    x, idx = node.required(0), node.required(1)
    return ctx.op("gather_elements", x, idx, axis=norm_axis(node, node.attr("axis", 0), ctx.rank(x)))


@handles("GatherND")
def gather_nd(ctx: ImportContext, node: OnnxNode) -> Value:
    data, idx = node.required(0), node.required(1)
    b = node.attr("batch_dims", 0)
    dshape = ctx.static_shape(data, "GatherND")
    ishape = ctx.static_shape(idx, "GatherND")
    k = ishape[-1]
    if b + k > len(dshape) or tuple(ishape[:b]) != tuple(dshape[:b]):
        raise node.unsupported(f"indices of shape {ishape} do not fit data of shape {dshape} "
                               f"with batch_dims={b}")
    indexed = dshape[b:b + k]
    idx = ctx.cast(idx, DType.i64)
    sizes = ctx.const(np.asarray(indexed, dtype=np.int64))
    idx = ctx.op("select", ctx.op("lt", idx, ctx.scalar(0, DType.i64)), ctx.op("add", idx, sizes), idx)
    strides = np.asarray([prod(indexed[j + 1:]) for j in range(k)], dtype=np.int64)
    linear = ctx.op("reduce_sum", ctx.op("mul", idx, ctx.const(strides)), axes=(len(ishape) - 1,), keepdims=False)
    block = prod(indexed)
    if b:
        batch = np.arange(prod(dshape[:b]), dtype=np.int64).reshape(tuple(dshape[:b]) + (1,) * (len(ishape) - 1 - b))
        linear = ctx.op("add", linear, ctx.const(batch * block))
    flat = ctx.op("reshape", data, shape=(prod(dshape[:b]) * block,) + tuple(dshape[b + k:]))
    return ctx.op("gather", flat, linear, axis=0)


@handles("OneHot")
def one_hot(ctx: ImportContext, node: OnnxNode) -> Value:
    idx = node.required(0)
    depth = int(ctx.const_scalar(node.required(1), "depth"))
    values = np.asarray(ctx.require_const(node.required(2), "values")).reshape(-1)
    if values.size != 2:
        raise node.unsupported(f"values must hold [off, on], got {values.size} entries")
    dtype = ctx.dtype(node.required(2))
    axis = node.attr("axis", -1)
    idx = ctx.cast(idx, DType.i64)
    return ctx.op("one_hot", idx, depth=depth, axis=norm_axis(node, axis, ctx.rank(idx) + 1),
                  on_value=float(values[1]), off_value=float(values[0]), dtype=dtype)


def _resize_sizes(ctx: ImportContext, node: OnnxNode, x: Value, scales, sizes, axes) -> tuple[tuple, list]:
    """Output shape, and the per-axis scales ONNX's coordinate mapping will use."""
    shape = list(ctx.static_shape(x, "Resize"))
    rank = len(shape)
    axes = list(range(rank)) if axes is None else list(norm_axes(node, axes, rank))
    out = list(shape)
    used = [1.0] * rank
    if sizes is not None:
        if len(sizes) != len(axes):
            raise node.unsupported(f"{len(sizes)} sizes for {len(axes)} axes")
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for a, s in zip(axes, sizes):
                out[a] = int(s)
                used[a] = s / shape[a] if shape[a] else 1.0
        elif policy in ("not_larger", "not_smaller"):
            ratios = [s / shape[a] for a, s in zip(axes, sizes)]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a] = int(scale * shape[a] + 0.5)
                used[a] = scale
        else:
            raise node.unsupported(f"keep_aspect_ratio_policy='{policy}'")
    elif scales is not None:
        if len(scales) != len(axes):
            raise node.unsupported(f"{len(scales)} scales for {len(axes)} axes")
        for a, s in zip(axes, scales):
            if s <= 0:
                raise node.unsupported(f"scale {s} is not positive")
            out[a] = int(np.floor(shape[a] * np.float32(s)))
            used[a] = float(s)
    else:
        raise node.unsupported("neither scales nor sizes is given")
    return tuple(out), used


def _emit_resize(ctx: ImportContext, node: OnnxNode, x: Value, out: tuple, used: list, mode: str,
                 coord: str, nearest_mode: str, cubic_a: float) -> Value:
    shape = ctx.shape(x)
    if mode not in ("nearest", "linear", "cubic"):
        raise node.unsupported(f"mode='{mode}'")
    if coord == "tf_crop_and_resize":
        raise node.unsupported("coordinate_transformation_mode='tf_crop_and_resize'")
    for a, (d, o) in enumerate(zip(shape, out)):
        if d != o and not np.isclose(used[a], o / d, rtol=1e-6, atol=0):
            raise node.unsupported(f"axis {a}: scale {used[a]} differs from the size ratio {o}/{d}; "
                                   f"graph.resize derives the scale from the output size")
    if tuple(out) == tuple(shape):
        return ctx.op("identity", x)
    return ctx.op("resize", x, sizes=out, mode=mode, coordinate_transformation_mode=coord,
                  nearest_mode=nearest_mode, cubic_coeff_a=cubic_a)


@handles("Resize")
def resize(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    mode = node.attr("mode", "nearest")
    if node.opset < 11:
        scales = tuple(float(s) for s in np.asarray(ctx.require_const(node.required(1), "scales")).reshape(-1))
        out, used = _resize_sizes(ctx, node, x, scales, None, None)
        return _emit_resize(ctx, node, x, out, used, mode, "asymmetric", "floor", -0.75)
    scales_v, sizes_v = node.input(2), node.input(3)
    scales = sizes = None
    if sizes_v is not None and ctx.shape(sizes_v) != (0,):
        sizes = ctx.const_ints(sizes_v, "sizes")
    elif scales_v is not None:
        scales = tuple(float(s) for s in np.asarray(ctx.require_const(scales_v, "scales")).reshape(-1))
    axes = node.attr("axes", None) if node.opset >= 18 else None
    out, used = _resize_sizes(ctx, node, x, scales, sizes, axes)
    coord = node.attr("coordinate_transformation_mode", "half_pixel")
    node.ignore("extrapolation_value")  # only read by tf_crop_and_resize, which is rejected
    if node.attr("exclude_outside", 0) and mode == "cubic":
        raise node.unsupported("exclude_outside=1")
    shape = ctx.shape(x)
    if node.attr("antialias", 0) and mode != "nearest" and any(o < d for o, d in zip(out, shape)):
        raise node.unsupported("antialias=1 when downsampling")
    return _emit_resize(ctx, node, x, out, used, mode, coord, node.attr("nearest_mode", "round_prefer_floor"),
                        node.attr("cubic_coeff_a", -0.75))


@handles("Upsample")
def upsample(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    mode = node.attr("mode", "nearest")
    if node.opset < 9:
        scales = node.attr("scales")
    else:
        scales = tuple(float(s) for s in np.asarray(ctx.require_const(node.required(1), "scales")).reshape(-1))
    out, used = _resize_sizes(ctx, node, x, scales, None, None)
    return _emit_resize(ctx, node, x, out, used, "linear" if mode == "bilinear" else mode, "asymmetric",
                        "floor", -0.75)


@handles("ReverseSequence")
def reverse_sequence(ctx: ImportContext, node: OnnxNode) -> Value:
    """Reverses the first lens[b] steps of every batch entry: a gather_elements on the time axis."""
    x, lens = node.required(0), node.required(1)
    shape = ctx.static_shape(x, "ReverseSequence")
    rank = len(shape)
    t_axis = norm_axis(node, node.attr("time_axis", 0), rank)
    b_axis = norm_axis(node, node.attr("batch_axis", 1), rank)
    if t_axis == b_axis:
        raise node.unsupported("time_axis equals batch_axis")
    steps = [1] * rank
    steps[t_axis] = shape[t_axis]
    t = ctx.const(np.arange(shape[t_axis], dtype=np.int64).reshape(steps))
    per_batch = [1] * rank
    per_batch[b_axis] = shape[b_axis]
    n = ctx.op("reshape", ctx.cast(lens, DType.i64), shape=tuple(per_batch))
    flipped = ctx.op("sub", ctx.op("sub", n, ctx.scalar(1, DType.i64)), t)
    idx = ctx.op("select", ctx.op("lt", t, n), flipped, t)
    idx = ctx.op("expand", idx, shape=tuple(shape))
    return ctx.op("gather_elements", x, idx, axis=t_axis)
