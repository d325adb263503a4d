"""Transformer ops: Attention (opset 23+), RotaryEmbedding and SwiGLU.

ONNX Attention has many variants (3-D packed heads, grouped-query heads, KV cache, boolean
or additive masks, causal and sliding-window masks, soft-capping, padded KV lengths, extra
outputs).  Whatever ``graph.attention`` expresses maps onto it: 3-D or 4-D heads, grouped-query
heads (read in place, not repeated), a KV cache (concatenated), bool or additive masks as wide
as the keys, and causal masking without a cache (top-left aligned).  Every other form
(windows, padded KV lengths, causal with a cache, soft-capping, softmax precision, the QK
output) is written out as the graph ops of its definition: scaled Q K^T, an additive bias of
0 / -inf, a softmax that gives 0 (not NaN) for fully masked rows, and the product with V.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Value
from ...ir.types import DType
from .context import ImportContext, OnnxNode
from .dtypes import to_dtype
from .registry import handles

_QK_WITH_BIAS, _QK_AFTER_SOFTMAX = 2, 3


def _split_heads(ctx: ImportContext, node: OnnxNode, x: Value, heads: int | None, what: str) -> Value:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = ctx.static_shape(x, "Attention")
    if not heads or hidden % heads:
        raise node.unsupported(f"{what} has hidden size {hidden}, which {heads} heads do not divide")
    x = ctx.op("reshape", x, shape=(b, s, heads, hidden // heads))
    return ctx.op("transpose", x, perm=(0, 2, 1, 3))


def _merge_heads(ctx: ImportContext, y: Value, b: int, q_len: int) -> Value:
    """(B, H, S, Dv) -> (B, S, H*Dv), the packed layout of a 3-D Attention."""
    _, h, _, dv = ctx.shape(y)
    return ctx.op("reshape", ctx.op("transpose", y, perm=(0, 2, 1, 3)), shape=(b, q_len, h * dv))


def _mask_needs_padding(ctx: ImportContext, mask: Value | None, kv_len: int) -> bool:
    """A mask narrower than the keys (ONNX pads it with -inf / false): only the bias path pads."""
    return mask is not None and ctx.shape(mask)[-1] != kv_len


def _graph_mask(ctx: ImportContext, mask: Value | None, like: Value) -> list[Value]:
    """The mask operand of ``graph.attention``: bool as it is (true = attend), else additive in
    the query's element type; none without a mask."""
    if mask is None:
        return []
    return [mask if ctx.dtype(mask) is DType.bool else ctx.cast(mask, ctx.dtype(like))]


def _repeat_heads(ctx: ImportContext, x: Value, reps: int) -> Value:
    """np.repeat(x, reps, axis=1) for a (B, H, L, D) tensor."""
    if reps == 1:
        return x
    b, h, n, d = ctx.shape(x)
    x = ctx.op("reshape", x, shape=(b, h, 1, n, d))
    x = ctx.op("expand", x, shape=(b, h, reps, n, d))
    return ctx.op("reshape", x, shape=(b, h * reps, n, d))


def _neg_inf_where_not(ctx: ImportContext, allowed: Value, like: Value) -> Value:
    return ctx.op("select", allowed, ctx.scalar(0, like), ctx.scalar(-np.inf, like))


def _position_bias(ctx: ImportContext, q_len: int, kv_len: int, offset, like: Value, causal: bool,
                   left: int, right: int) -> Value:
    """0 / -inf bias for query i and key j at absolute query position i + offset.

    ``offset`` is an int (past length) or a (B,) value (per-batch KV length - q_len); the
    result is (q, kv) or (B, 1, q, kv).
    """
    i = np.arange(q_len, dtype=np.int64).reshape(q_len, 1)
    j = np.arange(kv_len, dtype=np.int64).reshape(1, kv_len)
    if isinstance(offset, int):
        diff = i + offset - j
        allowed = np.ones((q_len, kv_len), dtype=bool)
        if causal:
            allowed &= diff >= 0
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        return ctx.const(np.where(allowed, 0, -np.inf).astype(ctx.dtype(like).np), ctx.dtype(like))
    b = ctx.shape(offset)[0]
    pos = ctx.op("add", ctx.const(i), ctx.op("reshape", offset, shape=(b, 1, 1)))
    diff = ctx.op("sub", pos, ctx.const(j))
    conds = []
    if causal:
        conds.append(ctx.op("ge", diff, ctx.scalar(0, DType.i64)))
    if left >= 0:
        conds.append(ctx.op("le", diff, ctx.scalar(left, DType.i64)))
    if right >= 0:
        conds.append(ctx.op("ge", diff, ctx.scalar(-right, DType.i64)))
    allowed = conds[0]
    for c in conds[1:]:
        allowed = ctx.op("and", allowed, c)
    bias = _neg_inf_where_not(ctx, allowed, like)
    return ctx.op("reshape", bias, shape=(b, 1, q_len, kv_len))


def _mask_bias(ctx: ImportContext, mask: Value, kv_len: int, like: Value) -> Value:
    """An attention mask as an additive bias: bool (true = attend) or float, padded to kv_len."""
    width = ctx.shape(mask)[-1]
    is_bool = ctx.dtype(mask) is DType.bool
    if width < kv_len:
        rank = ctx.rank(mask)
        pads = [0] * (2 * rank)
        pads[2 * rank - 1] = kv_len - width
        mask = ctx.op("pad", mask, pads=tuple(pads), mode="constant", value=0.0 if is_bool else -np.inf)
    if is_bool:
        return _neg_inf_where_not(ctx, mask, like)
    return ctx.cast(mask, ctx.dtype(like))


def _add(ctx: ImportContext, a: Value | None, b: Value | None) -> Value | None:
    if a is None:
        return b
    return a if b is None else ctx.op("add", a, b)


def _masked_softmax(ctx: ImportContext, scores: Value, bias: Value) -> Value:
    """Softmax over the last axis where a row masked everywhere gives zeros, as ONNX defines."""
    m = ctx.op("reduce_max", scores, axes=(-1 % ctx.rank(scores),), keepdims=True)
    neg_inf = ctx.scalar(-np.inf, scores)
    zero, one = ctx.scalar(0, scores), ctx.scalar(1, scores)
    m = ctx.op("select", ctx.op("eq", m, neg_inf), zero, m)
    e = ctx.op("exp", ctx.op("sub", scores, m))
    s = ctx.op("reduce_sum", e, axes=(ctx.rank(e) - 1,), keepdims=True)
    p = ctx.op("div", e, ctx.op("select", ctx.op("eq", s, zero), one, s))
    return ctx.op("select", _dead_rows(ctx, bias), ctx.scalar(0, p), p)


def _dead_rows(ctx: ImportContext, bias: Value) -> Value:
    """True for the query rows whose additive bias is -inf at every key (no key to attend)."""
    row_max = ctx.op("reduce_max", bias, axes=(ctx.rank(bias) - 1,), keepdims=True)
    return ctx.op("eq", row_max, ctx.scalar(-np.inf, bias))


def _zero_masked_rows(ctx: ImportContext, y: Value, v: Value, mask: Value, kv_len: int, q_len: int,
                      causal: bool, groups: int) -> Value:
    """ONNX decides a fully masked query row on the mask (and causal) bias, not on the scores:
    its probabilities are 0 even where a score is +inf or NaN (``graph.attention`` follows
    torch, which adds the -inf and gives NaN there), so the row is ``0 @ V``: 0, or NaN in a
    column of V holding an infinity or NaN.  A constant mask without such a row costs nothing."""
    known = ctx.value_of(mask)
    if known is not None:
        keep = known if known.dtype == np.bool_ else ~np.isneginf(known)
        if causal:
            keep = keep & np.tril(np.ones((q_len, kv_len), dtype=bool))
        if keep.shape[-1] == kv_len and keep.any(axis=-1).all():
            return y
    bias = _mask_bias(ctx, mask, kv_len, y)
    if causal:
        bias = ctx.op("add", bias, _position_bias(ctx, q_len, kv_len, 0, y, True, -1, -1))
    dead = _dead_rows(ctx, bias)
    zero_rows = ctx.op("reduce_sum", ctx.op("mul", v, ctx.scalar(0, v)), axes=(ctx.rank(v) - 2,), keepdims=True)
    zero_rows = _repeat_heads(ctx, zero_rows, groups)      # (B, Hkv, 1, Dv): one row per KV head
    return ctx.op("select", dead, ctx.cast(zero_rows, ctx.dtype(y)), y)


@handles("Attention")
def attention(ctx: ImportContext, node: OnnxNode) -> list[Value | None]:
    q, k, v = node.required(0), node.required(1), node.required(2)
    mask, past_k, past_v = node.input(3), node.input(4), node.input(5)
    nonpad = node.input(6)
    causal = bool(node.attr("is_causal", 0))
    scale = node.attr("scale", None)
    softcap = node.attr("softcap", 0.0)
    mode = node.attr("qk_matmul_output_mode", 0)
    precision = node.attr("softmax_precision", None)
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    q_heads, kv_heads = node.attr("q_num_heads", None), node.attr("kv_num_heads", None)
    packed = ctx.rank(q) == 3
    if packed:
        q = _split_heads(ctx, node, q, q_heads, "Q")
        k = _split_heads(ctx, node, k, kv_heads, "K")
        v = _split_heads(ctx, node, v, kv_heads, "V")
    elif ctx.rank(q) != 4:
        raise node.unsupported(f"Q must be 3-D or 4-D, got {q.type}")
    if (past_k is None) != (past_v is None):
        raise node.unsupported("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise node.unsupported("nonpad_kv_seqlen together with a past cache")
    b, hq, q_len, d = ctx.static_shape(q, "Attention")
    if past_k is not None:
        k = ctx.op("concat", [past_k, k], axis=2)
        v = ctx.op("concat", [past_v, v], axis=2)
    present_k, present_v = k, v
    hk = ctx.shape(k)[1]
    kv_len = ctx.shape(k)[2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if hk and hq % hk:
        raise node.unsupported(f"{hq} query heads are not a multiple of {hk} KV heads")

    extra = softcap > 0 or node.wants(3) or precision is not None
    windowed = left >= 0 or right >= 0 or nonpad is not None
    if not (extra or windowed or (causal and past_k is not None) or _mask_needs_padding(ctx, mask, kv_len)):
        y = ctx.op("attention", q, k, v, *_graph_mask(ctx, mask, q), scale=scale, causal=causal)
        if mask is not None:
            y = _zero_masked_rows(ctx, y, v, mask, kv_len, q_len, causal, hq // hk if hk else 1)
        y = _merge_heads(ctx, y, b, q_len) if packed else y
        return [y, present_k if node.wants(1) else None, present_v if node.wants(2) else None]

    bias = _mask_bias(ctx, mask, kv_len, q) if mask is not None else None
    if causal or left >= 0 or right >= 0:
        past_len = ctx.shape(past_k)[2] if past_k is not None else 0
        offset = past_len if nonpad is None else ctx.op("sub", ctx.cast(nonpad, DType.i64),
                                                        ctx.scalar(q_len, DType.i64))
        bias = _add(ctx, bias, _position_bias(ctx, q_len, kv_len, offset, q, causal, left, right))
    if nonpad is not None:
        lengths = ctx.op("reshape", ctx.cast(nonpad, DType.i64), shape=(b, 1, 1, 1))
        valid = ctx.op("lt", ctx.const(np.arange(kv_len, dtype=np.int64)), lengths)
        bias = _add(ctx, bias, _neg_inf_where_not(ctx, valid, q))

    if hq != hk:
        k, v = _repeat_heads(ctx, k, hq // hk), _repeat_heads(ctx, v, hq // hk)
    root = ctx.scalar(math.sqrt(scale), q)
    scores = ctx.op("matmul", ctx.op("mul", q, root),
                    ctx.op("transpose", ctx.op("mul", k, root), perm=(0, 1, 3, 2)))
    if softcap > 0:
        cap = ctx.scalar(softcap, scores)
        scores = ctx.op("mul", ctx.op("tanh", ctx.op("div", scores, cap)), cap)
    qk_out = scores
    with_bias = scores if bias is None else ctx.op("add", scores, bias)
    if mode == _QK_WITH_BIAS:
        qk_out = with_bias
    work = with_bias
    if precision is not None:
        target = to_dtype(precision)
        if target is None:
            raise node.unsupported(f"softmax_precision={precision}")
        work = ctx.cast(work, target)
    probs = ctx.op("softmax", work, axis=-1) if bias is None else \
        _masked_softmax(ctx, work, ctx.cast(bias, ctx.dtype(work)))
    probs = ctx.cast(probs, ctx.dtype(q))
    if mode == _QK_AFTER_SOFTMAX:
        qk_out = probs
    y = ctx.op("matmul", probs, v)
    if packed:
        y = _merge_heads(ctx, y, b, q_len)
    return [y, present_k if node.wants(1) else None, present_v if node.wants(2) else None,
            qk_out if node.wants(3) else None]


@handles("RotaryEmbedding")
def rotary_embedding(ctx: ImportContext, node: OnnxNode) -> Value:
    x, cos, sin, pos = node.required(0), node.required(1), node.required(2), node.input(3)
    interleaved = bool(node.attr("interleaved", 0))
    heads = node.attr("num_heads", 0)
    shape = ctx.static_shape(x, "RotaryEmbedding")
    if len(shape) == 4:
        y = ctx.op("transpose", x, perm=(0, 2, 1, 3))          # (B, S, H, D)
    elif len(shape) == 3:
        if not heads or shape[2] % heads:
            raise node.unsupported(f"num_heads={heads} does not divide hidden size {shape[2]}")
        y = ctx.op("reshape", x, shape=(shape[0], shape[1], heads, shape[2] // heads))
    else:
        raise node.unsupported(f"input must be 3-D or 4-D, got {x.type}")
    b, s, h, d = ctx.shape(y)
    rot = node.attr("rotary_embedding_dim", 0) or d
    half = rot // 2
    if pos is not None:
        cos, sin = ctx.op("gather", cos, pos, axis=0), ctx.op("gather", sin, pos, axis=0)
    if ctx.shape(cos)[-1] != half:
        raise node.unsupported(f"the cos cache has {ctx.shape(cos)[-1]} entries per position, "
                               f"expected rotary_embedding_dim/2 = {half}")
    cos, sin = ctx.op("unsqueeze", cos, axes=(2,)), ctx.op("unsqueeze", sin, axes=(2,))

    def part(start: int, end: int, step: int = 1) -> Value:
        return ctx.op("slice", y, starts=(start,), ends=(end,), axes=(3,), steps=(step,))
    x1, x2 = (part(0, rot, 2), part(1, rot, 2)) if interleaved else (part(0, half), part(half, rot))
    real = ctx.op("sub", ctx.op("mul", cos, x1), ctx.op("mul", sin, x2))
    imag = ctx.op("add", ctx.op("mul", sin, x1), ctx.op("mul", cos, x2))
    if interleaved:
        pair = ctx.op("concat", [ctx.op("unsqueeze", real, axes=(4,)), ctx.op("unsqueeze", imag, axes=(4,))], axis=4)
        rotated = ctx.op("reshape", pair, shape=(b, s, h, rot))
    else:
        rotated = ctx.op("concat", [real, imag], axis=3)
    if rot < d:
        rotated = ctx.op("concat", [rotated, part(rot, d)], axis=3)
    if len(shape) == 3:
        return ctx.op("reshape", rotated, shape=shape)
    return ctx.op("transpose", rotated, perm=(0, 2, 1, 3))


@handles("SwiGLU")
def swiglu(ctx: ImportContext, node: OnnxNode) -> Value:
    a, b = node.required(0), node.required(1)
    alpha = node.attr("alpha", 1.0)
    gate = ctx.op("silu", a) if alpha == 1.0 else \
        ctx.op("mul", a, ctx.op("sigmoid", ctx.op("mul", a, ctx.scalar(alpha, a))))
    return ctx.op("mul", gate, b)
