"""The schedule every kernel gets without tuning.

For each top-level loop nest: the outermost parallel loop with enough iterations runs across
threads (OpenMP, even static split) and the innermost loop that writes distinct elements is
vectorized.  Reduction loops stay serial; gcc vectorizes them itself under -ffast-math.
"""
from __future__ import annotations

from ..ir.core import Operation


def _loops_in(block) -> list[Operation]:
    return [op for op in block if op.name == "loop.for"]


def _perfect_chain(loop: Operation) -> list[Operation]:
    """The loop and the loops nested directly in it while each body holds exactly one loop and no other op."""
    chain = [loop]
    while True:
        body = chain[-1].regions[0].blocks[0]
        ops = body.ops
        if len(ops) == 1 and ops[0].name == "loop.for":
            chain.append(ops[0])
        else:
            return chain


def _extent(loop: Operation) -> int:
    a = loop.attributes
    return max(0, -(-(a["ub"] - a["lb"]) // a["step"]))


def _innermost_loops(loop: Operation):
    body = loop.regions[0].blocks[0]
    inner = _loops_in(body)
    if not inner:
        yield loop
    for child in inner:
        yield from _innermost_loops(child)


def default_schedule(fn: Operation, threads: int = 2) -> None:
    """Annotates ``fn`` (a loop.func) in place."""
    body = fn.regions[0].blocks[0]
    for nest in _loops_in(body):
        chain = [l for l in _perfect_chain(nest) if not l.attributes.get("reduction")]
        if chain:
            pick = next((l for l in chain if _extent(l) >= threads), None)
            if pick is not None and _extent(pick) >= 2:
                pick.attributes["kind"] = "parallel"
        for inner in _innermost_loops(nest):
            if inner.attributes.get("reduction") or inner.attributes["kind"] == "parallel":
                continue
            has_alloc = any(op.name == "loop.alloc" for op in inner.regions[0].blocks[0])
            if not has_alloc and _extent(inner) >= 4:
                inner.attributes["kind"] = "vectorize"
