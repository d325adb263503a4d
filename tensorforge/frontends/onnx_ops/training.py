"""The optimizer update ops of the ``ai.onnx.preview.training`` domain: Adagrad, Adam, Momentum.

Each is elementwise arithmetic on the tensors it updates, as the ONNX definitions write it; the
learning rate ``R`` and the step count ``T`` are runtime scalars, so the first-step rules
(``T == 0``) are a ``select``, not an import-time branch.  A node updating n tensors takes its
inputs as ``R, T, X1..Xn, G1..Gn, [V1..Vn,] [H1..Hn]`` and returns ``X_new1..n`` then the new
states in the same order.
"""
from __future__ import annotations

from ...ir.core import Value
from .context import ImportContext, OnnxNode
from .registry import handles

DOMAIN = "ai.onnx.preview.training"
OPS = ("Adagrad", "Adam", "Momentum")


def _groups(node: OnnxNode, per: int) -> tuple[int, list[list[Value]]]:
    """n and, for each of the ``per`` tensor groups after R and T, its n inputs."""
    rest = len(node.inputs) - 2
    if rest < per or rest % per:
        raise node.unsupported(f"{len(node.inputs)} inputs: expected R, T and {per} groups of tensors")
    n = rest // per
    return n, [[node.required(2 + g * n + i) for i in range(n)] for g in range(per)]


def _scalar_input(ctx: ImportContext, node: OnnxNode, i: int, like: Value) -> Value:
    return ctx.cast(node.required(i), ctx.dtype(like))


@handles("Adagrad")
def adagrad(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    decay, eps, norm = node.attr("decay_factor", 0.0), node.attr("epsilon", 0.0), node.attr("norm_coefficient", 0.0)
    n, (xs, gs, hs) = _groups(node, 3)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        s = lambda v: ctx.scalar(v, x)  # noqa: E731
        r, t = _scalar_input(ctx, node, 0, x), _scalar_input(ctx, node, 1, x)
        rate = ctx.op("div", r, ctx.op("add", s(1.0), ctx.op("mul", t, s(decay))))
        gr = ctx.op("add", ctx.op("mul", x, s(norm)), g)
        h2 = ctx.op("add", h, ctx.op("mul", gr, gr))
        scale = ctx.op("add", ctx.op("sqrt", h2), s(eps))
        new_x.append(ctx.op("sub", x, ctx.op("div", ctx.op("mul", rate, gr), scale)))
        new_h.append(h2)
    return new_x + new_h


@handles("Adam")
def adam(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    eps, norm = node.attr("epsilon", 0.0), node.attr("norm_coefficient", 0.0)
    post = node.attr("norm_coefficient_post", 0.0)
    n, (xs, gs, vs, hs) = _groups(node, 4)
    out_x, out_v, out_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        s = lambda c: ctx.scalar(c, x)  # noqa: E731
        r, t = _scalar_input(ctx, node, 0, x), _scalar_input(ctx, node, 1, x)
        gr = ctx.op("add", ctx.op("mul", x, s(norm)), g)
        v2 = ctx.op("add", ctx.op("mul", v, s(alpha)), ctx.op("mul", gr, s(1.0 - alpha)))
        h2 = ctx.op("add", ctx.op("mul", h, s(beta)), ctx.op("mul", ctx.op("mul", gr, gr), s(1.0 - beta)))
        scale = ctx.op("add", ctx.op("sqrt", h2), s(eps))
        corrected = ctx.op("div", ctx.op("mul", r, ctx.op("sqrt", ctx.op("sub", s(1.0), ctx.op("pow", s(beta), t)))),
                           ctx.op("sub", s(1.0), ctx.op("pow", s(alpha), t)))
        rate = ctx.op("select", ctx.op("gt", node.required(1), ctx.scalar(0, node.required(1))), corrected, r)
        x2 = ctx.op("sub", x, ctx.op("mul", rate, ctx.op("div", v2, scale)))
        out_x.append(ctx.op("mul", x2, s(1.0 - post)) if post else x2)
        out_v.append(v2)
        out_h.append(h2)
    return out_x + out_v + out_h


@handles("Momentum")
def momentum(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    alpha, beta, norm = node.attr("alpha"), node.attr("beta"), node.attr("norm_coefficient")
    mode = node.attr("mode")
    if mode not in ("standard", "nesterov"):
        raise node.unsupported(f"mode='{mode}'")
    n, (xs, gs, vs) = _groups(node, 3)
    out_x, out_v = [], []
    for x, g, v in zip(xs, gs, vs):
        s = lambda c: ctx.scalar(c, x)  # noqa: E731
        r = _scalar_input(ctx, node, 0, x)
        first = ctx.op("gt", node.required(1), ctx.scalar(0, node.required(1)))
        gr = ctx.op("add", ctx.op("mul", x, s(norm)), g)
        b = ctx.op("select", first, s(beta), s(1.0))
        v2 = ctx.op("add", ctx.op("mul", v, s(alpha)), ctx.op("mul", gr, b))
        step = v2 if mode == "standard" else ctx.op("add", gr, ctx.op("mul", v2, s(alpha)))
        out_x.append(ctx.op("sub", x, ctx.op("mul", r, step)))
        out_v.append(v2)
    return out_x + out_v

