"""Reductions, arg-reductions, softmax/log_softmax and cumsum as structured computes.

The structured dialect allows one combiner per compute, so every op here is a short chain
of computes in one kernel: a mean is a sum and a scale, an argmax is a max and then the
first (or last) index holding it, a softmax is a max, a sum of shifted exponentials and a
normalisation.  The helpers at the top (``ReduceLayout``, ``reduce_over``, ``SoftmaxParts``)
are shared with the pool, norm and attention lowerings.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ....dialects.graph.base import norm_axes, norm_axis
from ....dialects.graph.reduce import reduced_shape
from ....dialects.structured.builder import Expr, KernelBuilder, TensorRef, dim_index
from ....ir.symbolic import dim_add, dim_prod
from ....ir.types import DType
from .registry import LoweringContext, lowering

Index = Sequence[Expr]


def acc_dtype(dtype: DType) -> DType:
    """Accumulation type, as the references compute: half floats in f32, the rest as they are."""
    return DType.f32 if dtype is DType.f16 else dtype


def lowest(dtype: DType) -> float:
    """The value that never wins a max (padding of a max pool, masked-out scores)."""
    if dtype.is_float:
        return -math.inf
    if dtype is DType.bool:
        return 0.0
    return float(np.iinfo(dtype.np).min)


def cast_to(kb: KernelBuilder, t: TensorRef, dtype: DType) -> TensorRef:
    """``t`` converted to ``dtype`` (one elementwise compute; none when it already is)."""
    if t.dtype is dtype:
        return t
    shape = t.shape
    return kb.compute(shape, "p" * len(shape), dtype, lambda *i: t[i])


def count_value(kb: KernelBuilder, n, dtype: DType) -> float | Expr:
    """A count (a dim) as a number inside a compute body: a float literal when static, else the
    run-time dim converted to ``dtype`` (a mean over a symbolic axis divides by it)."""
    if isinstance(n, int):
        return float(n)
    return dim_index(kb.body_builder, n).cast(dtype)


def index_data(e: Expr, bound) -> Expr:
    """An index expression (``|e| < bound``) as i64 data.  ``scalar.cast`` to i64 keeps an
    index an index, so the value goes through i32 (or f64 past 2**31, exact up to 2**53; a
    symbolic bound has no proven limit, so it takes f64)."""
    small = isinstance(bound, int) and bound < 2 ** 31
    return e.cast(DType.i32 if small else DType.f64).cast(DType.i64)


class ReduceLayout:
    """The iteration domain of a reduction of a tensor of ``shape`` over ``axes``.

    The domain is the result's axes first (parallel; a reduced axis stays as an extent-1
    axis when ``keepdims``), then the reduced axes in order.  ``source`` maps domain axes to
    the index of the reduced tensor; ``project`` maps an index of the reduced tensor to the
    index of the result that holds its statistic (the reduced axes dropped or set to 0).
    """

    __slots__ = ("shape", "axes", "keepdims", "out_shape", "domain", "iterators")

    def __init__(self, shape: Sequence[int], axes: Sequence[int], keepdims: bool):
        self.shape, self.axes, self.keepdims = tuple(shape), tuple(axes), keepdims
        self.out_shape = reduced_shape(self.shape, self.axes, keepdims)
        self.domain = self.out_shape + tuple(self.shape[a] for a in self.axes)
        self.iterators = "p" * len(self.out_shape) + "r" * len(self.axes)

    @property
    def count(self):
        """How many elements each result element reduces (a dim: symbolic over symbolic axes)."""
        return dim_prod(self.shape[a] for a in self.axes)

    def split(self, dom: Index) -> tuple[list[Expr], list[Expr]]:
        n = len(self.out_shape)
        return list(dom[:n]), list(dom[n:])

    def source(self, dom: Index) -> list[Expr]:
        res, red = self.split(dom)
        kept = iter(res)
        idx = []
        for i in range(len(self.shape)):
            if i in self.axes:
                idx.append(red[self.axes.index(i)])
                if self.keepdims:
                    next(kept)
            else:
                idx.append(next(kept))
        return idx

    def project(self, idx: Index) -> list:
        if self.keepdims:
            return [0 if i in self.axes else v for i, v in enumerate(idx)]
        return [v for i, v in enumerate(idx) if i not in self.axes]


def reduce_over(kb: KernelBuilder, layout: ReduceLayout, combiner: str, dtype: DType,
                value: Callable[[list[Expr], list[Expr]], Expr]) -> TensorRef:
    """``out[r] = combine over the reduced axes of value(source index, r)``."""
    def body(*dom):
        return value(layout.source(dom), layout.split(dom)[0])
    return kb.compute(layout.domain, layout.iterators, dtype, body, combiner)


def elementwise(kb: KernelBuilder, shape: Sequence[int], dtype: DType, body: Callable[..., Expr]) -> TensorRef:
    return kb.compute(tuple(shape), "p" * len(shape), dtype, body)


def mean_of(kb: KernelBuilder, layout: ReduceLayout, read: Callable[[list[Expr]], Expr],
            out_dtype: DType) -> TensorRef:
    """Sum, then divide by the count (as NumPy: float means of integers, truncated back)."""
    dt = acc_dtype(out_dtype) if out_dtype.is_float else DType.f64
    total = reduce_over(kb, layout, "add", dt, lambda src, _: read(src).cast(dt))
    n = layout.count
    return elementwise(kb, layout.out_shape, out_dtype, lambda *r: total[r] / count_value(kb, n, dt))


def _axes_layout(ctx: LoweringContext) -> ReduceLayout:
    x = ctx.inputs[0]
    axes = norm_axes(ctx.attrs.get("axes", ()), len(x.shape)) or tuple(range(len(x.shape)))
    return ReduceLayout(x.shape, axes, ctx.attrs.get("keepdims", False))


_COMBINER = {"graph.reduce_sum": "add", "graph.reduce_prod": "mul", "graph.reduce_max": "max",
             "graph.reduce_min": "min"}


@lowering(*_COMBINER)
def lower_reduce(ctx: LoweringContext):
    x, kb, out_dt = ctx.inputs[0], ctx.kb, ctx.out_dtype()
    comb = _COMBINER[ctx.op.name]
    dt = acc_dtype(out_dt) if comb in ("add", "mul") else out_dt
    red = reduce_over(kb, _axes_layout(ctx), comb, dt, lambda src, _: x.read(src).cast(dt))
    return [cast_to(kb, red, out_dt)]


@lowering("graph.reduce_mean")
def lower_reduce_mean(ctx: LoweringContext):
    x = ctx.inputs[0]
    return [mean_of(ctx.kb, _axes_layout(ctx), x.read, ctx.out_dtype())]


@lowering("graph.argmax", "graph.argmin")
def lower_arg_reduction(ctx: LoweringContext):
    """The extreme value first, then the first (or last) index where ``x`` equals it: a min
    (or max) over the positions, with positions that do not hold the extreme left out.  A NaN
    is the extreme (the max/min propagate it), and matches the positions that hold a NaN: the
    first NaN's index, as torch and NumPy give."""
    x, kb = ctx.inputs[0], ctx.kb
    axis = norm_axis(ctx.attrs.get("axis", 0), len(x.shape))
    layout = ReduceLayout(x.shape, (axis,), ctx.attrs.get("keepdims", False))
    extreme = reduce_over(kb, layout, "max" if ctx.op.name == "graph.argmax" else "min", x.dtype,
                          lambda src, _: x.read(src))
    last = ctx.attrs.get("select_last_index", False)
    miss = -1 if last else x.shape[axis]

    def position(src, res):
        v = x.read(src)
        hit = v.eq(extreme.read(res))
        if x.dtype.is_float:
            hit = hit | v.ne(v)
        return index_data(hit.select(src[axis], miss), dim_add(x.shape[axis], 1))

    return [reduce_over(kb, layout, "max" if last else "min", DType.i64, position)]


class SoftmaxParts:
    """Max-shifted exponentials of ``logit`` along ``axis`` of a (virtual) tensor of ``shape``.

    Two computes: the row maximum and the row sum of ``exp(logit - max)``.  Positions where
    ``keep`` is false are left out of both (a bool mask, a causal triangle).  With
    ``guard_empty`` a row that sees nothing (every position masked, or every logit -inf)
    gets a finite shift and a zero total, so ``exp`` of it is 0 and not NaN; callers divide
    by ``total(idx).max(1)``, exact because a visible row's total is at least exp(0) = 1.
    """

    def __init__(self, kb: KernelBuilder, shape: Sequence[int], axis: int, dtype: DType,
                 logit: Callable[[list[Expr]], Expr], keep: Callable[[list[Expr]], Expr] | None = None,
                 guard_empty: bool = False):
        self.layout = ReduceLayout(shape, (axis,), keepdims=True)
        self.logit, self.keep, self.guard = logit, keep, guard_empty
        self.dtype = dtype

        def visible(src, _):
            v = logit(src)
            return keep(src).select(v, lowest(dtype)) if keep is not None else v

        self.max = reduce_over(kb, self.layout, "max", dtype, visible)
        self.sum = reduce_over(kb, self.layout, "add", dtype, lambda src, _: self.exp(src))

    def shift(self, idx: Index) -> Expr:
        m = self.max.read(self.layout.project(idx))
        return m.max(-float(np.finfo(self.dtype.np).max)) if self.guard else m

    def exp(self, idx: Index) -> Expr:
        """``exp(logit - shift)`` at ``idx``, 0 where not kept."""
        e = (self.logit(list(idx)) - self.shift(idx)).apply("exp")
        return self.keep(list(idx)).select(e, 0.0) if self.keep is not None else e

    def total(self, idx: Index) -> Expr:
        return self.sum.read(self.layout.project(idx))


@lowering("graph.softmax", "graph.log_softmax")
def lower_softmax(ctx: LoweringContext):
    x, kb = ctx.inputs[0], ctx.kb
    shape, out_dt = x.shape, ctx.out_dtype()
    dt = acc_dtype(out_dt)
    axis = norm_axis(ctx.attrs.get("axis", -1), len(shape))
    parts = SoftmaxParts(kb, shape, axis, dt, lambda i: x.read(i).cast(dt))
    if ctx.op.name == "graph.softmax":
        return [elementwise(kb, shape, out_dt, lambda *i: parts.exp(i) / parts.total(i))]
    return [elementwise(kb, shape, out_dt,
                        lambda *i: x.read(i).cast(dt) - parts.shift(i) - parts.total(i).apply("log"))]


@lowering("graph.cumsum")
def lower_cumsum(ctx: LoweringContext):
    """A sum over the scanned axis restricted to a triangle: O(n^2) per line, fine for the
    modest lengths cumsum sees in models (positions, masks).

    A float sum starts from -0.0 and the positions outside the triangle add -0.0, the IEEE
    identity of addition (``-0.0 + x == x`` for every ``x``), so a prefix of only -0.0 sums to
    -0.0 as a running sum does (``np.cumsum``, onnxruntime, ``onnx.reference``); from +0.0 it
    would be +0.0.  The empty prefix of an exclusive scan (its first position) is +0.0."""
    x, kb = ctx.inputs[0], ctx.kb
    shape, out_dt = x.shape, ctx.out_dtype()
    dt = acc_dtype(out_dt)
    axis = norm_axis(ctx.attrs["axis"], len(shape))
    exclusive, reverse = ctx.attrs.get("exclusive", False), ctx.attrs.get("reverse", False)
    n = shape[axis]

    def body(*dom):
        i, j = dom[axis], dom[-1]
        src = list(dom[:-1])
        src[axis] = j
        lo, hi = (i, j) if reverse else (j, i)        # sums positions lo <= hi (or < when exclusive)
        inside = lo < hi if exclusive else lo <= hi
        outside = 0
        if dt.is_float:
            outside = -0.0
            if exclusive:
                first = (i + 1).eq(dim_index(kb.body_builder, n)) if reverse else i.eq(0)
                outside = first.select(kb.const(0.0, dt), -0.0)
        return inside.select(x.read(src).cast(dt), outside)

    acc = kb.compute(tuple(shape) + (n,), "p" * len(shape) + "r", dt, body, "add",
                     init=-0.0 if dt.is_float else None)
    return [cast_to(kb, acc, out_dt)]
