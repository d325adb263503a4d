"""``FlexAttention`` of the ``ai.onnx.preview`` domain: scaled dot-product attention whose scores
and probabilities pass through user subgraphs (``score_mod``, ``prob_mod``).

It is written out as the graph ops of its definition (the ONNX reference,
``onnx/reference/ops/aionnx_preview/op_flex_attention.py``)::

    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T      # in the input type
    scores = score_mod(cast(scores, P))                   # P = softmax_precision
    probs  = prob_mod(softmax(scores, axis=-1))
    Y      = cast(probs @ cast(V, P), type(V))

``P`` defaults to f32 for f16/bf16 inputs and to the input type otherwise.  Grouped-query heads
repeat K and V (query head h reads KV head h // group).  The modifier subgraphs are inlined on the
score/probability tensor by the importer's own node loop (``control_flow.import_subgraph``), so
whatever the importer supports may appear in them (masks from Shape/Range/Where, soft caps, biases).
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Value
from ...ir.types import DType
from .attention import _repeat_heads
from .context import ImportContext, OnnxNode
from .control_flow import import_subgraph
from .dtypes import to_dtype
from .registry import handles
from .sequence import OptValue, SeqValue

DOMAIN = "ai.onnx.preview"
OPS = ("FlexAttention",)


def _optional_graph(node: OnnxNode, key: str):
    node.ignore(key)
    for a in node.proto.attribute:
        if a.name == key:
            if not a.HasField("g"):
                raise node.unsupported(f"attribute '{key}' must be a graph")
            return a.g
    return None


def _apply_mod(ctx: ImportContext, node: OnnxNode, graph, x: Value, what: str) -> Value:
    """The one output of the modifier ``graph`` applied to ``x``, in ``x``'s type."""
    if graph is None:
        return x
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise node.unsupported(f"{what} must have exactly one input and one output, got "
                               f"{len(graph.input)} and {len(graph.output)}")
    (y,) = import_subgraph(ctx, graph, [x])
    if isinstance(y, (SeqValue, OptValue)) or not isinstance(y, Value):
        raise node.unsupported(f"{what} must produce a tensor")
    if ctx.shape(y) != ctx.shape(x):
        if ctx.rank(y) > ctx.rank(x):
            raise node.unsupported(f"{what} changed the shape {ctx.shape(x)} to {ctx.shape(y)}")
        y = ctx.op("expand", y, shape=ctx.shape(x))
    return ctx.cast(y, ctx.dtype(x)) if ctx.dtype(y) is not ctx.dtype(x) else y


@handles("FlexAttention")
def flex_attention(ctx: ImportContext, node: OnnxNode) -> Value:
    if node.domain != DOMAIN:
        raise node.unsupported(f"FlexAttention is defined in domain '{DOMAIN}', not '{node.domain}'")
    q, k, v = node.required(0), node.required(1), node.required(2)
    scale = node.attr("scale", None)
    precision = node.attr("softmax_precision", None)
    score_mod = _optional_graph(node, "score_mod")
    prob_mod = _optional_graph(node, "prob_mod")
    for name, x in (("Q", q), ("K", k), ("V", v)):
        if ctx.rank(x) != 4:
            raise node.unsupported(f"{name} must be rank 4, got {x.type}")
    in_type = ctx.dtype(q)
    if not in_type.is_float:
        raise node.unsupported(f"inputs of type {in_type}")
    _, hq, _, d = ctx.static_shape(q, "FlexAttention")
    _, hk, kv_len, dk = ctx.static_shape(k, "FlexAttention")
    _, hv, v_len, _ = ctx.static_shape(v, "FlexAttention")
    if hk != hv or kv_len != v_len or dk != d:
        raise node.unsupported(f"Q {q.type}, K {k.type} and V {v.type} do not fit together")
    if hk == 0 or hq % hk:
        raise node.unsupported(f"{hq} query heads are not a multiple of {hk} KV heads")
    if precision is not None:
        work = to_dtype(precision)
        if work is None or not work.is_float:
            raise node.unsupported(f"softmax_precision={precision}")
    else:
        work = DType.f32 if in_type in (DType.f16, DType.bf16) else in_type
    if scale is None:
        scale = 1.0 / math.sqrt(d)

    if hq != hk:
        k, v = _repeat_heads(ctx, k, hq // hk), _repeat_heads(ctx, v, hq // hk)
    root = ctx.scalar(float(np.sqrt(np.float32(scale))), q)   # the reference rounds sqrt(scale) to f32, then to Q's type
    scores = ctx.op("matmul", ctx.op("mul", q, root),
                    ctx.op("transpose", ctx.op("mul", k, root), perm=(0, 1, 3, 2)))
    scores = ctx.cast(scores, work)
    scores = _apply_mod(ctx, node, score_mod, scores, "score_mod")
    probs = ctx.op("softmax", scores, axis=-1)
    probs = _apply_mod(ctx, node, prob_mod, probs, "prob_mod")
    y = ctx.op("matmul", probs, ctx.cast(v, work))
    return ctx.cast(y, ctx.dtype(v))
