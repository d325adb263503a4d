"""A whole model as one C file: every kernel as a static function plus ``tf_run``.

``tf_run(inputs, outputs, arena, weights)`` calls the kernels in program order with pointers
into the caller's buffers: model inputs, model outputs (results are written in place), one
arena for intermediates (offsets from the memory plan) and one weight blob.  Identical kernels
(same loop nest) are emitted once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...errors import CompileError
from ...ir.builtin import FuncOp
from ...ir.core import Operation, Value
from ...ir.types import TensorType
from ...passes.lower.structured_to_loop import lower_kernel
from ...passes.memory.plan import ALIGN, MemoryPlan, plan_memory
from .emit_loop import PRELUDE, FunctionEmitter, c_type

ENTRY = "tf_run"


@dataclass
class ModelLayout:
    """Where every tensor of the model lives at run time."""

    input_types: list[TensorType]
    output_types: list[TensorType]
    weights: np.ndarray                       # uint8 blob, 64-byte aligned entries
    arena_bytes: int
    plan: MemoryPlan
    kernel_names: list[str] = field(default_factory=list)
    unique_kernels: int = 0


def _weight_blob(func: FuncOp) -> tuple[np.ndarray, dict[int, int]]:
    offsets: dict[int, int] = {}
    chunks: list[bytes] = []
    pos = 0
    for op in func.body:
        if op.name != "graph.constant" or not op.results[0].uses:
            continue
        arr = np.ascontiguousarray(op.attributes["value"].array)
        offsets[id(op.results[0])] = pos
        data = arr.tobytes()
        pad = (-len(data)) % ALIGN
        chunks.append(data + b"\0" * pad)
        pos += len(data) + pad
    blob = np.frombuffer(b"".join(chunks), dtype=np.uint8).copy() if chunks else np.zeros(ALIGN, np.uint8)
    return blob, offsets


def generate_model_c(func: FuncOp, schedule: Callable[[Operation], None] | None = None
                     ) -> tuple[str, ModelLayout]:
    """C source and layout for ``func`` (which holds only constants, kernels and the return)."""
    for op in func.body:
        if op.name not in ("graph.constant", "structured.kernel", "func.return"):
            raise CompileError(f"'{op.name}'{op.location_str()} was not lowered to a kernel")
    outputs = func.outputs
    out_index: dict[int, int] = {}
    for j, v in enumerate(outputs):
        if v.op is not None and v.op.name == "structured.kernel" and id(v) not in out_index:
            out_index[id(v)] = j
    plan = plan_memory(func, lambda v: v.op is not None and v.op.name == "structured.kernel"
                       and id(v) not in out_index)
    blob, w_off = _weight_blob(func)
    in_index = {id(a): i for i, a in enumerate(func.args)}

    def pointer(v: Value) -> str:
        ct = c_type(v.type)
        if id(v) in in_index:
            return f"(({ct}*)inputs[{in_index[id(v)]}])"
        if id(v) in w_off:
            return f"(({ct}*)(weights + {w_off[id(v)]}))"
        if id(v) in out_index:
            return f"(({ct}*)outputs[{out_index[id(v)]}])"
        return f"(({ct}*)(arena + {plan.offset(v)}))"

    functions: list[str] = []
    bodies: dict[str, str] = {}
    calls: list[str] = []
    names: list[str] = []
    for k, op in enumerate(o for o in func.body if o.name == "structured.kernel"):
        loop_fn = lower_kernel(op)
        if schedule is not None:
            schedule(loop_fn)
        text = FunctionEmitter(loop_fn, "KERNEL_NAME").emit()
        cname = bodies.get(text)
        if cname is None:
            base = "".join(ch if ch.isalnum() else "_" for ch in op.attributes.get("sym_name", "k"))
            cname = f"k{len(bodies)}_{base}"
            bodies[text] = cname
            functions.append(text.replace("KERNEL_NAME", cname, 1))
        args = [pointer(v) for v in op.operands] + [pointer(r) for r in op.results]
        calls.append(f"  {cname}({', '.join(args)});")
        names.append(cname)
    for j, v in enumerate(outputs):
        if out_index.get(id(v)) != j:
            calls.append(f"  memcpy(outputs[{j}], {pointer(v)}, {v.type.nbytes});")
    entry = (f"void {ENTRY}(void* const* inputs, void* const* outputs, char* arena, const char* weights) {{\n"
             + "\n".join(calls) + "\n}\n")
    src = PRELUDE + "\n".join(functions) + "\n" + entry
    layout = ModelLayout([a.type for a in func.args], [v.type for v in outputs], blob,
                         plan.arena_bytes, plan, names, len(bodies))
    return src, layout
