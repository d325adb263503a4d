"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, as gathers and reductions.

The target class of every position is picked with ``gather_elements`` on the class axis;
``ignore_index`` positions are redirected to class 0 for the gather and then zeroed, and
excluded from the weight sum of a ``mean`` reduction, as ONNX defines.
"""
from __future__ import annotations

from ...ir.core import Value
from .context import ImportContext, OnnxNode
from .registry import handles


def _nll(ctx: ImportContext, node: OnnxNode, logp: Value, target: Value, weight: Value | None) -> Value:
    reduction = node.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise node.unsupported(f"reduction='{reduction}'")
    ignore = node.attr("ignore_index", None)
    ignored = None
    if ignore is not None:
        ignored = ctx.op("eq", target, ctx.scalar(ignore, target))
        target = ctx.op("select", ignored, ctx.scalar(0, target), target)
    picked = ctx.op("gather_elements", logp, ctx.op("unsqueeze", target, axes=(1,)), axis=1)
    loss = ctx.op("neg", ctx.op("squeeze", picked, axes=(1,)))
    w = ctx.op("gather", weight, target, axis=0) if weight is not None else None
    if ignored is not None:
        zero = ctx.scalar(0, loss)
        w = ctx.op("select", ignored, zero, w if w is not None else ctx.scalar(1, loss))
    if w is not None:
        loss = ctx.op("mul", loss, w)
    if reduction == "none":
        return loss
    total = ctx.op("reduce_sum", loss, axes=(), keepdims=False)
    if reduction == "sum":
        return total
    if w is None:
        return ctx.op("reduce_mean", loss, axes=(), keepdims=False)
    return ctx.op("div", total, ctx.op("reduce_sum", w, axes=(), keepdims=False))


@handles("NegativeLogLikelihoodLoss")
def nll_loss(ctx: ImportContext, node: OnnxNode) -> Value:
    return _nll(ctx, node, node.required(0), node.required(1), node.input(2))


@handles("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x = node.required(0)
    logp = ctx.op("log_softmax", x, axis=1)
    loss = _nll(ctx, node, logp, node.required(1), node.input(2))
    return [loss, logp]
