"""Liveness-based arena planning.

Every intermediate tensor of a function gets an offset in one arena so that a run allocates
nothing.  Tensors whose lifetimes do not overlap share bytes.  Offsets are chosen greedily,
largest tensor first, at the lowest offset that does not collide with an already placed tensor
whose lifetime overlaps (the classic "greedy by size" heuristic used by TFLite and ORT).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...ir.builtin import FuncOp
from ...ir.core import Operation, Value
from ...ir.types import TensorType

ALIGN = 64


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class MemoryPlan:
    offsets: dict[int, int] = field(default_factory=dict)     # id(value) -> arena offset
    sizes: dict[int, int] = field(default_factory=dict)
    arena_bytes: int = 0
    naive_bytes: int = 0                                      # sum of all sizes (no reuse)

    def offset(self, v: Value) -> int:
        return self.offsets[id(v)]


def live_intervals(func: FuncOp, needs_buffer: Callable[[Value], bool]) -> dict[int, tuple[int, int, Value]]:
    """id(value) -> (first op index, last use index, value) for values that need arena space."""
    order = {id(op): i for i, op in enumerate(func.body)}
    intervals: dict[int, tuple[int, int, Value]] = {}
    for op in func.body:
        for r in op.results:
            if not needs_buffer(r):
                continue
            start = order[id(op)]
            end = max([order.get(id(_top(u, func)), start) for u, _ in r.uses] or [start])
            intervals[id(r)] = (start, end, r)
    return intervals


def _top(op: Operation, func: FuncOp) -> Operation:
    """The op of ``func``'s body that contains ``op`` (uses may sit inside nested regions)."""
    while op.parent is not None and op.parent is not func.body:
        parent = op.parent_op
        if parent is None:
            break
        op = parent
    return op


def plan_memory(func: FuncOp, needs_buffer: Callable[[Value], bool]) -> MemoryPlan:
    intervals = live_intervals(func, needs_buffer)
    plan = MemoryPlan()
    placed: list[tuple[int, int, int, int]] = []   # (offset, size, start, end)
    items = sorted(intervals.values(), key=lambda t: (-t[2].type.nbytes, t[0]))
    for start, end, v in items:
        size = _aligned(max(v.type.nbytes, 1))
        plan.naive_bytes += size
        clashes = sorted((o, s) for o, s, a, b in placed if not (b < start or end < a))
        off = 0
        for o, s in clashes:
            if off + size <= o:
                break
            off = max(off, o + s)
        placed.append((off, size, start, end))
        plan.offsets[id(v)] = off
        plan.sizes[id(v)] = size
        plan.arena_bytes = max(plan.arena_bytes, off + size)
    return plan


def peak_live_bytes(func: FuncOp) -> int:
    """Largest total size of tensors alive at once in program order (inputs and constants excluded)."""
    intervals = live_intervals(func, lambda v: isinstance(v.type, TensorType) and v.op is not None
                               and v.op.name != "graph.constant")
    events: dict[int, int] = {}
    for start, end, v in intervals.values():
        events[start] = events.get(start, 0) + v.type.nbytes
        events[end + 1] = events.get(end + 1, 0) - v.type.nbytes
    peak = cur = 0
    for t in sorted(events):
        cur += events[t]
        peak = max(peak, cur)
    return peak
