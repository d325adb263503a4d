"""Reuse (multi-output) fusion: one kernel, one pass over the data, several results.

- A value needed both inside and outside a group: a producer whose result is also a function
  output, or also read by another kernel, still joins its consumer; the merged kernel returns
  the value as an extra output (``fuse_vertical(multi_output=True)``).
- Reductions of the same tensor over the same axes (the mean and the mean of squares of a
  decomposed norm, the max and the sum of exponentials of a decomposed softmax once the
  exponentials are fused in) run as one kernel with one result each, so the second reduction
  finds the rows the first one brought into cache.
- Inside a kernel, an expensive term a reduction accumulates and a later compute evaluates
  again (the exponentials of a softmax) is computed once into a row buffer both read
  (``share.py``); and a value read by several computes is either kept in a buffer or recomputed
  at each read, whichever the cost model says is cheaper (``inline.decide_inline``).
"""
from __future__ import annotations

from ...dialects.structured.ops import KernelView
from ...ir.core import Operation
from ...ir.opdef import FusionKind
from .engine import Fusion
from .horizontal import fuse_siblings
from .kinds import kernel_kind
from .share import share_reduction_terms
from .vertical import fuse_vertical


def _reduction_domains(k: Operation) -> set[tuple]:
    return {(cv.domain, cv.iterators) for cv in KernelView(k).computes if cv.reduction_axes}


def reduction_siblings_accept(a: Operation, b: Operation) -> str | None:
    """Two reduction kernels share a pass when they reduce over the same iteration domain."""
    if kernel_kind(a) != FusionKind.REDUCTION or kernel_kind(b) != FusionKind.REDUCTION:
        return "not two reductions"
    if not (_reduction_domains(a) & _reduction_domains(b)):
        return "they reduce over different domains"
    return None


def fuse_reuse(fz: Fusion) -> int:
    merged = fuse_vertical(fz, multi_output=True, strategy="reuse")
    merged += fuse_siblings(fz, "reuse", reduction_siblings_accept)
    for k in fz.kernels():
        for what in share_reduction_terms(k, fz.machine.cache_bytes):
            fz.log.record("reuse", (fz.label(k),), True, what)
    return merged


__all__ = ["fuse_reuse", "reduction_siblings_accept"]
