"""bf16 -> f32 before native lowering, keeping only the roundings that casts to bf16 perform.

The other storage-only types (float8, float4, 4-/2-bit ints: ``ir/lowbits.py``) are widened to
their ``compute_type`` the same way; a cast to one becomes a cast to the compute type that rounds
``via`` it (one op, so no tensor of those types reaches the memory plan or the C emitter).

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
    if isinstance(t, TensorType) and t.dtype.is_storage_only:
        return TensorType(t.shape, t.dtype.compute_type)
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
        if op.name == "graph.cast" and op.attributes.get("dtype").is_storage_only:
            # float8/float4/int4/int2 (ir/lowbits.py): one cast that rounds through the type
            op.attributes["via"] = op.attributes["dtype"]
        if op.name == "graph.constant":
            value = op.attributes["value"]
            if value.type.dtype.is_storage_only:
                op.attributes["value"] = Dense(value.array, value.type.dtype.compute_type)
        dt = op.attributes.get("dtype")
        if isinstance(dt, DType) and dt.is_storage_only:
            op.attributes["dtype"] = dt.compute_type
        changed |= any([_retype(r) for r in op.results])
    if changed:
        func.refresh_type()
    return changed


__all__ = ["widen_bf16"]
