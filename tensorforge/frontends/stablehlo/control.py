"""while and case onto the graph dialect's control flow (``graph.loop``, ``graph.if``).

``stablehlo.while(inits) {cond} {body}`` is ONNX ``Loop`` with no trip limit: the condition is
evaluated once on the initial values (before the loop) and, inside the body, on the values each
iteration produces, which is what ``graph.loop`` checks before the next iteration.
``stablehlo.case(index)`` runs branch ``index``, and the last branch for an index out of range:
a chain of ``graph.if`` on ``index == k``.  Bodies read outer values directly (graph regions are
not isolated), so nothing is threaded through them by hand.
"""
from __future__ import annotations

import numpy as np

from ...ir.builder import make_op
from ...ir.core import Block, Operation, Region, Value
from ...ir.types import DType, TensorType
from .context import ImportContext
from .importer import convert_block, converts

_I64_MAX = np.iinfo(np.int64).max


def _run_region(ctx: ImportContext, region: Region, args: list[Value]) -> list[Value]:
    block = region.blocks[0]
    for a, v in zip(block.args, args):
        ctx.bind(a, v)
    return convert_block(ctx, block)


def _scalar_bool(ctx: ImportContext, v: Value) -> Value:
    return ctx.reshape(v, ()) if tuple(v.type.shape) != () else v


@converts("stablehlo.while")
def while_(ctx: ImportContext, op: Operation) -> None:
    inits = [ctx.get(v) for v in op.operands]
    cond_region, body_region = op.regions
    here = ctx.op
    first = _scalar_bool(ctx, _run_region(ctx, cond_region, inits)[0])
    types = [v.type for v in inits]
    block = Block([TensorType((), DType.i64), TensorType((), DType.bool), *types])
    with ctx.building_in(block):
        new = _run_region(ctx, body_region, list(block.args[2:]))
        again = _scalar_bool(ctx, _run_region(ctx, cond_region, new)[0])
        ctx.b.insert(make_op("graph.yield", [again, *new], {}, [], (), here.loc))
    ctx.op = here
    trips = ctx.const(np.asarray(_I64_MAX, np.int64))
    loop = ctx.b.insert(make_op("graph.loop", [trips, first, *inits], {"num_scan": 0, "has_cond": True},
                                types, [Region([block])], here.loc))
    for r, v in zip(op.results, loop.results):
        ctx.bind(r, v)


def _branch(ctx: ImportContext, region: Region, here: Operation) -> Block:
    block = Block()
    with ctx.building_in(block):
        outs = convert_block(ctx, region.blocks[0])
        ctx.b.insert(make_op("graph.yield", outs, {}, [], (), here.loc))
    ctx.op = here
    return block


@converts("stablehlo.case")
def case(ctx: ImportContext, op: Operation) -> None:
    here = ctx.op
    index = ctx.get(op.operands[0])
    types = [r.type for r in op.results]
    arr = ctx.constant_of(op.operands[0])
    n = len(op.regions)
    if arr is not None:                   # a known branch: inline it
        k = int(np.asarray(arr).reshape(()))
        k = k if 0 <= k < n else n - 1
        for r, v in zip(op.results, convert_block(ctx, op.regions[k].blocks[0])):
            ctx.bind(r, v)
        return
    results = _case_chain(ctx, op, index, 0, types, here)
    for r, v in zip(op.results, results):
        ctx.bind(r, v)


def _case_chain(ctx: ImportContext, op: Operation, index: Value, k: int, types, here: Operation) -> list[Value]:
    """``if index == k: branch k else <the chain from k + 1>``; the last branch is the default."""
    n = len(op.regions)
    if k == n - 1:
        return convert_block(ctx, op.regions[k].blocks[0])
    key = ctx.const(np.asarray(k, dtype=index.type.dtype.np), index.type.dtype)
    cond = _scalar_bool(ctx, ctx.g.eq(index, key))
    then = _branch(ctx, op.regions[k], here)
    other = Block()
    with ctx.building_in(other):
        rest = _case_chain(ctx, op, index, k + 1, types, here)
        ctx.b.insert(make_op("graph.yield", rest, {}, [], (), here.loc))
    ctx.op = here
    node = ctx.b.insert(make_op("graph.if", [cond], {}, types, [Region([then]), Region([other])], here.loc))
    return list(node.results)
