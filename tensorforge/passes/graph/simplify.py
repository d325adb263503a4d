"""Algebraic simplification and constant folding of the graph dialect.

The rules are data (``tensorforge.ir.rules``): each reads like the identity it applies, and
each fires only when the replacement keeps the matched value's type (see ``rules.py``), so
``x + 0`` stays when the zero broadcasts ``x`` to a bigger shape.  Rules that are exact in
integer arithmetic but not in IEEE floats (``x * 0 -> 0``: NaN and inf) say so in ``where``.
No rule changes a float result: ``x * (1/y) -> x / y`` is not here, as ``1/y`` overflows for a
denormal ``y`` (``1e-40 * (1 / 1e-40)`` is inf in IEEE arithmetic and in onnxruntime, ``1e-40 /
1e-40`` is 1; fuzzer seed 11111), and a reciprocal of a broadcast row statistic (a norm's
``1 / sqrt(var + eps)``) is cheaper than a division per element anyway.

``simplify`` runs the rules and the ops' fold hooks with the greedy driver; ``fold`` runs the
fold hooks alone.
"""
from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

from ...ir.core import Operation
from ...ir.pass_manager import Option, Pass
from ...ir.rewrite import DEFAULT_FOLD_LIMIT, Pattern, RewriteStats, apply_patterns_greedily
from ...ir.rules import Rule, rule, rules_to_patterns
from ..registry import register_pass

SIMPLIFY_RULES: list[Rule] = [
    # additive and multiplicative identities
    rule("add-zero", "add(x, 0)", "x"),
    rule("zero-add", "add(0, x)", "x"),
    rule("sub-zero", "sub(x, 0)", "x"),
    rule("mul-one", "mul(x, 1)", "x"),
    rule("one-mul", "mul(1, x)", "x"),
    rule("div-one", "div(x, 1)", "x"),
    rule("pow-one", "pow(x, 1)", "x"),
    rule("mul-zero-int", "mul(x, 0)", "0", where="is_int(x)"),
    rule("zero-mul-int", "mul(0, x)", "0", where="is_int(x)"),
    rule("sub-self-int", "sub(x, x)", "0", where="is_int(x)"),
    # negation and reciprocals
    rule("neg-neg", "neg(neg(x))", "x"),
    rule("sub-neg", "sub(x, neg(y))", "add(x, y)"),
    # idempotent and no-op ops
    rule("identity", "identity(x)", "x"),
    rule("max-self", "max(x, x)", "x"),
    rule("min-self", "min(x, x)", "x"),
    rule("select-same", "select(c, x, x)", "x"),
    rule("cast-noop", "cast(x, dtype=d)", "x"),
    rule("cast-cast-exact", "cast(cast(x, dtype=a), dtype=b)", "cast(x, dtype=b)",
         where="lossless(dtype(x), a)"),
    # data movement
    rule("transpose-identity", "transpose(x, perm=p)", "x", where="is_identity(p)"),
    rule("transpose-transpose", "transpose(transpose(x, perm=p), perm=q)", "transpose(x, perm=compose(p, q))"),
    rule("reshape-noop", "reshape(x, shape=s)", "x"),
    rule("reshape-reshape", "reshape(reshape(x, shape=s), shape=t)", "reshape(x, shape=t)"),
    rule("squeeze-unsqueeze", "squeeze(unsqueeze(x, axes=a), axes=b)", "x"),
    rule("unsqueeze-squeeze", "unsqueeze(squeeze(x, axes=a), axes=b)", "x"),
    rule("concat-single", "concat(x, axis=a)", "x"),
]
"""The rules of ``simplify``.  Data movement pairs (reshape, squeeze/unsqueeze) reduce to ``x``
when the types say so because they never reorder elements."""


@lru_cache(maxsize=1)
def simplify_patterns() -> tuple[Pattern, ...]:
    return tuple(rules_to_patterns(SIMPLIFY_RULES))


def simplify(root: Operation, *, fold: bool = True, fold_limit: int = DEFAULT_FOLD_LIMIT,
             max_iterations: int = 10) -> RewriteStats:
    """Applies ``SIMPLIFY_RULES`` (and constant folding) under ``root`` until nothing changes."""
    return apply_patterns_greedily(root, simplify_patterns(), fold=fold, fold_limit=fold_limit,
                                   max_iterations=max_iterations)


def fold_constants(root: Operation, *, fold_limit: int = DEFAULT_FOLD_LIMIT,
                   max_iterations: int = 10) -> RewriteStats:
    """Constant folding alone: every op whose fold hook gives values becomes constants."""
    return apply_patterns_greedily(root, (), fold=True, fold_limit=fold_limit, max_iterations=max_iterations)


class _GreedyPass(Pass):
    """Shared by ``simplify`` and ``fold``: keeps the driver's statistics of the last run."""

    stats: RewriteStats | None = None

    def _finish(self, stats: RewriteStats) -> bool:
        self.stats = stats
        return stats.changed


@register_pass
class SimplifyPass(_GreedyPass):
    name = "simplify"
    summary = "algebraic simplification (rules in SIMPLIFY_RULES) plus constant folding"
    options: ClassVar[dict[str, Option]] = {
        "fold": Option(True, "also fold ops whose operands are constants"),
        "limit": Option(DEFAULT_FOLD_LIMIT, "largest folded result (elements) allowed to grow the IR"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(simplify(module, fold=self.fold, fold_limit=self.limit,
                                     max_iterations=self.max_iterations))


@register_pass
class FoldPass(_GreedyPass):
    name = "fold"
    summary = "constant folding through the ops' fold hooks"
    options: ClassVar[dict[str, Option]] = {
        "limit": Option(DEFAULT_FOLD_LIMIT, "largest folded result (elements) allowed to grow the IR"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(fold_constants(module, fold_limit=self.limit, max_iterations=self.max_iterations))


__all__ = ["FoldPass", "SIMPLIFY_RULES", "SimplifyPass", "fold_constants", "simplify", "simplify_patterns"]
