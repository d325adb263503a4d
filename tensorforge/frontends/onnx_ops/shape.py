"""Shape and layout ops: Reshape, Flatten, Transpose, (Un)Squeeze, Concat, Split, Slice, Pad, Tile,
Expand, Shape, Size, DepthToSpace, SpaceToDepth, CenterCropPad.

Shape-like operands (target shapes, axes, pads, split sizes...) became inputs in newer opsets;
they are read through ``ints_operand`` and must fold to constants at import time.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from ...ir.symbolic import dim_add, dim_exact_div, dim_min, dim_prod
from ...ir.types import Dim
from .common import ints_operand, is_static, norm_axes, norm_axis, prod
from .context import ImportContext, OnnxNode
from .registry import handles
from .symbolic import interval, provably_nonneg


def resolve_reshape(node: OnnxNode, in_shape: tuple[Dim, ...], target: tuple[Dim, ...],
                    allowzero: int = 0, range_of=None) -> tuple[Dim, ...] | None:
    """ONNX Reshape's target (0 copies a dim unless ``allowzero``, one -1 is inferred) made explicit.

    ``target`` may hold dim expressions (from the shapes of dynamic inputs); each must provably
    be a size (>= 1, or >= 0 with ``allowzero``), since a 0 or -1 at run time would mean
    something else.  The -1 is the exact quotient of the element counts
    (``(batch, seq, 64) -> (-1, 64)`` gives ``batch*seq``).  None when a symbolic entry may be
    0 or -1, or the quotient is not a dim."""
    out: list[Dim | None] = []
    infer = None
    for i, s in enumerate(target):
        if isinstance(s, str):
            lo, _ = interval(s, range_of) if range_of is not None else interval(s)
            if lo is None or lo < (0 if allowzero else 1):
                return None
            out.append(s)
        elif s == 0 and not allowzero:
            if i >= len(in_shape):
                raise node.unsupported(f"target shape {target} copies dim {i} of a rank-{len(in_shape)} input")
            out.append(in_shape[i])
        elif s == -1:
            if infer is not None:
                raise node.unsupported(f"target shape {target} has two -1 entries")
            infer = i
            out.append(None)
        elif s < -1:
            raise node.unsupported(f"target shape {target} has a negative entry")
        else:
            out.append(int(s))
    if infer is not None:
        known = dim_prod([d for d in out if d is not None])
        total = dim_prod(in_shape)
        if is_static(in_shape) and isinstance(known, int):
            if known == 0 or total % known:
                raise node.unsupported(f"target shape {target} does not fit input shape {in_shape}")
            out[infer] = total // known
        else:
            quotient = dim_exact_div(total, known) if known != 0 else None
            if quotient is None:
                return None
            out[infer] = quotient
    return tuple(out)  # type: ignore[arg-type]


@handles("Reshape")
def reshape(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    node.ignore("consumed_inputs")
    if node.opset < 5:
        target = node.attr("shape")
    else:
        target = ctx.dims_operand(node.required(1, "shape"), "the target shape")
    shape = resolve_reshape(node, ctx.shape(x), target, node.attr("allowzero", 0), ctx.range_of)
    if shape is None:
        raise ctx._unbound(f"the target shape {list(target)} for the dynamic input shape {list(ctx.shape(x))} "
                           f"is not expressible over the symbolic dims", ctx.sym_sites(ctx.shape(x) + tuple(target)))
    return ctx.op("reshape", x, shape=shape)


@handles("Flatten")
def flatten(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    rank = ctx.rank(x)
    axis = node.attr("axis", 1)
    if not -rank <= axis <= rank:
        raise node.unsupported(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    shape = ctx.shape(x)
    if is_static(shape):
        return ctx.op("reshape", x, shape=(prod(shape[:axis]), prod(shape[axis:])))
    return ctx.op("flatten", x, axis=axis)


@handles("Transpose")
def transpose(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    perm = node.attr("perm", None)
    if perm is None:
        perm = tuple(reversed(range(ctx.rank(x))))
    return ctx.op("transpose", x, perm=norm_axes(node, perm, ctx.rank(x), "perm entry"))


@handles("Squeeze")
def squeeze(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    axes = ints_operand(ctx, node, 1, "axes", 13, "the squeezed axes")
    shape = ctx.shape(x)
    if axes is None:
        if not is_static(shape):
            raise node.unsupported(f"squeezing every size-1 axis needs static dimensions, got {x.type}")
        axes = tuple(i for i, d in enumerate(shape) if d == 1)
    axes = tuple(sorted(set(norm_axes(node, axes, len(shape)))))
    if not axes:
        return x
    return ctx.op("squeeze", x, axes=axes)


@handles("Unsqueeze")
def unsqueeze(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    axes = ints_operand(ctx, node, 1, "axes", 13, "the inserted axes")
    if axes is None:
        raise node.unsupported("axes are missing")
    axes = tuple(sorted(norm_axes(node, axes, ctx.rank(x) + len(axes))))
    return ctx.op("unsqueeze", x, axes=axes)


@handles("Concat")
def concat(ctx: ImportContext, node: OnnxNode) -> Value:
    xs = [x for x in node.inputs if x is not None]
    axis = node.attr("axis", 1) if node.opset < 4 else node.attr("axis")
    axis = norm_axis(node, axis, ctx.rank(xs[0]))
    dtypes = {ctx.dtype(x) for x in xs}
    if len(dtypes) > 1:
        raise node.unsupported(f"inputs of different element types {sorted(map(str, dtypes))}")
    return ctx.op("concat", xs, axis=axis)


def split_sizes(node: OnnxNode, dim: Dim, parts: int, uneven: bool) -> tuple[int, ...]:
    if not isinstance(dim, int):
        raise node.unsupported("an equal split needs a static dimension on the split axis")
    if uneven:
        chunk = -(-dim // parts)
        sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
        if sizes[-1] < 0:
            raise node.unsupported(f"cannot split a dimension of {dim} into {parts} parts")
        return tuple(sizes)
    if dim % parts:
        raise node.unsupported(f"cannot split a dimension of {dim} into {parts} equal parts")
    return (dim // parts,) * parts


@handles("Split")
def split(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.required(0)
    axis = norm_axis(node, node.attr("axis", 0), ctx.rank(x))
    if node.opset < 2:
        raise node.unsupported("Split-1 is not supported")
    sizes = ints_operand(ctx, node, 1, "split", 13, "the split sizes")
    parts = len(node.outputs)
    if node.opset >= 18:
        num_outputs = node.attr("num_outputs", None)
        if num_outputs is not None:
            if sizes is not None:
                raise node.unsupported("both 'split' and 'num_outputs' are given")
            parts = num_outputs
    if sizes is None:
        sizes = split_sizes(node, ctx.shape(x)[axis], parts, node.opset >= 18)
    if len(sizes) != len(node.outputs):
        raise node.unsupported(f"{len(sizes)} split sizes for {len(node.outputs)} outputs")
    if len(sizes) == 1:
        return [ctx.op("identity", x)]
    out = ctx.op("split", x, axis=axis, sizes=tuple(sizes))
    return list(out) if isinstance(out, tuple) else [out]


@handles("Slice")
def slice_(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    rank = ctx.rank(x)
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes = node.attr("axes", None)
        steps = None
    else:
        starts = ctx.dims_operand(node.required(1), "starts")
        ends = ctx.dims_operand(node.required(2), "ends")
        axes = ctx.const_ints(node.input(3), "axes") if node.input(3) is not None else None
        steps = ctx.const_ints(node.input(4), "steps") if node.input(4) is not None else None
    if axes is None:
        axes = tuple(range(len(starts)))
    if steps is None:
        steps = (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.unsupported("starts, ends, axes and steps differ in length")
    if any(s == 0 for s in steps):
        raise node.unsupported("a step is 0")
    big = 2 ** 63 - 1
    ends = tuple(e if isinstance(e, str) else max(min(e, big), -big) for e in ends)
    starts = tuple(s if isinstance(s, str) else max(min(s, big), -big) for s in starts)
    axes = norm_axes(node, axes, rank)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if isinstance(s, str) or isinstance(e, str):
            _check_symbolic_bounds(ctx, ctx.shape(x)[a], a, s, e, st)
    return ctx.op("slice", x, starts=tuple(starts), ends=ends, axes=axes, steps=tuple(steps))


_TO_THE_END = 2 ** 31 - 1      # graph.slice reads bounds this large as the ends of the axis


def _check_symbolic_bounds(ctx: ImportContext, d: Dim, axis: int, start: Dim, end: Dim, step: int) -> None:
    """A symbolic start or end (``position_ids[:seq]``) is an index from the front inside the axis:
    ONNX's negative "from the end" and clamping are not expressible for a symbolic bound, so
    the bound must provably be >= 0, the end at most the axis size and the start at most the
    end, under the symbols' ranges (which the model may narrow: see ``require_le``)."""
    where = f"the slice of axis {axis} (size {d}) from {start} to {end}"
    syms = ctx.sym_sites([start, end])
    if step <= 0:
        raise ctx._unbound(f"{where}: a symbolic bound needs a positive step, got {step}", syms)
    for bound in (start, end):
        if isinstance(bound, str) and not provably_nonneg(bound, ctx.range_of):
            raise ctx._unbound(f"{where}: the bound {bound} may be negative (counted from the end)", syms)
    if isinstance(start, int):
        start = 0 if start <= -_TO_THE_END else (dim_add(d, start) if start < 0 else start)
    if isinstance(end, int):
        end = d if end >= _TO_THE_END else (dim_add(d, end) if end < 0 else dim_min(end, d))
    else:
        ctx.require_le(end, d, f"{where}: the end")
    ctx.require_le(start, end, f"{where}: the start")


@handles("Pad")
def pad(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    rank = ctx.rank(x)
    mode = node.attr("mode", "constant")
    if node.opset < 11:
        pads = node.attr("pads" if node.opset >= 2 else "paddings")
        value = node.attr("value", 0.0)
    else:
        pads = ctx.const_ints(node.required(1), "pads")
        cv = node.input(2)
        value = ctx.const_scalar(cv, "the pad value") if cv is not None else 0.0
        axes_v = node.input(3)
        if axes_v is not None:
            axes = norm_axes(node, ctx.const_ints(axes_v, "axes"), rank)
            n = len(axes)
            if len(pads) != 2 * n:
                raise node.unsupported(f"{len(pads)} pads for {n} axes")
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                full[a], full[a + rank] = pads[i], pads[i + n]
            pads = tuple(full)
    if len(pads) != 2 * rank:
        raise node.unsupported(f"{len(pads)} pads for a rank-{rank} input")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise node.unsupported(f"mode='{mode}'")
    if not any(pads):
        return ctx.op("identity", x)
    if mode == "wrap":
        return _pad_wrap(ctx, x, tuple(pads))
    return ctx.op("pad", x, pads=tuple(pads), mode=mode, value=float(value))


def _pad_wrap(ctx: ImportContext, x: Value, pads: tuple[int, ...]) -> Value:
    """mode='wrap' (periodic): per padded axis, a gather of static positions ``(j - begin) mod n``.
    Negative pads crop first (as the ONNX reference does), then the rest wraps around the crop."""
    rank = ctx.rank(x)
    shape = ctx.static_shape(x, "Pad mode='wrap'")
    for axis in range(rank):
        begin, end = pads[axis], pads[axis + rank]
        if begin == 0 and end == 0:
            continue
        lo, hi = max(0, -begin), max(0, -end)
        m = shape[axis] - lo - hi
        if m <= 0:
            raise ctx.node.unsupported(f"wrap padding of an axis cropped to {m} elements")
        idx = lo + np.mod(np.arange(-max(begin, 0), m + max(end, 0)), m)
        x = ctx.op("gather", x, ctx.const(idx.astype(np.int64)), axis=axis)
    return x


@handles("Tile")
def tile(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    if node.opset < 6:
        raise node.unsupported("Tile-1 (tiles/axis inputs) is not supported")
    repeats = ctx.dims_operand(node.required(1), "repeats")
    if len(repeats) != ctx.rank(x):
        raise node.unsupported(f"{len(repeats)} repeats for a rank-{ctx.rank(x)} input")
    if all(isinstance(r, int) for r in repeats):
        return ctx.op("tile", x, repeats=repeats)
    # a symbolic repeat count (x.repeat(batch, 1)) of a size-1 axis is an expand to that count
    if any(isinstance(r, str) and d != 1 for r, d in zip(repeats, ctx.shape(x))):
        raise ctx._unbound(f"Tile repeats {list(repeats)} of the input shape {list(ctx.shape(x))} (a symbolic "
                           f"count repeats only size-1 axes here)", ctx.sym_sites(repeats))
    ints = tuple(r if isinstance(r, int) else 1 for r in repeats)
    y = ctx.op("tile", x, repeats=ints) if any(r != 1 for r in ints) else x
    return ctx.op("expand", y, shape=tuple(r if isinstance(r, str) else 1 for r in repeats))


@handles("Expand")
def expand(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    shape = ctx.dims_operand(node.required(1), "the target shape")
    return ctx.op("expand", x, shape=shape)


def _shape_slice(node: OnnxNode, rank: int) -> tuple[int, int]:
    start, end = node.attr("start", 0), node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(end, start)


@handles("Shape")
def shape_(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    shape = ctx.shape(x)
    start, end = _shape_slice(node, len(shape))
    if is_static(shape[start:end]):
        return ctx.const(np.asarray(shape[start:end], dtype=np.int64))
    full = ctx.op("shape_of", x)
    if (start, end) == (0, len(shape)):
        return full
    return ctx.op("slice", full, starts=(start,), ends=(end,), axes=(0,), steps=(1,))


@handles("Size")
def size(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    shape = ctx.shape(x)
    if is_static(shape):
        return ctx.const(np.asarray(prod(shape), dtype=np.int64))
    return ctx.op("reduce_prod", ctx.op("shape_of", x), axes=(0,), keepdims=False)


@handles("DepthToSpace")
def depth_to_space(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    b = node.attr("blocksize")
    mode = node.attr("mode", "DCR")
    n, c, h, w = ctx.static_shape(x, "DepthToSpace")
    if c % (b * b):
        raise node.unsupported(f"{c} channels do not split into blocks of {b}x{b}")
    if mode == "DCR":
        y = ctx.op("reshape", x, shape=(n, b, b, c // (b * b), h, w))
        y = ctx.op("transpose", y, perm=(0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        y = ctx.op("reshape", x, shape=(n, c // (b * b), b, b, h, w))
        y = ctx.op("transpose", y, perm=(0, 1, 4, 2, 5, 3))
    else:
        raise node.unsupported(f"mode='{mode}'")
    return ctx.op("reshape", y, shape=(n, c // (b * b), h * b, w * b))


@handles("SpaceToDepth")
def space_to_depth(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    b = node.attr("blocksize")
    n, c, h, w = ctx.static_shape(x, "SpaceToDepth")
    if h % b or w % b:
        raise node.unsupported(f"spatial size {h}x{w} is not a multiple of the block size {b}")
    mode = node.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise node.unsupported(f"mode='{mode}'")
    y = ctx.op("reshape", x, shape=(n, c, h // b, b, w // b, b))
    y = ctx.op("transpose", y, perm=(0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return ctx.op("reshape", y, shape=(n, c * b * b, h // b, w // b))


@handles("CenterCropPad")
def center_crop_pad(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    shape = ctx.static_shape(x, "CenterCropPad")
    rank = len(shape)
    target = ctx.const_ints(node.required(1), "the target shape")
    axes = norm_axes(node, node.attr("axes", tuple(range(rank))), rank)
    if len(target) != len(axes):
        raise node.unsupported(f"{len(target)} target sizes for {len(axes)} axes")
    starts, ends, crop_axes = [], [], []
    pads = [0] * (2 * rank)
    for a, t in zip(axes, target):
        d = shape[a]
        if t < d:
            begin = (d - t) // 2
            starts.append(begin)
            ends.append(begin + t)
            crop_axes.append(a)
        elif t > d:
            pads[a] = (t - d) // 2
            pads[a + rank] = t - d - (t - d) // 2
    y = x
    if crop_axes:
        y = ctx.op("slice", y, starts=tuple(starts), ends=tuple(ends), axes=tuple(crop_axes),
                   steps=(1,) * len(crop_axes))
    if any(pads):
        y = ctx.op("pad", y, pads=tuple(pads), mode="constant", value=0.0)
    return y if y is not x else ctx.op("identity", x)
