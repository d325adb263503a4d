"""Category fusion: runs of cheap kernels of the same kind, adjacent in program order, become one.

Whatever connects them (nothing, often: the position ids, the attention mask and the casts of
a transformer's preamble), each cheap kernel costs a call with its OpenMP region; a run of them
costs one.  "Cheap" is every result at most ``Machine.small_bytes``.  Kernels adjacent in
program order (constants in between do not count) cannot have another kernel on a path
between them, so merging a run never makes a cycle.
"""
from __future__ import annotations

from ...ir.core import Operation
from ...ir.opdef import FusionKind
from ...ir.symbolic import hint_nbytes
from .engine import Fusion
from .kinds import KERNEL, kernel_kind


def _cheap(fz: Fusion, k: Operation) -> bool:
    return (kernel_kind(k) < FusionKind.OUT_ELEMENTWISE_FUSABLE
            and all(hint_nbytes(r.type) <= fz.machine.small_bytes for r in k.results))


def fuse_category(fz: Fusion) -> int:
    runs: list[list[Operation]] = []
    run: list[Operation] = []
    for op in fz.func.body:
        if op.name != KERNEL:
            continue
        if run and _cheap(fz, op) and kernel_kind(op) == kernel_kind(run[0]):
            run.append(op)
            continue
        if len(run) > 1:
            runs.append(run)
        run = [op] if _cheap(fz, op) else []
    if len(run) > 1:
        runs.append(run)
    merged = 0
    for r in runs:
        if fz.try_merge(r, "category") is not None:
            merged += 1
    return merged


__all__ = ["fuse_category"]
