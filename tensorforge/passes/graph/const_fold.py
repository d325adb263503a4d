"""Constant folding that never grows the model by more than a bound (``const-fold``).

The greedy driver's own folding (``fold``) refuses a result above ``fold_limit`` elements only
when it is bigger than its constant inputs.  That misses the case that matters for model size:
an input that *stays* in the model because other ops use it too.  GPT-2 ties its LM head to
the token embedding; folding ``transpose(embedding_table)`` for the head's matmul adds a
second 147 MiB copy of the table (+28% weights), where keeping the transpose (or, after
``simplify-extra``, a GEMM with ``trans_b``) costs nothing.

``GuardedFold`` counts what folding an op really adds: the result's bytes minus the bytes of
the constant operands that die with it (this op is their only user).  It folds when that
growth is at most ``limit`` elements' worth; re-laying out a weight only this op reads is
free, duplicating a shared one is not.  (Splat broadcasts are ``shape-prop``'s: a splat is
stored as one element whatever its shape.)

Every pass of this package that folds uses ``GuardedFold`` (the driver's ``fold`` is off); the
default pipeline starts with ``const-fold`` instead of ``fold``.  The same test belongs in
``rewrite.py``'s ``_try_fold``; until it moves there it lives here.
"""
from __future__ import annotations

from typing import ClassVar, Sequence


from ...ir.core import Operation
from ...ir.pass_manager import Option
from ...ir.rewrite import (DEFAULT_FOLD_LIMIT, Pattern, RewriteStats, apply_patterns_greedily, constant_value,
                           fold_into_constants)
from ..registry import register_pass
from .simplify import _GreedyPass


def fold_growth(op: Operation) -> int:
    """Bytes folding ``op`` adds to the model: its results minus the constant operands only it reads."""
    added = sum(r.type.nbytes for r in op.results)
    freed, seen = 0, set()
    for v in op.operands:
        if id(v) in seen or constant_value(v) is None:
            continue
        seen.add(id(v))
        if all(user is op for user, _ in v.uses):
            freed += v.type.nbytes
    return added - freed


class GuardedFold(Pattern):
    """Folds a pure op through its definition's ``fold`` hook unless that grows the model by more
    than ``limit`` elements (of the result's element type)."""

    name = "const-fold"
    benefit = 100          # before any rewrite, as the driver's own folding would be

    def __init__(self, limit: int = DEFAULT_FOLD_LIMIT):
        super().__init__()
        self.limit = limit

    def match_and_rewrite(self, op, rewriter):
        return fold_into_constants(op, rewriter, self._allow)

    def _allow(self, op: Operation, consts: list) -> bool:
        itemsize = max(r.type.dtype.itemsize for r in op.results)
        return fold_growth(op) <= self.limit * itemsize          # decided before anything is computed


def with_folding(patterns: Sequence[Pattern], limit: int = DEFAULT_FOLD_LIMIT) -> list[Pattern]:
    """``patterns`` plus ``GuardedFold``: what this package's passes give the greedy driver (with
    the driver's own folding off)."""
    return [GuardedFold(limit), *patterns]


def fold_guarded(root: Operation, *, limit: int = DEFAULT_FOLD_LIMIT, max_iterations: int = 10) -> RewriteStats:
    return apply_patterns_greedily(root, with_folding((), limit), fold=False, max_iterations=max_iterations)


@register_pass
class ConstFoldPass(_GreedyPass):
    name = "const-fold"
    summary = "constant folding that never grows the model by more than `limit` elements"
    options: ClassVar[dict[str, Option]] = {
        "limit": Option(DEFAULT_FOLD_LIMIT, "most elements one fold may add to the model"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(fold_guarded(module, limit=self.limit, max_iterations=self.max_iterations))


__all__ = ["ConstFoldPass", "GuardedFold", "fold_growth", "fold_guarded", "with_folding"]
