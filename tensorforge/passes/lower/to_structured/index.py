"""Indexing graph ops (gather, gather_elements, embedding, one_hot, resize, topk) as tensor expressions.

Data-dependent indices are read from the index tensor and converted with ``to_index``.  The
reference raises on an index out of range; native code cannot raise, so every data index is
also clamped into its axis: an invalid index then reads a valid element instead of arbitrary
memory (ONNX leaves such inputs undefined).

Resize maps output coordinates to input taps with exact integer arithmetic: the source
coordinate of every ONNX coordinate mode is a rational ``(A*o + B) / D``, so nearest indices,
linear/cubic base indices and fractions need no float rounding (which ``-ffast-math`` would
make unpredictable).  The reference computes the coordinate in f32, as onnxruntime does, and
on exact ties its rounding can differ from the exact value; those few output coordinates
get an explicit correction (a select on the coordinate), so the native nearest index agrees
with the reference everywhere.

topk has no elementwise form; it is lowered as a rank count (O(n^2) comparisons per row,
ties broken by index as ONNX requires), so it is only lowered for short axes.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from ....dialects.graph.base import norm_axis
from ....errors import UnsupportedOpError
from ....ir.types import DType
from ....dialects.structured.builder import Expr
from ....ir.symbolic import Dim, dim_sub
from .registry import LoweringContext, lowering
from .shape import Index, clamp, emit_result

# topk compares every pair of elements of a row: beyond this axis length that is too slow.
TOPK_MAX_AXIS = 2048


def data_index(v: Expr, size: Dim, wrap: bool) -> Expr:
    """An index read from data, as an index into an axis of ``size``: negatives count from the
    end when ``wrap``; then clamped into [0, size) so that native code never reads outside."""
    j = v.to_index()
    if wrap:
        j = (j < 0).select(j + size, j)
    return clamp(j, 0, dim_sub(size, 1))


# ---- gather family -----------------------------------------------------------------------

@lowering("graph.gather")
def lower_gather(ctx: LoweringContext):
    x, ind = ctx.inputs
    a = norm_axis(ctx.attrs["axis"], len(x.shape))
    r = len(ind.shape)

    def body(*o):
        j = data_index(ind.read(o[a:a + r]), x.shape[a], wrap=True)
        return x.read(list(o[:a]) + [j] + list(o[a + r:]))

    return [emit_result(ctx, body)]


@lowering("graph.gather_elements")
def lower_gather_elements(ctx: LoweringContext):
    x, ind = ctx.inputs
    a = norm_axis(ctx.attrs["axis"], len(x.shape))

    def body(*o):
        j = data_index(ind.read(o), x.shape[a], wrap=True)
        return x.read(list(o[:a]) + [j] + list(o[a + 1:]))

    return [emit_result(ctx, body)]


@lowering("graph.embedding")
def lower_embedding(ctx: LoweringContext):
    table, ids = ctx.inputs
    return [emit_result(ctx, lambda *o: table.read([data_index(ids.read(o[:-1]), table.shape[0], wrap=False),
                                                    o[-1]]))]


@lowering("graph.one_hot")
def lower_one_hot(ctx: LoweringContext):
    (ind,) = ctx.inputs
    at = ctx.attrs
    depth, dt = at["depth"], ctx.out_dtype()
    a = norm_axis(at["axis"], len(ind.shape) + 1)

    def body(*o):
        k = ind.read(o[:a] + o[a + 1:]).to_index()
        k = (k < 0).select(k + depth, k)
        return k.eq(o[a]).select(ctx.kb.const(at["on_value"], dt), ctx.kb.const(at["off_value"], dt))

    return [emit_result(ctx, body)]


# ---- resize ------------------------------------------------------------------------------

def source_fraction(in_size: int, out_size: int, mode: str) -> tuple[int, int, int]:
    """``(A, B, D)`` with the exact source coordinate of output coordinate o being ``(A*o + B) / D``
    (ONNX coordinate_transformation_mode), reduced by their gcd."""
    d, s = in_size, out_size
    if mode == "half_pixel" or (mode == "pytorch_half_pixel" and s > 1):
        abd = (2 * d, d - s, 2 * s)            # (o + 1/2) * d/s - 1/2
    elif mode == "align_corners" and s > 1:
        abd = (d - 1, 0, s - 1)
    elif mode == "asymmetric":
        abd = (d, 0, s)
    elif mode == "tf_half_pixel_for_nn":
        abd = (2 * d, d, 2 * s)
    else:                                       # pytorch_half_pixel / align_corners to one element
        abd = (0, 0, 1)
    g = math.gcd(*abd)
    return abd[0] // g, abd[1] // g, abd[2] // g


def nearest_rule(a: int, b: int, d: int, nearest_mode: str) -> tuple[int, int, int]:
    """``(P, Q, R)`` with ``floor((P*o + Q) / R)`` the exactly rounded coordinate ``(a*o + b) / d``."""
    if nearest_mode == "floor":
        return a, b, d
    if nearest_mode == "ceil":
        return a, b + d - 1, d
    if nearest_mode == "round_prefer_floor":    # ceil(x - 1/2)
        return 2 * a, 2 * b + d - 1, 2 * d
    return 2 * a, 2 * b + d, 2 * d              # round_prefer_ceil: floor(x + 1/2)


def nearest_index(o: Expr, in_size: int, frac: tuple[int, int, int], nearest_mode: str,
                  reference: np.ndarray) -> Index:
    """The input index read by output coordinate ``o`` of a nearest resize, equal to
    ``reference`` (the op's own table) for every coordinate.

    Ties are where the exact rule and the reference's f32 rounding can disagree; shifting Q by
    one flips every tie, so the better of the three shifts is used and the rest is corrected.
    """
    p, q, r = nearest_rule(*frac, nearest_mode)
    out = np.arange(len(reference))
    last = in_size - 1

    def table(t):
        return np.clip((p * out + q + t) // r, 0, last)

    shift = min((0, -1, 1), key=lambda t: int((table(t) != reference).sum()))
    q += shift
    raw = (p * out + q) // r
    idx = clamp((o * p + q) // r, 0, last, (int(raw.min()), int(raw.max())))
    for m in np.flatnonzero(table(shift) != reference):
        idx = o.eq(int(m)).select(int(reference[m]), idx)
    return idx


def _cubic_weights(s: Expr, a: float) -> list[Expr]:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 from the base index."""
    def near(t):    # |t| <= 1
        return ((t * (a + 2) - (a + 3)) * t) * t + 1.0

    def far(t):     # 1 < |t| < 2
        return ((t * a - 5 * a) * t + 8 * a) * t - 4 * a

    return [far(s + 1.0), near(s), near(1.0 - s), far(2.0 - s)]


def interpolation_taps(o: Expr, in_size: int, out_size: int, frac: tuple[int, int, int], mode: str,
                       cubic_a: float, ft: DType) -> list[tuple[Index, Expr | None]]:
    """(input index, weight) of every tap of a linear or cubic resize of one axis."""
    a, b, d = frac
    last = in_size - 1
    n = o * a + b
    n_range = (min(b, a * (out_size - 1) + b), max(b, a * (out_size - 1) + b))
    if mode == "linear":                        # coordinate clamped to [0, last] first
        n = clamp(n, 0, last * d, n_range)
        lo = n // d
        if d == 1:
            return [(lo, None)]
        w = (n - lo * d).cast(ft) / float(d)
        return [(lo, 1.0 - w), ((lo + 1).min(last), w)]
    base = n // d
    s = (n - base * d).cast(ft) / float(d)
    lo_base, hi_base = n_range[0] // d, n_range[1] // d
    return [(clamp(base + t, 0, last, (lo_base + t, hi_base + t)), w)
            for t, w in zip((-1, 0, 1, 2), _cubic_weights(s, cubic_a))]


@lowering("graph.resize")
def lower_resize(ctx: LoweringContext):
    """One compute: each resized axis contributes its taps, the result sums their tensor
    product (1 read for nearest, 2^k for linear, 4^k for cubic over k resized axes)."""
    (x,) = ctx.inputs
    at = ctx.attrs
    mode = at["mode"]
    ft = DType.f64 if x.dtype is DType.f64 else DType.f32
    out_shape = ctx.out_shape()
    for k, (d, o) in enumerate(zip(x.shape, out_shape)):
        if (isinstance(d, str) or isinstance(o, str)) and d != o:
            raise UnsupportedOpError(f"'{ctx.op.name}'{ctx.op.location_str()}: axis {k} is resized from {d} to "
                                     f"{o}; native resize needs static sizes on resized axes (its index maps "
                                     f"are exact rationals of the sizes)")
    refs = ctx.op.opdef.taps(ctx.op)

    def axis_taps(o: Expr, k: int) -> list[tuple[Index, Expr | None]]:
        d, s = x.shape[k], out_shape[k]
        if refs[k] is None:
            return [(o, None)]
        if d == 1:
            return [(0, None)]
        frac = source_fraction(d, s, at["coordinate_transformation_mode"])
        if mode == "nearest":
            return [(nearest_index(o, d, frac, at["nearest_mode"], refs[k][0][:, 0]), None)]
        return interpolation_taps(o, d, s, frac, mode, at["cubic_coeff_a"], ft)

    def body(*o):
        total = None
        for combo in itertools.product(*(axis_taps(ok, k) for k, ok in enumerate(o))):
            v = x.read([i for i, _ in combo])
            weights = [w for _, w in combo if w is not None]
            if weights:
                w = weights[0]
                for extra in weights[1:]:
                    w = w * extra
                v = v.cast(ft) * w
            total = v if total is None else total + v
        return total

    return [emit_result(ctx, body)]


def _upper_bound(ctx: LoweringContext, d: Dim) -> int | None:
    """The largest value of ``d`` over the symbol ranges of the op's function (None: unbounded)."""
    from ....ir.symbolic import symbol_table_of
    cur = ctx.op.parent_op
    while cur is not None and cur.name != "func.func":
        cur = cur.parent_op
    return symbol_table_of(cur).upper_bound(d) if cur is not None else None


# ---- topk --------------------------------------------------------------------------------

@lowering("graph.topk")
def lower_topk(ctx: LoweringContext):
    """rank[i] = #elements that come before element i in the sorted order (larger/smaller, or
    equal with a lower index); index[k] = the i with rank k; value[k] = x[index[k]].  Sorted
    output, so ``sorted = false`` is honoured too.  A NaN ranks above every number, as in
    torch.topk and NumPy's sort (so it is the first of the largest and the last of the smallest)."""
    (x,) = ctx.inputs
    kb, at = ctx.kb, ctx.attrs
    a = norm_axis(at["axis"], len(x.shape))
    n = x.shape[a]
    bound = n if isinstance(n, int) else _upper_bound(ctx, n)
    if bound is None or bound > TOPK_MAX_AXIS:
        n = f"{n} (declared max {bound})" if isinstance(n, str) else n
        raise UnsupportedOpError(f"'{ctx.op.name}'{ctx.op.location_str()}: native topk compares all pairs "
                                 f"of an axis and is limited to {TOPK_MAX_AXIS} elements, axis {a} has {n}; "
                                 f"use target='interpreter'")
    if any(d == 0 for d in x.shape) or at["k"] == 0:
        return [emit_result(ctx, None, 0), emit_result(ctx, None, 1)]
    largest = at["largest"]
    rank_shape = tuple(x.shape)

    def at_axis(p: Sequence, j) -> list:
        return list(p[:a]) + [j] + list(p[a + 1:])

    def before(*axes):
        p, j = axes[:-1], axes[-1]
        xi, xj = x.read(p), x.read(at_axis(p, j))
        ahead = (xj > xi) if largest else (xj < xi)
        tie = xj.eq(xi)
        if x.dtype.is_float:
            nan_i, nan_j = xi.ne(xi), xj.ne(xj)
            ahead = ahead | ((nan_j & xi.eq(xi)) if largest else (nan_i & xj.eq(xj)))
            tie = tie | (nan_i & nan_j)
        first = ahead | (tie & (j < p[a]))
        return first.select(kb.const(1, DType.i64), kb.const(0, DType.i64))

    rank = kb.compute(rank_shape + (n,), "p" * len(rank_shape) + "r", DType.i64, before, combiner="add")
    out_shape = ctx.out_shape(1)

    def holder(*axes):
        p, i = axes[:-1], axes[-1]
        hit = rank.read(at_axis(p, i)).to_index().eq(p[a])
        return hit.select(i, -1)

    indices = kb.compute(tuple(out_shape) + (n,), "p" * len(out_shape) + "r", DType.i64, holder, combiner="max")
    values = emit_result(ctx, lambda *p: x.read(at_axis(p, data_index(indices.read(p), n, wrap=False))), 0)
    return [values, indices]
