"""Data movement: reshape, transpose, flatten, squeeze, unsqueeze, expand, concat, split, slice,
pad, tile.

No op here does arithmetic: every output element is one input element (or a pad constant),
so each is at worst INJECTIVE.  The ones whose output-to-input index map is a *monotone
projection* (each input coordinate is an output coordinate, in order, or the constant 0) are
BROADCAST: that is exactly the map of NumPy broadcasting, so a consumer fuses them the way it
fuses a broadcast operand of ``graph.add``, with plain affine indexing.  That holds for expand,
squeeze and unsqueeze.  Reshape and flatten merge or split dims, whose index maps need
floordiv/mod of a linearised offset: INJECTIVE.  (A reshape that only adds or drops unit dims
should be canonicalised into squeeze/unsqueeze by simplification, which makes it BROADCAST.)

Rules about attributes (a permutation, sizes that sum to the dim, slice steps) are checked in
``infer``, so they fail when an op is built as well as in the verifier, which re-runs ``infer``.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, expect, register
from ...ir.symbolic import dim_add, dim_ceildiv, dim_min, dim_mul, dim_sub
from ...ir.types import Dim, TensorType
from .base import (FoldStaticOnly, broadcast_shapes, counts_differ, dims_product, exact_quotient, expect_choice,
                   io_bytes, match_dims, norm_axes, norm_axis, promote, resolve_dims, tensor_types)

# Slice bounds at least this large (or this negative) mean "to the end of the axis" even when
# the axis size is a symbol: ONNX exporters write INT64_MAX, some INT32_MAX.
_TO_THE_END = 2 ** 31 - 1


class DataMovement(FoldStaticOnly):
    """One tensor in, elements moved without arithmetic."""

    operands = ("x",)
    traits = frozenset({PURE})
    fusion = FusionKind.INJECTIVE
    flops = 0.0


class BroadcastMovement(DataMovement):
    """Index map is a monotone projection (see the module docstring)."""

    fusion = FusionKind.BROADCAST


# ---- reshape family ----------------------------------------------------------------------

@register
class Reshape(DataMovement):
    """Same elements in row-major order under a new shape.

    The frontends resolve ONNX's copy-dim ``0``; here ``0`` is a literal size (only valid for an
    empty input).  One ``-1`` stands for the element count divided by the other dims, which
    must divide it exactly for every value of the symbols (``("b", "s", 768) -> (-1, 12, 64)``
    gives ``("b*s", 12, 64)``).  A symbolic dim in ``shape`` names a run-time size, e.g.
    ``(N, L, 768) -> ("N", "L", 12, 64)``.
    """

    name = "graph.reshape"
    attrs = {"shape": Attr("dims")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        shape = reshape_target(x.shape, attrs["shape"])
        for i, d in enumerate(shape):
            expect(d != 0 or (x.is_static and x.num_elements == 0),
                   f"shape[{i}] = 0 for a non-empty input: ONNX's copy-dim 0 must be resolved by "
                   f"the frontend")
        expect(not counts_differ(x.shape, shape),
               f"shape {tuple(shape)} holds a different number of elements than the input "
               f"{tuple(x.shape)}")
        return [TensorType(shape, x.dtype)]

    def compute(self, x, shape):
        return x.reshape(resolve_dims(shape, self.name, total=x.size))


def reshape_target(shape: Sequence[Dim], target: Sequence[Dim]) -> tuple:
    """``target`` with its ``-1`` (at most one) replaced by the exact quotient of ``shape``'s
    element count by the other dims; other negative sizes are errors."""
    holes = [i for i, d in enumerate(target) if isinstance(d, int) and d < 0]
    for i in holes:
        expect(target[i] == -1, f"shape[{i}] = {target[i]}: only -1 (the rest of the elements) may be negative")
    expect(len(holes) <= 1, f"shape {tuple(target)} has more than one -1")
    if not holes:
        return tuple(target)
    h = holes[0]
    known = dims_product([d for i, d in enumerate(target) if i != h])
    expect(known != 0, f"shape {tuple(target)}: -1 next to a zero dim is ambiguous")
    rest = exact_quotient(dims_product(shape), known,
                          f"shape {tuple(target)} does not divide the {tuple(shape)} input into whole rows")
    return tuple(target[:h]) + (rest,) + tuple(target[h + 1:])


@register
class Flatten(DataMovement):
    """ONNX Flatten: ``(prod(shape[:axis]), prod(shape[axis:]))``; axis in [-rank, rank].

    INJECTIVE for the same reason as reshape.
    """

    name = "graph.flatten"
    attrs = {"axis": Attr("int", 1)}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        a = _flatten_axis(attrs["axis"], x.rank)
        return [TensorType((dims_product(x.shape[:a], "flatten"), dims_product(x.shape[a:], "flatten")),
                           x.dtype)]

    @staticmethod
    def compute(x, axis):
        a = _flatten_axis(axis, x.ndim)
        return x.reshape(int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))


def _flatten_axis(axis: int, rank: int) -> int:
    expect(-rank <= axis <= rank, f"axis {axis} is out of range [-{rank}, {rank}]")
    return axis + rank if axis < 0 else axis


@register
class Squeeze(BroadcastMovement):
    """Drops the listed size-1 axes.  An empty ``axes`` drops none (frontends resolve ONNX's
    "all unit axes" default, which depends on the shape)."""

    name = "graph.squeeze"
    attrs = {"axes": Attr("ints")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        axes = norm_axes(attrs["axes"], x.rank)
        for a in axes:
            expect(x.shape[a] == 1, f"axes: axis {a} has size {x.shape[a]}; squeeze removes only "
                                    f"static size-1 axes")
        return [TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)]

    @staticmethod
    def compute(x, axes):
        return np.squeeze(x, axis=tuple(axes))


@register
class Unsqueeze(BroadcastMovement):
    """Inserts size-1 axes; ``axes`` index the result (ONNX Unsqueeze)."""

    name = "graph.unsqueeze"
    attrs = {"axes": Attr("ints")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        rank = x.rank + len(attrs["axes"])
        axes = norm_axes(attrs["axes"], rank)
        rest = iter(x.shape)
        return [TensorType(tuple(1 if i in axes else next(rest) for i in range(rank)), x.dtype)]

    @staticmethod
    def compute(x, axes):
        return np.expand_dims(x, tuple(axes))


@register
class Expand(BroadcastMovement):
    """ONNX Expand: the result shape is the bidirectional broadcast of ``x.shape`` and ``shape``
    (a 1 in ``shape`` keeps x's size)."""

    name = "graph.expand"
    attrs = {"shape": Attr("dims")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        shape = attrs["shape"]
        for i, d in enumerate(shape):
            expect(not isinstance(d, int) or d >= 0, f"shape[{i}] = {d} is negative")
        return [TensorType(broadcast_shapes(x.shape, shape), x.dtype)]

    def compute(self, x, shape):
        target = resolve_dims(shape, self.name, aligned=x.shape)
        return np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, target)))


@register
class Transpose(DataMovement):
    """Permutes axes: result axis i is input axis ``perm[i]`` (negative entries count from the end)."""

    name = "graph.transpose"
    attrs = {"perm": Attr("ints")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        perm = permutation(attrs["perm"], x.rank)
        return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]

    @staticmethod
    def compute(x, perm):
        return np.ascontiguousarray(np.transpose(x, permutation(perm, x.ndim)))


def permutation(perm: Sequence[int], rank: int) -> tuple[int, ...]:
    """``perm`` with negative entries normalised; a ShapeError unless it permutes 0..rank-1."""
    expect(len(perm) == rank, f"perm {tuple(perm)} has {len(perm)} entries for rank {rank}")
    out = tuple(norm_axis(p, rank, "perm entry") for p in perm)
    expect(sorted(out) == list(range(rank)), f"perm {tuple(perm)} is not a permutation of 0..{rank - 1}")
    return out


@register
class Tile(DataMovement):
    """Repeats the tensor ``repeats[i]`` times along axis i (INJECTIVE: the map is a mod)."""

    name = "graph.tile"
    attrs = {"repeats": Attr("ints")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        reps = attrs["repeats"]
        expect(len(reps) == x.rank, f"repeats {reps} has {len(reps)} entries for rank {x.rank}")
        out: list[Dim] = []
        for i, (d, r) in enumerate(zip(x.shape, reps)):
            expect(r >= 0, f"repeats[{i}] = {r} is negative")
            out.append(dim_mul(d, r))
        return [TensorType(tuple(out), x.dtype)]

    @staticmethod
    def compute(x, repeats):
        return np.tile(x, repeats)


# ---- concat / split ----------------------------------------------------------------------

@register
class Concat(FoldStaticOnly):
    """Joins tensors along ``axis``; every other dim must agree."""

    name = "graph.concat"
    operands = ("inputs*",)
    attrs = {"axis": Attr("int")}
    traits = frozenset({PURE})
    fusion = FusionKind.INJECTIVE

    def infer(self, types, attrs):
        ins = tensor_types(types, self.name)
        expect(len(ins) >= 1, "needs at least one input")
        first = ins[0]
        expect(first.rank >= 1, "inputs must have rank >= 1")
        a = norm_axis(attrs["axis"], first.rank)
        shape = list(first.shape)
        for k, t in enumerate(ins[1:], 1):
            expect(t.rank == first.rank, f"input #{k} has rank {t.rank}, input #0 has {first.rank}")
            promote(first.dtype, t.dtype)
            for i, d in enumerate(t.shape):
                if i != a:
                    shape[i] = match_dims(shape[i], d, f"input #{k} axis {i}")
        if len(ins) > 1:
            total: Dim = 0
            for t in ins:
                total = dim_add(total, t.shape[a])
            shape[a] = total
        return [TensorType(tuple(shape), first.dtype)]

    @staticmethod
    def compute(*inputs, axis):
        return np.concatenate(inputs, axis=axis)


@register
class Split(DataMovement):
    """Cuts ``x`` along ``axis`` into pieces of the given sizes: one result per size."""

    name = "graph.split"
    results = ("outputs*",)
    attrs = {"axis": Attr("int"), "sizes": Attr("ints")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        a = norm_axis(attrs["axis"], x.rank)
        sizes = attrs["sizes"]
        expect(len(sizes) >= 1, "sizes is empty; a split has at least one result")
        expect(all(s >= 0 for s in sizes), f"sizes {sizes} has a negative entry")
        d = x.shape[a]
        expect(isinstance(d, int), f"axis {a} has symbolic size '{d}'; split needs a static axis "
                                   f"(its sizes are numbers)")
        expect(sum(sizes) == d, f"sizes {sizes} sum to {sum(sizes)}, but axis {a} has size {d}")
        return [x.with_shape(x.shape[:a] + (s,) + x.shape[a + 1:]) for s in sizes]

    @staticmethod
    def compute(x, axis, sizes):
        return [np.ascontiguousarray(p) for p in np.split(x, np.cumsum(sizes)[:-1], axis=axis)]

    @staticmethod
    def offsets(sizes: Sequence[int]) -> tuple[int, ...]:
        """Start of each piece along the axis."""
        return tuple(int(o) for o in np.cumsum((0,) + tuple(sizes[:-1])))


# ---- slice -------------------------------------------------------------------------------

class SliceDim(NamedTuple):
    """One axis of a normalised slice: elements ``start + step * k`` for k in [0, count).
    ``start`` is symbolic only on a symbolic axis sliced from its end (``"s-1"``)."""

    start: Dim
    step: int
    count: Dim


def slice_plan(shape: Sequence[Dim], attrs: dict[str, Any]) -> list[SliceDim]:
    """Every axis of ``shape`` as (start, step, count) after ONNX Slice normalisation.

    Negative starts/ends count from the end; then for a positive step start and end clamp to
    [0, d], for a negative step start clamps to [0, d-1] and end to [-1, d-1]; the count is
    ``ceil((end - start) / step)`` (at least 0).  Unsliced axes are (0, 1, d).  An axis of
    symbolic size is sliced by ``_slice_symbolic_axis``.
    """
    starts, ends = attrs["starts"], attrs["ends"]
    n = len(starts)
    axes = attrs["axes"] or tuple(range(n))
    steps = attrs["steps"] or (1,) * n
    expect(len(ends) == n and len(axes) == n and len(steps) == n,
           f"starts, ends, axes, steps have lengths {n}, {len(ends)}, {len(axes)}, {len(steps)}; "
           f"they must be equal (axes and steps may be empty for the defaults)")
    rank = len(shape)
    norm = [norm_axis(a, rank, "axes entry") for a in axes]
    expect(len(set(norm)) == n, f"axes {tuple(axes)} names an axis twice")
    plan = [SliceDim(0, 1, d) for d in shape]
    for a, s, e, st in zip(norm, starts, ends, steps):
        expect(st != 0, f"steps: the step of axis {a} is 0")
        d = shape[a]
        if isinstance(s, str) or isinstance(e, str):
            plan[a] = _slice_by_symbolic_bounds(d, s, e, st)
        else:
            plan[a] = _slice_symbolic_axis(d, s, e, st) if isinstance(d, str) else _slice_axis(d, s, e, st)
    return plan


def _slice_by_symbolic_bounds(d: Dim, start: Dim, end: Dim, step: int) -> SliceDim:
    """A slice whose start or end is a size (``causal[:seq]``, ``cache[:, past:past+seq]``).

    Symbolic bounds are indices counted from the front that lie inside the axis: an end beyond
    a static axis would make the count ``min(1024,seq)``, a size no other tensor has.
    ``Slice.verify`` proves ``end <= d`` from the declared ranges; an int bound is normalised as
    usual.  Only positive steps (torch's slices)."""
    expect(step > 0, f"a slice with a symbolic bound needs a positive step, got {step}")
    if isinstance(start, int):
        start = 0 if start <= -_TO_THE_END else (dim_add(d, start) if start < 0 else start)
    if isinstance(end, int):
        end = d if end >= _TO_THE_END else (dim_add(d, end) if end < 0 else dim_min(end, d))
    return SliceDim(start, step, dim_ceildiv(dim_sub(end, start), step))


def check_slice_bounds(op) -> None:
    """Every symbolic end of ``op`` (a graph.slice) provably within its axis under the function's
    declared ranges; a kernel reading past the end would read another tensor's memory."""
    from ...ir.symbolic import symbol_table_of
    starts, ends = op.attributes["starts"], op.attributes["ends"]
    if not any(isinstance(v, str) for v in list(starts) + list(ends)):
        return
    func = op.parent_op
    while func is not None and func.name != "func.func":
        func = func.parent_op
    if func is None:
        return          # a detached op (being built): checked when its function is verified
    table = symbol_table_of(func)
    shape = op.operands[0].type.shape
    axes = op.attributes["axes"] or tuple(range(len(starts)))
    for a, e in zip(axes, ends):
        d = shape[a % len(shape)]
        if not isinstance(e, str):
            continue
        hi = table.upper_bound(e)
        d_hi = d if isinstance(d, int) else table.upper_bound(d)
        if isinstance(d, str) and (e == d or _provably_le(e, d)):
            continue
        expect(hi is not None and d_hi is not None and hi <= d_hi,
               f"slice end '{e}' of axis {a} (size {d}) is only safe when '{e}' <= {d}; declare a maximum "
               f"for its symbols (dynamic_shapes Dim max / --shape NAME=MIN..MAX) of at most {d}")


def _provably_le(a: Dim, b: Dim) -> bool:
    from ...ir.symbolic import as_expr
    diff = as_expr(b) - as_expr(a)
    return all(c >= 0 for c in diff.terms.values())


def _slice_symbolic_axis(d: str, start: int, end: int, step: int) -> SliceDim:
    """A slice of an axis of symbolic size ``d``.  Ends clamp to the axis (``min(512,s)``);
    negative indices count from the end (``s-1``); bounds beyond +-(2^31-1) mean the ends of the
    axis.  Starts are taken to lie inside the axis (clamping a start would give counts such as
    ``max(0,s-1)`` that fit no kernel); the entry's range check is where a too-short axis fails.
    """
    if step > 0:
        first = 0 if start <= -_TO_THE_END else (dim_add(d, start) if start < 0 else
                                                 (d if start >= _TO_THE_END else start))
        stop = d if end >= _TO_THE_END else (0 if end <= -_TO_THE_END else
                                             (dim_add(d, end) if end < 0 else dim_min(end, d)))
        return SliceDim(first, step, dim_ceildiv(dim_sub(stop, first), step))
    last = dim_sub(d, 1)
    first = last if start >= _TO_THE_END else (dim_add(d, start) if start < 0 else dim_min(start, last))
    stop = -1 if end <= -_TO_THE_END else (dim_add(d, end) if end < 0 else end)
    return SliceDim(first, step, dim_ceildiv(dim_sub(first, stop), -step))


def _slice_axis(d: int, start: int, end: int, step: int) -> SliceDim:
    if start < 0:
        start += d
    if end < 0:
        end += d
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        count = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
        count = max(0, -(-(start - end) // -step)) if d else 0
    return SliceDim(start if count else 0, step, count)


@register
class Slice(DataMovement):
    """ONNX Slice: strided sub-tensor with clamping; ends may be +-(2^63-1)."""

    name = "graph.slice"
    attrs = {"starts": Attr("dims"), "ends": Attr("dims"), "axes": Attr("ints"), "steps": Attr("ints")}

    def verify(self, op):
        check_slice_bounds(op)

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        return [x.with_shape(tuple(p.count for p in slice_plan(x.shape, attrs)))]

    @staticmethod
    def compute(x, **attrs):
        index = []
        if any(isinstance(v, str) for v in list(attrs["starts"]) + list(attrs["ends"])):
            from .base import resolve_dims
            attrs = dict(attrs, starts=resolve_dims(attrs["starts"], "graph.slice"),
                         ends=resolve_dims(attrs["ends"], "graph.slice"))
        for p in slice_plan(x.shape, attrs):
            stop = p.start + p.step * p.count
            index.append(slice(p.start, stop if stop >= 0 else None, p.step))
        return np.ascontiguousarray(x[tuple(index)])

    def plan(self, op) -> list[SliceDim]:
        """(start, step, count) of every axis of ``op``'s operand, for the lowering passes."""
        return slice_plan(op.operands[0].type.shape, op.attributes)

    def cost(self, operand_types, result_types, attrs):
        return Cost(0.0, 2 * io_bytes((), result_types))   # reads only what it keeps


# ---- pad ---------------------------------------------------------------------------------

PAD_MODES = ("constant", "reflect", "edge")


class PadDim(NamedTuple):
    """One axis of a pad.  Negative pads crop first: the kept input window is
    ``[crop_begin, crop_begin + window)``; then ``begin`` elements are added before it and the
    axis ends with ``size`` elements."""

    crop_begin: int
    window: Dim
    begin: int
    size: Dim


def pad_plan(shape: Sequence[Dim], pads: Sequence[int], mode: str) -> list[PadDim]:
    """Per-axis crop and pad amounts, with the mode's limits checked."""
    rank = len(shape)
    expect(len(pads) == 2 * rank, f"pads has {len(pads)} values; rank {rank} needs {2 * rank} "
                                  f"(begin..., end...)")
    expect_choice(mode, PAD_MODES, "mode")
    plan = []
    for i, d in enumerate(shape):
        b, e = pads[i], pads[i + rank]
        if isinstance(d, str):
            plan.append(_pad_symbolic_axis(d, b, e, mode, i))
            continue
        crop_b, crop_e = max(0, -b), max(0, -e)
        window = d - crop_b - crop_e
        expect(window >= 0, f"pads {b}, {e} on axis {i} crop {crop_b + crop_e} elements from size {d}")
        grow_b, grow_e = max(0, b), max(0, e)
        if mode == "reflect" and (grow_b or grow_e):
            expect(max(grow_b, grow_e) <= window - 1,
                   f"reflect pads {grow_b}, {grow_e} on axis {i} must be < the (cropped) size {window}")
        if mode == "edge" and (grow_b or grow_e):
            expect(window >= 1, f"edge padding of an empty axis {i}")
        plan.append(PadDim(crop_b, window, grow_b, window + grow_b + grow_e))
    return plan


def _pad_symbolic_axis(d: str, b: int, e: int, mode: str, axis: int) -> PadDim:
    """``pad_plan`` of an axis of symbolic size: the window and size are expressions; that the
    crop leaves a window (and a reflect pad fits in it) is taken from the symbol's range."""
    crop_b, crop_e = max(0, -b), max(0, -e)
    window = dim_sub(d, crop_b + crop_e)
    grow_b, grow_e = max(0, b), max(0, e)
    return PadDim(crop_b, window, grow_b, dim_add(window, grow_b + grow_e))


def pad_source(p: PadDim, out: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Input indices read by output coordinates ``out`` of one axis, and a mask of those that
    read the input at all (constant mode: False means the pad value)."""
    j = np.asarray(out, dtype=np.int64) - p.begin
    inside = (j >= 0) & (j < p.window)
    if mode == "edge":
        j = np.clip(j, 0, p.window - 1)
        inside = np.ones_like(inside)
    elif mode == "reflect":
        if p.window > 1:
            period = 2 * (p.window - 1)
            j = np.mod(j, period)
            j = np.where(j >= p.window, period - j, j)
        else:
            j = np.zeros_like(j)
        inside = np.ones_like(inside)
    else:
        j = np.where(inside, j, 0)
    return j + p.crop_begin, inside


@register
class Pad(DataMovement):
    """Pads (or, with negative pads, crops) every axis.  Crops apply first, then reflect/edge
    read the cropped window, as onnxruntime does."""

    name = "graph.pad"
    attrs = {"pads": Attr("ints"), "mode": Attr("str", "constant"), "value": Attr("float", 0.0)}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        return [x.with_shape(tuple(p.size for p in pad_plan(x.shape, attrs["pads"], attrs["mode"])))]

    @staticmethod
    def compute(x, pads, mode, value):
        plan = pad_plan(x.shape, pads, mode)
        out_shape = tuple(p.size for p in plan)
        fill = np.asarray(value).astype(x.dtype)
        if any(p.window == 0 for p in plan):
            return np.full(out_shape, fill, dtype=x.dtype)
        srcs, masks = zip(*(pad_source(p, np.arange(p.size), mode) for p in plan)) if plan else ((), ())
        y = x[np.ix_(*srcs)] if plan else x.copy()
        if mode == "constant" and plan:
            keep = np.ones(out_shape, dtype=bool)
            for i, m in enumerate(masks):
                keep &= m.reshape((-1,) + (1,) * (len(plan) - i - 1))
            y = np.where(keep, y, fill)
        return y

    def plan(self, op) -> list[PadDim]:
        """Per-axis crop/pad of ``op``'s operand, for the lowering passes (see ``pad_source``)."""
        return pad_plan(op.operands[0].type.shape, op.attributes["pads"], op.attributes["mode"])
