"""Data-movement graph ops (reshape family, transpose, tile, concat, split, slice, pad) as index maps.

Every output element is one input element (or a pad constant), so each lowering is one
parallel compute over the result whose body is a single read at an index expression of the
output axes.  The expressions are built to stay small because they run once per element:
reshape works on groups of dims whose sizes multiply to the same count (a dim carried over
unchanged costs nothing, a merge one multiply-add, a split one floordiv/mod) and ignores unit
dims; bounds checks exist only where an index can actually leave its range.

The index helpers at the top (``clamp``, ``delinearize``, ...) are shared with ``index.py``.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ....dialects.graph.base import norm_axis
from ....dialects.graph.shape import Split, permutation
from ....dialects.structured.builder import Expr, TensorRef
from ....ir.symbolic import Dim, dim_add, dim_exact_div, dim_mul, dim_prod, dim_sub, dims_equal
from .registry import LoweringContext, broadcast_read, lowering

Index = Expr | int


# ---- index helpers -----------------------------------------------------------------------

def clamp(e: Index, lo: int, hi: Dim, known: tuple[int, Dim] | None = None) -> Index:
    """``e`` limited to [lo, hi]; a side is skipped when ``known`` (e's range) already respects it.
    ``hi`` may be a symbolic dim (read at run time); that side is then only skipped when ``known``
    ends at exactly ``hi``."""
    if isinstance(e, int) and isinstance(hi, int):
        return min(max(e, lo), hi)
    if isinstance(e, int):
        raise ValueError("clamp of a constant index to a symbolic bound: build the index as an expression")
    if known is None or known[0] < lo:
        e = e.max(lo)
    if known is None or not _at_most(known[1], hi):
        e = e.min(hi)
    return e


def _at_most(a: Dim, b: Dim) -> bool:
    """``a <= b`` provably (ints compare; symbolic dims only when equal)."""
    if isinstance(a, int) and isinstance(b, int):
        return a <= b
    return dims_equal(a, b)


def linearize(idx: Sequence[Index], dims: Sequence[Dim]) -> Index:
    """Row-major offset of ``idx`` within ``dims`` (symbolic dims are read at run time)."""
    flat = idx[0]
    for i, d in zip(idx[1:], dims[1:]):
        flat = flat * d + i
    return flat


def delinearize(flat: Index, dims: Sequence[Dim]) -> list[Index]:
    """Row-major coordinates of offset ``flat`` (< prod(dims)) within ``dims``."""
    out: list[Index] = []
    suffix = dim_prod(dims[1:])
    for m, d in enumerate(dims):
        e = flat // suffix if suffix != 1 else flat
        out.append(e % d if m > 0 else e)
        if m + 1 < len(dims):
            suffix = dim_exact_div(suffix, dims[m + 1])
    return out


def reshape_indices(out_axes: Sequence[Expr], out_shape: Sequence[int], in_shape: Sequence[int]) -> list[Index]:
    """Input coordinates of the output position ``out_axes`` when the same row-major elements
    are viewed as ``in_shape`` (reshape, flatten, squeeze, unsqueeze).

    Unit dims are left out, the others are matched in groups with equal element counts: a group
    is linearised on the output side and delinearised on the input side, so dims that carry
    over unchanged map straight through.  The result must not be empty.
    """
    idx: list[Index] = [0] * len(in_shape)
    outs = [k for k, d in enumerate(out_shape) if d != 1]
    ins = [k for k, d in enumerate(in_shape) if d != 1]
    if not all(isinstance(d, int) for d in list(out_shape) + list(in_shape)):
        return _symbolic_reshape_indices(out_axes, out_shape, in_shape, outs, ins)
    i = j = 0
    while i < len(outs):
        go, gi = [outs[i]], [ins[j]]
        po, pi = out_shape[outs[i]], in_shape[ins[j]]
        while po != pi:
            if po < pi:
                i += 1
                go.append(outs[i])
                po *= out_shape[outs[i]]
            else:
                j += 1
                gi.append(ins[j])
                pi *= in_shape[ins[j]]
        flat = linearize([out_axes[k] for k in go], [out_shape[k] for k in go])
        for k, e in zip(gi, delinearize(flat, [in_shape[k] for k in gi])):
            idx[k] = e
        i, j = i + 1, j + 1
    return idx


def _symbolic_reshape_indices(out_axes: Sequence[Expr], out_shape: Sequence[Dim], in_shape: Sequence[Dim],
                              outs: list[int], ins: list[int]) -> list[Index]:
    """``reshape_indices`` over symbolic dims: groups grow on the side whose product provably
    divides the other's (``b*s`` against ``b``, then ``s``) until the products are equal; when
    neither divides, the rest of both shapes forms one group (always correct, one more div/mod)."""
    idx: list[Index] = [0] * len(in_shape)
    i = j = 0
    while i < len(outs) and j < len(ins):
        go, gi = [outs[i]], [ins[j]]
        po, pi = out_shape[outs[i]], in_shape[ins[j]]
        while not dims_equal(po, pi):
            if i + 1 < len(outs) and _proper_divisor(po, pi):
                i += 1
                go.append(outs[i])
                po = dim_mul(po, out_shape[outs[i]])
            elif j + 1 < len(ins) and _proper_divisor(pi, po):
                j += 1
                gi.append(ins[j])
                pi = dim_mul(pi, in_shape[ins[j]])
            else:
                go += outs[i + 1:]
                gi += ins[j + 1:]
                i, j = len(outs) - 1, len(ins) - 1
                break
        flat = linearize([out_axes[k] for k in go], [out_shape[k] for k in go])
        for k, e in zip(gi, delinearize(flat, [in_shape[k] for k in gi])):
            idx[k] = e
        i, j = i + 1, j + 1
    return idx


def _proper_divisor(a: Dim, b: Dim) -> bool:
    """``a`` provably divides ``b`` and is not equal to it."""
    return not dims_equal(a, b) and dim_exact_div(b, a) is not None


# ---- compute helpers ---------------------------------------------------------------------

def emit_result(ctx: LoweringContext, body: Callable[..., Expr], i: int = 0) -> TensorRef:
    """One parallel compute over result ``i``.  An empty result gets a constant body: there is
    nothing to compute, and index maps into empty inputs cannot be evaluated."""
    shape = ctx.out_shape(i)
    empty = any(d == 0 for d in shape)
    return ctx.kb.compute(shape, "p" * len(shape), ctx.out_dtype(i), (lambda *_: 0) if empty else body)


def read_mapped(x: TensorRef, ctx: LoweringContext, index_map: Callable[[list[Expr]], Sequence[Index]],
                i: int = 0) -> TensorRef:
    """Result ``i`` as ``x[index_map(output axes)]``."""
    return emit_result(ctx, lambda *o: x.read(index_map(list(o))), i)


# ---- lowerings ---------------------------------------------------------------------------

@lowering("graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze")
def lower_reshape(ctx: LoweringContext):
    (x,) = ctx.inputs
    out = ctx.out_shape()
    return [read_mapped(x, ctx, lambda o: reshape_indices(o, out, x.shape))]


@lowering("graph.expand")
def lower_expand(ctx: LoweringContext):
    (x,) = ctx.inputs
    out = ctx.out_shape()
    return [emit_result(ctx, lambda *o: broadcast_read(x, o, out))]


@lowering("graph.transpose")
def lower_transpose(ctx: LoweringContext):
    (x,) = ctx.inputs
    perm = permutation(ctx.attrs["perm"], len(x.shape))

    def index_map(o):
        idx: list[Index] = [0] * len(perm)
        for k, p in enumerate(perm):
            idx[p] = o[k]
        return idx

    return [read_mapped(x, ctx, index_map)]


@lowering("graph.tile")
def lower_tile(ctx: LoweringContext):
    (x,) = ctx.inputs
    reps = ctx.attrs["repeats"]
    return [read_mapped(x, ctx, lambda o: [0 if d == 1 else (i % d if r > 1 else i)
                                           for i, d, r in zip(o, x.shape, reps)])]


@lowering("graph.concat")
def lower_concat(ctx: LoweringContext):
    """A chain of selects on the concat axis.  Every input is read for every element (the
    chain evaluates all branches), so each read clamps its axis index into its own range."""
    a = norm_axis(ctx.attrs["axis"], len(ctx.out_shape()))
    total = ctx.out_shape()[a]
    pieces, off = [], 0
    for t in ctx.inputs:
        if t.shape[a] != 0:         # a symbolic piece is at least one long (symbol ranges start at 1)
            pieces.append((t, off))
        off = dim_add(off, t.shape[a])

    def body(*o):
        def piece(k):
            t, start = pieces[k]
            known = (-start, total - 1 - start) if isinstance(start, int) and isinstance(total, int) else None
            j = clamp(o[a] - start, 0, dim_sub(t.shape[a], 1), known)
            return t.read(list(o[:a]) + [j] + list(o[a + 1:]))

        v = piece(len(pieces) - 1)
        for k in range(len(pieces) - 2, -1, -1):
            v = (o[a] < pieces[k + 1][1]).select(piece(k), v)
        return v

    return [emit_result(ctx, body)]


@lowering("graph.split")
def lower_split(ctx: LoweringContext):
    (x,) = ctx.inputs
    a = norm_axis(ctx.attrs["axis"], len(x.shape))
    offsets = Split.offsets(ctx.attrs["sizes"])
    return [read_mapped(x, ctx, lambda o, s=s: o[:a] + [o[a] + s] + o[a + 1:], i)
            for i, s in enumerate(offsets)]


@lowering("graph.slice")
def lower_slice(ctx: LoweringContext):
    (x,) = ctx.inputs
    plan = ctx.op.opdef.plan(ctx.op)
    return [read_mapped(x, ctx, lambda o: [o_k * p.step + p.start for o_k, p in zip(o, plan)])]


@lowering("graph.pad")
def lower_pad(ctx: LoweringContext):
    """Constant mode reads with a bounds check that yields the pad value (padding lies exactly
    outside the input's bounds once crops are folded into the offset); edge and reflect map
    every output coordinate back into the kept window."""
    (x,) = ctx.inputs
    mode, value = ctx.attrs["mode"], ctx.attrs["value"]
    plan = ctx.op.opdef.plan(ctx.op)

    def axis_index(o: Expr, p) -> Index:
        j = o - p.begin
        last = dim_sub(p.window, 1)
        grow_end = dim_sub(dim_sub(p.size, p.begin), p.window)
        if mode == "edge":
            j = clamp(j, 0, last, (-p.begin, dim_add(last, grow_end)))
        elif mode == "reflect":
            if p.begin:
                j = j.apply("abs")
            if grow_end:
                j = last - (last - j).apply("abs")
        return j + p.crop_begin

    if mode == "constant":
        grows = any(p.begin or p.size != p.window for p in plan)
        return [emit_result(ctx, lambda *o: x.read([o_k - p.begin + p.crop_begin for o_k, p in zip(o, plan)],
                                                   pad=value if grows else None))]
    return [read_mapped(x, ctx, lambda o: [axis_index(o_k, p) for o_k, p in zip(o, plan)])]
