"""NonZero, Compress, Unique and NonMaxSuppression: outputs whose size depends on values.

Each node's result gets a fresh symbol (``<kind><k>``) that only running the op binds; see
``dialects/graph/data_dependent.py``.
"""
from __future__ import annotations

from ...ir.core import Value
from .common import norm_axis
from .context import ImportContext, OnnxNode
from .registry import handles


def _fresh_count(ctx: ImportContext, kind: str) -> str:
    """A symbol name not used by any other op of the function being imported, nor by an input's
    dims (an ONNX ``dim_param`` may be called ``nonzero0``: the runtime binds that one from the input)."""
    from ...ir.symbolic import symbols_of
    used = {s for a in ctx.func.args for d in getattr(a.type, "shape", ()) for s in symbols_of(d)}
    while True:
        taken = getattr(ctx, "_data_dependent_counts", 0)
        ctx._data_dependent_counts = taken + 1
        if f"{kind}{taken}" not in used:
            return f"{kind}{taken}"


@handles("NonZero")
def nonzero(ctx: ImportContext, node: OnnxNode) -> Value:
    return ctx.op("nonzero", node.required(0), count=_fresh_count(ctx, "nonzero"))


@handles("Compress")
def compress(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    axis = node.attr("axis", None)
    if axis is not None:
        axis = norm_axis(node, axis, ctx.rank(x))
    cond = node.required(1)
    return ctx.op("compress", x, cond, axis=axis, count=_fresh_count(ctx, "compress"))


@handles("Unique")
def unique(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.required(0)
    axis = node.attr("axis", None)
    if axis is not None:
        axis = norm_axis(node, axis, ctx.rank(x))
    return list(ctx.op("unique", x, axis=axis, sorted=bool(node.attr("sorted", 1)),
                       count=_fresh_count(ctx, "unique")))


@handles("NonMaxSuppression")
def non_max_suppression(ctx: ImportContext, node: OnnxNode) -> Value:
    import numpy as np
    boxes, scores = node.required(0), node.required(1)
    # absent operands as empty constants: no limit given means no boxes, no threshold means none
    limit, iou, score = (node.input(i) if node.input(i) is not None else ctx.const(np.zeros((0,), dt))
                         for i, dt in ((2, np.int64), (3, np.float32), (4, np.float32)))
    return ctx.op("non_max_suppression", boxes, scores, limit, iou, score,
                  center_point_box=bool(node.attr("center_point_box", 0)), count=_fresh_count(ctx, "nms"))
