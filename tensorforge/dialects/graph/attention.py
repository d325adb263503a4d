"""Scaled dot-product attention as one op: ``softmax(q k^T * scale + mask) v``.

Kept whole (OPAQUE) so a backend can pick a fused kernel (flash-style) instead of
materialising the (Lq, Lk) score matrix; the reference below does materialise it.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, OpDef, expect, register
from ...ir.types import DType, TensorType
from .base import (broadcast_shapes, broadcasts_to, compute_dtype, expect_float, io_bytes, match_dims,
                   num_elements, promote, tensor_types)


@register
class Attention(OpDef):
    """q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv), optional mask broadcast to (..., Lq, Lk).

    A bool mask keeps the positions where it is true; any other mask is added to the
    scores.  ``causal`` lets query i see keys j <= i (top-left aligned, as ONNX Attention
    without a cache and torch's ``is_causal``).  A query row that can see no key gives 0.
    Leading (batch, head) dims broadcast.
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
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
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
        lq, lk, d, dv = (x if isinstance(x, int) else 1 for x in dims)
        pairs = batch * lq * lk
        return Cost(2.0 * pairs * (d + dv) + 5.0 * pairs, io_bytes(operand_types, result_types))


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
              scale: float | None = None, causal: bool = False) -> np.ndarray:
    dt = compute_dtype(q.dtype)
    q, k, v = (t.astype(dt, copy=False) for t in (q, k, v))
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
    if keep is not None:
        scores = np.where(keep, scores, dt.type(-np.inf))
    row_max = np.max(scores, axis=-1, keepdims=True)
    dead = np.isneginf(row_max)                     # rows that see no key at all
    e = np.exp(scores - np.where(dead, 0, row_max))
    p = e / np.where(dead, 1, np.sum(e, axis=-1, keepdims=True))
    return np.matmul(p, v)
