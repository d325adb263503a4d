"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Written as float arithmetic: ``q = clip(round_half_even(x / scale) + zero_point)`` and
``x = (q - zero_point) * scale``, with per-tensor, per-axis and blocked scales broadcast to
the input.  Integer quantized types (int8, uint8, int16, uint16, int4, uint4, int2, uint2) clip;
float8/float4 outputs round by a cast (saturating unless ``saturate=0``).
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from ...ir.types import DType
from .common import norm_axis
from .context import ImportContext, OnnxNode
from .dtypes import onnx_type_name, to_dtype
from .registry import handles


def _broadcast_param(ctx: ImportContext, node: OnnxNode, p: Value, x: Value, axis: int, block: int) -> Value:
    """A scale or zero point reshaped (or, blocked, repeated) to broadcast against ``x``."""
    shape = ctx.shape(p)
    rank = ctx.rank(x)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return ctx.op("reshape", p, shape=())
    if not block:
        if len(shape) != 1:
            raise node.unsupported(f"a per-axis parameter must be 1-D, got {p.type}")
        dims = [1] * rank
        dims[axis] = shape[0]
        return ctx.op("reshape", p, shape=tuple(dims))
    if len(shape) != rank:
        raise node.unsupported(f"a blocked parameter must have the rank of the input, got {p.type}")
    n = shape[axis]
    wide = list(shape)
    wide.insert(axis + 1, block)
    merged = list(shape)
    merged[axis] = n * block
    y = ctx.op("expand", ctx.op("unsqueeze", p, axes=(axis + 1,)), shape=tuple(wide))
    y = ctx.op("reshape", y, shape=tuple(merged))
    full = ctx.shape(x)[axis]
    if full != n * block:
        y = ctx.op("slice", y, starts=(0,), ends=(full,), axes=(axis,), steps=(1,))
    return y


def _quant_layout(node: OnnxNode, x: Value, scale: Value, ctx: ImportContext) -> tuple[int, int]:
    block = node.attr("block_size", 0) if node.opset >= 21 else 0
    if not block and ctx.shape(scale) in ((), (1,)):
        node.ignore("axis")
        return 0, block      # per-tensor: ONNX ignores the axis (default 1, even for a 1-D input)
    axis = norm_axis(node, node.attr("axis", 1), max(ctx.rank(x), 1)) if ctx.rank(x) else 0
    return axis, block


def _saturate(ctx: ImportContext, node: OnnxNode, y: Value, dtype: DType) -> Value:
    if dtype.is_float or dtype is DType.bool:
        raise node.unsupported(f"quantizing to {dtype} is not supported")
    lo, hi = dtype.int_range
    return ctx.cast(ctx.op("clip", y, min=float(lo), max=float(hi)), dtype)


@handles("QuantizeLinear")
def quantize(ctx: ImportContext, node: OnnxNode) -> Value:
    x, scale, zp = node.required(0), node.required(1), node.input(2)
    axis, block = _quant_layout(node, x, scale, ctx)
    saturate = node.attr("saturate", 1) if node.opset >= 19 else 1   # float8 outputs only
    code = node.attr("output_dtype", 0) if node.opset >= 21 else 0
    if zp is not None:
        out = ctx.dtype(zp)
    elif code:
        out = to_dtype(code)
        if out is None:
            raise node.unsupported(f"output_dtype {onnx_type_name(code)}")
    else:
        out = DType.u8
    precision = node.attr("precision", 0) if node.opset >= 25 else 0
    work = to_dtype(precision) if precision else ctx.dtype(x)
    if work is None or not work.is_float:
        raise node.unsupported(f"precision {onnx_type_name(precision)}")
    xs = ctx.cast(x, work)
    s = ctx.cast(_broadcast_param(ctx, node, scale, x, axis, block), work)
    if out.is_storage_only and out.is_float:
        # float8/float4: x / scale rounded by the cast (as the ONNX reference: float8 ignores the
        # zero point, float4 adds it), saturating unless saturate=0 (float8)
        y = ctx.op("div", xs, s)
        if zp is not None and out is DType.f4e2m1:
            y = ctx.op("add", y, ctx.cast(_broadcast_param(ctx, node, zp, x, axis, block), work))
        return ctx.op("cast", y, dtype=out, saturate=None if saturate else False)
    y = ctx.op("round", ctx.op("div", xs, s))
    if zp is not None:
        y = ctx.op("add", y, ctx.cast(_broadcast_param(ctx, node, zp, x, axis, block), work))
    if not _bounds_exact(out, work):
        y = ctx.cast(y, DType.f64)  # the clip bounds of 32-bit types are not exact in f32
    return _saturate(ctx, node, y, out)


def _bounds_exact(out: DType, work: DType) -> bool:
    """Whether ``work`` holds ``out``'s integer range exactly, so the saturating clip can run in
    ``work`` (8- and 16-bit types in float32: a clip in float64 would give the same values, and
    the quantize chain stays in float32 SIMD lanes)."""
    if out.is_float or out is DType.bool or work.is_storage_only:
        return False
    return all(int(np.array(b, work.np)) == b for b in out.int_range)


@handles("DequantizeLinear")
def dequantize(ctx: ImportContext, node: OnnxNode) -> Value:
    x, scale, zp = node.required(0), node.required(1), node.input(2)
    axis, block = _quant_layout(node, x, scale, ctx)
    code = node.attr("output_dtype", 0) if node.opset >= 23 else 0
    out = to_dtype(code) if code else ctx.dtype(scale)
    if out is None:
        raise node.unsupported(f"output_dtype {onnx_type_name(code)}")
    dx = ctx.cast(x, DType.f32)
    if zp is not None:
        dx = ctx.op("sub", dx, ctx.cast(_broadcast_param(ctx, node, zp, x, axis, block), DType.f32))
    y = ctx.op("mul", dx, ctx.cast(_broadcast_param(ctx, node, scale, x, axis, block), DType.f32))
    return ctx.cast(y, out)


@handles("DynamicQuantizeLinear")
def dynamic_quantize(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.required(0)
    zero = ctx.scalar(0, x)
    lo = ctx.op("min", ctx.op("reduce_min", x, axes=(), keepdims=False), zero)
    hi = ctx.op("max", ctx.op("reduce_max", x, axes=(), keepdims=False), zero)
    scale = ctx.op("div", ctx.op("sub", hi, lo), ctx.scalar(255, x))
    zp_f = ctx.op("clip", ctx.op("round", ctx.op("div", ctx.op("neg", lo), scale)), min=0.0, max=255.0)
    zp = ctx.cast(zp_f, DType.u8)
    y = ctx.op("add", ctx.op("round", ctx.op("div", x, scale)), zp_f)
    return [_saturate(ctx, node, y, DType.u8), scale, zp]
