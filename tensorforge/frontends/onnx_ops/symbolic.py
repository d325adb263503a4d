"""Shape vectors whose entries are dim expressions: ``[batch, 128*seq, 12, 64]``.

A dynamic-axes export computes reshape, expand, slice and range operands from ``Shape`` of
tensors whose shapes hold symbols.  Such a vector cannot fold to a constant, but each entry is a
number or a dim expression of ``tensorforge.ir.symbolic`` (``"batch"``, ``"batch*seq"``,
``"seq-1"``, ``"(seq+1)//2"``), which ``graph.reshape``/``graph.expand`` (``shape``),
``graph.slice`` (``starts``/``ends``) and ``graph.iota`` (``size``) take as attributes.  This
module follows the chain: data movement moves entries; integer arithmetic on entries is exact
polynomial arithmetic (``dim_mul``, ``dim_add``...), division and modulo by a positive constant
are floor division where the dividend is provably non-negative (ONNX's integer Div truncates,
which agrees there); comparisons, ``max``/``min`` and ``where`` are decided when the symbols'
ranges decide them (sizes are never negative, so ``seq == -1`` is false).  Anything else is
unknown (None), and the operand needs concrete sizes.

``interval`` bounds a dim under the symbols' ranges; the importer uses it to prove that a
symbolic slice end stays inside its axis.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...errors import ShapeError
from ...ir.core import Value
from ...ir.symbolic import (as_dim, as_expr, dim_add, dim_exact_div, dim_floordiv, dim_max, dim_min, dim_mod,
                            dim_mul, dim_prod, dim_sub, dims_equal)
from ...ir.types import Dim, DType, TensorType

SAME_ELEMENTS = frozenset({"graph.identity", "graph.reshape", "graph.flatten", "graph.squeeze",
                           "graph.unsqueeze"})
"""Ops that keep the (at most one-dimensional) vector's entries as they are."""

Entry = Dim
ValueOf = Callable[[Value], "np.ndarray | None"]
Range = tuple  # (lo | None, hi | None): None is unbounded on that side
RangeOf = Callable[[str], Range]


def _no_ranges(_: str) -> Range:
    return (0, None)          # a size: never negative


# ---- bounds of a dim under the symbols' ranges ---------------------------------------------------

def interval(d: Dim, range_of: RangeOf = _no_ranges) -> Range:
    """``(lo, hi)`` bounds of ``d`` for every allowed value of its symbols (None: unbounded)."""
    if isinstance(d, int):
        return (d, d)
    return _expr_interval(as_expr(d), range_of)


def _expr_interval(e, range_of: RangeOf) -> Range:
    lo, hi = 0, 0
    for mono, c in e.terms.items():
        mlo, mhi = 1, 1
        for atom, power in mono:
            alo, ahi = _atom_interval(atom, range_of)
            if alo is None or alo < 0:
                return (None, None)            # products of signed factors: not bounded here
            mlo = mlo * alo ** power
            mhi = None if mhi is None or ahi is None else mhi * ahi ** power
            if alo == 0 and ahi == 0:
                mlo, mhi = 0, 0
                break
        tlo, thi = (c * mlo, None if mhi is None else c * mhi) if c > 0 else \
                   (None if mhi is None else c * mhi, c * mlo)
        lo = None if lo is None or tlo is None else lo + tlo
        hi = None if hi is None or thi is None else hi + thi
    return (lo, hi)


def _atom_interval(atom, range_of: RangeOf) -> Range:
    if isinstance(atom, str):
        return range_of(atom)
    op, x, y = atom
    xlo, xhi = _expr_interval(x, range_of)
    if op in ("//", "%"):
        if y <= 0:
            return (None, None)
        if op == "%":
            return (0, y - 1)
        return (None if xlo is None else xlo // y, None if xhi is None else xhi // y)
    ylo, yhi = _expr_interval(y, range_of)
    if op == "min":
        return (None if xlo is None or ylo is None else min(xlo, ylo),
                yhi if xhi is None else xhi if yhi is None else min(xhi, yhi))
    return (xlo if ylo is None else ylo if xlo is None else max(xlo, ylo),
            None if xhi is None or yhi is None else max(xhi, yhi))


def provably_le(a: Dim, b: Dim, range_of: RangeOf = _no_ranges) -> bool:
    """``a <= b`` for every allowed value of the symbols."""
    if dims_equal(a, b):
        return True
    lo, _ = interval(dim_sub(b, a), range_of)
    return lo is not None and lo >= 0


def provably_nonneg(d: Dim, range_of: RangeOf = _no_ranges) -> bool:
    lo, _ = interval(d, range_of)
    return lo is not None and lo >= 0


# ---- the vector walk -------------------------------------------------------------------------------

def symbolic_vector(v: Value, value_of: ValueOf, range_of: RangeOf = _no_ranges) -> list[Entry] | None:
    """``v`` (0-d or 1-d, integer or bool) as a list of ints and dim expressions, or None when
    some entry is neither; ``value_of`` gives import-time constants, ``range_of`` the ranges of
    the symbols (lo, hi)."""
    return _Walker(value_of, range_of).vector(v)


class _Walker:
    def __init__(self, value_of: ValueOf, range_of: RangeOf):
        self.value_of, self.range_of = value_of, range_of
        self.memo: dict[Value, list[Entry] | None] = {}

    def vector(self, v: Value) -> list[Entry] | None:
        if v in self.memo:
            return self.memo[v]
        self.memo[v] = None                   # a cycle is impossible in SSA, but stay safe
        try:
            out = self._vector(v)
        except ShapeError:                    # e.g. a division the dims cannot express
            out = None
        self.memo[v] = out
        return out

    def _vector(self, v: Value) -> list[Entry] | None:
        arr = self.value_of(v)
        if arr is not None:
            arr = np.asarray(arr)
            if arr.ndim > 1 or arr.dtype.kind not in "iubf":
                return None
            if arr.dtype.kind == "f" and not (np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))):
                return None                    # a fraction: not a size
            return [int(a) for a in arr.reshape(-1)]
        op = v.op
        if op is None or len(v.type.shape) > 1:
            return None
        if getattr(v.type, "dtype", None) is None:
            return None
        name, a = op.name, op.attributes
        if name == "graph.shape_of":
            return list(op.operands[0].type.shape)
        if name in SAME_ELEMENTS:
            return self.vector(op.operands[0])
        if name == "graph.cast":
            return self._cast(op, v)
        if name == "graph.concat":
            parts = [self.vector(o) for o in op.operands]
            return None if any(p is None for p in parts) else [d for p in parts for d in p]
        if name == "graph.gather":
            src, idx = self.vector(op.operands[0]), self.value_of(op.operands[1])
            if src is None or idx is None or len(op.operands[0].type.shape) != 1:
                return None
            return [src[int(i)] for i in np.asarray(idx).reshape(-1)]
        if name == "graph.slice" and tuple(a["axes"] or (0,)) == (0,):
            start, end = a["starts"][0], a["ends"][0]
            step = (a["steps"] or (1,))[0]
            src = self.vector(op.operands[0])
            if src is None or not isinstance(start, int) or not isinstance(end, int):
                return None
            return src[slice(start, end, step)]
        if name in ("graph.reduce_prod", "graph.reduce_sum") and len(op.operands[0].type.shape) == 1:
            src = self.vector(op.operands[0])
            if src is None:
                return None
            if name == "graph.reduce_prod":
                return [dim_prod(src)]
            total: Dim = 0
            for d in src:
                total = dim_add(total, d)
            return [total]
        if name in _RULES:
            return self._elementwise(op, v)
        return None

    def _cast(self, op, v: Value) -> list[Entry] | None:
        src = self.vector(op.operands[0])
        if src is None:
            return None
        to = v.type.dtype
        if to is DType.bool:
            out = []
            for d in src:
                if isinstance(d, int):
                    out.append(int(bool(d)))
                else:
                    lo, _ = interval(d, self.range_of)
                    if lo is None or lo < 1:
                        return None
                    out.append(1)
            return out
        # int -> int or int -> float: sizes are small integers, exact in either
        return src

    def _elementwise(self, op, v: Value) -> list[Entry] | None:
        args = [self.vector(o) for o in op.operands]
        if any(x is None for x in args):
            return None
        size = v.type.shape[0] if v.type.shape else 1
        if not isinstance(size, int) or any(len(x) not in (1, size) for x in args):
            return None
        floats = any(o.type.dtype.is_float for o in op.operands)
        out: list[Entry] = []
        for i in range(size):
            row = [x[i] if len(x) > 1 else x[0] for x in args]
            if all(isinstance(e, int) for e in row):
                entry = _numeric(op, row)
            else:
                entry = _RULES[op.name](self, floats, *row)
            if entry is None:
                return None
            out.append(entry)
        return out

    # ---- rules for rows with a symbolic entry (valid for every allowed value of the symbols) ----
    def le(self, a: Dim, b: Dim) -> bool:
        return provably_le(a, b, self.range_of)

    def compare(self, a: Dim, b: Dim) -> int | None:
        """-1, 0 or 1 when the order of a and b is decided, else None."""
        if dims_equal(a, b):
            return 0
        if self.le(dim_add(a, 1), b):
            return -1
        if self.le(dim_add(b, 1), a):
            return 1
        return None

    def nonneg(self, d: Dim) -> bool:
        return provably_nonneg(d, self.range_of)


def _div(w: _Walker, floats: bool, a: Dim, b: Dim) -> Dim | None:
    q = dim_exact_div(a, b) if b != 0 else None
    if q is not None:
        return q
    if floats:
        return None                    # a true division of sizes: not an integer in general
    if isinstance(b, int) and b > 0 and w.nonneg(a):
        return dim_floordiv(a, b)      # trunc == floor for a non-negative dividend
    return None


def _mod(w: _Walker, floats: bool, a: Dim, b: Dim) -> Dim | None:
    if floats or not (isinstance(b, int) and b > 0):
        return None
    return dim_mod(a, b)


def _minmax(fn, pick_first_if_le: bool):
    def rule(w: _Walker, floats: bool, a: Dim, b: Dim) -> Dim:
        if w.le(a, b):
            return a if pick_first_if_le else b
        if w.le(b, a):
            return b if pick_first_if_le else a
        return fn(a, b)
    return rule


def _cmp(test):
    def rule(w: _Walker, floats: bool, a: Dim, b: Dim) -> int | None:
        order = w.compare(a, b)
        return None if order is None else int(test(order))
    return rule


def _select(w: _Walker, floats: bool, c: Dim, a: Dim, b: Dim) -> Dim | None:
    if isinstance(c, int):
        return a if c else b
    if dims_equal(a, b):
        return a
    lo, _ = interval(c, w.range_of)
    return a if lo is not None and lo >= 1 else None


_RULES: dict[str, Callable[..., Entry | None]] = {
    "graph.mul": lambda w, f, a, b: dim_mul(a, b),
    "graph.add": lambda w, f, a, b: dim_add(a, b),
    "graph.sub": lambda w, f, a, b: dim_sub(a, b),
    "graph.neg": lambda w, f, a: as_dim(-as_expr(a)),
    "graph.div": _div,
    "graph.mod": _mod,
    "graph.max": _minmax(dim_max, False),
    "graph.min": _minmax(dim_min, True),
    "graph.eq": _cmp(lambda o: o == 0),
    "graph.ne": _cmp(lambda o: o != 0),
    "graph.lt": _cmp(lambda o: o < 0),
    "graph.le": _cmp(lambda o: o <= 0),
    "graph.gt": _cmp(lambda o: o > 0),
    "graph.ge": _cmp(lambda o: o >= 0),
    "graph.select": _select,
}
"""Rules for rows with a symbolic entry; None: unknown."""


def _numeric(op, row: list[int]) -> int | None:
    """The op on number entries, by its reference semantics (integer division, comparisons...)."""
    inputs = [np.asarray(e).astype(o.type.dtype.np) for e, o in zip(row, op.operands)]
    try:
        (res,) = op.opdef.evaluate(inputs, op.attributes, [TensorType((), op.results[0].type.dtype)])
    except Exception:  # a reference that rejects these operands: unknown
        return None
    res = np.asarray(res)
    if res.dtype.kind == "f":
        if not np.isfinite(res) or float(res) != int(res):
            return None
    return int(res)


def ranges_of(table) -> RangeOf:
    """A ``range_of`` over a ``SymbolTable`` (unknown symbols, e.g. data-dependent counts: >= 0)."""
    def range_of(name: str) -> Range:
        r = table.ranges.get(name)
        if r is None:
            return (0, None)
        return (r.lo, r.hi)
    return range_of


__all__ = ["interval", "provably_le", "provably_nonneg", "ranges_of", "symbolic_vector"]
