"""Constant propagation through shape computations and splats (``shape-prop``).

``fold`` turns an op into a constant when all of its operands are constants.  Shape
arithmetic often is not that: ``gather(shape_of(x), 1)`` on ``x: tensor<?x128xf32>`` is 128
although ``shape_of(x)`` is not a constant (the batch is symbolic), and ONNX's
``ConstantOfShape`` arrives as ``expand(splat)``, a broadcast that ``fold``'s size guard
refuses because the result is larger than its input.  Three patterns cover that:

- ``partial-shape``: small integer/float tensors (shape vectors) are evaluated element by
  element with unknown entries (a symbolic dim is unknown, a static one known): data movement
  (gather, slice, concat, reshape, ...) moves known entries, elementwise ops compute where all
  their inputs are known.  An op whose result is fully known becomes a constant, and then
  ``fold`` carries on through whatever consumes it.
- ``splat-broadcast``: an elementwise op or data movement of splat constants is a splat of
  the result type, whatever its size: it is stored as one element (printed ``dense<v>``, held
  as a zero-stride array), so this cannot grow the model.
- ``iota-into-users``: an ``iota`` whose every user has only constant operands otherwise
  becomes a constant (under the fold limit), so that the users fold (GPT-2's position ids
  feeding an embedding of a constant table).

Reshapes carry their target shape as an attribute, so once the values above are constants the
frontends' reshapes are static already; what this pass removes is the arithmetic around them.
"""
from __future__ import annotations

from typing import ClassVar, Sequence

import numpy as np

from ...ir.attributes import Dense
from ...ir.core import Operation, Value
from ...ir.opdef import CONSTANT_LIKE, ELEMENTWISE, PURE
from ...ir.pass_manager import Option
from ...ir.rewrite import (DEFAULT_FOLD_LIMIT, Pattern, PatternRewriter, RewriteStats, apply_patterns_greedily,
                           constant_value)
from ...ir.types import DType, TensorType
from ..registry import register_pass
from .const_fold import with_folding
from .simplify import _GreedyPass

MAX_SHAPE_ELEMENTS = 64
"""Largest value ``partial-shape`` evaluates element by element (shape vectors are tiny)."""

MOVEMENT_OPS = frozenset({
    "graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze", "graph.transpose", "graph.slice",
    "graph.concat", "graph.expand", "graph.tile", "graph.gather", "graph.split", "graph.identity",
})
"""Ops whose every result element is one element of their data operands: they move known and
unknown entries alike (``gather``'s indices must be known)."""

_INDEX_OPERANDS = {"graph.gather": (1,)}
"""Operands that are read as values (indices), not moved."""


# ---- partial evaluation -------------------------------------------------------------------
class Partial:
    """A small tensor whose entries may be unknown: ``values`` with a ``known`` mask."""

    __slots__ = ("values", "known")

    def __init__(self, values: np.ndarray, known: np.ndarray):
        self.values, self.known = values, known

    @property
    def complete(self) -> bool:
        return bool(self.known.all())


def _small_static(t) -> bool:
    return isinstance(t, TensorType) and t.is_static and t.num_elements <= MAX_SHAPE_ELEMENTS


def partial_value(v: Value, memo: dict | None = None) -> Partial | None:
    """What is known of ``v``'s elements at compile time, or None when nothing is (or it is not
    a small static tensor).  ``memo`` caches results within one query."""
    memo = {} if memo is None else memo
    key = id(v)
    if key in memo:
        return memo[key]
    memo[key] = None                     # cycles cannot happen in SSA, but be safe
    result = _partial(v, memo) if _small_static(v.type) else None
    memo[key] = result
    return result


def _partial(v: Value, memo: dict) -> Partial | None:
    t: TensorType = v.type  # type: ignore[assignment]
    arr = constant_value(v)
    if arr is not None:
        return Partial(np.asarray(arr).reshape(t.shape), np.ones(t.shape, bool))
    op = v.op
    if op is None or op.opdef is None or PURE not in op.opdef.traits or op.regions:
        return None
    if op.name == "graph.shape_of":
        dims = op.operands[0].type.shape
        known = np.array([isinstance(d, int) for d in dims], bool)
        return Partial(np.array([d if isinstance(d, int) else 0 for d in dims], np.int64), known)
    if op.name in MOVEMENT_OPS:
        return _partial_movement(op, v.index, memo)
    if ELEMENTWISE in op.opdef.traits:
        return _partial_elementwise(op, memo)
    return None


def _operand_partials(op: Operation, memo: dict) -> list[Partial | None]:
    return [partial_value(o, memo) for o in op.operands]


def _partial_movement(op: Operation, index: int, memo: dict) -> Partial | None:
    """Runs the op on element ids instead of values: where each result element comes from."""
    parts = _operand_partials(op, memo)
    index_operands = _INDEX_OPERANDS.get(op.name, ())
    inputs, pools, offset = [], [], 0
    for i, (o, p) in enumerate(zip(op.operands, parts)):
        if i in index_operands:
            if p is None or not p.complete:
                return None
            inputs.append(p.values)
            continue
        if p is None:
            if not o.type.is_static:        # a symbolic data operand: its ids cannot be laid out
                return None
            p = Partial(np.zeros(o.type.shape, o.type.dtype.np), np.zeros(o.type.shape, bool))
        inputs.append(np.arange(offset, offset + p.values.size, dtype=np.int64).reshape(p.values.shape))
        pools.append(p)
        offset += p.values.size
    if not pools or not any(p.known.any() for p in pools):
        return None
    ids_types = [TensorType(r.type.shape, DType.i64) for r in op.results]
    try:
        ids = op.opdef.evaluate(inputs, op.attributes, ids_types)[index]
    except Exception:    # a reference that rejects these operands: nothing is known
        return None
    values = np.concatenate([p.values.reshape(-1).astype(op.results[index].type.dtype.np) for p in pools])
    known = np.concatenate([p.known.reshape(-1) for p in pools])
    return Partial(values[ids], known[ids])


def _partial_elementwise(op: Operation, memo: dict) -> Partial | None:
    """Computes every element, then keeps those whose inputs were all known."""
    parts = _operand_partials(op, memo)
    if all(p is None for p in parts):
        return None
    shape = op.results[0].type.shape
    inputs, known = [], np.ones(shape, bool)
    for o, p in zip(op.operands, parts):
        if p is None:
            p = Partial(np.ones(o.type.shape, o.type.dtype.np), np.zeros(o.type.shape, bool))
        vals = np.where(p.known, p.values, np.ones((), p.values.dtype))   # harmless stand-ins
        inputs.append(vals.astype(o.type.dtype.np, copy=False))
        known &= np.broadcast_to(p.known, shape)
    if not known.any():
        return None
    try:
        with np.errstate(all="ignore"):
            (out,) = op.opdef.evaluate(inputs, op.attributes, [op.results[0].type])
    except Exception:
        return None
    return Partial(np.asarray(out).reshape(shape), known)


# ---- patterns -----------------------------------------------------------------------------
def _materialize(rewriter: PatternRewriter, op: Operation, arrays: Sequence[np.ndarray]) -> None:
    values = [rewriter.constant(Dense(a, r.type.dtype)) for a, r in zip(arrays, op.results)]
    rewriter.replace_op(op, values)


class PartialShape(Pattern):
    """An op whose small result is fully known from partially known operands becomes a constant."""

    name = "partial-shape"

    def match_and_rewrite(self, op, rewriter):
        d = op.opdef
        if d is None or PURE not in d.traits or CONSTANT_LIKE in d.traits or op.regions or not op.operands:
            return False
        if not all(_small_static(r.type) for r in op.results):
            return False
        if op.name not in MOVEMENT_OPS and ELEMENTWISE not in d.traits:
            return False
        memo: dict = {}
        parts = [partial_value(r, memo) for r in op.results]
        if any(p is None or not p.complete for p in parts):
            return False
        _materialize(rewriter, op, [p.values for p in parts])
        return True


SPLAT_MOVEMENT = frozenset({
    "graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze", "graph.transpose", "graph.slice",
    "graph.expand", "graph.tile", "graph.identity",
})
"""Data movement that maps a splat to a splat (concat and gather could mix several values)."""


def splat_scalar(v: Value) -> np.ndarray | None:
    """The single value of a splat constant as a 0-d array, else None."""
    arr = constant_value(v)
    if arr is None or arr.size == 0:
        return None
    first = arr.flat[0]
    if arr.size > 1 and not all(s == 0 for s in arr.strides):       # a zero-stride view is a splat
        if arr.flat[-1] != first or not (arr == first).all():     # cheap rejection first
            return None
    return np.asarray(first)


def splat_dense(value: np.ndarray, t: TensorType) -> Dense:
    """A splat of ``t`` held as a zero-stride view: one element of memory whatever the shape."""
    scalar = np.asarray(value).astype(t.dtype.np)
    return Dense(np.broadcast_to(scalar, t.shape), t.dtype)


class SplatBroadcast(Pattern):
    """Elementwise ops and data movement of splat constants give a splat of the result type."""

    name = "splat-broadcast"
    benefit = 101          # before const-fold, which would store every element

    def match_and_rewrite(self, op, rewriter):
        d = op.opdef
        if d is None or PURE not in d.traits or CONSTANT_LIKE in d.traits or not op.operands or op.regions:
            return False
        elementwise = ELEMENTWISE in d.traits
        if not elementwise and op.name not in SPLAT_MOVEMENT:
            return False
        types = [r.type for r in op.results]
        if len(types) != 1 or not isinstance(types[0], TensorType) or not types[0].is_static:
            return False
        scalars = [splat_scalar(o) for o in op.operands]
        if any(s is None for s in scalars):
            return False
        if elementwise:
            scalar_types = [TensorType((), t.dtype) for t in types]
            try:
                with np.errstate(all="ignore"):
                    (value,) = d.evaluate([s.astype(o.type.dtype.np) for s, o in zip(scalars, op.operands)],
                                          op.attributes, scalar_types)
            except Exception:
                return False
        else:
            value = scalars[0]
        if types[0].num_elements == 0:
            return False
        rewriter.replace_op(op, [rewriter.constant(splat_dense(value, types[0]))])
        return True


class IotaIntoUsers(Pattern):
    """``iota`` becomes a constant when that lets every one of its users fold."""

    name = "iota-into-users"
    root = ("graph.iota",)

    def __init__(self, fold_limit: int = DEFAULT_FOLD_LIMIT):
        super().__init__()
        self.fold_limit = fold_limit

    def match_and_rewrite(self, op, rewriter):
        t = op.results[0].type
        users = op.results[0].users
        if not users or not t.is_static or t.num_elements > self.fold_limit:
            return False
        for user in users:
            if user.opdef is None or PURE not in user.opdef.traits:
                return False
            if any(o is not op.results[0] and constant_value(o) is None for o in user.operands):
                return False
        (arr,) = op.opdef.evaluate([], op.attributes, [t])
        rewriter.replace_op(op, [rewriter.constant(Dense(arr, t.dtype))])
        return True


def shape_prop_patterns(fold_limit: int = DEFAULT_FOLD_LIMIT) -> list[Pattern]:
    return [PartialShape(), SplatBroadcast(), IotaIntoUsers(fold_limit)]


def propagate_shapes(root: Operation, *, fold_limit: int = DEFAULT_FOLD_LIMIT,
                     max_iterations: int = 10) -> RewriteStats:
    """The three patterns above plus (guarded) constant folding, to a fixpoint."""
    return apply_patterns_greedily(root, with_folding(shape_prop_patterns(fold_limit), fold_limit), fold=False,
                                   max_iterations=max_iterations)


@register_pass
class ShapePropPass(_GreedyPass):
    name = "shape-prop"
    summary = "constant propagation through shape computations, splats and iota (with folding)"
    options: ClassVar[dict[str, Option]] = {
        "limit": Option(DEFAULT_FOLD_LIMIT, "largest folded result (elements) allowed to grow the IR"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(propagate_shapes(module, fold_limit=self.limit, max_iterations=self.max_iterations))


__all__ = ["MAX_SHAPE_ELEMENTS", "Partial", "PartialShape", "ShapePropPass", "SplatBroadcast", "IotaIntoUsers",
           "partial_value", "propagate_shapes", "shape_prop_patterns", "splat_dense", "splat_scalar"]
