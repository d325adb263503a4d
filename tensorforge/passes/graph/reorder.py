"""Operator reordering (``reorder``): a topological order chosen for memory or for fusion.

Program order decides how long each tensor lives, so it decides the arena the memory planner
needs (``peak_live_bytes`` in ``passes/memory/plan.py``: the most bytes of op results alive at
once; inputs and constants are not counted).  Two goals:

- ``goal=memory`` (default): list scheduling that always runs the ready op with the smallest
  ``bytes it allocates - bytes it frees`` (an op frees an operand it is the last user of),
  preferring on ties the op that consumes what was just produced (short lifetimes, and
  producer and consumer stay together for fusion), then program order.  The result is kept
  only if its peak is lower than the current order's: the pass never makes memory worse.
- ``goal=siblings``: program order, except that when an op runs, the ops of the same kind that
  read one of its (non-constant) operands and are ready run right after it: the Q, K and V
  projections of attention, the 1x1 convs that open an Inception block.  Horizontal fusion
  looks for exactly these neighbours.

Only the order of the ops in each function body changes; constants are placed right before
their first user.  ``peak_before``/``peak_after`` and ``siblings_before``/``siblings_after``
(adjacent sibling pairs) of the last run are kept on the pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

from ...errors import PassError
from ...ir.builtin import FuncOp
from ...ir.core import Block, Operation, Value
from ...ir.opdef import TERMINATOR
from ...ir.pass_manager import Option, Pass
from ...ir.symbolic import hint_nbytes, hints_from, symbol_table_of
from ...ir.types import TensorType
from ...passes.memory.plan import peak_live_bytes
from ..registry import register_pass

GOALS = ("memory", "siblings")


def _counted(v: Value) -> bool:
    """Whether ``peak_live_bytes`` counts ``v`` (an op result that is not a constant)."""
    return isinstance(v.type, TensorType) and v.op is not None and v.op.name != "graph.constant"


def _data(v: Value) -> bool:
    """A value computed at run time (a function input or a counted result): what siblings share."""
    return v.is_block_arg or _counted(v)


def _is_constant_like(op: Operation) -> bool:
    """Ops placed next to their first user rather than scheduled: no operands, nothing counted."""
    return not op.operands and not op.regions and not any(_counted(r) for r in op.results)


class _Graph:
    """The dependence graph of one block's ops (terminator excluded)."""

    def __init__(self, block: Block):
        ops = list(block)
        self.terminator = ops.pop() if ops and ops[-1].has_trait(TERMINATOR) else None
        self.ops = ops
        self.index = {id(op): i for i, op in enumerate(ops)}
        self.preds: list[set[int]] = [set() for _ in ops]
        self.succs: list[set[int]] = [set() for _ in ops]
        self.reads: list[list[Value]] = []            # distinct values each op reads
        for i, op in enumerate(ops):
            seen: dict[int, Value] = {}
            for inner in op.walk():
                for v in inner.operands:
                    seen.setdefault(id(v), v)
            own = {id(r) for inner in op.walk() for r in inner.results}
            reads = [v for k, v in seen.items() if k not in own]
            self.reads.append(reads)
            for v in reads:
                j = self._producer(v)
                if j is not None and j != i:
                    self.preds[i].add(j)
                    self.succs[j].add(i)

    def _producer(self, v: Value) -> int | None:
        op = v.op
        while op is not None and id(op) not in self.index:
            op = op.parent_op
        return None if op is None else self.index[id(op)]

    def users_in_block(self) -> dict[int, int]:
        """id(value) -> how many ops of the block (the terminator included) read it."""
        count: dict[int, int] = {}
        for reads in self.reads:
            for v in reads:
                count[id(v)] = count.get(id(v), 0) + 1
        if self.terminator is not None:
            for v in {id(v): v for v in self.terminator.operands}.values():
                count[id(v)] = count.get(id(v), 0) + 1
        return count


def simulated_peak(graph: _Graph, order: Sequence[int]) -> int:
    """``peak_live_bytes`` of the block if its ops ran in ``order`` (indices into ``graph.ops``)."""
    remaining = graph.users_in_block()
    live = peak = 0
    for i in order:
        op = graph.ops[i]
        alloc = sum(hint_nbytes(r.type) for r in op.results if _counted(r))
        peak = max(peak, live + alloc)
        live += sum(hint_nbytes(r.type) for r in op.results if _counted(r) and remaining.get(id(r), 0) > 0)
        for v in graph.reads[i]:
            remaining[id(v)] -= 1
            if remaining[id(v)] == 0 and _counted(v):
                live -= hint_nbytes(v.type)
    return peak


def working_set_bound(func: FuncOp) -> int:
    """The most bytes one op of ``func`` reads and writes at once (counted values only): no order
    can have a lower peak, so a peak equal to it is optimal."""
    best = 0
    for op in func.body:
        values = {id(v): v for v in list(op.operands) + list(op.results) if _counted(v)}
        best = max(best, sum(hint_nbytes(v.type) for v in values.values()))
    return best


def _list_schedule(graph: _Graph, pick: Callable[[list[int], list[int]], int]) -> list[int]:
    """A topological order: ``pick(ready, order_so_far)`` chooses the next op among the ready ones.

    Constant-like ops are taken as soon as they are ready, without asking ``pick``: they cost
    nothing and ``_apply`` moves them next to their users anyway.
    """
    waiting = [len(p) for p in graph.preds]
    free = [_is_constant_like(op) for op in graph.ops]
    ready = [i for i, n in enumerate(waiting) if n == 0 and not free[i]]
    order: list[int] = [i for i, n in enumerate(waiting) if n == 0 and free[i]]
    for i in order:
        for j in graph.succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    while ready:
        i = pick(ready, order)
        ready.remove(i)
        order.append(i)
        for j in graph.succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:          # never a constant-like op: those have no operands
                ready.append(j)
    if len(order) != len(graph.ops):
        raise PassError("reorder: the block's ops have a dependence cycle (is the IR verified?)")
    return order


def memory_order(graph: _Graph) -> list[int]:
    """Greedy by net allocation; ties go to consumers of the last result, then program order."""
    remaining = graph.users_in_block()
    alloc = [sum(hint_nbytes(r.type) for r in op.results if _counted(r)) for op in graph.ops]

    def pick(ready: list[int], order: list[int]) -> int:
        last = graph.succs[order[-1]] if order else set()

        def key(i: int):
            freed = sum(hint_nbytes(v.type) for v in graph.reads[i] if _counted(v) and remaining[id(v)] == 1)
            return (alloc[i] - freed, i not in last, i)
        best = min(ready, key=key)
        for v in graph.reads[best]:
            remaining[id(v)] -= 1
        return best
    return _list_schedule(graph, pick)


def siblings_order(graph: _Graph) -> list[int]:
    """Program order, pulling ready siblings (same op name, a shared non-constant operand)
    right after each op."""
    queue: list[int] = []

    def pick(ready: list[int], order: list[int]) -> int:
        while queue:
            j = queue.pop(0)
            if j in ready:
                return j
        best = min(ready)
        op = graph.ops[best]
        shared = {id(v) for v in graph.reads[best] if _data(v)}
        queue.extend(sorted(j for j in ready if j != best and graph.ops[j].name == op.name
                            and shared & {id(v) for v in graph.reads[j]}))
        return best
    return _list_schedule(graph, pick)


def adjacent_siblings(block: Block) -> int:
    """Consecutive pairs of same-named ops that share a non-constant operand (constants skipped)."""
    ops = [op for op in block if not _is_constant_like(op) and not op.has_trait(TERMINATOR)]
    count = 0
    for a, b in zip(ops, ops[1:]):
        if a.name == b.name and {id(v) for v in a.operands if _data(v)} & {id(v) for v in b.operands}:
            count += 1
    return count


def _apply(block: Block, graph: _Graph, order: list[int]) -> None:
    """Relinks the block's ops in ``order``; constant-like ops go right before their first user."""
    placed: set[int] = set()
    sequence: list[Operation] = []
    scheduled = [i for i in order if not _is_constant_like(graph.ops[i])]
    for i in scheduled:
        for j in sorted(graph.preds[i]):
            if j not in placed and _is_constant_like(graph.ops[j]):
                placed.add(j)
                sequence.append(graph.ops[j])
        placed.add(i)
        sequence.append(graph.ops[i])
    for j, op in enumerate(graph.ops):                 # constants nothing in the block reads
        if j not in placed:
            sequence.append(op)
    for op in sequence:
        op.detach()
    anchor = graph.terminator
    for op in sequence:
        if anchor is not None:
            block.insert_before(op, anchor)
        else:
            block.append(op)


@dataclass
class ReorderResult:
    """What one function's reordering did."""

    function: str
    peak_before: int
    peak_after: int
    siblings_before: int
    siblings_after: int
    changed: bool


def reorder_function(func: FuncOp, goal: str = "memory") -> ReorderResult:
    """Reorders ``func``'s body for ``goal`` ("memory" or "siblings"); symbolic sizes count at
    the function's hints."""
    if goal not in GOALS:
        raise PassError(f"reorder: unknown goal '{goal}' (choose from {', '.join(GOALS)})")
    with hints_from(symbol_table_of(func)):
        return _reorder_function(func, goal)


def _reorder_function(func: FuncOp, goal: str) -> ReorderResult:
    block = func.body
    graph = _Graph(block)
    peak_before, sib_before = peak_live_bytes(func), adjacent_siblings(block)
    original = list(range(len(graph.ops)))
    if goal == "memory":
        order = memory_order(graph)
        better = simulated_peak(graph, order) < simulated_peak(graph, original)
    else:
        order = siblings_order(graph)
        better = True
    core = [i for i in order if not _is_constant_like(graph.ops[i])]
    same = core == [i for i in original if not _is_constant_like(graph.ops[i])]
    if better and not same:
        _apply(block, graph, order)
    changed = better and not same
    return ReorderResult(func.sym_name, peak_before, peak_live_bytes(func) if changed else peak_before,
                         sib_before, adjacent_siblings(block) if changed else sib_before, changed)


@register_pass
class ReorderPass(Pass):
    name = "reorder"
    summary = "reorder ops: lower peak live memory (goal=memory) or put siblings together (goal=siblings)"
    options: ClassVar[dict[str, Option]] = {
        "goal": Option("memory", "memory: lower peak live bytes; siblings: same-kind ops sharing an input adjacent"),
    }

    def __init__(self, **options):
        super().__init__(**options)
        self.results: list[ReorderResult] = []

    def run(self, module):
        if self.goal not in GOALS:
            raise PassError(f"reorder: unknown goal '{self.goal}' (choose from {', '.join(GOALS)})")
        funcs = [op for op in module.walk() if isinstance(op, FuncOp)]
        self.results = [reorder_function(f, self.goal) for f in funcs]
        return any(r.changed for r in self.results)

    @property
    def peak_before(self) -> int:
        return sum(r.peak_before for r in self.results)

    @property
    def peak_after(self) -> int:
        return sum(r.peak_after for r in self.results)


__all__ = ["GOALS", "ReorderPass", "ReorderResult", "adjacent_siblings", "memory_order", "reorder_function",
           "siblings_order", "simulated_peak", "working_set_bound"]
