"""The target-neutral half of compiling a model, shared by every backend.

    graph module -> lower + fuse (for the target) -> kernels in program order
                 -> memory plan (arena offsets) + weight blob -> where every value lives
                 -> backend.emit(kernel) per distinct kernel -> backend.link(...)

A backend (``codegen/c``, ``codegen/opencl``, ``codegen/cuda``) only decides how one kernel
becomes code and how the pieces become a runnable model; lowering, fusion, the memory plan, the
weight layout and the deduplication of identical kernels happen here, once, for all of them.
``build(module, "cpu" | "opencl" | "cuda" | "mlir")`` picks the backend by name (``mlir`` exports the
loop level as upstream MLIR and lets upstream tools compile it: a cross-check of the C backend).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import CompileError, TensorforgeError
from ..ir.builtin import FuncOp, ModuleOp
from ..ir.core import Operation, Value
from ..ir.structure import structural_hash
from ..passes.memory.plan import ALIGN
from ..runtime.arena_plan import aligned
from ..runtime.buffers import aligned_empty

BACKENDS = ("cpu", "opencl", "cuda", "mlir")


def lower_for(module: ModuleOp, target: Any) -> ModuleOp:
    """A copy of ``module`` whose main function is lowered to kernels and fused for ``target``
    (the module itself is left unchanged)."""
    from ..passes.lower.graph_to_kernels import lower_function
    work = module.clone()
    lower_function(work.main, target)
    return work


def check_lowered(func: FuncOp) -> None:
    """Every op of a lowered function is a constant, a kernel or the return."""
    for op in func.body:
        if op.name not in ("graph.constant", "structured.kernel", "func.return"):
            raise CompileError(f"'{op.name}'{op.location_str()} was not lowered to a kernel")


def output_slots(func: FuncOp) -> dict[int, int]:
    """id(value) -> the output index a kernel writes it to directly (its first position among the
    outputs); outputs that are inputs, constants or repeats are copied after the kernels run."""
    slots: dict[int, int] = {}
    for j, v in enumerate(func.outputs):
        if v.op is not None and v.op.name == "structured.kernel" and id(v) not in slots:
            slots[id(v)] = j
    return slots


def kernel_key(op: Operation) -> str:
    """What decides a kernel's code: its structure and operand types (not which tensors it reads).

    A kernel path that emits different code depending on *which* operand it gets (e.g. weights
    pre-packed at compile time) must add that to the key.
    """
    return structural_hash(op)


def kernels(func: FuncOp) -> Iterator[Operation]:
    """The kernels of a lowered function, in program order."""
    return (op for op in func.body if op.name == "structured.kernel")


@dataclass(frozen=True)
class Location:
    """Where a value lives at run time: ``region`` is input / output / weights / arena (static
    plan offset) / slot (symbolic plan: the runtime places buffer ``index``); ``index`` picks the
    input, output or slot, ``offset`` is in bytes."""

    region: str
    index: int = 0
    offset: int = 0


class Placement:
    """Where every value of a lowered function lives: the inputs and outputs by position, the
    constants in the weight blob, the other kernel results in the arena (static plan) or in a
    slot of the symbolic plan."""

    def __init__(self, func: FuncOp, weight_offsets: dict[int, int], plan=None, dynamic=None):
        self.inputs = {id(a): i for i, a in enumerate(func.args)}
        self.outputs = output_slots(func)
        self.weights = weight_offsets
        self.plan = plan
        self.dynamic = dynamic

    def of(self, v: Value) -> Location:
        if id(v) in self.inputs:
            return Location("input", self.inputs[id(v)])
        if id(v) in self.weights:
            return Location("weights", offset=self.weights[id(v)])
        if id(v) in self.outputs:
            return Location("output", self.outputs[id(v)])
        if self.dynamic is not None:
            return Location("slot", self.dynamic.buffer(v))
        return Location("arena", offset=self.plan.offset(v))

    def copies(self, func: FuncOp) -> list[tuple[int, Value]]:
        """(output index, value) of the outputs no kernel writes in place: copied at the end."""
        return [(j, v) for j, v in enumerate(func.outputs) if self.outputs.get(id(v)) != j]


def needs_arena(outputs: dict[int, int]) -> Callable[[Value], bool]:
    """The values the memory plan places: kernel results that are not written into an output."""
    return lambda v: v.op is not None and v.op.name == "structured.kernel" and id(v) not in outputs


def weight_blob(func: FuncOp, extra: Sequence[np.ndarray] = (), skip: AbstractSet[int] = frozenset()
                ) -> tuple[np.ndarray, dict[int, int]]:
    """All used constants of ``func`` in one aligned blob, and id(value) -> byte offset.

    ``extra`` arrays (weights pre-packed by the tensorizer) follow, keyed by id(array);
    constants in ``skip`` (id(value): every use reads a packed copy) are left out.
    Each array is copied once, straight into its slot: joining ``tobytes()`` chunks would copy
    every weight three times, which dominated compile time for BERT-sized models.
    """
    offsets: dict[int, int] = {}
    entries: list[tuple[int, np.ndarray]] = []
    pos = 0
    arrays = [(id(op.results[0]), op.attributes["value"].array) for op in func.body
              if op.name == "graph.constant" and op.results[0].uses and id(op.results[0]) not in skip]
    for key, arr in arrays + [(id(a), a) for a in extra]:
        offsets[key] = pos
        entries.append((pos, arr))
        pos += aligned(arr.nbytes)
    blob = aligned_empty(max(pos, ALIGN))
    end = 0
    for off, arr in entries:
        blob[end:off] = 0
        n = arr.nbytes
        if n:
            np.copyto(blob[off:off + n].view(arr.dtype).reshape(arr.shape), arr)
        end = off + n
    blob[end:] = 0
    return blob, offsets


def build(module: ModuleOp, target: str = "cpu", **options: Any):
    """Compiles ``module``'s main function with the backend named ``target``; returns
    ``(runnable model, source text)``."""
    if target == "cpu":
        from .c.build import build_native
        return build_native(module, **options)
    if target in ("opencl", "cuda"):
        from .gpu.backend import build_gpu
        return build_gpu(module, target, **options)
    if target == "mlir":
        from .mlir.backend import build_mlir
        return build_mlir(module, **options)
    raise TensorforgeError(f"unknown backend '{target}' (choose from {', '.join(BACKENDS)})")
