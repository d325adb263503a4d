"""Shape vectors whose entries may be symbolic dims: ``[batch, 128, 12, 64]``.

A dynamic-axes export with a dim left unbound computes reshape and expand targets from
``Shape`` of tensors whose shapes hold symbols.  Such a vector cannot fold to a constant, but
each entry is either a number or exactly one symbolic dim, which ``graph.reshape`` and
``graph.expand`` accept as attributes.  This module follows the chain: data movement moves
entries, element-wise ops compute entries whose operands are numbers and apply the identities
that hold for any size (``d * 1 = d``, ``d == -1`` is false because sizes are non-negative,
``where`` with a known condition picks a side).  Anything else is unknown (None).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...ir.core import Value
from ...ir.types import Dim, TensorType

SAME_ELEMENTS = frozenset({"graph.identity", "graph.reshape", "graph.flatten", "graph.squeeze",
                           "graph.unsqueeze", "graph.cast"})
"""Ops that keep the (at most one-dimensional) vector's entries as they are."""

Entry = Dim
ValueOf = Callable[[Value], "np.ndarray | None"]


def symbolic_vector(v: Value, value_of: ValueOf) -> list[Entry] | None:
    """``v`` (0-d or 1-d, integer or bool) as a list of ints and symbol names, or None when some
    entry is neither; ``value_of`` gives import-time constants."""
    arr = value_of(v)
    if arr is not None:
        arr = np.asarray(arr)
        return [int(a) for a in arr.reshape(-1)] if arr.ndim <= 1 and arr.dtype.kind in "iub" else None
    op = v.op
    if op is None or len(v.type.shape) > 1:
        return None
    name, a = op.name, op.attributes
    if name == "graph.shape_of":
        return list(op.operands[0].type.shape)
    if name in SAME_ELEMENTS:
        return symbolic_vector(op.operands[0], value_of)
    if name == "graph.concat":
        parts = [symbolic_vector(o, value_of) for o in op.operands]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if name == "graph.gather":
        src, idx = symbolic_vector(op.operands[0], value_of), value_of(op.operands[1])
        if src is None or idx is None or len(op.operands[0].type.shape) != 1:
            return None
        return [src[int(i)] for i in np.asarray(idx).reshape(-1)]
    if name == "graph.slice" and tuple(a["axes"]) == (0,):
        src = symbolic_vector(op.operands[0], value_of)
        return None if src is None else src[slice(a["starts"][0], a["ends"][0], a["steps"][0])]
    if op.opdef is not None and name in _IDENTITIES:
        return _elementwise(op, v, value_of)
    return None


def _elementwise(op, v: Value, value_of: ValueOf) -> list[Entry] | None:
    args = [symbolic_vector(o, value_of) for o in op.operands]
    if any(x is None for x in args):
        return None
    size = v.type.shape[0] if v.type.shape else 1
    if not isinstance(size, int) or any(len(x) not in (1, size) for x in args):
        return None
    out: list[Entry] = []
    for i in range(size):
        row = [x[i] if len(x) > 1 else x[0] for x in args]
        entry = _numeric(op, row) if all(isinstance(e, int) for e in row) else _IDENTITIES[op.name](*row)
        if entry is None:
            return None
        out.append(entry)
    return out


def _numeric(op, row: list[int]) -> int | None:
    """The op on number entries, by its reference semantics (integer division, comparisons...)."""
    inputs = [np.asarray(e, dtype=o.type.dtype.np) for e, o in zip(row, op.operands)]
    try:
        (res,) = op.opdef.evaluate(inputs, op.attributes, [TensorType((), op.results[0].type.dtype)])
    except Exception:  # a reference that rejects these operands: unknown
        return None
    return int(np.asarray(res))


def _neg(x) -> bool:
    return isinstance(x, int) and x < 0


_IDENTITIES: dict[str, Callable[..., Entry | None]] = {
    "graph.mul": lambda a, b: b if a == 1 else a if b == 1 else 0 if 0 in (a, b) else None,
    "graph.add": lambda a, b: b if a == 0 else a if b == 0 else None,
    "graph.sub": lambda a, b: a if b == 0 else 0 if a == b else None,
    "graph.div": lambda a, b: a if b == 1 else None,
    "graph.eq": lambda a, b: 1 if a == b else 0 if _neg(a) or _neg(b) else None,
    "graph.ne": lambda a, b: 0 if a == b else 1 if _neg(a) or _neg(b) else None,
    "graph.max": lambda a, b: b if a == b or (isinstance(a, int) and a <= 0) else
                              a if isinstance(b, int) and b <= 0 else None,
    "graph.select": lambda c, a, b: (a if c else b) if isinstance(c, int) else a if a == b else None,
}
"""Rules for rows with a symbol, valid for every size >= 0; None: unknown."""


__all__ = ["symbolic_vector"]
