"""More algebraic simplification: the rules ``simplify`` lacks, and the pass that runs both sets.

``EXTRA_RULES`` are declarative rules (``tensorforge.ir.rules``) in four groups:

- canonical forms that let other rules and the inference folds see through the frontends'
  spellings: constants on the right of ``add``/``mul``, ``x - c`` as ``x + (-c)``, ``x / c`` as
  ``x * (1/c)`` for a float splat ``c``, a reshape that only adds or drops unit dims as
  ``unsqueeze``/``squeeze`` (BROADCAST for fusion, where a reshape is INJECTIVE);
- constant reassociation (``(x * a) * b -> x * (a*b)``, ``(x + a) + b``, ``(x + a) * b ->
  x*b + a*b``): a chain of per-channel scales and shifts (a decomposed BatchNorm followed by
  a frontend's own scale/shift) collapses to one multiply and one add.  These change rounding
  (one product instead of two), by an ulp or so;
- removals: idempotent ``relu``/``abs``, no-op ``slice``/``expand``/``tile``/``pad``, nested
  ``unsqueeze``, negations that cancel, integer cast chains;
- ``pad-into-conv``: a zero ``pad`` of the spatial dims becomes the conv's own padding;
- a transposed matrix operand of ``gemm``/``matmul`` becomes the GEMM's ``trans_a``/``trans_b``.

Every rule fires only when the replacement has exactly the matched value's type (see
``rules.py``).  ``simplify-extra`` runs ``SIMPLIFY_RULES`` and ``EXTRA_RULES`` together, with
constant folding, to one fixpoint: the two sets feed each other.
"""
from __future__ import annotations

from functools import lru_cache
from typing import ClassVar, Sequence

from ...ir.core import Operation, Value
from ...ir.pass_manager import Option
from ...ir.rewrite import DEFAULT_FOLD_LIMIT, Pattern, RewriteStats, apply_patterns_greedily, constant_value
from ...ir.rules import Rule, rule, rule_function, rules_to_patterns, same_dim
from ...ir.symbolic import dim_prod
from ...ir.types import DType
from ..registry import register_pass
from .const_fold import with_folding
from .simplify import SIMPLIFY_RULES, _GreedyPass


# ---- helpers the rules call --------------------------------------------------------------
@rule_function
def is_const(v: Value) -> bool:
    """``v`` is made by a constant op (its value is known at compile time)."""
    return constant_value(v) is not None


@rule_function
def int_type(d: DType) -> bool:
    """An integer element type (``bool`` is not: a cast to bool is a comparison, not a truncation)."""
    return d.is_int


@rule_function
def bits(d: DType) -> int:
    return d.itemsize * 8


@rule_function
def all_equal(values: Sequence[int], n: int) -> bool:
    return all(v == n for v in values)


@rule_function
def zero_spatial_pad(pads: Sequence[int], value: float, mode: str) -> bool:
    """A constant-zero pad of the dims after (N, C) only, growing them (no crop)."""
    rank = len(pads) // 2
    return (mode == "constant" and value == 0.0 and rank >= 3
            and all(p == 0 for p in pads[:2] + pads[rank:rank + 2]) and all(p >= 0 for p in pads))


@rule_function
def merge_pads(pad_pads: Sequence[int], conv_pads: Sequence[int]) -> tuple[int, ...]:
    """Conv pads (begin..., end... over spatial dims) plus a pad op's spatial pads."""
    rank = len(pad_pads) // 2
    spatial = rank - 2
    begin, end = pad_pads[2:rank], pad_pads[rank + 2:]
    conv = tuple(conv_pads) or (0,) * (2 * spatial)
    return tuple(c + p for c, p in zip(conv, tuple(begin) + tuple(end)))


@rule_function
def unit_axes_added(src: Sequence, dst: Sequence) -> tuple[int, ...]:
    """Axes of ``dst`` that are inserted size-1 dims when ``dst`` is ``src`` with unit dims
    added (every other dim equal and in order); () when it is not that.  A left-aligned greedy
    match is enough: where a 1 of ``src`` could pair with several 1s of ``dst``, any choice
    gives the same shape."""
    if len(dst) <= len(src):
        return ()
    added, j = [], 0
    for i, d in enumerate(dst):
        if j < len(src) and same_dim(d, src[j]):
            j += 1
        elif d == 1:
            added.append(i)
        else:
            return ()
    return tuple(added) if j == len(src) else ()


@rule_function
def unit_axes_dropped(src: Sequence, dst: Sequence) -> tuple[int, ...]:
    """Axes of ``src`` that are dropped size-1 dims when ``dst`` is ``src`` without them."""
    return unit_axes_added(dst, src)


@rule_function
def unsqueeze_axes(inner: Sequence[int], outer: Sequence[int], rank: int) -> tuple[int, ...]:
    """Axes of ``unsqueeze(unsqueeze(x, inner), outer)`` as one unsqueeze of rank-``rank`` x."""
    mid = rank + len(inner)
    inner_set = {a % mid for a in inner}
    final = mid + len(outer)
    outer_set = {a % final for a in outer}
    tags, k = [], 0
    mid_tags = ["new" if i in inner_set else "old" for i in range(mid)]
    for i in range(final):
        if i in outer_set:
            tags.append("new")
        else:
            tags.append(mid_tags[k])
            k += 1
    return tuple(i for i, t in enumerate(tags) if t == "new")


# ---- the rules ---------------------------------------------------------------------------
CANONICAL_RULES: list[Rule] = [
    rule("const-rhs-add", "add(const(a), x)", "add(x, a)", where="not is_const(x)"),
    rule("const-rhs-mul", "mul(const(a), x)", "mul(x, a)", where="not is_const(x)"),
    rule("sub-const", "sub(x, const(a))", "add(x, neg(a))", where="not is_bool(x)"),
    rule("div-splat", "div(x, splat(v))", "mul(x, splat(1.0 / v))",
         where="is_float(x) and v != 0 and v == v and abs(v) < 1e300"),
    rule("reshape-as-unsqueeze", "reshape(x, shape=s)", "unsqueeze(x, axes=unit_axes_added(shape(x), s))",
         where="len(unit_axes_added(shape(x), s)) > 0"),
    rule("reshape-as-squeeze", "reshape(x, shape=s)", "squeeze(x, axes=unit_axes_dropped(shape(x), s))",
         where="len(unit_axes_dropped(shape(x), s)) > 0"),
]
"""Spellings that the other rules (and ``fold-inference``) expect."""

AFFINE_RULES: list[Rule] = [
    rule("mul-mul-const", "mul(t := mul(x, const(a)), const(b))", "mul(x, mul(a, b))", where="one_use(t)"),
    rule("add-add-const", "add(t := add(x, const(a)), const(b))", "add(x, add(a, b))", where="one_use(t)"),
    rule("mul-add-const", "mul(t := add(x, const(a)), const(b))", "add(mul(x, b), mul(a, b))",
         where="one_use(t)"),
]
"""Constant reassociation: scale/shift chains collapse to one ``mul`` and one ``add``."""

@rule_function
def as_matrix(shape: Sequence) -> tuple:
    """(rows, columns) of a shape flattened to 2-D along its last dim (``("b", "s", 64)`` gives
    ``("b*s", 64)``)."""
    return (dim_prod(shape[:-1]), shape[-1])


CONTRACTION_RULES: list[Rule] = [
    rule("transpose-into-gemm-b", "gemm(a, transpose(b, perm=p), alpha=x, beta=y, trans_a=ta, trans_b=tb)",
         "gemm(a, b, alpha=x, beta=y, trans_a=ta, trans_b=not tb)", where="p == (1, 0)"),
    rule("transpose-into-gemm-b-bias", "gemm(a, transpose(b, perm=p), c, alpha=x, beta=y, trans_a=ta, trans_b=tb)",
         "gemm(a, b, c, alpha=x, beta=y, trans_a=ta, trans_b=not tb)", where="p == (1, 0)"),
    rule("transpose-into-gemm-a", "gemm(transpose(a, perm=p), b, alpha=x, beta=y, trans_a=ta, trans_b=tb)",
         "gemm(a, b, alpha=x, beta=y, trans_a=not ta, trans_b=tb)", where="p == (1, 0)"),
    rule("transpose-into-gemm-a-bias", "gemm(transpose(a, perm=p), b, c, alpha=x, beta=y, trans_a=ta, trans_b=tb)",
         "gemm(a, b, c, alpha=x, beta=y, trans_a=not ta, trans_b=tb)", where="p == (1, 0)"),
    rule("matmul-transposed-rhs", "matmul(x, transpose(w, perm=p))", "gemm(x, w, trans_b=True)",
         where="p == (1, 0) and rank(x) == 2"),
    rule("matmul-transposed-rhs-batched", "(t := matmul(x, transpose(w, perm=p)))",
         "reshape(gemm(reshape(x, shape=as_matrix(shape(x))), w, trans_b=True), shape=shape(t))",
         where="p == (1, 0) and rank(x) > 2"),
]
"""A transposed matrix operand of a GEMM is a flag, not a copy: what folding may not do for a
weight that is shared (GPT-2's LM head reads the token embedding transposed)."""

REMOVAL_RULES: list[Rule] = [
    rule("add-neg", "add(x, neg(y))", "sub(x, y)", where="not is_const(y)"),
    rule("neg-sub", "neg(sub(x, y))", "sub(y, x)"),
    rule("mul-neg-neg", "mul(neg(x), neg(y))", "mul(x, y)"),
    rule("relu-relu", "relu(relu(x))", "relu(x)"),
    rule("abs-abs", "abs(abs(x))", "abs(x)"),
    rule("abs-neg", "abs(neg(x))", "abs(x)"),
    rule("cast-int-chain", "cast(cast(x, dtype=a), dtype=b)", "cast(x, dtype=b)",
         where="is_int(x) and int_type(a) and int_type(b) and bits(a) >= bits(b)"),
    rule("unsqueeze-unsqueeze", "unsqueeze(unsqueeze(x, axes=a), axes=b)",
         "unsqueeze(x, axes=unsqueeze_axes(a, b, rank(x)))"),
    rule("slice-noop", "slice(x, starts=a, ends=e, axes=c, steps=s)", "x", where="all_equal(s, 1)"),
    rule("expand-noop", "expand(x, shape=s)", "x"),
    rule("tile-noop", "tile(x, repeats=r)", "x", where="all_equal(r, 1)"),
    rule("pad-noop", "pad(x, pads=p, mode=m, value=v)", "x", where="all_equal(p, 0)"),
    rule("pad-into-conv", "conv(pad(x, pads=p, mode=m, value=v), w, strides=s, pads=q, dilations=d, groups=g)",
         "conv(x, w, strides=s, pads=merge_pads(p, q), dilations=d, groups=g)", where="zero_spatial_pad(p, v, m)"),
    rule("pad-into-conv-bias",
         "conv(pad(x, pads=p, mode=m, value=v), w, b, strides=s, pads=q, dilations=d, groups=g)",
         "conv(x, w, b, strides=s, pads=merge_pads(p, q), dilations=d, groups=g)",
         where="zero_spatial_pad(p, v, m)"),
]
"""Ops that cancel or do nothing, and padding that a conv can do itself."""

EXTRA_RULES: list[Rule] = CANONICAL_RULES + AFFINE_RULES + CONTRACTION_RULES + REMOVAL_RULES
"""Everything ``simplify-extra`` adds to ``SIMPLIFY_RULES``."""


@lru_cache(maxsize=1)
def extra_patterns() -> tuple[Pattern, ...]:
    return tuple(rules_to_patterns(SIMPLIFY_RULES + EXTRA_RULES))


def simplify_extra(root: Operation, *, fold: bool = True, fold_limit: int = DEFAULT_FOLD_LIMIT,
                   max_iterations: int = 10) -> RewriteStats:
    """``SIMPLIFY_RULES`` + ``EXTRA_RULES`` (and guarded constant folding) under ``root`` to a fixpoint."""
    patterns = with_folding(extra_patterns(), fold_limit) if fold else extra_patterns()
    return apply_patterns_greedily(root, patterns, fold=False, max_iterations=max_iterations)


@register_pass
class SimplifyExtraPass(_GreedyPass):
    name = "simplify-extra"
    summary = "simplify's rules plus EXTRA_RULES (canonical forms, reassociation, pad-into-conv), with folding"
    options: ClassVar[dict[str, Option]] = {
        "fold": Option(True, "also fold ops whose operands are constants"),
        "limit": Option(DEFAULT_FOLD_LIMIT, "largest folded result (elements) allowed to grow the IR"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(simplify_extra(module, fold=self.fold, fold_limit=self.limit,
                                           max_iterations=self.max_iterations))


__all__ = ["AFFINE_RULES", "CANONICAL_RULES", "CONTRACTION_RULES", "EXTRA_RULES", "REMOVAL_RULES", "SimplifyExtraPass",
           "extra_patterns", "simplify_extra"]
