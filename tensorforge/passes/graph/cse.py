"""Common subexpression elimination: one walk, one hash table per scope.

Two pure ops are the same computation when their ``op_key`` (name, operands, attributes,
result types) is equal.  Constants merge by content, bit for bit (``-0.0`` is not ``0.0``), but
are keyed by their type and a few sampled elements rather than a hash of all their data: a
model's weights are most of its bytes and nearly all of them are unique, so only constants
that already agree on type and sample are compared in full.  Operands of commutative ops are
keyed as an unordered pair.

The first op in program order survives (it dominates the others in its scope); values of an
outer scope are visible in nested regions but not the other way round, and each function
(``IS_SYMBOL``) starts an empty table.
"""
from __future__ import annotations

import numpy as np

from ...ir.attributes import Dense, attr_key
from ...ir.core import Block, Operation, op_key
from ...ir.opdef import COMMUTATIVE, CONSTANT_LIKE, IS_SYMBOL, PURE, TERMINATOR
from ...ir.pass_manager import Pass
from ..registry import register_pass


def _key(op: Operation) -> tuple:
    key = op_key(op)
    if COMMUTATIVE in op.opdef.traits:
        key = (key[0], tuple(sorted(key[1])), *key[2:])
    return key


_SAMPLES = 16


class _Scope:
    """Values visible at a point: this region's table, then the enclosing ones."""

    __slots__ = ("table", "parent")

    def __init__(self, parent: "_Scope | None" = None):
        self.table: dict = {}
        self.parent = parent

    def get(self, key, default=None):
        scope = self
        while scope is not None:
            found = scope.table.get(key)
            if found is not None:
                return found
            scope = scope.parent
        return default


def _constant_key(op: Operation, dense: Dense) -> tuple:
    """Type plus sampled elements; for small constants the sample is all of the data."""
    arr = dense.array
    if arr.size <= _SAMPLES:
        data = arr.tobytes()
    else:
        flat = arr.reshape(-1)
        data = flat[:: flat.size // _SAMPLES][:_SAMPLES].tobytes() + flat[-1:].tobytes()
    others = tuple(sorted((k, attr_key(v)) for k, v in op.attributes.items() if k != "value"))
    return ("constant", op.name, dense.type, data, others)


def _same_bits(a: Dense, b: Dense) -> bool:
    if a is b or a.array.size <= _SAMPLES:      # small: the key held every byte
        return True
    return np.array_equal(np.ascontiguousarray(a.array).view(np.uint8),
                          np.ascontiguousarray(b.array).view(np.uint8))


def _merge(op: Operation, first: Operation) -> None:
    for old, new in zip(op.results, first.results):
        if new.name_hint is None:
            new.name_hint = old.name_hint
        old.replace_all_uses_with(new)
    op.erase()


def _cse_constant(op: Operation, dense: Dense, scope: _Scope) -> bool:
    """Merges ``op`` into an earlier constant with the same bits; True if it did."""
    key = _constant_key(op, dense)
    seen = scope.get(key, ())
    for first in seen:
        if _same_bits(first.attributes["value"], dense):
            _merge(op, first)
            return True
    scope.table[key] = [*seen, op]    # a new list: inner scopes never add to outer ones
    return False


def _cse_block(block: Block, scope: _Scope) -> int:
    merged = 0
    for op in block:
        if op.regions:
            for region in op.regions:
                for inner in region.blocks:
                    merged += _cse_block(inner, _Scope(None if op.has_trait(IS_SYMBOL) else scope))
            continue
        d = op.opdef
        if d is None or PURE not in d.traits or TERMINATOR in d.traits:
            continue
        dense = op.attributes.get("value")
        if CONSTANT_LIKE in d.traits and isinstance(dense, Dense):
            merged += _cse_constant(op, dense, scope)
            continue
        key = _key(op)
        first = scope.get(key)
        if first is None:
            scope.table[key] = op
            continue
        _merge(op, first)
        merged += 1
    return merged


def eliminate_common_subexpressions(root: Operation) -> int:
    """Merges duplicate pure ops under ``root``; returns how many were removed."""
    return sum(_cse_block(block, _Scope()) for region in root.regions for block in region.blocks)


@register_pass
class CSEPass(Pass):
    name = "cse"
    summary = "merge pure ops that compute the same value (equal constants included)"

    merged: int = 0

    def run(self, module):
        self.merged = eliminate_common_subexpressions(module)
        return self.merged > 0


__all__ = ["CSEPass", "eliminate_common_subexpressions"]
