"""Liveness-based arena planning.

Every intermediate tensor of a function gets an offset in one arena so that a run allocates
nothing.  Tensors whose lifetimes do not overlap share bytes.  Offsets are chosen greedily,
largest tensor first, at the lowest offset that does not collide with an already placed tensor
whose lifetime overlaps (the classic "greedy by size" heuristic used by TFLite and ORT).

The placing itself lives in ``runtime/arena_plan.py`` (``place``), because a model with symbolic
sizes places its buffers at run time, once per distinct set of dims, from the plan this module
makes as data (``plan_dynamic``): static and dynamic models share one algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...ir.builtin import FuncOp
from ...ir.core import Operation, Value
from ...ir.symbolic import Dim, dim_mul, dim_prod, hint_nbytes
from ...ir.types import TensorType
from ...runtime.arena_plan import ALIGN, DynamicPlan, PlannedBuffer, aligned as _aligned, place


@dataclass
class MemoryPlan:
    offsets: dict[int, int] = field(default_factory=dict)     # id(value) -> arena offset
    sizes: dict[int, int] = field(default_factory=dict)
    arena_bytes: int = 0
    naive_bytes: int = 0                                      # sum of all sizes (no reuse)
    keep_alive: dict[int, int] = field(default_factory=dict)  # id(value) -> op index it must live to

    def offset(self, v: Value) -> int:
        return self.offsets[id(v)]


def live_intervals(func: FuncOp, needs_buffer: Callable[[Value], bool],
                   keep_alive: dict[int, int] | None = None) -> dict[int, tuple[int, int, Value]]:
    """id(value) -> (first op index, last use index, value) for values that need arena space;
    ``keep_alive`` (id(value) -> op index) extends a value's life to a later op that reads it
    without being its user in the IR (a kernel fused at emission with the one after it)."""
    keep_alive = keep_alive or {}
    order = {id(op): i for i, op in enumerate(func.body)}
    intervals: dict[int, tuple[int, int, Value]] = {}
    for op in func.body:
        for r in op.results:
            if not needs_buffer(r):
                continue
            start = order[id(op)]
            end = max([order.get(id(_top(u, func)), start) for u, _ in r.uses] or [start])
            end = max(end, keep_alive.get(id(r), end))
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


def plan_memory(func: FuncOp, needs_buffer: Callable[[Value], bool],
                keep_alive: dict[int, int] | None = None) -> MemoryPlan:
    """Offsets for the static-sized values ``needs_buffer`` selects (see ``plan_dynamic`` for
    functions with symbolic sizes), alive as ``live_intervals`` says."""
    intervals = list(live_intervals(func, needs_buffer, keep_alive).values())
    offsets, arena = place([v.type.nbytes for _, _, v in intervals], [(a, b) for a, b, _ in intervals])
    plan = MemoryPlan(arena_bytes=arena, keep_alive=dict(keep_alive or {}))
    for (_, _, v), off in zip(intervals, offsets):
        size = _aligned(max(v.type.nbytes, 1))
        plan.naive_bytes += size
        plan.offsets[id(v)] = off
        plan.sizes[id(v)] = size
    return plan


def nbytes_dim(t: TensorType) -> Dim:
    """The byte size of ``t`` as a dim: an int for static types, an expression over its symbols."""
    return t.nbytes if t.is_static else dim_mul(dim_prod(t.shape), t.dtype.itemsize)


@dataclass
class SymbolicMemoryPlan:
    """A function's arena plan when sizes depend on symbols: ``index[id(value)]`` is the value's
    buffer number in ``plan`` (the generated C reads ``arena + offsets[index]``)."""

    plan: DynamicPlan
    index: dict[int, int] = field(default_factory=dict)

    def buffer(self, v: Value) -> int:
        return self.index[id(v)]


def plan_dynamic(func: FuncOp, needs_buffer: Callable[[Value], bool], symbols: list[str]) -> SymbolicMemoryPlan:
    """The memory plan of a function with symbolic sizes as data: per buffer, its size in bytes
    as a dim expression and its live interval, in program order; offsets are chosen at run time
    (``DynamicPlan.offsets_for``) because they depend on the dims."""
    out = SymbolicMemoryPlan(DynamicPlan(symbols, []))
    for start, end, v in live_intervals(func, needs_buffer).values():
        out.index[id(v)] = len(out.plan.buffers)
        out.plan.buffers.append(PlannedBuffer(nbytes_dim(v.type), start, end))
    return out


def peak_live_bytes(func: FuncOp) -> int:
    """Largest total size of tensors alive at once in program order (inputs and constants excluded)."""
    intervals = live_intervals(func, lambda v: isinstance(v.type, TensorType) and v.op is not None
                               and v.op.name != "graph.constant")
    events: dict[int, int] = {}
    for start, end, v in intervals.values():
        n = v.type.nbytes if v.type.is_static else hint_nbytes(v.type)    # symbolic: at the hints
        events[start] = events.get(start, 0) + n
        events[end + 1] = events.get(end + 1, 0) - n
    peak = cur = 0
    for t in sorted(events):
        cur += events[t]
        peak = max(peak, cur)
    return peak
