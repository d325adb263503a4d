"""Scaled dot-product attention as one op: ``softmax(q k^T * scale + mask) v``.

Kept whole (OPAQUE) so a backend can pick a fused kernel (flash-style) instead of
materialising the (Lq, Lk) score matrix; the reference below does materialise it.

Grouped-query attention (GQA, MQA) is part of the op rather than a ``repeat`` in front of it:
k and v may have fewer heads than q, so the KV tensors are read in place by every query head
of their group instead of being copied ``Hq / Hkv`` times (what torch's CPU flash kernel,
``enable_gqa=True`` and ONNX Attention with ``kv_num_heads`` all mean).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.opdef import PURE, Attr, Cost, FusionKind, OpDef, expect, register
from ...ir.types import Dim, DType, TensorType
from .base import (broadcast_shapes, broadcasts_to, compute_dtype, expect_float, hint_size, io_bytes, match_dims,
                   num_elements, promote, tensor_types)


@register
class Attention(OpDef):
    """q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv), optional mask broadcast to (..., Lq, Lk).

    Leading (batch, head) dims broadcast.  The heads dim (-3) of k and v may also divide q's
    (grouped-query attention): with ``Hq = g * Hkv``, query head ``h`` attends with KV head
    ``h // g``, as ``torch.repeat_interleave`` / ``np.repeat`` of the KV heads would give.
    A bool mask keeps the positions where it is true; any other mask is added to the
    scores.  ``causal`` lets query i see keys j <= i (top-left aligned, as ONNX Attention
    without a cache and torch's ``is_causal``).  A query row that can see no key gives 0.
    Masking adds -inf to a score, as torch does, so a NaN or +inf score makes its row NaN
    even where it is masked (torch's ``exp(s - max)`` is NaN there).
    """

    name = "graph.attention"
    operands = ("q", "k", "v", "mask?")
    attrs = {"scale": Attr("float", None, "default 1/sqrt(D)"), "causal": Attr("bool", False)}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE

    def infer(self, types, attrs):
        tt = tensor_types(types, self.name)
        q, k, v = tt[:3]
        expect_float(q, "q")
        promote(q.dtype, k.dtype)
        promote(q.dtype, v.dtype)
        for name, t in (("q", q), ("k", k), ("v", v)):
            expect(t.rank >= 2, f"{name} must be (..., L, D) with rank >= 2, got shape {t.shape}")
        match_dims(q.shape[-1], k.shape[-1], "head dim: q and k differ in their last dim (D)")
        lk = match_dims(k.shape[-2], v.shape[-2], "key length: k and v differ in dim -2 (Lk)")
        batch = attention_batch(q.shape, k.shape, v.shape)
        if len(tt) == 4:
            mask = tt[3]
            expect(mask.dtype in (DType.bool, q.dtype),
                   f"mask must be i1 (true = keep) or additive {q.dtype}, got {mask.dtype}")
            scores = batch + (q.shape[-2], lk)
            expect(broadcasts_to(mask.shape, scores),
                   f"mask of shape {mask.shape} does not broadcast to the scores (..., Lq, Lk) = {scores}")
        return [TensorType(batch + (q.shape[-2], v.shape[-1]), q.dtype)]

    @staticmethod
    def compute(q, k, v, mask=None, scale=None, causal=False):
        return attention(q, k, v, mask, scale, causal)

    def cost(self, operand_types, result_types, attrs):
        q, k, v = operand_types[:3]
        batch = num_elements(result_types[0].shape[:-2])
        dims = (q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1])
        lq, lk, d, dv = (x if isinstance(x, int) else hint_size(x) for x in dims)
        pairs = batch * lq * lk
        return Cost(2.0 * pairs * (d + dv) + 5.0 * pairs, io_bytes(operand_types, result_types))


def kv_groups(q_shape: Sequence[Dim], kv_shape: Sequence[Dim]) -> int:
    """How many query heads share one head of k or v (``Hq // Hkv``); 1 when the heads dims
    are equal, broadcast (``Hkv == 1``), symbolic, or absent (rank < 3)."""
    if len(q_shape) < 3 or len(kv_shape) < 3:
        return 1
    hq, hkv = q_shape[-3], kv_shape[-3]
    if isinstance(hq, int) and isinstance(hkv, int) and 1 < hkv < hq and hq % hkv == 0:
        return hq // hkv
    return 1


def attention_batch(q_shape: Sequence[Dim], k_shape: Sequence[Dim], v_shape: Sequence[Dim]) -> tuple:
    """The broadcast batch dims (everything but the last two) of an attention, with the KV
    heads of a grouped-query attention counted as the query heads they serve."""
    def as_query_heads(shape: Sequence[Dim]) -> tuple:
        g = kv_groups(q_shape, shape)
        lead = list(shape[:-2])
        if g > 1:
            lead[-1] = lead[-1] * g
        elif len(lead) and len(q_shape) >= 3 and _heads_conflict(q_shape[-3], lead[-1]):
            raise ShapeError(f"q has {q_shape[-3]} heads (dim -3) but k/v have {lead[-1]}: grouped-query "
                             f"attention needs the query heads to be a multiple of the KV heads")
        return tuple(lead)
    return broadcast_shapes(q_shape[:-2], as_query_heads(k_shape), as_query_heads(v_shape))


def _heads_conflict(hq: Dim, hkv: Dim) -> bool:
    """Static head counts that neither broadcast nor group."""
    return isinstance(hq, int) and isinstance(hkv, int) and 1 not in (hq, hkv) and hq != hkv


def repeat_kv_heads(q: np.ndarray, t: np.ndarray) -> np.ndarray:
    """k or v with each head repeated for the query heads of its group (identity without GQA)."""
    g = kv_groups(q.shape, t.shape)
    return np.repeat(t, g, axis=-3) if g > 1 else t


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
              scale: float | None = None, causal: bool = False) -> np.ndarray:
    dt = compute_dtype(q.dtype)
    q, k, v = (t.astype(dt, copy=False) for t in (q, k, v))
    k, v = repeat_kv_heads(q, k), repeat_kv_heads(q, v)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * dt.type(scale)
    keep = None
    if mask is not None:
        if mask.dtype == np.bool_:
            keep = mask
        else:
            scores = scores + mask.astype(dt, copy=False)
    if causal:
        lq, lk = scores.shape[-2:]
        tri = np.tril(np.ones((lq, lk), dtype=bool))
        keep = tri if keep is None else keep & tri
    with np.errstate(invalid="ignore"):             # inf - inf: a NaN row, as in torch
        if keep is not None:                        # added, not selected: NaN and +inf stay NaN
            scores = scores + np.where(keep, dt.type(0), dt.type(-np.inf))
        row_max = np.max(scores, axis=-1, keepdims=True)
        dead = np.isneginf(row_max)                 # rows that see no key at all
        e = np.exp(scores - np.where(dead, 0, row_max))
        p = e / np.where(dead, 1, np.sum(e, axis=-1, keepdims=True))
        return np.matmul(p, v)
