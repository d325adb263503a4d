"""reduce and reduce_window: the region says how elements combine.

A region that applies one of add / multiply / maximum / minimum (or and / or on booleans) to its
two arguments is a plain reduction (``graph.reduce_*``, ``graph.max_pool``, a sum pool via
``graph.avg_pool``); a start value other than the combiner's identity is folded in afterwards
(the combiners are associative).  The two-operand reduction that ``jnp.argmax``/``argmin`` emit
(values with their iota, a compare-and-select region) becomes ``graph.argmax``/``argmin``.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Operation, Value
from ...ir.types import DType
from .attributes import enum_value, int_list, padding_pairs
from .context import ImportContext
from .importer import converts

_COMBINERS = {"stablehlo.add": "add", "stablehlo.multiply": "mul", "stablehlo.maximum": "max",
              "stablehlo.minimum": "min", "stablehlo.and": "and", "stablehlo.or": "or"}


def combiner(region) -> str | None:
    """'add' / 'mul' / 'max' / 'min' / 'and' / 'or' when the region is ``return f(arg0, arg1)``."""
    block = region.blocks[0]
    ops = list(block)
    if len(ops) != 2 or len(block.args) != 2 or ops[1].name not in ("stablehlo.return", "func.return"):
        return None
    body, ret = ops
    if body.name not in _COMBINERS or list(ret.operands) != [body.results[0]] or \
            set(map(id, body.operands)) != set(map(id, block.args)):
        return None
    return _COMBINERS[body.name]


def _identity(kind: str, dtype: DType):
    if kind == "add":
        return 0
    if kind == "mul":
        return 1
    if dtype is DType.bool:
        return {"and": True, "or": False, "max": False, "min": True}[kind]
    if dtype.is_float:
        return -math.inf if kind == "max" else math.inf
    info = np.iinfo(dtype.np)
    return info.min if kind == "max" else info.max


def _fold_init(ctx: ImportContext, kind: str, value: Value, init: Operation | Value) -> Value:
    """``value`` combined with the start value, unless that is the identity."""
    arr = ctx.constant_of(init)
    ident = _identity(kind, value.type.dtype)
    if arr is not None and np.asarray(arr).size == 1:
        v = np.asarray(arr).reshape(())
        if v == ident or (isinstance(ident, float) and np.isinf(ident) and v == ident):
            return value
    start = ctx.reshape(ctx.get(init), (1,) * value.type.rank) if value.type.rank else ctx.get(init)
    return _combine(ctx, kind, value, start)


def _combine(ctx: ImportContext, kind: str, a: Value, b: Value) -> Value:
    name = {"add": "add", "mul": "mul", "max": "max", "min": "min", "and": "and", "or": "or"}[kind]
    if a.type.dtype is not DType.bool and kind in ("and", "or"):
        name = "bitwise_" + kind
    return getattr(ctx.g, name)(a, b)


def _reduce_one(ctx: ImportContext, kind: str, x: Value, axes: tuple[int, ...]) -> Value:
    if x.type.dtype is DType.bool:         # all / any through integers
        as_int = ctx.cast(x, DType.i32)
        r = getattr(ctx.g, "reduce_min" if kind in ("and", "min") else "reduce_max")(as_int, axes=axes, keepdims=False)
        return ctx.cast(r, DType.bool)
    if kind in ("and", "or"):
        raise ctx.unsupported(f"bitwise '{kind}' reductions of integers are not supported")
    return getattr(ctx.g, {"add": "reduce_sum", "mul": "reduce_prod", "max": "reduce_max",
                           "min": "reduce_min"}[kind])(x, axes=axes, keepdims=False)


@converts("stablehlo.reduce")
def reduce(ctx: ImportContext, op: Operation) -> None:
    dims = tuple(int(d) for d in op.attributes.get("dimensions", ()))
    n = len(op.operands) // 2
    if n == 2 and _arg_reduce(ctx, op, dims):
        return
    kind = combiner(op.regions[0]) if n == 1 else None
    if kind is None:
        raise ctx.unsupported("with this region is not supported (one of add, multiply, maximum, minimum, and, or "
                              "over one operand, or an argmax/argmin pair)")
    x, init = op.operands
    if not dims:
        value = ctx.get(x)
    else:
        value = _reduce_one(ctx, kind, ctx.get(x), dims)
    ctx.bind(op.results[0], _fold_init(ctx, kind, value, init))


def _arg_reduce(ctx: ImportContext, op: Operation, dims: tuple[int, ...]) -> bool:
    """``jnp.argmax``/``argmin``: (values, indices) reduced over one dim by compare-and-select."""
    compares = [o for o in op.regions[0].blocks[0] if o.name == "stablehlo.compare"]
    block = op.regions[0].blocks[0]
    directions = {enum_value(c.attributes.get("comparison_direction"), "direction") for c in compares
                  if block.args[0] in c.operands and block.args[2] in c.operands}
    kind = "max" if "GT" in directions else "min" if "LT" in directions else None
    if kind is None or len(dims) != 1:
        return False
    x = ctx.get(op.operands[0])
    axis = dims[0]
    values = ctx.g.reduce_max(x, axes=dims, keepdims=False) if kind == "max" else \
        ctx.g.reduce_min(x, axes=dims, keepdims=False)
    index = getattr(ctx.g, f"arg{kind}")(x, axis=axis, keepdims=False)
    ctx.bind(op.results[0], values)
    ctx.bind(op.results[1], ctx.cast(index, op.results[1].type.dtype))
    return True


@converts("stablehlo.reduce_window")
def reduce_window(ctx: ImportContext, op: Operation) -> None:
    """Max and sum windows as pools: the windowed dims go last (as NC + spatial), the others are
    folded into the two leading dims, then everything is put back."""
    if len(op.operands) != 2:
        raise ctx.unsupported("over several operands is not supported")
    kind = combiner(op.regions[0])
    if kind not in ("max", "add"):
        raise ctx.unsupported("is supported for max and add windows only")
    x_shlo, init = op.operands
    x = ctx.get(x_shlo)
    rank = x.type.rank
    window, strides = int_list(op, "window_dimensions", rank, 1), int_list(op, "window_strides", rank, 1)
    base, wdil = int_list(op, "base_dilations", rank, 1), int_list(op, "window_dilations", rank, 1)
    pad = padding_pairs(op, rank)
    if any(b != 1 for b in base):
        raise ctx.unsupported("with base_dilations is not supported")
    spatial = [i for i in range(rank) if window[i] != 1 or strides[i] != 1 or pad[i].any() or wdil[i] != 1]
    others = [i for i in range(rank) if i not in spatial]
    if not spatial:
        ctx.bind(op.results[0], _fold_init(ctx, kind, x, init))
        return
    lead = [x.type.shape[i] for i in others]
    folded = ([1] * (2 - len(lead)) + lead) if len(lead) <= 2 else [math.prod(lead[:-1]), lead[-1]]
    y = ctx.reshape(ctx.transpose(x, others + spatial), folded + [x.type.shape[i] for i in spatial])
    kernel = tuple(window[i] for i in spatial)
    pads = tuple(int(pad[i, 0]) for i in spatial) + tuple(int(pad[i, 1]) for i in spatial)
    stride = tuple(strides[i] for i in spatial)
    if kind == "max":
        y = ctx.g.max_pool(y, kernel=kernel, strides=stride, pads=pads, dilations=tuple(wdil[i] for i in spatial))
    else:
        if any(wdil[i] != 1 for i in spatial):
            raise ctx.unsupported("sum windows with window_dilations are not supported")
        y = ctx.g.avg_pool(y, kernel=kernel, strides=stride, pads=pads, count_include_pad=True)
        y = ctx.g.mul(y, ctx.scalar_like(float(math.prod(kernel)), y.type))
    out_shape = op.results[0].type.shape
    y = ctx.reshape(y, lead + [out_shape[i] for i in spatial])
    inverse = [0] * rank
    for k, i in enumerate(others + spatial):
        inverse[i] = k
    y = ctx.transpose(y, inverse)
    ctx.bind(op.results[0], _fold_init(ctx, kind, y, init))
