"""Scatter ops: ScatterND, ScatterElements, Scatter (deprecated) and TensorScatter.

ScatterND maps onto ``graph.scatter_nd`` (a library kernel: copy, then one pass over the update
rows).  ScatterElements and Scatter are the same op with element indices: the full coordinate of
every update element is its own position with the ``axis`` entry replaced by the index, built from
``iota`` ops and one concat.  TensorScatter (a KV-cache write) needs no scatter at all: each cache
position reads the update row that lands on it or keeps its old value, a ``gather_elements`` and a
``select``, so it stays injective and fuses with its neighbours.
"""
from __future__ import annotations

from ...ir.core import Value
from ...ir.types import DType
from .common import norm_axis
from .context import ImportContext, OnnxNode
from .registry import handles


def _reduction(node: OnnxNode) -> str:
    red = node.attr("reduction", "none") if node.opset >= 16 else "none"
    if red not in ("none", "add", "mul", "min", "max"):
        raise node.unsupported(f"reduction='{red}'")
    return red


@handles("ScatterND")
def scatter_nd(ctx: ImportContext, node: OnnxNode) -> Value:
    data, idx, upd = node.required(0), node.required(1), node.required(2)
    return ctx.op("scatter_nd", data, ctx.cast(idx, DType.i64), upd, reduction=_reduction(node))


def _element_coordinates(ctx: ImportContext, idx: Value, axis: int) -> Value:
    """``indices`` of ScatterElements as ScatterND's: shape ``indices.shape + (rank,)``, entry ``j``
    of the last axis the position's own coordinate ``j`` except at ``axis`` (the index)."""
    shape = ctx.shape(idx)
    rank = len(shape)
    cols = []
    for j in range(rank):
        if j == axis:
            cols.append(ctx.op("reshape", idx, shape=tuple(shape) + (1,)))
            continue
        one = [1] * (rank + 1)
        one[j] = shape[j]
        ramp = ctx.op("reshape", ctx.op("iota", size=shape[j], dtype=DType.i64), shape=tuple(one))
        cols.append(ctx.op("expand", ramp, shape=tuple(shape) + (1,)))
    return cols[0] if rank == 1 else ctx.op("concat", cols, axis=rank)


@handles("ScatterElements", "Scatter")
def scatter_elements(ctx: ImportContext, node: OnnxNode) -> Value:
    data, idx, upd = node.required(0), node.required(1), node.required(2)
    rank = ctx.rank(data)
    if ctx.rank(idx) != rank or ctx.rank(upd) != rank:
        raise node.unsupported(f"data, indices and updates must have one rank, got {rank}, {ctx.rank(idx)}, "
                               f"{ctx.rank(upd)}")
    axis = norm_axis(node, node.attr("axis", 0), rank)
    red = _reduction(node) if node.op_type == "ScatterElements" else "none"
    coords = _element_coordinates(ctx, ctx.cast(idx, DType.i64), axis)
    return ctx.op("scatter_nd", data, coords, upd, reduction=red)


@handles("TensorScatter")
def tensor_scatter(ctx: ImportContext, node: OnnxNode) -> Value:
    """``present[b, ..., s, ...] = update[b, ..., s - w[b], ...]`` where ``0 <= s - w[b] < S`` (modulo
    the cache length when ``mode = 'circular'``), else ``past[b, ..., s, ...]``."""
    past, upd = node.required(0), node.required(1)
    shape = ctx.shape(past)
    rank = len(shape)
    axis = norm_axis(node, node.attr("axis", -2), rank)
    if axis == 0:
        raise node.unsupported("axis 0 is the batch axis")
    mode = node.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise node.unsupported(f"mode='{mode}'")
    length, seq = shape[axis], ctx.shape(upd)[axis]
    if not isinstance(length, int) or not isinstance(seq, int):
        raise node.unsupported("the sequence axis of the cache and of the update must be static")
    w = node.input(2)
    one = [1] * rank
    one[axis] = length
    pos = ctx.op("reshape", ctx.op("iota", size=length, dtype=DType.i64), shape=tuple(one))
    if w is None:
        rel = pos
    else:
        per_batch = [1] * rank
        per_batch[0] = shape[0]
        rel = ctx.op("sub", pos, ctx.op("reshape", ctx.cast(w, DType.i64), shape=tuple(per_batch)))
    if mode == "circular":
        rel = ctx.op("mod", rel, ctx.scalar(length, DType.i64))
    hit = ctx.op("and", ctx.op("ge", rel, ctx.scalar(0, DType.i64)),
                 ctx.op("lt", rel, ctx.scalar(seq, DType.i64)))
    src = ctx.op("select", hit, rel, ctx.scalar(0, DType.i64))
    src = ctx.op("expand", src, shape=tuple(shape))
    moved = ctx.op("gather_elements", upd, src, axis=axis)
    return ctx.op("select", ctx.op("expand", hit, shape=tuple(shape)), moved, past)
