"""Inference folding (``fold-inference``): BatchNorm, bias adds and scales into conv/GEMM weights.

At inference every BatchNorm is ``x * a + t`` per channel with constants ``a = scale /
sqrt(var + eps)`` and ``t = bias - mean * a``.  After a conv (or GEMM, or a 2-D matmul by a
constant) whose result has no other user, the scale goes into the weights of each output
channel and the shift into the bias, so the normalisation costs nothing at run time.  A
BatchNorm that follows anything else becomes a ``mul`` and an ``add`` by per-channel
constants, which the reassociation rules merge with neighbouring scales and shifts and which
fuse as elementwise ops later.  In the same way:

- an ``add`` of a per-channel constant after a conv/GEMM/matmul becomes (part of) its bias;
- a ``mul`` by a per-channel (or scalar) constant after one scales its weights and bias, and
  one before a conv scales the weights of each input channel;
- ``identity`` (what ONNX ``Dropout`` imports as) disappears (the ``identity`` rule of simplify).

Folded weights are computed once, here, in float64 and rounded to the weight type: the
result differs from the unfolded graph by rounding only.  Every pattern needs the weights
(and whatever it folds) to be constants, and the folded op to have no other user, so that
nothing is computed twice.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar, Sequence, Union

import numpy as np

from ...errors import TensorforgeError
from ...ir.core import Operation, Value
from ...ir.opdef import lookup
from ...ir.pass_manager import Option
from ...ir.rewrite import (DEFAULT_FOLD_LIMIT, Pattern, PatternRewriter, RewriteStats, apply_patterns_greedily,
                           constant_value, pattern)
from ...ir.rules import rules_to_patterns
from ...ir.symbolic import dim_prod
from ...ir.types import TensorType, Type
from ..registry import register_pass
from .const_fold import with_folding
from .rules_extra import AFFINE_RULES, CANONICAL_RULES
from .simplify import SIMPLIFY_RULES, _GreedyPass

CONVS = ("graph.conv", "graph.conv_transpose")


# ---- helpers ------------------------------------------------------------------------------
def channel_vector(c: np.ndarray, rank: int, channels: int, axis: int = 1) -> np.ndarray | None:
    """``c`` as ``channels`` values, one per index of ``axis``, when ``c`` broadcasts against a
    rank-``rank`` tensor that way (a scalar counts: the same value for every channel)."""
    if c.ndim > rank or not isinstance(channels, int):
        return None
    shape = (1,) * (rank - c.ndim) + tuple(c.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != axis % rank) or shape[axis % rank] not in (1, channels):
        return None
    return np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (channels,))


def bn_affine(op: Operation) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, t) of a batch_norm with constant parameters: ``bn(x) = x * a + t`` per channel."""
    params = [constant_value(v) for v in op.operands[1:]]
    if any(p is None for p in params):
        return None
    scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
    a = scale / np.sqrt(var + op.attributes.get("epsilon", 1e-5))
    return a, bias - mean * a


def _single_user(v: Value) -> Operation | None:
    return v.op if v.op is not None and len(v.uses) == 1 else None


def _infer(name: str, operands: Sequence, attrs: dict[str, Any]) -> list[Type] | None:
    """Result types of ``name`` on these operands, or None when it rejects them."""
    d = lookup(name)
    types = [o.type for o in operands]
    try:
        return d.infer(types, d.normalize_attrs(dict(attrs)))
    except TensorforgeError:
        return None


def _float_like(v: Value) -> bool:
    return isinstance(v.type, TensorType) and v.type.dtype.is_float


class NewConst:
    """A constant operand not built yet: patterns check the result type before creating anything,
    so a pattern that does not fire leaves the IR untouched."""

    __slots__ = ("array", "type")

    def __init__(self, array: np.ndarray, like: Value):
        dtype = like.type.dtype
        self.array = np.asarray(array).astype(dtype.np)
        self.type = TensorType(self.array.shape, dtype)


Operand = Union[Value, NewConst]


def _const(rewriter: PatternRewriter, array: np.ndarray, like: Value) -> Value:
    """A constant in ``like``'s element type, built now (folded values are computed in float64)."""
    c = NewConst(array, like)
    return rewriter.constant(c.array, c.type.dtype)


def _replace_with(rewriter: PatternRewriter, op: Operation, name: str, operands: Sequence[Operand],
                  attrs: dict[str, Any]) -> bool:
    """Replaces ``op`` by a new ``name`` op, if that has exactly ``op``'s result type."""
    types = _infer(name, operands, attrs)
    if types is None or types != [op.results[0].type]:
        return False
    values = [rewriter.constant(o.array, o.type.dtype) if isinstance(o, NewConst) else o for o in operands]
    new = rewriter.create(name, values, attrs)
    rewriter.replace_op(op, new.results)
    return True


def _operand_and_const(op: Operation, producers: Sequence[str]) -> tuple[Operation, np.ndarray] | None:
    """For a binary op: a single-use producer among ``producers`` on one side, a constant on the other."""
    for i in (0, 1):
        x, c = op.operands[i], op.operands[1 - i]
        prod = _single_user(x)
        arr = constant_value(c)
        if prod is not None and prod.name in producers and arr is not None and _float_like(x):
            return prod, arr
    return None


# ---- conv weights per output / input channel -----------------------------------------------
def _scale_weight_channels(w: np.ndarray, s: np.ndarray, rows: bool, groups: int) -> np.ndarray:
    """``w`` (rows, cols/g, *K) with channel ``c`` scaled by ``s[c]``: channels along the rows, or
    along the columns, where column ``j`` of a row in group ``g`` is channel ``g * cols + j``."""
    w = np.asarray(w, np.float64)
    spatial = (1,) * (w.ndim - 2)
    if rows:
        return w * s.reshape((-1, 1) + spatial)
    r, cols = w.shape[0], w.shape[1]
    per_row = np.repeat(s.reshape(groups, cols), r // groups, axis=0)       # (rows, cols)
    return w * per_row.reshape((r, cols) + spatial)


def _out_channel_scale(conv: Operation, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``w`` with output channel ``o`` multiplied by ``s[o]`` (conv w: (O, C/g, *K);
    conv_transpose w: (C, O/g, *K))."""
    return _scale_weight_channels(w, s, conv.name == "graph.conv", conv.attributes.get("groups", 1))


def _in_channel_scale(conv: Operation, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``w`` with input channel ``c`` multiplied by ``s[c]``."""
    return _scale_weight_channels(w, s, conv.name == "graph.conv_transpose", conv.attributes.get("groups", 1))


def _conv_parts(conv: Operation) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Constant weights and bias (None when absent) of a conv, or None if not constant."""
    w = constant_value(conv.operands[1])
    if w is None:
        return None
    if len(conv.operands) == 3:
        b = constant_value(conv.operands[2])
        return None if b is None else (w, b)
    return w, None


def _fold_into_conv(rewriter: PatternRewriter, op: Operation, conv: Operation, scale: np.ndarray | None,
                    shift: np.ndarray | None) -> bool:
    """Replaces ``op`` (a scale and/or shift of ``conv``'s output channels) by a new conv."""
    parts = _conv_parts(conv)
    if parts is None:
        return False
    w, b = parts
    x, wv = conv.operands[0], conv.operands[1]
    operands: list[Operand] = [x, wv]
    bias = None if b is None else np.asarray(b, np.float64)
    if scale is not None:
        operands[1] = NewConst(_out_channel_scale(conv, w, scale), wv)
        bias = None if bias is None else bias * scale
    if shift is not None:
        bias = shift if bias is None else bias + shift
    if bias is not None:
        operands.append(NewConst(bias, wv))
    return _replace_with(rewriter, op, conv.name, operands, conv.attributes)


# ---- BatchNorm ----------------------------------------------------------------------------
@pattern("graph.batch_norm", name="bn-into-conv", benefit=3)
def bn_into_conv(op: Operation, rewriter: PatternRewriter) -> bool:
    conv = _single_user(op.operands[0])
    affine = bn_affine(op)
    if conv is None or conv.name not in CONVS or affine is None:
        return False
    return _fold_into_conv(rewriter, op, conv, *affine)


def _gemm_column_scale(gemm: Operation, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``b`` with column ``n`` of ``op(b)`` multiplied by ``s[n]``."""
    b = np.asarray(b, np.float64)
    return b * s[:, None] if gemm.attributes.get("trans_b", False) else b * s[None, :]


def _fold_into_gemm(rewriter: PatternRewriter, op: Operation, gemm: Operation, scale: np.ndarray | None,
                    shift: np.ndarray | None) -> bool:
    """Replaces ``op`` (a scale of the columns and/or a shift of ``gemm``'s result) by a new gemm.

    ``scale`` is a vector of N (needs a constant ``b``) or a scalar (into ``b`` when it is constant,
    else into ``alpha``); ``shift`` broadcasts to (M, N).
    """
    attrs = dict(gemm.attributes)
    a, b = gemm.operands[0], gemm.operands[1]
    c = constant_value(gemm.operands[2]) if len(gemm.operands) == 3 else None
    if len(gemm.operands) == 3 and c is None:
        return False
    beta = attrs.get("beta", 1.0)
    cc = None if c is None else np.asarray(c, np.float64) * beta
    bw = constant_value(b)
    if scale is not None and scale.ndim == 0 and bw is None:
        attrs["alpha"] = attrs.get("alpha", 1.0) * float(scale)     # weights unknown: scale the product
    elif scale is not None:
        if bw is None:
            return False
        b = NewConst(np.asarray(bw, np.float64) * scale if scale.ndim == 0 else _gemm_column_scale(gemm, bw, scale), b)
    if scale is not None and cc is not None:
        cc = cc * scale
    if shift is not None:
        cc = shift if cc is None else cc + shift
    attrs["beta"] = 1.0
    operands = [a, b] + ([] if cc is None else [NewConst(cc, a)])
    return _replace_with(rewriter, op, "graph.gemm", operands, attrs)


@pattern("graph.batch_norm", name="bn-into-gemm", benefit=3)
def bn_into_gemm(op: Operation, rewriter: PatternRewriter) -> bool:
    gemm = _single_user(op.operands[0])
    affine = bn_affine(op)
    if gemm is None or gemm.name != "graph.gemm" or affine is None or constant_value(gemm.operands[1]) is None:
        return False
    return _fold_into_gemm(rewriter, op, gemm, *affine)


def _fold_into_matmul(rewriter: PatternRewriter, op: Operation, mm: Operation, scale: np.ndarray | None,
                      shift: np.ndarray | None) -> bool:
    """A 2-D ``matmul(x, W)`` followed by a column scale/shift: a gemm with the scale in ``W``."""
    x, w = mm.operands
    if x.type.rank != 2 or w.type.rank != 2:
        return False
    gemm_attrs = {"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False}
    operands: list[Operand] = [x, w]
    if scale is not None:
        wv = constant_value(w)
        if wv is None:
            return False
        operands[1] = NewConst(np.asarray(wv, np.float64) * (scale if scale.ndim == 0 else scale[None, :]), w)
    if shift is not None:
        operands.append(NewConst(shift, x))
    return _replace_with(rewriter, op, "graph.gemm", operands, gemm_attrs)


@pattern("graph.batch_norm", name="bn-into-matmul", benefit=3)
def bn_into_matmul(op: Operation, rewriter: PatternRewriter) -> bool:
    mm = _single_user(op.operands[0])
    affine = bn_affine(op)
    if mm is None or mm.name != "graph.matmul" or affine is None:
        return False
    return _fold_into_matmul(rewriter, op, mm, *affine)


@pattern("graph.batch_norm", name="bn-decompose", benefit=1)
def bn_decompose(op: Operation, rewriter: PatternRewriter) -> bool:
    """What cannot fold into a producer becomes ``x * a + t`` with per-channel constants."""
    affine = bn_affine(op)
    x = op.operands[0]
    if affine is None:
        return False
    shape = (-1,) + (1,) * (x.type.rank - 2)
    a, t = (_const(rewriter, v.reshape(shape), x) for v in affine)
    scaled = rewriter.create("graph.mul", [x, a]).results[0]
    rewriter.replace_op(op, rewriter.create("graph.add", [scaled, t]).results)
    return True


# ---- bias adds and scales ------------------------------------------------------------------
def _channel_const_into_conv(op: Operation, rewriter: PatternRewriter, as_scale: bool) -> bool:
    """``op(conv(...), per-channel constant)`` folded into the conv's weights (scale) or bias (add)."""
    found = _operand_and_const(op, CONVS)
    if found is None:
        return False
    conv, c = found
    t = conv.results[0].type
    vec = channel_vector(c, t.rank, t.shape[1])
    if vec is None:
        return False
    return _fold_into_conv(rewriter, op, conv, vec if as_scale else None, None if as_scale else vec)


@pattern("graph.add", name="bias-into-conv", benefit=2)
def bias_into_conv(op: Operation, rewriter: PatternRewriter) -> bool:
    return _channel_const_into_conv(op, rewriter, as_scale=False)


@pattern("graph.mul", name="scale-into-conv", benefit=2)
def scale_into_conv(op: Operation, rewriter: PatternRewriter) -> bool:
    return _channel_const_into_conv(op, rewriter, as_scale=True)


def _input_scale(conv: Operation) -> tuple[Value, np.ndarray] | None:
    """(x, per-input-channel scale) when conv's input is ``mul(x, constant)``."""
    mul = conv.operands[0].op
    if mul is None or mul.name != "graph.mul":
        return None
    for i in (0, 1):
        x, c = mul.operands[i], mul.operands[1 - i]
        arr = constant_value(c)
        if arr is None or constant_value(x) is not None or x.type != mul.results[0].type:
            continue
        vec = channel_vector(arr, x.type.rank, x.type.shape[1])
        if vec is not None:
            return x, vec
    return None


@pattern(CONVS, name="input-scale-into-conv", benefit=2)
def input_scale_into_conv(op: Operation, rewriter: PatternRewriter) -> bool:
    """``conv(x * s, w) = conv(x, w * s[c])``: zero padding stays zero under a scale."""
    found = _input_scale(op)
    w = constant_value(op.operands[1])
    if found is None or w is None or not _float_like(op.operands[0]):
        return False
    x, s = found
    wv = NewConst(_in_channel_scale(op, w, s), op.operands[1])
    return _replace_with(rewriter, op, op.name, [x, wv] + list(op.operands[2:]), op.attributes)


@pattern("graph.add", name="bias-into-gemm", benefit=2)
def bias_into_gemm(op: Operation, rewriter: PatternRewriter) -> bool:
    found = _operand_and_const(op, ("graph.gemm",))
    if found is None:
        return False
    gemm, c = found
    return _fold_into_gemm(rewriter, op, gemm, None, np.asarray(c, np.float64))


def _column_scale(c: np.ndarray, t: TensorType) -> np.ndarray | None:
    """A scalar (0-d) or one value per column (last dim) of ``t``, as float64; else None."""
    if c.size == 1 and c.ndim <= t.rank:
        return np.asarray(c, np.float64).reshape(())
    return channel_vector(c, t.rank, t.shape[-1], axis=-1)


@pattern("graph.mul", name="scale-into-gemm", benefit=2)
def scale_into_gemm(op: Operation, rewriter: PatternRewriter) -> bool:
    found = _operand_and_const(op, ("graph.gemm",))
    if found is None:
        return False
    gemm, c = found
    s = _column_scale(c, gemm.results[0].type)
    return s is not None and _fold_into_gemm(rewriter, op, gemm, s, None)


@pattern("graph.add", name="bias-into-matmul", benefit=2)
def bias_into_matmul(op: Operation, rewriter: PatternRewriter) -> bool:
    """``matmul(x, W) + d`` becomes a gemm with bias ``d`` (x flattened to 2-D when it has
    batch dims and W is a matrix)."""
    found = _operand_and_const(op, ("graph.matmul",))
    if found is None:
        return False
    mm, d = found
    x, w = mm.operands
    out = mm.results[0].type
    if w.type.rank != 2 or x.type.rank < 2 or op.results[0].type != out:
        return False
    bias = np.asarray(d, np.float64)
    if x.type.rank == 2:
        return _fold_into_matmul(rewriter, op, mm, None, bias)
    vec = channel_vector(bias, out.rank, out.shape[-1], axis=-1)
    if vec is None:
        return False
    rows = dim_prod(x.type.shape[:-1])          # "b*s" for a symbolic batch and sequence
    flat = rewriter.create("graph.reshape", [x], {"shape": (rows, x.type.shape[-1])}).results[0]
    gemm = rewriter.create("graph.gemm", [flat, w, _const(rewriter, vec, x)], {}).results[0]
    rewriter.replace_op(op, rewriter.create("graph.reshape", [gemm], {"shape": out.shape}).results)
    return True


@pattern("graph.mul", name="scale-into-matmul", benefit=2)
def scale_into_matmul(op: Operation, rewriter: PatternRewriter) -> bool:
    found = _operand_and_const(op, ("graph.matmul",))
    if found is None:
        return False
    mm, c = found
    x, w = mm.operands
    wv = constant_value(w)
    s = _column_scale(c, mm.results[0].type)
    if wv is None or s is None or w.type.rank != 2:
        return False
    scaled = np.asarray(wv, np.float64) * (s if s.ndim == 0 else s[None, :])
    return _replace_with(rewriter, op, "graph.matmul", [x, NewConst(scaled, w)], {})


MOVEMENT = ("graph.reshape", "graph.transpose", "graph.squeeze", "graph.unsqueeze")
"""Ops a scalar multiply commutes with: they only move elements."""


def _through_movement(v: Value) -> tuple[Operation, list[Operation]] | None:
    """(the op that produces ``v`` after single-use data movement, the movement ops in program
    order), when every op on the way has one user."""
    chain: list[Operation] = []
    op = _single_user(v)
    while op is not None and op.name in MOVEMENT:
        chain.append(op)
        op = _single_user(op.operands[0])
    return None if op is None else (op, chain[::-1])


def _has_constant_weights(op: Operation) -> bool:
    if op.name == "graph.gemm":
        return all(constant_value(v) is not None for v in op.operands[1:])
    return op.name == "graph.matmul" and op.operands[1].type.rank == 2 and constant_value(op.operands[1]) is not None


def _scaled_weights_op(rewriter: PatternRewriter, op: Operation, s: float) -> Value:
    """A copy of gemm/matmul ``op`` whose constant weights (and gemm bias) are scaled by ``s``."""
    operands: list[Value] = [op.operands[0]]
    for v in op.operands[1:]:
        operands.append(_const(rewriter, np.asarray(constant_value(v), np.float64) * s, v))
    return rewriter.create(op.name, operands, op.attributes).results[0]


def _rebuild(rewriter: PatternRewriter, v: Value, chain: Sequence[Operation]) -> Value:
    for m in chain:
        v = rewriter.create(m.name, [v], m.attributes).results[0]
    return v


@pattern("graph.mul", name="scale-through-matmul", benefit=2)
def scale_through_matmul(op: Operation, rewriter: PatternRewriter) -> bool:
    """``matmul(a, b) * s`` for a scalar ``s`` (reshapes and transposes allowed in between),
    where ``a`` or ``b`` comes the same way from a gemm/matmul with constant weights: ``s`` goes
    into those weights (attention's ``q k^T / sqrt(d)`` into the query projection)."""
    for i in (0, 1):
        c = constant_value(op.operands[1 - i])
        x = op.operands[i]
        if c is None or c.size != 1 or c.ndim > x.type.rank or not _float_like(x) or constant_value(x) is not None:
            continue
        found = _through_movement(x)
        if found is None or found[0].name not in ("graph.matmul", "graph.batch_matmul"):
            continue
        mm_op, after = found
        scale = float(np.asarray(c).reshape(()))
        for side in (0, 1):
            operand = _scaled_source(rewriter, mm_op.operands[side], scale)
            if operand is None:
                continue
            rewriter.set_insertion_point_before(op)
            operands = list(mm_op.operands)
            operands[side] = operand
            product = rewriter.create(mm_op.name, operands, mm_op.attributes).results[0]
            rewriter.replace_op(op, [_rebuild(rewriter, product, after)])
            return True
    return False


def _scaled_source(rewriter: PatternRewriter, v: Value, scale: float) -> Value | None:
    """``v * scale`` rebuilt from a gemm/matmul with the scale in its constant weights, or None
    (and nothing built) when ``v`` does not come from one.  ``v`` may be one piece of a
    ``split`` of such a product along its columns (GPT-2's fused QKV projection): then only
    that piece's columns are scaled and the other pieces are taken from the new split."""
    source = _through_movement(v)
    if source is None:
        return None
    producer, before = source
    if _has_constant_weights(producer):
        return _rebuild(rewriter, _scaled_weights_op(rewriter, producer, scale), before)
    if producer.name != "graph.split":
        return None
    piece = before[0].operands[0] if before else v
    upstream = _through_movement(producer.operands[0])
    rank = producer.operands[0].type.rank
    if upstream is None or not _has_constant_weights(upstream[0]) or producer.attributes["axis"] % rank != rank - 1:
        return None
    product, chain = upstream
    columns = product.results[0].type.shape[-1]
    if any(m.name == "graph.transpose" or m.results[0].type.shape[-1] != columns for m in chain):
        return None           # the split axis must still be the product's columns
    offsets = np.cumsum((0,) + tuple(producer.attributes["sizes"]))
    col_scale = np.ones(columns)
    col_scale[offsets[piece.index]:offsets[piece.index + 1]] = scale
    # Built right after the old split: its other pieces have users that may come before the mul.
    rewriter.set_insertion_point_after(producer)
    operands: list[Value] = [product.operands[0]]
    for i, w in enumerate(product.operands[1:], 1):
        wv = np.asarray(constant_value(w), np.float64)
        if i == 1 and product.name == "graph.gemm":
            wv = _gemm_column_scale(product, wv, col_scale)
        else:                 # matmul weights (K, N) and the gemm bias broadcast to (M, N): columns last
            wv = wv * col_scale
        operands.append(_const(rewriter, wv, w))
    scaled = rewriter.create(product.name, operands, product.attributes).results[0]
    new_split = rewriter.create("graph.split", [_rebuild(rewriter, scaled, chain)], producer.attributes)
    for old, new in zip(producer.results, new_split.results):
        if old is not piece:
            rewriter.replace_all_uses_with(old, new)
    return _rebuild(rewriter, new_split.results[piece.index], before)


FOLD_PATTERNS: tuple[Pattern, ...] = (
    bn_into_conv, bn_into_gemm, bn_into_matmul, bn_decompose, bias_into_conv, scale_into_conv,
    input_scale_into_conv, bias_into_gemm, scale_into_gemm, bias_into_matmul, scale_into_matmul,
    scale_through_matmul,
)
"""The inference folds; the canonical-form and reassociation rules of ``rules_extra`` and the
``identity`` rule of simplify run with them (see ``fold_inference_patterns``)."""

_HELPER_RULES = ("identity", "sub-const", "const-rhs-add", "const-rhs-mul")


@lru_cache(maxsize=1)
def fold_inference_patterns() -> tuple[Pattern, ...]:
    helpers = [r for r in SIMPLIFY_RULES + CANONICAL_RULES if r.name in _HELPER_RULES]
    return FOLD_PATTERNS + tuple(rules_to_patterns(helpers + AFFINE_RULES))


def fold_inference(root: Operation, *, fold_limit: int = DEFAULT_FOLD_LIMIT,
                   max_iterations: int = 10) -> RewriteStats:
    """Folds BatchNorm, bias adds and scales under ``root`` into conv/GEMM/matmul weights."""
    return apply_patterns_greedily(root, with_folding(fold_inference_patterns(), fold_limit), fold=False,
                                   max_iterations=max_iterations)


@register_pass
class FoldInferencePass(_GreedyPass):
    name = "fold-inference"
    summary = "fold BatchNorm, bias adds and scales into conv/GEMM weights; drop identities"
    options: ClassVar[dict[str, Option]] = {
        "limit": Option(DEFAULT_FOLD_LIMIT, "largest folded result (elements) allowed to grow the IR"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(fold_inference(module, fold_limit=self.limit, max_iterations=self.max_iterations))


__all__ = ["FOLD_PATTERNS", "FoldInferencePass", "bn_affine", "channel_vector", "fold_inference",
           "fold_inference_patterns"]
