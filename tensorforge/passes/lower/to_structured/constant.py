"""Ops whose values come from attributes or types alone: iota and shape_of."""
from __future__ import annotations

from ....dialects.structured.builder import dim_index
from .registry import LoweringContext, lowering


def _size_value(kb, d, dtype):
    """A dim as a value of ``dtype``: a literal when static, else read at run time (``scalar.dim``)."""
    if isinstance(d, int):
        return kb.const(d, dtype)
    return dim_index(kb.body_builder, d).apply("cast", dtype=dtype)


@lowering("graph.iota")
def lower_iota(ctx: LoweringContext):
    a = ctx.attrs
    dt = ctx.out_dtype()
    kb = ctx.kb

    def body(i):
        return i.apply("cast", dtype=dt) * kb.const(a["step"], dt) + kb.const(a["start"], dt)

    return [kb.compute((a["size"],), "p", dt, body)]


@lowering("graph.shape_of")
def lower_shape_of(ctx: LoweringContext):
    shape = ctx.op.operands[0].type.shape
    kb = ctx.kb
    dt = ctx.out_dtype()

    def body(i):
        v = kb.const(0, dt)
        for k, d in enumerate(shape):
            v = (i.eq(kb.index(k))).select(_size_value(kb, d, dt), v)
        return v

    return [kb.compute((len(shape),), "p", dt, body)]
