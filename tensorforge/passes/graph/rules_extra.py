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
- a transposed matrix operand of ``gemm``/``matmul`` becomes the GEMM's ``trans_a``/``trans_b``;
- ``sink-transpose-*`` (``EXTRA_PATTERNS``, ``transpose_sinking.py``): transposes move below
  elementwise ops and reductions, where transpose pairs of channels-last models cancel;
- ``sum-scaled-as-mean``, ``mean-var-as-layer-norm`` (``EXTRA_PATTERNS``, ``norm_patterns.py``): a
  sum times 1/n is a mean, a spelled-out LayerNorm over the last dim is ``layer_norm``;
- ``reshape-unary-reshape`` (``EXTRA_PATTERNS``): an activation between two reshapes that cancel
  (between two Linears over the last dim) loses them, so it can become the GEMM's epilogue;
- LayerNorms over the channels of NCHW (``LAYOUT_PATTERNS``, off with ``norm_layout=false``): the
  spelled-out ``(x - mean(x, 1)) / sqrt(var(x, 1) + eps)`` becomes a LayerNorm between transposes
  (which fuse into one kernel that reads and writes NCHW), and a channels-last LayerNorm feeding
  a Linear (ConvNeXt) keeps NCHW, read by the GEMM as a transposed operand.

Every rule fires only when the replacement has exactly the matched value's type (see
``rules.py``).  ``simplify-extra`` runs ``SIMPLIFY_RULES`` and ``EXTRA_RULES`` together, with
constant folding, to one fixpoint: the two sets feed each other.
"""
from __future__ import annotations

from functools import lru_cache
from typing import ClassVar, Sequence


from ...ir.builder import make_op
from ...ir.core import Operation, Value
from ...ir.opdef import ELEMENTWISE
from ...ir.pass_manager import Option
from ...ir.rewrite import DEFAULT_FOLD_LIMIT, Pattern, RewriteStats, apply_patterns_greedily, constant_value, pattern
from ...ir.rules import Rule, rule, rule_function, rules_to_patterns, same_dim, same_shape
from ...ir.symbolic import dim_prod
from ...ir.types import DType
from ..registry import register_pass
from .const_fold import with_folding
from .simplify import SIMPLIFY_RULES, _GreedyPass
from .norm_patterns import NORM_PATTERNS, layer_norm_parts
from .transpose_sinking import TRANSPOSE_SINKING


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
    # StableHLO and ONNX Max spell ReLU as max with zero (NaN stays NaN either way)
    rule("max-zero-relu", "max(x, 0)", "relu(x)", where="is_float(x)"),
    rule("zero-max-relu", "max(0, x)", "relu(x)", where="is_float(x)"),
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

@rule_function
def whole_extremum(axes: Sequence[int], keepdims: bool, rank: int) -> bool:
    """A max/min over every axis of a rank-``rank`` tensor, to a scalar."""
    return not keepdims and (not axes or sorted(a % rank for a in axes) == list(range(rank)))


# A max or min of a whole tensor (a dynamic quantization's range) reads the values before a reshape
# or transpose: the same set, so the same result, read in memory order.  Through BERT's attention
# output (transpose, reshape, then DynamicQuantizeLinear) the fused reduction read every element at
# a stride and stayed scalar.
WHOLE_EXTREMUM_RULES: list[Rule] = [
    rule(f"{op}-whole-{view}", f"{op}(t := {view}(x, {arg}=p), axes=a, keepdims=k)", f"{op}(x, axes=(), keepdims=False)",
         where="whole_extremum(a, k, rank(t))")
    for op in ("reduce_max", "reduce_min") for view, arg in (("reshape", "shape"), ("transpose", "perm"))
]

REMOVAL_RULES: list[Rule] = WHOLE_EXTREMUM_RULES + [
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


@pattern("graph.reshape", name="reshape-unary-reshape")
def reshape_unary_reshape(op: Operation, rewriter) -> bool:
    """``reshape(u(reshape(x)), back) -> u(x)`` for a unary elementwise ``u`` when the reshapes
    cancel: a Linear over the last dim of a rank-3/4 tensor imports as ``reshape -> gemm ->
    reshape``, and an activation between two such Linears (a transformer's or ConvNeXt's MLP) then
    sits between reshapes, where it cannot become the first GEMM's epilogue."""
    t = op.operands[0]
    u = t.op
    if u is None or u.opdef is None or len(u.operands) != 1 or len(u.results) != 1 or len(t.uses) != 1:
        return False
    if ELEMENTWISE not in u.opdef.traits or u.regions:
        return False
    inner = u.operands[0].op
    if inner is None or inner.name != "graph.reshape":
        return False
    x = inner.operands[0]
    if not same_shape(x.type.shape, op.results[0].type.shape):
        return False
    new = make_op(u.name, [x], dict(u.attributes))
    if new.results[0].type != op.results[0].type:
        return False
    rewriter.insert(new)
    rewriter.replace_op(op, new.results)
    return True


def _channels_last_perm(perm: Sequence[int], rank: int) -> bool:
    return rank >= 3 and tuple(perm) == (0,) + tuple(range(2, rank)) + (1,)


@pattern("graph.gemm", name="channel-norm-into-gemm-a")
def channel_norm_into_gemm_a(op: Operation, rewriter) -> bool:
    """``gemm(reshape(layer_norm(transpose(x, channels last))), w)`` for a batch-1 ``x`` in
    NC... layout becomes ``gemm(reshape(transpose(layer_norm(transpose(x)), back)), w, trans_a)``.

    ConvNeXt's block is ``conv -> permute(0,2,3,1) -> LayerNorm(C) -> Linear``: as imported, the
    LayerNorm writes channels-last, so its statistics over C read ``x`` across channel planes one
    pixel at a time.  Rewritten, the transposes around the LayerNorm fuse into one kernel that
    reads and writes NCHW, rows of pixels in SIMD lanes (statistics across channel planes), and
    the Linear reads that (C, H*W) matrix as a transposed operand, which its packing absorbs."""
    a = op.operands[0]
    if op.attributes.get("trans_a", False) or len(a.uses) != 1 or a.op is None or a.op.name != "graph.reshape":
        return False
    ln = a.op.operands[0]
    if ln.op is None or ln.op.name != "graph.layer_norm" or len(ln.uses) != 1:
        return False
    t = ln.op.operands[0]
    rank = len(t.type.shape)
    if t.op is None or t.op.name != "graph.transpose" or not _channels_last_perm(t.op.attributes["perm"], rank):
        return False
    if ln.op.attributes.get("axis", -1) % rank != rank - 1:
        return False
    shape = t.type.shape                      # (1, *spatial, C)
    if shape[0] != 1 or tuple(a.type.shape) != (dim_prod(shape[:-1]), shape[-1]) \
            or not all(isinstance(d, int) for d in shape):
        return False
    back = (0, rank - 1) + tuple(range(1, rank - 1))
    nchw = rewriter.insert(make_op("graph.transpose", [ln], {"perm": back})).results[0]
    mat = rewriter.insert(make_op("graph.reshape", [nchw], {"shape": (shape[-1], dim_prod(shape[1:-1]))})).results[0]
    attrs = dict(op.attributes)
    attrs["trans_a"] = True
    new = make_op("graph.gemm", [mat] + list(op.operands[1:]), attrs)
    if new.results[0].type != op.results[0].type:
        return False
    rewriter.insert(new)
    rewriter.replace_op(op, new.results)
    return True


EXTRA_PATTERNS: tuple[Pattern, ...] = (reshape_unary_reshape,) + TRANSPOSE_SINKING + NORM_PATTERNS
"""Rewrites that read better as code than as a declarative rule."""


@pattern("graph.div", name="channel-mean-var-as-layer-norm")
def channel_mean_var_as_layer_norm(op: Operation, rewriter) -> bool:
    """``(x - u) / sqrt(mean((x - u)**2, 1) + eps)`` with ``u = mean(x, 1)`` (both keepdims) for an
    ``x`` of rank >= 3 becomes ``transpose(layer_norm(transpose(x, channels last), eps), back)``:
    ConvNeXt's channels_first LayerNorm written out.  As a LayerNorm, its transposes fuse into one
    kernel that reduces across the channel planes a row of pixels at a time (the spelled-out form
    materialises ``x - u`` in full, read by the variance and the division), with the norm lowering's
    corrected two-pass statistics; NaN and Inf in a pixel's channels give NaN there, as torch."""
    parts = layer_norm_parts(op, lambda rank: 1 if rank >= 3 else None)
    if parts is None:
        return False
    xv, _, eps = parts
    rank = xv.type.rank
    last = (0,) + tuple(range(2, rank)) + (1,)
    back = (0, rank - 1) + tuple(range(1, rank - 1))
    t = make_op("graph.transpose", [xv], {"perm": last})
    ln = make_op("graph.layer_norm", [t.results[0]], {"axis": rank - 1, "epsilon": eps})
    y = make_op("graph.transpose", [ln.results[0]], {"perm": back})
    if y.results[0].type != op.results[0].type:
        return False
    for new in (t, ln, y):
        rewriter.insert(new)
    rewriter.replace_op(op, y.results)
    return True


LAYOUT_PATTERNS: tuple[Pattern, ...] = (channel_norm_into_gemm_a, channel_mean_var_as_layer_norm)
"""Patterns for LayerNorms over channels (``simplify-extra{norm_layout=false}`` turns them off)."""


@lru_cache(maxsize=2)
def extra_patterns(norm_layout: bool = True) -> tuple[Pattern, ...]:
    return (tuple(rules_to_patterns(SIMPLIFY_RULES + EXTRA_RULES)) + EXTRA_PATTERNS
            + (LAYOUT_PATTERNS if norm_layout else ()))


def simplify_extra(root: Operation, *, fold: bool = True, fold_limit: int = DEFAULT_FOLD_LIMIT,
                   max_iterations: int = 10, norm_layout: bool = True) -> RewriteStats:
    """``SIMPLIFY_RULES`` + ``EXTRA_RULES`` (and guarded constant folding) under ``root`` to a fixpoint."""
    patterns = with_folding(extra_patterns(norm_layout), fold_limit) if fold else extra_patterns(norm_layout)
    return apply_patterns_greedily(root, patterns, fold=False, max_iterations=max_iterations)


@register_pass
class SimplifyExtraPass(_GreedyPass):
    name = "simplify-extra"
    summary = "simplify's rules plus EXTRA_RULES (canonical forms, reassociation, pad-into-conv), with folding"
    options: ClassVar[dict[str, Option]] = {
        "fold": Option(True, "also fold ops whose operands are constants"),
        "limit": Option(DEFAULT_FOLD_LIMIT, "largest folded result (elements) allowed to grow the IR"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
        "norm_layout": Option(True, "a channels-last LayerNorm feeding a Linear keeps NCHW, read by the "
                                    "GEMM as a transposed operand (LAYOUT_PATTERNS)"),
    }

    def run(self, module):
        return self._finish(simplify_extra(module, fold=self.fold, fold_limit=self.limit,
                                           max_iterations=self.max_iterations, norm_layout=self.norm_layout))


__all__ = ["AFFINE_RULES", "CANONICAL_RULES", "CONTRACTION_RULES", "EXTRA_PATTERNS", "EXTRA_RULES", "LAYOUT_PATTERNS",
           "REMOVAL_RULES", "SimplifyExtraPass", "extra_patterns", "simplify_extra"]
