"""Spelled-out means and LayerNorms recognised (``simplify-extra``).

Frontends that decompose (StableHLO from JAX, older ONNX exports) write a mean as a sum times
``1/n`` and a LayerNorm as ``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps)``.  As
``reduce_mean`` and ``graph.layer_norm`` they lower to one kernel with the norm lowering's
two-pass statistics, where the spelled-out form materialises ``x - mean`` and reads it twice.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.builder import make_op
from ...ir.core import Operation, Value
from ...ir.rewrite import constant_value, pattern


def mean_over(v: Value, x: Value | None, axis: int) -> Value | None:
    """The operand of ``v = reduce_mean(operand, axes=[axis], keepdims=True)`` (which must be ``x``
    when given), else None."""
    op = v.op
    if op is None or op.name != "graph.reduce_mean" or not op.attributes.get("keepdims", False):
        return None
    src = op.operands[0]
    rank = len(src.type.shape)
    if tuple(a % rank for a in op.attributes.get("axes", ())) != (axis,) or (x is not None and src is not x):
        return None
    return src


def squares(v: Value, d: Value) -> bool:
    """``v`` is ``d * d`` or ``d ** 2``."""
    op = v.op
    if op is None:
        return False
    if op.name == "graph.mul":
        return op.operands[0] is d and op.operands[1] is d
    if op.name == "graph.pow" and op.operands[0] is d:
        e = constant_value(op.operands[1])
        return e is not None and e.size == 1 and float(e.reshape(())) == 2.0
    return False


@pattern("graph.mul", name="sum-scaled-as-mean")
def sum_scaled_as_mean(op: Operation, rewriter) -> bool:
    """``reduce_sum(x, a) * (1/n)``, with the sum's reduced dims re-inserted by an ``unsqueeze`` or
    not, is ``reduce_mean(x, a)`` (keepdims when they were re-inserted); ``n`` is the number of
    summed elements and the factor must be exactly ``1/n`` rounded to the element type."""
    s, c = op.operands
    scale = constant_value(c)
    if scale is None or scale.size != 1 or not op.results[0].type.dtype.is_float:
        return False
    keep = False
    if s.op is not None and s.op.name == "graph.unsqueeze" and len(s.uses) == 1:
        inner = s.op.operands[0]
        if inner.op is None or inner.op.name != "graph.reduce_sum" or inner.op.attributes.get("keepdims", False):
            return False
        x = inner.op.operands[0]
        axes = tuple(sorted(a % x.type.rank for a in inner.op.attributes.get("axes", ())))
        if tuple(sorted(a % x.type.rank for a in s.op.attributes["axes"])) != axes:
            return False
        keep, total = True, inner
    elif s.op is not None and s.op.name == "graph.reduce_sum":
        x, total = s.op.operands[0], s
        axes = tuple(sorted(a % x.type.rank for a in s.op.attributes.get("axes", ()))) or tuple(range(x.type.rank))
        keep = bool(s.op.attributes.get("keepdims", False))
    else:
        return False
    if len(total.uses) != 1 or not x.type.is_static:
        return False
    n = math.prod(x.type.shape[a] for a in axes)
    if n == 0 or float(scale.reshape(())) != float(np.asarray(1.0 / n, dtype=scale.dtype)):
        return False
    return _replace_with(rewriter, op, make_op("graph.reduce_mean", [x], {"axes": axes, "keepdims": keep}))


def layer_norm_parts(op: Operation, axis_of) -> tuple[Value, int, float] | None:
    """``(x, axis, eps)`` when ``op`` is ``(x - u) / sqrt(mean((x - u)**2, axis) + eps)`` with
    ``u = mean(x, axis)`` (both keepdims) and ``axis = axis_of(rank)``; the pieces must have no
    other readers (the rewrite would then duplicate work)."""
    d, s = op.operands
    x = op.results[0].type
    rank = len(x.shape)
    axis = axis_of(rank)
    if axis is None or not x.dtype.is_float or d.op is None or d.op.name != "graph.sub" or s.op is None \
            or s.op.name != "graph.sqrt":
        return None
    xv, u = d.op.operands
    if xv.type != x or mean_over(u, xv, axis) is None:
        return None
    a = s.op.operands[0].op
    if a is None or a.name != "graph.add":
        return None
    var, eps_v = a.operands
    eps = constant_value(eps_v)
    if eps is None or eps.size != 1 or not np.isfinite(eps).all() or float(eps.reshape(())) < 0:
        return None
    sq = mean_over(var, None, axis)
    if sq is None or not squares(sq, d):
        return None
    if len(u.uses) != 1 or len(var.uses) != 1 or len(d.uses) != (3 if sq.op.name == "graph.mul" else 2):
        return None
    return xv, axis, float(eps.reshape(()))


@pattern("graph.div", name="mean-var-as-layer-norm")
def mean_var_as_layer_norm(op: Operation, rewriter) -> bool:
    """The spelled-out LayerNorm over the last dim is ``layer_norm(x, axis=-1, eps)`` (NaN and Inf
    in a row give NaN there, as torch)."""
    parts = layer_norm_parts(op, lambda rank: rank - 1 if rank >= 2 else None)
    if parts is None:
        return False
    xv, axis, eps = parts
    return _replace_with(rewriter, op, make_op("graph.layer_norm", [xv], {"axis": axis, "epsilon": eps}))


def _replace_with(rewriter, op: Operation, new: Operation) -> bool:
    """``op`` replaced by the (not yet inserted) ``new`` when its result has ``op``'s type."""
    if new.results[0].type != op.results[0].type:
        return False
    rewriter.insert(new)
    rewriter.replace_op(op, new.results)
    return True


NORM_PATTERNS = (sum_scaled_as_mean, mean_var_as_layer_norm)
