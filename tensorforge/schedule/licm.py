"""Loop-invariant code motion on a scheduled loop.func, run just before it becomes C.

gcc hoists invariant arithmetic itself under ``-ffast-math``, but in the IEEE build it leaves
much of it in place inside a vectorized loop: the squeeze-excitation gate
``x * sigmoid(s[c] + b[c])`` recomputed an ``exp`` for every pixel of channel ``c`` (efficientnet:
a fifth of the run time).  Moving such an expression out of the loop, where it is computed once,
changes no result: the same operations run on the same values, only fewer times.

What moves: pure scalar ops and loads, directly in a loop's body (not under a ``loop.if``), whose
operands are all defined outside that loop; a load also needs its buffer not to be stored
anywhere inside the loop.  Only out of loops with a static trip count of at least one, so that
nothing runs that the loop would not have run (a load past the end of an empty buffer, an integer
division by a run-time zero).  Inner loops go first, so an expression climbs as far as it can.
"""
from __future__ import annotations

from ..ir.core import Operation, Value
from .analysis import FOR, IF, LOAD, STORE, body, buffer_of, encloses, extent, is_pure, is_symbolic_loop, walk_ops


def _defined_inside(v: Value, loop: Operation) -> bool:
    if v.is_block_arg:
        owner = v.owner.parent_op
        return owner is loop or (owner is not None and encloses(loop, owner))
    return v.op is not None and encloses(loop, v.op)


def _runs_at_least_once(loop: Operation) -> bool:
    return not is_symbolic_loop(loop) and extent(loop) >= 1


def hoist_invariants(fn: Operation) -> int:
    """Moves the loop-invariant ops of every loop in ``fn`` in front of it; returns how many moved."""
    moved = 0
    for loop in reversed(list(walk_ops(fn, FOR))):
        if not _runs_at_least_once(loop):
            continue
        stored = {id(buffer_of(st)) for st in walk_ops(loop, STORE)}
        for op in list(body(loop)):
            if op.name in (FOR, IF) or not op.results:
                continue
            if op.name == LOAD:
                if id(buffer_of(op)) in stored:
                    continue
            elif not is_pure(op):
                continue
            if any(_defined_inside(v, loop) for v in op.operands):
                continue
            op.move_before(loop)
            moved += 1
    return moved
