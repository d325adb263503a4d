"""How much work a model is: flops and compulsory memory traffic of its graph.

Both are counted on the imported (unoptimised) graph so that every contender is credited
with the same work.  ``graph_bytes`` is the traffic no implementation can avoid (weights,
inputs and outputs, each moved once); achieved GB/s over it is a lower bound, which is the
right yardstick for models that are memory-bound.
"""
from __future__ import annotations

from ..ir.types import TensorType

_SKIP = ("graph.constant", "func.return")


def graph_flops(module) -> float:
    """Sum of ``opdef.cost(...).flops`` over the graph ops of the main function."""
    total = 0.0
    for op in module.main.body:
        if op.opdef is None or op.name in _SKIP:
            continue
        cost = op.opdef.cost([v.type for v in op.operands], [r.type for r in op.results], op.attributes)
        total += cost.flops
    return total


def graph_bytes(module) -> int:
    """Bytes of every constant, input and output of the main function, each counted once."""
    func = module.main
    total = sum(a.type.nbytes for a in func.args if isinstance(a.type, TensorType))
    total += sum(v.type.nbytes for v in func.outputs if isinstance(v.type, TensorType))
    for op in func.body:
        if op.name == "graph.constant":
            total += sum(r.type.nbytes for r in op.results if isinstance(r.type, TensorType))
    return total
