"""Ops that carry a recurrent state (opset 27): CausalConvWithState and LinearAttention.

Both are written with graph ops, as the ONNX definitions state them: the causal convolution is
the past state (or zeros) concatenated before the input, a depthwise valid convolution and an
optional SiLU, the new state the last ``k - 1`` positions; linear attention is its recurrence
over the static sequence length, unrolled (as ``rnn.py`` unrolls RNN/GRU/LSTM), accumulating in
float32 whatever the activations' type.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Value
from ...ir.types import DType
from .context import ImportContext, OnnxNode
from .registry import handles

_MAX_STEPS = 512


def _take(ctx: ImportContext, x: Value, index: int, axis: int) -> Value:
    """x[index] along ``axis``, that axis removed."""
    part = ctx.op("slice", x, starts=(index,), ends=(index + 1,), axes=(axis,), steps=(1,))
    return ctx.op("squeeze", part, axes=(axis,))


def _silu(ctx: ImportContext, y: Value) -> Value:
    dtype = ctx.dtype(y)
    y32 = ctx.cast(y, DType.f32)
    return ctx.cast(ctx.op("mul", y32, ctx.op("sigmoid", y32)), dtype)


@handles("CausalConvWithState")
def causal_conv_with_state(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, w = node.required(0), node.required(1)
    bias, past = node.input(2), node.input(3)
    activation = node.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise node.unsupported(f"activation='{activation}'")
    if ctx.rank(x) != 3 or ctx.rank(w) != 3:
        raise node.unsupported(f"input and weight must be rank 3, got {x.type} and {w.type}")
    batch, channels, length = ctx.static_shape(x, "CausalConvWithState")
    k = ctx.static_shape(w, "CausalConvWithState")[2]
    if past is None:
        past = ctx.const(np.zeros((batch, channels, k - 1)), ctx.dtype(x))
    padded = ctx.op("concat", [past, x], axis=2) if k > 1 else x
    y = ctx.op("conv", padded, w, bias, strides=(1,), pads=(0, 0), dilations=(1,), groups=channels)
    if activation != "none":
        y = _silu(ctx, y)
    total = length + k - 1
    state = ctx.op("slice", padded, starts=(total - (k - 1),), ends=(total,), axes=(2,), steps=(1,))
    return [y, state]


def _heads(ctx: ImportContext, x: Value, heads: int) -> Value:
    """(B, T, H*D) -> (B, H, T, D) in float32."""
    b, t, hd = ctx.static_shape(x, "LinearAttention")
    four = ctx.op("reshape", x, shape=(b, t, heads, hd // heads))
    return ctx.cast(ctx.op("transpose", four, perm=(0, 2, 1, 3)), DType.f32)


@handles("LinearAttention")
def linear_attention(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    q, k, v = node.required(0), node.required(1), node.required(2)
    past, decay, beta = node.input(3), node.input(4), node.input(5)
    rule = node.attr("update_rule", "gated_delta")
    hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
    scale = node.attr("scale", 0.0)
    node.ignore("chunk_size")                           # a tuning hint: no effect on the result
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise node.unsupported(f"update_rule='{rule}'")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise node.unsupported(f"update_rule='{rule}' with decay {'given' if decay else 'absent'} and beta "
                               f"{'given' if beta else 'absent'}")
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise node.unsupported(f"q_num_heads={hq} is not a positive multiple of kv_num_heads={hkv}")
    b, t, qd = ctx.static_shape(q, "LinearAttention")
    if t > _MAX_STEPS:
        raise node.unsupported(f"{t} time steps (unrolled up to {_MAX_STEPS})")
    dk, dv = qd // hq, ctx.static_shape(v, "LinearAttention")[2] // hkv
    group = hq // hkv
    q4, k4, v4 = _heads(ctx, q, hq), _heads(ctx, k, hkv), _heads(ctx, v, hkv)
    if decay is not None:
        last = ctx.static_shape(decay, "LinearAttention")[2]
        if last == hkv:
            decay4 = ctx.cast(ctx.op("transpose", ctx.op("reshape", decay, shape=(b, t, hkv, 1)), perm=(0, 2, 1, 3)),
                              DType.f32)
        elif last == hkv * dk:
            decay4 = _heads(ctx, decay, hkv)
        else:
            raise node.unsupported(f"decay's last dim {last} is neither kv_num_heads nor kv_num_heads*d_k")
        decay4 = ctx.op("exp", decay4)                   # (B, H_kv, T, 1 | d_k)
    if beta is not None:
        last = ctx.static_shape(beta, "LinearAttention")[2]
        if last not in (hkv, 1):
            raise node.unsupported(f"beta's last dim {last} is neither kv_num_heads nor 1")
        beta4 = ctx.cast(ctx.op("transpose", ctx.op("reshape", beta, shape=(b, t, last, 1)), perm=(0, 2, 1, 3)),
                         DType.f32)                      # (B, H_kv | 1, T, 1)
    state_dtype = ctx.dtype(past) if past is not None else ctx.dtype(q)
    state = (ctx.cast(past, DType.f32) if past is not None
             else ctx.const(np.zeros((b, hkv, dk, dv), np.float32), DType.f32))
    scale_v = ctx.scalar(1.0 / math.sqrt(dk) if not scale else float(scale), DType.f32)
    outs = []
    for i in range(t):
        k_t, v_t = _take(ctx, k4, i, 2), _take(ctx, v4, i, 2)          # (B, H_kv, d)
        if gating:
            g_t = _take(ctx, decay4, i, 2)                              # (B, H_kv, 1 | d_k)
            state = ctx.op("mul", state, ctx.op("unsqueeze", g_t, axes=(3,)))
        if delta:
            retrieved = ctx.op("squeeze", ctx.op("matmul", ctx.op("unsqueeze", k_t, axes=(2,)), state), axes=(2,))
            v_t = ctx.op("mul", _take(ctx, beta4, i, 2), ctx.op("sub", v_t, retrieved))
        state = ctx.op("add", state, ctx.op("mul", ctx.op("unsqueeze", k_t, axes=(3,)),
                                            ctx.op("unsqueeze", v_t, axes=(2,))))
        read = state
        if group > 1:                                    # query head h reads kv head h // group
            read = ctx.op("reshape", ctx.op("expand", ctx.op("unsqueeze", state, axes=(2,)),
                                            shape=(b, hkv, group, dk, dv)), shape=(b, hq, dk, dv))
        q_t = ctx.op("unsqueeze", _take(ctx, q4, i, 2), axes=(2,))      # (B, H_q, 1, d_k)
        outs.append(ctx.op("mul", ctx.op("matmul", q_t, read), scale_v))  # (B, H_q, 1, d_v)
    out = outs[0] if t == 1 else ctx.op("concat", outs, axis=2)         # (B, H_q, T, d_v)
    out = ctx.op("reshape", ctx.op("transpose", out, perm=(0, 2, 1, 3)), shape=(b, t, hq * dv))
    return [ctx.cast(out, ctx.dtype(q)), ctx.cast(state, state_dtype)]
