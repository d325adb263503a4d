"""Indexing ops: Gather, GatherElements, GatherND, OneHot, Resize and Upsample.

GatherND is a gather on the data flattened over the indexed axes, with the linear index
computed by graph arithmetic.  Resize maps onto ``graph.resize`` (explicit output sizes, exact
rational coordinate maps) when it can; the ONNX variants that op does not express (scales that
differ from out/in, antialiasing when downsampling, ``exclude_outside``, ``tf_crop_and_resize``,
``half_pixel_symmetric``) become, per resized axis, the weighted sum of a few gathers with
static tap tables (``resize_table``: the ONNX coordinate and coefficient rules evaluated once at
import, in f64 as the reference does), plus a select for ``tf_crop_and_resize``'s extrapolation.
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


def _keys_cubic(r: float, a: float) -> list[float]:
    return [((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
            ((a * (2 - r) - 5 * a) * (2 - r) + 8 * a) * (2 - r) - 4 * a]


def _coefficients(r: float, scale: float, mode: str, nearest_mode: str, cubic_a: float, antialias: bool) -> np.ndarray:
    """ONNX Resize's interpolation coefficients for the fraction ``r`` in (0, 1] (1: on a sample)."""
    if mode == "nearest":
        if float(r).is_integer():
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5, "floor": False, "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    if not antialias:
        return np.array([1 - r, r]) if mode == "linear" else np.array(_keys_cubic(r, cubic_a))
    s = min(scale, 1.0)                   # the filter stretched by 1/scale when downsampling
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        c = np.clip(1 - np.abs((np.arange(start, 2 - start) - r) * s), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        t = np.abs(s * (np.arange(start, 2 - start) - r))
        a = cubic_a
        c = np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                     np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))
    return c / c.sum()


def resize_table(in_size: int, out_size: int, scale: float, mode: str, coord: str, nearest_mode: str,
                 cubic_a: float, exclude_outside: bool, antialias: bool, roi: tuple[float, float] | None):
    """Input taps of one resized axis as ``(indices (out, taps), weights (out, taps), outside)``,
    ``outside`` the output positions that take the extrapolation value (tf_crop_and_resize; else
    None), following ONNX Resize: the source coordinate of each output position, the
    coefficients of its fraction, the taps nearest to it (ties to the lower ones) with edge
    replication, renormalised without the outside taps under ``exclude_outside``."""
    y = np.arange(out_size, dtype=np.float64)
    width = scale * in_size
    outside = None
    if coord == "align_corners":
        x = np.zeros(out_size) if width == 1 else y * (in_size - 1) / (width - 1)
    elif coord == "asymmetric":
        x = y / scale
    elif coord == "tf_crop_and_resize":
        lo, hi = roi
        x = (np.full(out_size, (hi - lo) * (in_size - 1) / 2) if width == 1
             else y * (hi - lo) * (in_size - 1) / (width - 1)) + lo * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif coord == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif coord == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif coord == "half_pixel_symmetric":
        x = (in_size / 2) * (1 - out_size / width) + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(coord)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    coeffs = np.stack([_coefficients(float(r), scale, mode, nearest_mode, cubic_a, antialias) for r in ratio])
    n = coeffs.shape[1]
    pad = (n + 1) // 2
    xp = x + pad
    p = np.floor(xp)
    frac = xp - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + offset).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_size - 1), coeffs, outside


def _table_resize(ctx: ImportContext, node: OnnxNode, x: Value, out: tuple, used: list, mode: str, coord: str,
                  nearest_mode: str, cubic_a: float, exclude_outside: bool, antialias: bool,
                  roi: list | None, extrapolation: float) -> Value:
    """Resize as, per axis, ``sum_t gather(y, idx[:, t]) * w[:, t]`` with static tables (one gather
    for nearest), then ``select(outside, extrapolation, y)`` for tf_crop_and_resize."""
    shape = ctx.static_shape(x, "Resize")
    rank = len(shape)
    dtype = ctx.dtype(x)
    if mode != "nearest" and not dtype.is_float:
        raise node.unsupported(f"{mode} resize of {dtype} data")
    y = x
    for a in range(rank):
        pair = None if roi is None else (float(roi[a]), float(roi[a + rank]))
        trivial_roi = pair is None or (np.isclose(pair[0], 0.0) and np.isclose(pair[1], 1.0))
        if np.isclose(used[a], 1.0) and out[a] == shape[a] and trivial_roi:
            continue
        idx, w, outside = resize_table(shape[a], out[a], used[a], mode, coord, nearest_mode, cubic_a,
                                       exclude_outside, antialias and used[a] < 1.0, pair)
        bshape = (out[a],) + (1,) * (rank - a - 1)
        if mode == "nearest":
            y = ctx.op("gather", y, ctx.const(idx[np.arange(len(idx)), w.argmax(axis=1)]), axis=a)
        else:
            total = None
            for t in range(idx.shape[1]):
                if not w[:, t].any():
                    continue
                term = ctx.op("mul", ctx.op("gather", y, ctx.const(idx[:, t]), axis=a),
                              ctx.const(w[:, t].reshape(bshape), dtype))
                total = term if total is None else ctx.op("add", total, term)
            y = total if total is not None else ctx.op("mul", ctx.op("gather", y, ctx.const(idx[:, 0]), axis=a),
                                                       ctx.scalar(0, dtype))
        if outside is not None and outside.any():
            y = ctx.op("select", ctx.const(outside.reshape(bshape)), ctx.scalar(extrapolation, dtype), y)
    return y


def _emit_resize(ctx: ImportContext, node: OnnxNode, x: Value, out: tuple, used: list, mode: str,
                 coord: str, nearest_mode: str, cubic_a: float, exclude_outside: bool = False,
                 antialias: bool = False, roi: list | None = None, extrapolation: float = 0.0) -> Value:
    shape = ctx.shape(x)
    if mode not in ("nearest", "linear", "cubic"):
        raise node.unsupported(f"mode='{mode}'")
    if coord not in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                     "tf_half_pixel_for_nn", "tf_crop_and_resize"):
        raise node.unsupported(f"coordinate_transformation_mode='{coord}'")
    if coord == "tf_crop_and_resize" and roi is None:
        raise node.unsupported("tf_crop_and_resize without roi")
    ratio_differs = any(d != o and not np.isclose(used[a], o / d, rtol=1e-6, atol=0)
                        for a, (d, o) in enumerate(zip(shape, out)))
    downsampled = any(o < d for o, d in zip(out, shape))
    if (ratio_differs or coord in ("tf_crop_and_resize", "half_pixel_symmetric")
            or (exclude_outside and mode == "cubic") or (antialias and mode != "nearest" and downsampled)):
        if coord == "tf_half_pixel_for_nn":
            raise node.unsupported("tf_half_pixel_for_nn with scales that differ from the size ratio")
        return _table_resize(ctx, node, x, out, used, mode, coord, nearest_mode, cubic_a,
                             exclude_outside and mode == "cubic", antialias and mode != "nearest", roi, extrapolation)
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
    extrapolation = float(node.attr("extrapolation_value", 0.0))
    roi = None
    roi_v = node.input(1)
    if coord == "tf_crop_and_resize" and roi_v is not None and ctx.shape(roi_v) != (0,):
        given = [float(r) for r in np.asarray(ctx.require_const(roi_v, "roi")).reshape(-1)]
        rank = ctx.rank(x)
        if axes is None:
            roi = given
        else:
            ax = list(norm_axes(node, axes, rank))
            roi = [0.0] * rank + [1.0] * rank
            for i, a in enumerate(ax):
                roi[a], roi[a + rank] = given[i], given[len(ax) + i]
        if len(roi) != 2 * rank:
            raise node.unsupported(f"roi has {len(roi)} entries for rank {rank}")
    return _emit_resize(ctx, node, x, out, used, mode, coord, node.attr("nearest_mode", "round_prefer_floor"),
                        node.attr("cubic_coeff_a", -0.75), bool(node.attr("exclude_outside", 0)),
                        bool(node.attr("antialias", 0)), roi, extrapolation)


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


@handles("ArrayFeatureExtractor")  # ai.onnx.ml
def array_feature_extractor(ctx: ImportContext, node: OnnxNode) -> Value:
    """``x[..., indices.ravel()]``: a gather on the last axis of the flattened indices; a 1-D x
    gives one row (shape ``(1, n)``), as onnxruntime and the ONNX reference do."""
    x, idx = node.required(0), node.required(1)
    count = prod(ctx.static_shape(idx, "ArrayFeatureExtractor's indices"))
    flat = ctx.op("reshape", idx, shape=(count,)) if ctx.rank(idx) != 1 else idx
    y = ctx.op("gather", x, flat, axis=ctx.rank(x) - 1)
    if ctx.rank(x) == 1:
        y = ctx.op("reshape", y, shape=(1, count))
    return y
