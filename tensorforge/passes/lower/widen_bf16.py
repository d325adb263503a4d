"""bf16 -> f32 before native lowering, keeping only the roundings that casts to bf16 perform.

The IR holds bf16 values as f32 (``DType.bf16.np`` is float32) and the reference interpreter
computes every bf16 op in f32; only ``graph.cast`` to bf16 rounds.  Native code does the same:
this pass retypes every bf16 tensor of a graph function to f32 (arguments, results, constants,
``dtype`` attributes), and a cast to bf16 keeps its bf16 result (the rounding) followed by a
cast back to f32.  The C emitter then meets bf16 only inside such a cast pair (see
``codegen/c/emit_loop.py``), and the library's inputs and outputs are the f32 arrays the
runtime already passes for bf16 tensors.
"""
from __future__ import annotations

from ...ir.attributes import Dense
from ...ir.builder import Builder
from ...ir.builtin import FuncOp
from ...ir.core import Value
from ...ir.types import DType, TensorType


def _widened(t):
    if isinstance(t, TensorType) and t.dtype is DType.bf16:
        return TensorType(t.shape, DType.f32)
    return t


def _retype(v: Value) -> bool:
    new = _widened(v.type)
    if new is v.type:
        return False
    v.type = new
    return True


def widen_bf16(func: FuncOp) -> bool:
    """Rewrites ``func`` in place as described in the module docstring; True if anything changed."""
    changed = any([_retype(a) for a in func.args])
    for op in list(func.body):
        if op.name == "graph.cast" and op.attributes.get("dtype") is DType.bf16:
            rounded = op.results[0]
            uses = list(rounded.uses)
            if uses:
                back = Builder.after(op).create("graph.cast", [rounded], {"dtype": DType.f32}).results[0]
                for user, i in uses:
                    user.set_operand(i, back)
            changed = True
            continue
        if op.name == "graph.constant":
            value = op.attributes["value"]
            if value.type.dtype is DType.bf16:
                op.attributes["value"] = Dense(value.array, DType.f32)
        if op.attributes.get("dtype") is DType.bf16:
            op.attributes["dtype"] = DType.f32
        changed |= any([_retype(r) for r in op.results])
    if changed:
        func.refresh_type()
    return changed


__all__ = ["widen_bf16"]
