"""Elementwise graph ops: one compute over the output shape, operands read with broadcasting."""
from __future__ import annotations

from ....ir.opdef import ELEMENTWISE, registered_ops
from .registry import LoweringContext, broadcast_read, lowering


def lower_elementwise(ctx: LoweringContext):
    shape = ctx.out_shape()
    short = ctx.op.short_name
    attrs = {k: v for k, v in ctx.attrs.items() if not k.startswith("_")}

    def body(*axes):
        vals = [broadcast_read(t, axes, shape) for t in ctx.inputs]
        return vals[0].apply(short, *vals[1:], **attrs)

    return [ctx.kb.compute(shape, "p" * len(shape), ctx.out_dtype(), body)]


lowering(*[n for n, d in registered_ops("graph").items() if ELEMENTWISE in d.traits])(lower_elementwise)
