"""BitShift as integer arithmetic: a left shift is a wrapping multiply by 2^s, a right shift a
floor division by 2^s (arithmetic, sign-extending for signed types).

Shift amounts outside [0, bits) give 0 (or -1 for a right shift of a negative value), as ONNX
defines.  The bitwise logic ops (BitwiseAnd/Or/Xor/Not) map to ``graph.bitwise_*``.
"""
from __future__ import annotations

from ...ir.core import Value
from .context import ImportContext, OnnxNode
from .registry import handles


@handles("BitShift")
def bit_shift(ctx: ImportContext, node: OnnxNode) -> Value:
    x, s = node.required(0), node.required(1)
    direction = node.attr("direction")
    dtype = ctx.dtype(x)
    if not dtype.is_int:
        raise node.unsupported(f"element type {dtype}")
    s = ctx.cast(s, dtype)
    bits = dtype.itemsize * 8
    signed = dtype.np.kind == "i"
    zero, one, two = ctx.scalar(0, x), ctx.scalar(1, x), ctx.scalar(2, x)
    # Largest shift that keeps 2^s positive in this type.
    top = bits - 2 if signed else bits - 1
    in_range = ctx.op("and", ctx.op("ge", s, zero), ctx.op("le", s, ctx.scalar(top, x)))
    safe = ctx.op("select", in_range, s, zero)
    power = ctx.op("pow", two, safe)
    negative = ctx.op("lt", x, zero) if signed else None
    if direction == "LEFT":
        shifted = ctx.op("mul", x, power)
        if signed:  # s = bits - 1: only the lowest bit survives, moved into the sign bit
            sign_bit = ctx.op("mul", ctx.op("mul", ctx.op("fmod", x, two), ctx.scalar(2 ** (bits - 2), x)), two)
            shifted = ctx.op("select", ctx.op("eq", s, ctx.scalar(bits - 1, x)), sign_bit, shifted)
            in_range = ctx.op("and", ctx.op("ge", s, zero), ctx.op("lt", s, ctx.scalar(bits, x)))
        return ctx.op("select", in_range, shifted, zero)
    if direction != "RIGHT":
        raise node.unsupported(f"direction='{direction}'")
    if not signed:
        return ctx.op("select", in_range, ctx.op("div", x, power), zero)
    # floor(x / p) for negative x is -((-(x + 1)) / p) - 1 with truncating division.
    pos = ctx.op("div", x, power)
    neg = ctx.op("sub", ctx.op("neg", ctx.op("div", ctx.op("neg", ctx.op("add", x, one)), power)), one)
    shifted = ctx.op("select", negative, neg, pos)
    fill = ctx.op("select", negative, ctx.scalar(-1, x), zero)
    return ctx.op("select", in_range, shifted, fill)


_BITWISE = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


@handles(*_BITWISE)
def bitwise(ctx: ImportContext, node: OnnxNode) -> Value:
    a, b = node.required(0), node.required(1)
    if not ctx.dtype(a).is_int or ctx.dtype(a).is_storage_only:
        raise node.unsupported(f"element type {ctx.dtype(a)}")
    return ctx.op(_BITWISE[node.op_type], a, b)


@handles("BitwiseNot")
def bitwise_not(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    if not ctx.dtype(x).is_int or ctx.dtype(x).is_storage_only:
        raise node.unsupported(f"element type {ctx.dtype(x)}")
    return ctx.op("bitwise_not", x)
