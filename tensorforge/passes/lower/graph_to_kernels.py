"""graph -> (graph.constant + structured.kernel): each remaining graph op becomes one kernel.

Constants stay graph-level (they become the weight blob); every other op is replaced by a
``structured.kernel`` taking the same operands.  Fusion (a later pass) merges kernels.
"""
from __future__ import annotations

from ...errors import UnsupportedOpError
from ...ir.builtin import FuncOp, ModuleOp
from .to_structured import lower_op_to_kernel

KEEP = {"graph.constant", "func.return", "structured.kernel"}


def lower_function(func: FuncOp) -> int:
    """Replaces every graph op of ``func`` by a kernel; returns how many kernels were made."""
    missing: dict[str, int] = {}
    for op in func.body:
        if op.name in KEEP:
            continue
        try:
            lower_op_to_kernel(op)
        except UnsupportedOpError:
            missing[op.name] = missing.get(op.name, 0) + 1
    if missing:
        listed = ", ".join(f"{n} (x{c})" for n, c in sorted(missing.items()))
        raise UnsupportedOpError(f"no native lowering for: {listed}; use target='interpreter' or add a "
                                 f"lowering in tensorforge/passes/lower/to_structured/")
    count = 0
    for op in list(func.body):
        if op.name in KEEP:
            continue
        kernel = lower_op_to_kernel(op, name=f"{op.short_name}")
        func.body.insert_before(kernel, op)
        for old, new in zip(op.results, kernel.results):
            old.replace_all_uses_with(new)
        op.erase()
        count += 1
    return count


def lower_module(module: ModuleOp) -> int:
    return sum(lower_function(f) for f in module.functions)
