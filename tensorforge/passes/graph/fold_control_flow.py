"""``fold-control-flow``: a ``graph.if`` whose condition is a constant becomes the branch it takes.

The chosen region's ops move in front of the ``graph.if`` and its results are replaced by what
the branch yields.  It fires only when every yielded type is exactly the result's type (a result
typed with a fresh symbol because the branches differ in shape keeps its ``graph.if``; the
ONNX importer already inlines the branches it can decide).  Runs in the default pipeline
(a no-op on functions without control flow).
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Operation
from ...ir.pass_manager import Pass
from ..registry import register_pass


def _constant_bool(v) -> bool | None:
    op = v.op
    if op is None or op.name != "graph.constant":
        return None
    arr = np.asarray(op.attributes["value"].array)
    return bool(arr.reshape(-1)[0]) if arr.size == 1 else None


def fold_if(op: Operation) -> bool:
    """Inlines the taken branch of ``op`` (a ``graph.if``) when its condition is constant."""
    taken = _constant_bool(op.operands[0])
    if taken is None:
        return False
    block = op.regions[0 if taken else 1].blocks[0]
    term = block.last
    if any(v.type != r.type for v, r in zip(term.operands, op.results)):
        return False
    yielded = list(term.operands)
    for inner in list(block):
        if inner is term:
            continue
        inner.detach()
        op.parent.insert_before(inner, op)
    for r, v in zip(op.results, yielded):
        r.replace_all_uses_with(v)
    op.erase()
    return True


def fold_control_flow(root: Operation) -> int:
    """Folds every constant-condition ``graph.if`` under ``root`` (innermost first); returns how many."""
    ifs = [op for op in root.walk() if op.name == "graph.if"]
    return sum(fold_if(op) for op in reversed(ifs))


@register_pass
class FoldControlFlowPass(Pass):
    name = "fold-control-flow"
    summary = "inline the taken branch of a graph.if whose condition is a constant"

    def run(self, module: Operation) -> bool:
        return fold_control_flow(module) > 0
