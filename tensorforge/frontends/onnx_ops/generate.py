"""Ops that make tensors from attributes and shapes: Constant, ConstantOfShape, Range, EyeLike,
Trilu, and the window functions.

Their outputs only depend on import-time values, so most become ``graph.constant`` (Range
becomes ``graph.iota``; Trilu selects with a constant mask).
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Value
from ...ir.symbolic import dim_ceildiv, dim_sub
from ...ir.types import DType
from .context import ImportContext, OnnxNode
from .dtypes import onnx_type_name, to_dtype
from .registry import handles

_CONSTANT_FORMS = ("value", "value_float", "value_floats", "value_int", "value_ints")


def _onnx_dtype(node: OnnxNode, code: int) -> DType:
    dtype = to_dtype(code)
    if dtype is None:
        raise node.unsupported(f"element type {onnx_type_name(code)} is not supported")
    return dtype


@handles("Constant")
def constant(ctx: ImportContext, node: OnnxNode) -> Value:
    for key in ("value_string", "value_strings", "sparse_value"):
        if node.has_attr(key):
            node.ignore(key)
            raise node.unsupported(f"attribute '{key}' (strings and sparse tensors are not supported)")
    present = [k for k in _CONSTANT_FORMS if node.has_attr(k)]
    if len(present) != 1:
        raise node.unsupported(f"expected exactly one value attribute, got {present or 'none'}")
    key = present[0]
    value = node.attr(key)
    if key == "value":
        t = next(a.t for a in node.proto.attribute if a.name == "value")
        return ctx.const(value, to_dtype(t.data_type))
    dtype = DType.f32 if key.startswith("value_float") else DType.i64
    return ctx.const(np.asarray(value), dtype)


@handles("ConstantOfShape")
def constant_of_shape(ctx: ImportContext, node: OnnxNode) -> Value:
    shape = ctx.dims_operand(node.required(0), "the shape")
    value = node.attr("value", None)
    if value is None:
        fill, dtype = np.zeros((), np.float32), DType.f32
    else:
        t = next(a.t for a in node.proto.attribute if a.name == "value")
        fill, dtype = np.asarray(value).reshape(-1)[:1].reshape(()), to_dtype(t.data_type)
    if all(isinstance(d, int) for d in shape) and math.prod(shape) <= 4096:
        return ctx.const(np.full(shape, fill, dtype=dtype.np), dtype)
    return ctx.op("expand", ctx.const(fill, dtype), shape=shape)


@handles("Range")
def range_(ctx: ImportContext, node: OnnxNode) -> Value:
    start_v, limit_v, delta_v = node.required(0), node.required(1), node.required(2)
    dtype = ctx.dtype(start_v)
    start = ctx.const_scalar(start_v, "start")
    delta = ctx.const_scalar(delta_v, "delta")
    if delta == 0:
        raise node.unsupported("delta is 0")
    if ctx.value_of(limit_v) is None and ctx.shape_vector(limit_v) is not None:
        return _symbolic_range(ctx, node, start, ctx.dim_scalar(limit_v, "limit"), delta, dtype)
    limit = ctx.const_scalar(limit_v, "limit")
    size = max(int(math.ceil((limit - start) / delta)), 0)
    return ctx.op("iota", size=size, start=float(start), step=float(delta), dtype=dtype)


def _symbolic_range(ctx: ImportContext, node: OnnxNode, start, limit, delta, dtype: DType) -> Value:
    """``Range(start, seq, delta)``: ``graph.iota`` of size ``ceil((limit - start) / delta)``, a dim
    when ``start`` and ``delta`` are integers and the count is provably >= 0."""
    if isinstance(limit, int):
        size = max(int(math.ceil((limit - start) / delta)), 0)
        return ctx.op("iota", size=size, start=float(start), step=float(delta), dtype=dtype)
    what = f"Range({start}, {limit}, {delta})"
    if float(start) != int(start) or float(delta) != int(delta):
        raise ctx._unbound(f"{what}: a symbolic limit needs an integer start and delta", ctx.sym_sites([limit]))
    start, delta = int(start), int(delta)
    if delta > 0:
        ctx.require_le(start, limit, f"{what}: the count")
        size = dim_ceildiv(dim_sub(limit, start), delta)
    else:
        ctx.require_le(limit, start, f"{what}: the count")
        size = dim_ceildiv(dim_sub(start, limit), -delta)
    return ctx.op("iota", size=size, start=float(start), step=float(delta), dtype=dtype)


@handles("EyeLike")
def eye_like(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    shape = ctx.static_shape(x, "EyeLike")
    if len(shape) != 2:
        raise node.unsupported(f"input must be 2-D, got {x.type}")
    code = node.attr("dtype", None)
    dtype = ctx.dtype(x) if code is None else _onnx_dtype(node, code)
    return ctx.const(np.eye(shape[0], shape[1], k=node.attr("k", 0), dtype=dtype.np), dtype)


@handles("Trilu")
def trilu(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    shape = ctx.static_shape(x, "Trilu")
    k = int(ctx.const_scalar(node.input(1), "k")) if node.input(1) is not None else 0
    rows, cols = shape[-2:]
    ones = np.ones((rows, cols), dtype=bool)
    mask = np.triu(ones, k) if node.attr("upper", 1) else np.tril(ones, k)
    return ctx.op("select", ctx.const(mask, DType.bool), x, ctx.scalar(0, x))


def _window(node: OnnxNode, size: int, terms: tuple[float, ...]) -> np.ndarray:
    """sum_j (-1)^j a_j cos(2 pi j n / N'), N' = size (periodic) or size - 1 (symmetric)."""
    n = np.arange(size, dtype=np.float64)
    denom = size if node.attr("periodic", 1) else size - 1
    out = np.zeros(size)
    for j, a in enumerate(terms):
        out += (-1) ** j * a * np.cos(2 * np.pi * j * n / denom) if j else a
    return out


@handles("HannWindow", "HammingWindow", "BlackmanWindow")
def window(ctx: ImportContext, node: OnnxNode) -> Value:
    size = int(ctx.const_scalar(node.required(0), "size"))
    dtype = _onnx_dtype(node, node.attr("output_datatype", 1))
    alpha = 25.0 / 46.0
    terms = {"HannWindow": (0.5, 0.5), "HammingWindow": (alpha, 1 - alpha),
             "BlackmanWindow": (0.42, 0.5, 0.08)}[node.op_type]
    return ctx.const(_window(node, size, terms).astype(dtype.np), dtype)
