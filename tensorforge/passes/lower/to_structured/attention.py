"""attention: scores = q k^T, a masked softmax over the keys, then the weighted sum of v.

Five computes over the broadcast batch dims ``B``: the scores ``(B, Lq, Lk)`` as a plain
contraction over D (so a later micro-kernel path can recognise it), the row max and the row
sum of the softmax (scale, additive mask, bool mask and causal triangle are applied inline
where the scores are read), the probabilities, and their contraction with ``v``.  A query
row that sees no key gets probabilities 0, hence an output of 0, as the op defines.
Grouped-query attention reads KV head ``h // g`` for query head ``h`` (a floordiv in the index
map of k and v), so the KV heads are never copied.

NaN and +inf follow torch: a score that is NaN or +inf makes its whole row NaN, masked or not
(torch adds -inf to masked scores, and its ``exp(s - max)`` gives NaN there).  The native
``exp`` clamps its argument, which drops NaN, so the row sum carries the NaN explicitly (bit
tests that ``-ffast-math`` cannot fold away).
"""
from __future__ import annotations

import math
from typing import Sequence

from ....dialects.graph.attention import attention_batch, kv_groups
from ....dialects.structured.builder import Expr, TensorRef
from ....ir.types import DType
from .reduce import SoftmaxParts, acc_dtype, cast_to, elementwise
from .registry import LoweringContext, broadcast_read, lowering


class PoisonedSoftmax(SoftmaxParts):
    """``SoftmaxParts`` whose exponential is NaN where a logit is NaN or +inf, so that the row
    total is NaN exactly when torch's softmax row would be; ``probability`` passes it on."""

    def exp(self, idx) -> Expr:
        s = self.logit(list(idx))
        return (s.ne(s) | s.eq(math.inf)).select(math.nan, super().exp(idx))

    def probability(self, idx) -> Expr:
        """exp / total, 0 for a row that sees no key (total 0), NaN for a poisoned row."""
        total = self.total(idx)
        return total.ne(total).select(total, self.exp(idx) / total.max(1.0))


def batch_index(t: TensorRef, batch: Sequence[int], axes: Sequence[Expr], groups: int = 1) -> list:
    """The leading (batch) indices of ``t`` (..., L, D) at broadcast batch position ``axes``;
    with ``groups > 1`` its heads dim (-3) is shared by that many query heads (GQA)."""
    own = t.shape[:-2]
    lead = len(batch) - len(own)
    index = [0 if d == 1 and batch[lead + j] != 1 else axes[lead + j] for j, d in enumerate(own)]
    if groups > 1:
        index[-1] = axes[len(batch) - 1] // groups
    return index


@lowering("graph.attention")
def lower_attention(ctx: LoweringContext):
    q, k, v = ctx.inputs[:3]
    mask = ctx.inputs[3] if len(ctx.inputs) > 3 else None
    kb, out_dt = ctx.kb, ctx.out_dtype()
    dt = acc_dtype(out_dt)
    batch = attention_batch(q.shape, k.shape, v.shape)
    gk, gv = kv_groups(q.shape, k.shape), kv_groups(q.shape, v.shape)
    nb = len(batch)
    lq, lk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = ctx.attrs.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    causal = ctx.attrs.get("causal", False)
    rows = tuple(batch) + (lq, lk)

    def dot(*ax):
        b, i, j, e = ax[:nb], ax[nb], ax[nb + 1], ax[nb + 2]
        qe = q.read(batch_index(q, batch, b) + [i, e]).cast(dt)
        return qe * k.read(batch_index(k, batch, b, gk) + [j, e]).cast(dt)

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

    parts = PoisonedSoftmax(kb, rows, nb + 1, dt, logit, keep if (bool_mask or causal) else None, guard_empty=True)
    probs = elementwise(kb, rows, dt, lambda *i: parts.probability(i))

    def weighted(*ax):
        b, i, e, j = ax[:nb], ax[nb], ax[nb + 1], ax[nb + 2]
        return probs.read(list(b) + [i, j]) * v.read(batch_index(v, batch, b, gv) + [j, e]).cast(dt)

    out = kb.compute(tuple(batch) + (lq, dv, lk), "p" * (nb + 2) + "r", dt, weighted, combiner="add")
    return [cast_to(kb, out, out_dt)]
