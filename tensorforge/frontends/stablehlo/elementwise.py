"""Elementwise StableHLO/CHLO ops -> graph elementwise ops (which broadcast implicitly).

Semantics follow StableHLO, which agree with the graph ops': integer ``divide`` and ``remainder``
truncate toward zero (C), ``maximum``/``minimum`` propagate NaN, ``round_nearest_even`` is
ONNX ``Round``.  Ops without a graph twin are spelled with a few graph ops.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Operation, Value
from ...ir.types import DType
from .attributes import enum_value
from .context import ImportContext
from .importer import converts

_BINARY = {"stablehlo.add": "add", "stablehlo.subtract": "sub", "stablehlo.multiply": "mul",
           "stablehlo.divide": "div", "stablehlo.maximum": "max", "stablehlo.minimum": "min",
           "stablehlo.power": "pow", "stablehlo.remainder": "fmod"}
_LOGICAL = {"stablehlo.and": ("and", "bitwise_and"), "stablehlo.or": ("or", "bitwise_or"),
            "stablehlo.xor": ("xor", "bitwise_xor")}
_UNARY = {"stablehlo.abs": "abs", "stablehlo.negate": "neg", "stablehlo.exponential": "exp",
          "stablehlo.log": "log", "stablehlo.sqrt": "sqrt", "stablehlo.rsqrt": "rsqrt", "stablehlo.tanh": "tanh",
          "stablehlo.logistic": "sigmoid", "stablehlo.sine": "sin", "stablehlo.cosine": "cos",
          "stablehlo.floor": "floor", "stablehlo.ceil": "ceil", "stablehlo.round_nearest_even": "round",
          "stablehlo.sign": "sign", "chlo.erf": "erf", "chlo.asin": "asin", "chlo.acos": "acos",
          "chlo.atan": "atan"}
_COMPARE = {"EQ": "eq", "NE": "ne", "LT": "lt", "LE": "le", "GT": "gt", "GE": "ge"}


def operands_for(ctx: ImportContext, op: Operation) -> list[Value]:
    """The operands as values that broadcast to the result (pending broadcasts stay small); when
    together they would not reach the result's shape, the first is materialised."""
    vals = [ctx.get_broadcastable(v) for v in op.operands]
    shape = tuple(op.results[0].type.shape)
    if tuple(np.broadcast_shapes(*[tuple(v.type.shape) for v in vals])) != shape:
        vals[0] = ctx.get(op.operands[0])
    return vals


def _bind(ctx: ImportContext, op: Operation, value: Value) -> None:
    ctx.bind(op.results[0], value)


@converts(*_BINARY)
def binary(ctx: ImportContext, op: Operation) -> None:
    a, b = operands_for(ctx, op)
    _bind(ctx, op, getattr(ctx.g, _BINARY[op.name])(a, b))


@converts(*_LOGICAL)
def logical(ctx: ImportContext, op: Operation) -> None:
    a, b = operands_for(ctx, op)
    boolean, bitwise = _LOGICAL[op.name]
    _bind(ctx, op, getattr(ctx.g, boolean if a.type.dtype is DType.bool else bitwise)(a, b))


@converts(*_UNARY)
def unary(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, getattr(ctx.g, _UNARY[op.name])(x))


@converts("stablehlo.not")
def logical_not(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, getattr(ctx.g, "not")(x) if x.type.dtype is DType.bool else ctx.g.bitwise_not(x))


def _one(ctx: ImportContext, like: Value, value: float) -> Value:
    return ctx.scalar_like(value, like.type)


@converts("stablehlo.exponential_minus_one")
def expm1(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, ctx.g.sub(ctx.g.exp(x), _one(ctx, x, 1.0)))


@converts("stablehlo.log_plus_one")
def log1p(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, ctx.g.log(ctx.g.add(x, _one(ctx, x, 1.0))))


@converts("stablehlo.is_finite")
def is_finite(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, ctx.g.lt(ctx.g.abs(x), _one(ctx, x, math.inf)))       # NaN compares false


@converts("stablehlo.cbrt")
def cbrt(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    root = ctx.g.pow(ctx.g.abs(x), _one(ctx, x, 1.0 / 3.0))
    _bind(ctx, op, ctx.g.mul(ctx.g.sign(x), root))


@converts("stablehlo.round_nearest_afz")
def round_half_away(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    mag = ctx.g.floor(ctx.g.add(ctx.g.abs(x), _one(ctx, x, 0.5)))
    _bind(ctx, op, ctx.g.mul(ctx.g.sign(x), mag))


@converts("stablehlo.tan", "chlo.tan")
def tan(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, ctx.g.div(ctx.g.sin(x), ctx.g.cos(x)))


@converts("stablehlo.convert")
def convert(ctx: ImportContext, op: Operation) -> None:
    x = ctx.get_broadcastable(op.operands[0])
    y = ctx.cast(x, op.results[0].type.dtype)
    if tuple(y.type.shape) == tuple(op.results[0].type.shape):
        _bind(ctx, op, y)
    else:
        ctx.bind_lazy(op.results[0], y)


@converts("stablehlo.bitcast_convert")
def bitcast(ctx: ImportContext, op: Operation) -> None:
    src, dst = op.operands[0].type, op.results[0].type
    if src.shape != dst.shape:
        raise ctx.unsupported("between element types of different widths is not supported")
    _bind(ctx, op, ctx.b.create("graph.bitcast", [ctx.get(op.operands[0])], {"dtype": dst.dtype}).results[0])


@converts("stablehlo.compare")
def compare(ctx: ImportContext, op: Operation) -> None:
    direction = enum_value(op.attributes.get("comparison_direction"), "comparison_direction")
    name = _COMPARE.get(direction)
    if name is None:
        raise ctx.unsupported(f"direction {direction} is not supported")
    a, b = operands_for(ctx, op)
    _bind(ctx, op, getattr(ctx.g, name)(a, b))


@converts("stablehlo.select")
def select(ctx: ImportContext, op: Operation) -> None:
    c, a, b = operands_for(ctx, op)
    _bind(ctx, op, ctx.g.select(c, a, b))


@converts("stablehlo.clamp")
def clamp(ctx: ImportContext, op: Operation) -> None:
    """``min(max(x, lo), hi)``; scalar ``lo``/``hi`` broadcast (StableHLO allows rank-0 bounds)."""
    x = ctx.get(op.operands[1])
    lo, hi = (ctx.get_broadcastable(v) for v in (op.operands[0], op.operands[2]))
    rank = x.type.rank
    lo, hi = (ctx.reshape(v, (1,) * rank) if v.type.rank == 0 and rank else v for v in (lo, hi))
    _bind(ctx, op, ctx.g.min(ctx.g.max(x, lo), hi))


@converts("stablehlo.optimization_barrier")
def barrier(ctx: ImportContext, op: Operation) -> None:
    for r, v in zip(op.results, op.operands):
        ctx.bind(r, ctx.get(v))


@converts("stablehlo.constant")
def constant(ctx: ImportContext, op: Operation) -> None:
    dense = op.attributes.get("value")
    if dense is None or not hasattr(dense, "array"):
        raise ctx.unsupported(f"value {dense!r} is not a dense tensor")
    _bind(ctx, op, ctx.g.constant(dense))


@converts("chlo.erfc")
def erfc(ctx: ImportContext, op: Operation) -> None:
    """``1 - erf(x)``: jax's exact GELU is ``x * erfc(-x / sqrt 2) / 2``; the absolute error is erf's."""
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, ctx.g.sub(_one(ctx, x, 1.0), ctx.g.erf(x)))


@converts("chlo.sinh", "chlo.cosh")
def hyperbolic(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    half = _one(ctx, x, 0.5)
    e_pos, e_neg = ctx.g.exp(x), ctx.g.exp(ctx.g.neg(x))
    combine = ctx.g.sub if op.name == "chlo.sinh" else ctx.g.add
    _bind(ctx, op, ctx.g.mul(combine(e_pos, e_neg), half))


@converts("chlo.square")
def square(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    _bind(ctx, op, ctx.g.mul(x, x))


@converts("chlo.is_inf", "chlo.is_pos_inf", "chlo.is_neg_inf")
def is_inf(ctx: ImportContext, op: Operation) -> None:
    (x,) = operands_for(ctx, op)
    if op.name == "chlo.is_inf":
        _bind(ctx, op, ctx.g.eq(ctx.g.abs(x), _one(ctx, x, math.inf)))
    else:
        _bind(ctx, op, ctx.g.eq(x, _one(ctx, x, math.inf if op.name == "chlo.is_pos_inf" else -math.inf)))


@converts("chlo.asinh", "chlo.acosh", "chlo.atanh")
def inverse_hyperbolic(ctx: ImportContext, op: Operation) -> None:
    """The textbook log forms (asinh's through |x| with the sign restored, so large negative x
    does not cancel)."""
    (x,) = operands_for(ctx, op)
    g, one = ctx.g, _one(ctx, x, 1.0)
    if op.name == "chlo.asinh":
        a = g.abs(x)
        _bind(ctx, op, g.mul(g.sign(x), g.log(g.add(a, g.sqrt(g.add(g.mul(a, a), one))))))
    elif op.name == "chlo.acosh":
        _bind(ctx, op, g.log(g.add(x, g.sqrt(g.sub(g.mul(x, x), one)))))
    else:
        _bind(ctx, op, g.mul(g.log(g.div(g.add(one, x), g.sub(one, x))), _one(ctx, x, 0.5)))


@converts("chlo.top_k")
def top_k(ctx: ImportContext, op: Operation) -> None:
    """Largest ``k`` along the last dim, sorted, as ``jax.lax.top_k`` (values, then int32 indices)."""
    x = ctx.get(op.operands[0])
    k = int(op.attributes.get("k"))
    values, indices = ctx.g.topk(x, k=k, axis=-1, largest=True, sorted=True)
    ctx.bind(op.results[0], values)
    ctx.bind(op.results[1], ctx.cast(indices, op.results[1].type.dtype))
