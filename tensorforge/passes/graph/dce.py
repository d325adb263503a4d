"""Dead code elimination: pure ops none of whose values is used.

One backward walk per block is enough: users come after their producers, so by the time a
producer is visited every user that was going to die is already gone.  Nested regions are
cleaned before the op that holds them is judged.
"""
from __future__ import annotations

from ...ir.core import Block, Operation
from ...ir.pass_manager import Pass
from ...ir.rewrite import is_trivially_dead
from ..registry import register_pass


def _dce_block(block: Block) -> int:
    erased = 0
    op = block.last
    while op is not None:
        prev = op.prev
        for region in op.regions:
            for inner in region.blocks:
                erased += _dce_block(inner)
        if is_trivially_dead(op):
            op.erase()
            erased += 1
        op = prev
    return erased


def eliminate_dead_code(root: Operation) -> int:
    """Erases every dead pure op under ``root``; returns how many."""
    return sum(_dce_block(block) for region in root.regions for block in region.blocks)


@register_pass
class DCEPass(Pass):
    name = "dce"
    summary = "erase pure ops whose results are unused"

    erased: int = 0

    def run(self, module):
        self.erased = eliminate_dead_code(module)
        return self.erased > 0


__all__ = ["DCEPass", "eliminate_dead_code"]
