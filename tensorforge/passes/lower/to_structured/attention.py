"""attention: scores = q k^T, a masked softmax over the keys, then the weighted sum of v.

Five computes over the broadcast batch dims ``B``: the scores ``(B, Lq, Lk)`` as a plain
contraction over D (so a later micro-kernel path can recognise it), the row max and the row
sum of the softmax (scale, additive mask, bool mask and causal triangle are applied inline
where the scores are read), the probabilities, and their contraction with ``v``.  A query
row that sees no key gets probabilities 0, hence an output of 0, as the op defines.
"""
from __future__ import annotations

import math
from typing import Sequence

from ....dialects.graph.base import broadcast_shapes
from ....dialects.structured.builder import Expr, TensorRef
from ....ir.types import DType
from .reduce import SoftmaxParts, acc_dtype, cast_to, elementwise
from .registry import LoweringContext, broadcast_read, lowering


def batch_index(t: TensorRef, batch: Sequence[int], axes: Sequence[Expr]) -> list:
    """The leading (batch) indices of ``t`` (..., L, D) at broadcast batch position ``axes``."""
    own = t.shape[:-2]
    lead = len(batch) - len(own)
    return [0 if d == 1 and batch[lead + j] != 1 else axes[lead + j] for j, d in enumerate(own)]


@lowering("graph.attention")
def lower_attention(ctx: LoweringContext):
    q, k, v = ctx.inputs[:3]
    mask = ctx.inputs[3] if len(ctx.inputs) > 3 else None
    kb, out_dt = ctx.kb, ctx.out_dtype()
    dt = acc_dtype(out_dt)
    batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    nb = len(batch)
    lq, lk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = ctx.attrs.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    causal = ctx.attrs.get("causal", False)
    rows = tuple(batch) + (lq, lk)

    def dot(*ax):
        b, i, j, e = ax[:nb], ax[nb], ax[nb + 1], ax[nb + 2]
        return q.read(batch_index(q, batch, b) + [i, e]).cast(dt) * k.read(batch_index(k, batch, b) + [j, e]).cast(dt)

    scores = kb.compute(rows + (d,), "p" * (nb + 2) + "r", dt, dot, combiner="add")
    bool_mask = mask is not None and mask.dtype is DType.bool

    def logit(idx):
        s = scores.read(idx) * scale
        if mask is not None and not bool_mask:
            s = s + broadcast_read(mask, idx, rows).cast(dt)
        return s

    def keep(idx):
        conds = []
        if bool_mask:
            conds.append(broadcast_read(mask, idx, rows))
        if causal:
            conds.append(idx[-1] <= idx[-2])
        return conds[0] & conds[1] if len(conds) == 2 else conds[0]

    parts = SoftmaxParts(kb, rows, nb + 1, dt, logit, keep if (bool_mask or causal) else None, guard_empty=True)
    probs = elementwise(kb, rows, dt, lambda *i: parts.exp(i) / parts.total(i).max(1.0))

    def weighted(*ax):
        b, i, e, j = ax[:nb], ax[nb], ax[nb + 1], ax[nb + 2]
        return probs.read(list(b) + [i, j]) * v.read(batch_index(v, batch, b) + [j, e]).cast(dt)

    out = kb.compute(tuple(batch) + (lq, dv, lk), "p" * (nb + 2) + "r", dt, weighted, combiner="add")
    return [cast_to(kb, out, out_dt)]
