"""Recurrent layers (RNN, GRU, LSTM), unrolled over the static sequence length.

The input projection of every time step is one matmul over the whole sequence; each step then
adds the recurrent matmul and applies the gate equations of the ONNX definition with graph
ops.  Sequences of per-batch lengths (``sequence_lens`` other than the full length) are not
supported.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...ir.core import Value
from .context import ImportContext, OnnxNode
from .registry import handles
from .elementwise import onnx_elu

_MAX_STEPS = 512
_DEFAULT_ACTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}

Act = Callable[[Value], Value]


def _activation(ctx: ImportContext, node: OnnxNode, name: str, alpha: float | None, beta: float | None) -> Act:
    """One of ONNX's named RNN activations, with its alpha/beta."""
    def s(v: float, x: Value) -> Value:
        return ctx.scalar(v, x)
    table: dict[str, Act] = {
        "Tanh": lambda x: ctx.op("tanh", x),
        "Sigmoid": lambda x: ctx.op("sigmoid", x),
        "Relu": lambda x: ctx.op("relu", x),
        "Softsign": lambda x: ctx.op("div", x, ctx.op("add", ctx.op("abs", x), s(1, x))),
        "Softplus": lambda x: ctx.op("softplus", x),
        "LeakyRelu": lambda x: ctx.op("leaky_relu", x, alpha=0.01 if alpha is None else alpha),
        "Elu": lambda x: onnx_elu(ctx, x, 1.0 if alpha is None else alpha),
        "HardSigmoid": lambda x: ctx.op("hard_sigmoid", x, alpha=0.2 if alpha is None else alpha,
                                        beta=0.5 if beta is None else beta),
        "Affine": lambda x: ctx.op("add", ctx.op("mul", x, s(1.0 if alpha is None else alpha, x)),
                                   s(0.0 if beta is None else beta, x)),
        "ScaledTanh": lambda x: ctx.op("mul", ctx.op("tanh", ctx.op("mul", x, s(1.0 if beta is None else beta, x))),
                                       s(1.0 if alpha is None else alpha, x)),
        "ThresholdedRelu": lambda x: ctx.op("select", ctx.op("gt", x, s(1.0 if alpha is None else alpha, x)), x,
                                            s(0, x)),
    }
    if name not in table:
        raise node.unsupported(f"activation '{name}'")
    return table[name]


def _activations(ctx: ImportContext, node: OnnxNode, directions: int) -> list[list[Act]]:
    names = node.attr("activations", None)
    per_dir = len(_DEFAULT_ACTS[node.op_type])
    names = list(names) if names else list(_DEFAULT_ACTS[node.op_type]) * directions
    if len(names) == per_dir and directions == 2:
        names = names * 2
    alphas = list(node.attr("activation_alpha", ()))
    betas = list(node.attr("activation_beta", ()))
    acts = [_activation(ctx, node, n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
            for i, n in enumerate(names)]
    return [acts[d * per_dir:(d + 1) * per_dir] for d in range(directions)]


def _take(ctx: ImportContext, x: Value, index: int, axis: int = 0) -> Value:
    """x[index] along ``axis`` with that axis removed."""
    part = ctx.op("slice", x, starts=(index,), ends=(index + 1,), axes=(axis,), steps=(1,))
    return ctx.op("squeeze", part, axes=(axis,))


def _gate(ctx: ImportContext, x: Value, g: int, hidden: int) -> Value:
    return ctx.op("slice", x, starts=(g * hidden,), ends=((g + 1) * hidden,), axes=(ctx.rank(x) - 1,), steps=(1,))


def _rnn(ctx: ImportContext, node: OnnxNode) -> list[Value | None]:
    kind = node.op_type
    x, w, r = node.required(0), node.required(1), node.required(2)
    b, seq_lens, h0 = node.input(3), node.input(4), node.input(5)
    c0 = node.input(6) if kind == "LSTM" else None
    peep = node.input(7) if kind == "LSTM" else None
    hidden = node.attr("hidden_size")
    direction = node.attr("direction", "forward")
    layout = node.attr("layout", 0)
    clip = node.attr("clip", None)
    if kind == "LSTM" and node.attr("input_forget", 0):
        raise node.unsupported("input_forget=1")
    linear_before_reset = node.attr("linear_before_reset", 0) if kind == "GRU" else 0
    if direction not in ("forward", "reverse", "bidirectional"):
        raise node.unsupported(f"direction='{direction}'")
    dirs = 2 if direction == "bidirectional" else 1
    if layout:
        x = ctx.op("transpose", x, perm=(1, 0, 2))
        h0 = ctx.op("transpose", h0, perm=(1, 0, 2)) if h0 is not None else None
        c0 = ctx.op("transpose", c0, perm=(1, 0, 2)) if c0 is not None else None
    steps, batch, _ = ctx.static_shape(x, kind)
    if steps > _MAX_STEPS:
        raise node.unsupported(f"{steps} time steps (unrolling is limited to {_MAX_STEPS})")
    if seq_lens is not None:
        lens = np.asarray(ctx.require_const(seq_lens, "sequence_lens")).reshape(-1)
        if not (lens == steps).all():
            raise node.unsupported("sequence_lens shorter than the sequence (per-batch lengths)")
    acts = _activations(ctx, node, dirs)
    n_gates = _GATES[kind]
    zeros = np.zeros((batch, hidden), dtype=ctx.dtype(x).np)

    def clipped(v: Value) -> Value:
        return v if clip is None else ctx.op("clip", v, min=-clip, max=clip)

    ys, hs, cs = [], [], []
    for d in range(dirs):
        wd, rd = _take(ctx, w, d), _take(ctx, r, d)
        proj = ctx.op("matmul", x, ctx.op("transpose", wd, perm=(1, 0)))          # (S, B, G*H)
        rt = ctx.op("transpose", rd, perm=(1, 0))                                   # (H, G*H)
        wb = rb = None
        if b is not None:
            bd = _take(ctx, b, d)
            wb = ctx.op("slice", bd, starts=(0,), ends=(n_gates * hidden,), axes=(0,), steps=(1,))
            rb = ctx.op("slice", bd, starts=(n_gates * hidden,), ends=(2 * n_gates * hidden,), axes=(0,), steps=(1,))
            proj = ctx.op("add", proj, wb if kind == "GRU" else ctx.op("add", wb, rb))
        h = _take(ctx, h0, d) if h0 is not None else ctx.const(zeros)
        c = _take(ctx, c0, d) if c0 is not None else ctx.const(zeros)
        pd = _take(ctx, peep, d) if peep is not None else None
        f = acts[d]
        outs: dict[int, Value] = {}
        order = range(steps) if (direction == "forward" or (direction == "bidirectional" and d == 0)) \
            else reversed(range(steps))
        for t in order:
            xt = _take(ctx, proj, t)
            if kind == "RNN":
                h = f[0](clipped(ctx.op("add", xt, ctx.op("matmul", h, rt))))
            elif kind == "GRU":
                rec = ctx.op("matmul", h, rt)
                if rb is not None:
                    rec = ctx.op("add", rec, rb)
                z = f[0](clipped(ctx.op("add", _gate(ctx, xt, 0, hidden), _gate(ctx, rec, 0, hidden))))
                rr = f[0](clipped(ctx.op("add", _gate(ctx, xt, 1, hidden), _gate(ctx, rec, 1, hidden))))
                if linear_before_reset:
                    cand = ctx.op("add", _gate(ctx, xt, 2, hidden), ctx.op("mul", rr, _gate(ctx, rec, 2, hidden)))
                else:
                    rh = ctx.op("matmul", ctx.op("mul", rr, h), _gate(ctx, rt, 2, hidden))
                    if rb is not None:
                        rh = ctx.op("add", rh, _gate(ctx, rb, 2, hidden))
                    cand = ctx.op("add", _gate(ctx, xt, 2, hidden), rh)
                hc = f[1](clipped(cand))
                one = ctx.scalar(1, z)
                h = ctx.op("add", ctx.op("mul", ctx.op("sub", one, z), hc), ctx.op("mul", z, h))
            else:
                gates = ctx.op("add", xt, ctx.op("matmul", h, rt))
                i_, o_, f_, c_ = (_gate(ctx, gates, g, hidden) for g in range(4))
                if pd is not None:
                    i_ = ctx.op("add", i_, ctx.op("mul", _gate(ctx, pd, 0, hidden), c))
                    f_ = ctx.op("add", f_, ctx.op("mul", _gate(ctx, pd, 2, hidden), c))
                it, ft, ct = f[0](clipped(i_)), f[0](clipped(f_)), f[1](clipped(c_))
                c = ctx.op("add", ctx.op("mul", ft, c), ctx.op("mul", it, ct))
                if pd is not None:
                    o_ = ctx.op("add", o_, ctx.op("mul", _gate(ctx, pd, 1, hidden), c))
                h = ctx.op("mul", f[0](clipped(o_)), f[2](c))
            outs[t] = h
        ys.append(ctx.op("concat", [ctx.op("unsqueeze", outs[t], axes=(0,)) for t in range(steps)], axis=0))
        hs.append(ctx.op("unsqueeze", h, axes=(0,)))
        cs.append(ctx.op("unsqueeze", c, axes=(0,)))
    y = ctx.op("concat", [ctx.op("unsqueeze", v, axes=(1,)) for v in ys], axis=1)  # (S, D, B, H)
    yh = hs[0] if dirs == 1 else ctx.op("concat", hs, axis=0)                         # (D, B, H)
    yc = cs[0] if dirs == 1 else ctx.op("concat", cs, axis=0)
    if layout:
        y = ctx.op("transpose", y, perm=(2, 0, 1, 3))
        yh = ctx.op("transpose", yh, perm=(1, 0, 2))
        yc = ctx.op("transpose", yc, perm=(1, 0, 2))
    return [y, yh, yc if kind == "LSTM" else None]


handles("RNN", "GRU", "LSTM")(_rnn)
