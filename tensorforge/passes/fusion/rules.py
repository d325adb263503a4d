"""What may fuse into what: the kind rules, and the index-map checks of a contraction's kernel.

Kinds are ordered ELEMENTWISE < BROADCAST < INJECTIVE < REDUCTION < OUT_ELEMENTWISE_FUSABLE
< OPAQUE.  For a producer kernel P feeding a consumer kernel C:

- nothing fuses with an OPAQUE kernel (top-k, cumsum, attention, shape_of);
- a kernel holds at most one contraction (GEMM/conv), and nothing reduces after it: its
  consumers may join as an *epilogue* only when they are elementwise, broadcast or injective;
- a contraction's operands take only *prologues* that move data (pad, transpose, broadcast,
  slice, reshape with an affine index map), folded into its loads; an elementwise producer
  would be recomputed for every tile of the GEMM, a reduction not at all;
- among elementwise, broadcast, injective and reduction kernels anything goes, subject to the
  cost model (a reduction broadcast back over a row that does not fit in cache is vetoed there).

After a candidate is built, ``contraction_maps`` checks the index maps the GEMM/conv
micro-kernel must follow: every epilogue reads the contraction's result through an affine map
of its own axes (no floordiv/mod from a reshape that splits a dim), and the contraction reads
only kernel inputs (every prologue was folded into its loads).
"""
from __future__ import annotations

from ...dialects.structured.ops import ComputeView, KernelView
from ...ir.core import Operation
from ...ir.opdef import FusionKind
from .kinds import AFFINE, MAP_NAMES, READ, anchors, is_data_movement, kernel_kind, read_map

CONTRACTION = FusionKind.OUT_ELEMENTWISE_FUSABLE


def _reader_compute(read: Operation) -> Operation:
    return read.parent.parent.parent


def read_by_anchor(consumer: Operation, producer: Operation) -> bool:
    """Whether a contraction compute of ``consumer`` reads a result of ``producer``."""
    anchor_ids = {id(cv.op) for cv in anchors(consumer)}
    if not anchor_ids:
        return False
    body = consumer.regions[0].blocks[0]
    for arg, v in zip(body.args, consumer.operands):
        if v.op is producer and any(u.name == READ and id(_reader_compute(u)) in anchor_ids for u, _ in arg.uses):
            return True
    return False


def vertical_rule(producer: Operation, consumer: Operation) -> str | None:
    """Why ``producer`` cannot fuse into ``consumer`` by the kind rules, or None."""
    kp, kc = kernel_kind(producer), kernel_kind(consumer)
    if kp == FusionKind.OPAQUE or kc == FusionKind.OPAQUE:
        return "opaque kernel: runs alone"
    if kp == CONTRACTION and kc == CONTRACTION:
        return "both hold a contraction: one GEMM/conv per kernel"
    if kp == CONTRACTION and kc == FusionKind.REDUCTION:
        return "a reduction after a contraction needs whole output rows, not an epilogue"
    if kp == FusionKind.REDUCTION and kc == CONTRACTION:
        return "a contraction takes no reduction as prologue or epilogue input"
    if kc == CONTRACTION and read_by_anchor(consumer, producer):
        if not all(is_data_movement(cv) for cv in KernelView(producer).computes):
            return "a contraction's operands take only data movement (pad, transpose, broadcast) as prologue"
    return None


def sibling_rule(a: Operation, b: Operation) -> str | None:
    """Why two kernels that share an input cannot run as one, or None."""
    ka, kb = kernel_kind(a), kernel_kind(b)
    if FusionKind.OPAQUE in (ka, kb):
        return "opaque kernel: runs alone"
    if ka == CONTRACTION or kb == CONTRACTION:
        return "contractions on a shared input merge by concatenating weights (graph level), not as siblings"
    return None


def contraction_maps(kernel: Operation) -> str | None:
    """Why a merged kernel's contraction cannot be mapped onto a GEMM/conv micro-kernel with
    prologue loads and an epilogue, or None."""
    found = anchors(kernel)
    if len(found) > 1:
        return "two contractions in one kernel"
    if not found:
        return None
    cv = found[0]
    body = kernel.regions[0].blocks[0]
    for r in cv.reads():
        if not (r.operands[0].is_block_arg and r.operands[0].owner is body):
            return "a prologue could not be folded into the contraction's loads"
    memo: dict[int, int] = {}
    for r in cv.op.results[0].uses:
        read = r[0]
        if read.name != READ:
            continue
        m = read_map(ComputeView(_reader_compute(read)), read, memo)
        if m > AFFINE:
            return f"an epilogue reads the contraction's result through a {MAP_NAMES[m]} index map"
    return None


__all__ = ["CONTRACTION", "contraction_maps", "read_by_anchor", "sibling_rule", "vertical_rule"]
