"""Integer contractions: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

All four are exact compositions of graph ops: the 8-bit operands are widened to int32 and their
zero points subtracted, the contraction is a ``graph.matmul`` / ``graph.conv`` on int32 (int32
accumulation, as ONNX defines; every native kernel sums int32 exactly, modulo 2^32 like the
reference), and the QLinear ops requantize as ONNX's reference does: the scale
``a_scale * b_scale / y_scale`` in the scales' type, the product with the int32 accumulator in
f64 (NumPy's int32 x float promotion), plus the output zero point, rounded half to even and
saturated to the output type.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from ...ir.types import DType
from .context import ImportContext, OnnxNode
from .nn import _window_attrs
from .registry import handles


def _widen(ctx: ImportContext, node: OnnxNode, x: Value, zp: Value | None, per_axis_shape=None) -> Value:
    """``int32(x) - int32(zp)``; a 1-D zero point with more than one entry is reshaped to
    ``per_axis_shape(n)`` (per row of A, per output channel of W)."""
    if ctx.dtype(x) not in (DType.i8, DType.u8):
        raise node.unsupported(f"{ctx.dtype(x)} operands (int8/uint8 only)")
    y = ctx.cast(x, DType.i32)
    if zp is None:
        return y
    return ctx.op("sub", y, _param(ctx, node, zp, DType.i32, per_axis_shape))


def _param(ctx: ImportContext, node: OnnxNode, p: Value, dtype: DType, per_axis_shape=None) -> Value:
    shape = ctx.shape(p)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return ctx.cast(ctx.op("reshape", p, shape=()), dtype)
    if len(shape) == 1 and per_axis_shape is not None:
        return ctx.cast(ctx.op("reshape", p, shape=per_axis_shape(shape[0])), dtype)
    if len(shape) == 1:
        raise node.unsupported(f"a per-axis parameter of shape {shape} here")
    return ctx.cast(p, dtype)


def _rows(n):                 # per row of A: (M, 1)
    return (n, 1)


@handles("MatMulInteger")
def matmul_integer(ctx: ImportContext, node: OnnxNode) -> Value:
    a = _widen(ctx, node, node.required(0), node.input(2), _rows)
    b = _widen(ctx, node, node.required(1), node.input(3))
    return ctx.op("matmul", a, b)


def _conv_integer(ctx: ImportContext, node: OnnxNode, x: Value, xzp: Value | None, w: Value,
                  wzp: Value | None, bias: Value | None) -> Value:
    rank = ctx.rank(w)
    kernel = tuple(node.attr("kernel_shape", ctx.shape(w)[2:]))
    strides, pads, dilations = _window_attrs(ctx, node, x, kernel)
    xi = _widen(ctx, node, x, xzp)
    wi = _widen(ctx, node, w, wzp, lambda n: (n,) + (1,) * (rank - 1))
    return ctx.op("conv", xi, wi, bias, strides=strides, pads=pads, dilations=dilations,
                  groups=node.attr("group", 1))


@handles("ConvInteger")
def conv_integer(ctx: ImportContext, node: OnnxNode) -> Value:
    return _conv_integer(ctx, node, node.required(0), node.input(2), node.required(1), node.input(3), None)


def _requantize(ctx: ImportContext, node: OnnxNode, acc: Value, scale: Value, yzp: Value | None,
                out: DType) -> Value:
    """``saturate(round_half_even(f64(acc) * f64(scale) + zp))`` as ``out``."""
    if out not in (DType.i8, DType.u8):
        raise node.unsupported(f"{out} output (int8/uint8 only)")
    y = ctx.op("mul", ctx.cast(acc, DType.f64), ctx.cast(scale, DType.f64))
    if yzp is not None:
        y = ctx.op("add", y, ctx.cast(yzp, DType.f64))
    info = np.iinfo(out.np)
    y = ctx.op("clip", ctx.op("round", y), min=float(info.min), max=float(info.max))
    return ctx.cast(y, out)


def _scale(ctx: ImportContext, node: OnnxNode, a: Value, b: Value, y: Value, a_axis=None, b_axis=None) -> Value:
    """``a * b / y`` in the scales' own type (as the reference computes it)."""
    dt = ctx.dtype(a)
    return ctx.op("div", ctx.op("mul", _param(ctx, node, a, dt, a_axis), _param(ctx, node, b, dt, b_axis)),
                  _param(ctx, node, y, dt))


@handles("QLinearMatMul")
def qlinear_matmul(ctx: ImportContext, node: OnnxNode) -> Value:
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (node.input(i) for i in range(8))
    for i in (0, 1, 3, 4, 6):
        node.required(i)
    acc = ctx.op("matmul", _widen(ctx, node, a, a_zp, _rows), _widen(ctx, node, b, b_zp))
    out = ctx.dtype(y_zp) if y_zp is not None else ctx.dtype(a)
    return _requantize(ctx, node, acc, _scale(ctx, node, a_s, b_s, y_s, _rows),
                       None if y_zp is None else _param(ctx, node, y_zp, ctx.dtype(y_zp)), out)


@handles("QLinearConv")
def qlinear_conv(ctx: ImportContext, node: OnnxNode) -> Value:
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = (node.input(i) for i in range(8))
    for i in (0, 1, 3, 4, 6):
        node.required(i)
    rank = ctx.rank(w)
    acc = _conv_integer(ctx, node, x, x_zp, w, w_zp, node.input(8))
    per_out = lambda n: (1, n) + (1,) * (rank - 2)        # noqa: E731  (per output channel of y)
    out = ctx.dtype(y_zp) if y_zp is not None else ctx.dtype(x)
    return _requantize(ctx, node, acc, _scale(ctx, node, x_s, w_s, y_s, None, per_out),
                       None if y_zp is None else _param(ctx, node, y_zp, ctx.dtype(y_zp)), out)
