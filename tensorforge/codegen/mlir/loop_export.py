"""Loop level -> upstream MLIR: ``scf`` / ``memref`` / ``arith`` / ``math`` / ``func``.

The module has one private ``func.func`` per distinct kernel (deduplicated by
``driver.kernel_key``, as every backend does) and a public ``@main``:

    func.func @main(%in0: memref<..>, ..., %out0: memref<..>, ...) attributes {llvm.emit_c_interface}
      arena = memref.alloc() : memref<Nxi8>         (the driver's memory plan, one block)
      memref.view arena[offset] per intermediate    (plan_memory's offsets)
      memref.get_global per weight                  (memref.global "private" constant)
      func.call @k<i>_<name>(operands..., results...) per kernel, in program order
      memref.copy for outputs that no kernel writes in place (Placement.copies)

A kernel function is ``structured_to_loop.lower_kernel``'s default loop nest printed op for op:
``loop.for`` -> ``scf.for`` (the loop kind kept as the discardable ``tf.kind`` attribute),
``loop.load``/``store`` -> ``memref.load``/``store`` (a padded load clamps its indices and
selects the pad value, as the structured level does), ``loop.if`` -> ``scf.if``, scalar ops ->
``arith``/``math`` (``scalar.py``).  ``loop.alloc`` (accumulators, intermediates) is hoisted to
the function's entry, where it is allocated once per call: every buffer is written before it is
read in each iteration, and an ``alloca`` inside a loop would grow the stack with each trip.
Rank-0 and small buffers are ``memref.alloca``, larger ones ``memref.alloc``.

``loop_program(module, weights_argument=True)`` (what ``target="mlir"`` builds) passes the weights
in instead: ``@main`` takes the driver's weight blob (``driver.weight_blob``, the layout every
backend uses) as a leading ``memref<Nxi8>`` argument and views each weight at its offset.  Weights
compiled in as constants make ``mlir-translate`` and ``llc`` copy every byte through their own IR
(minutes for a ResNet-18), and the runtime holds the blob anyway.

Heap buffers (the arena, large temporaries) are freed by ``--buffer-deallocation-pipeline``,
which must see no ``memref.dealloc`` in its input (it rejects them); ``deallocate=True`` writes
explicit deallocations instead, for pipelines without that pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...dialects.loop.ops import ForView
from ...errors import CompileError
from ...ir.builtin import FuncOp, ModuleOp
from ...ir.core import Block, Operation, Value
from ...ir.symbolic import c_identifier
from ...ir.types import BufferType, IndexType, TensorType
from ...passes.lower.structured_to_loop import lower_kernel
from ...passes.memory.plan import ALIGN, plan_memory
from ..driver import Placement, kernel_key, kernels, lower_for, needs_arena, output_slots, weight_blob
from .scalar import STATIC_ONLY, Emitter, element_read, mlir_type, scalar_op
from .structured_export import Weights, check_exportable, kernel_label
from .target import MlirTarget

STACK_BYTES = 4096        # loop.alloc buffers up to this size live on the stack (memref.alloca)


def loop_module_text(module: ModuleOp, emit_c_interface: bool = True, *, deallocate: bool = False) -> str:
    """The whole upstream-MLIR module of a graph-level (already optimised) ``module``, lowered here
    for ``MlirTarget`` (``module`` itself is left unchanged): one private ``func.func`` per
    distinct kernel and a public ``@main`` whose arguments are the model's inputs, then its
    outputs, as memrefs with static identity layouts (bool is ``i1``), returning nothing;
    ``emit_c_interface`` marks it ``llvm.emit_c_interface`` (``_mlir_ciface_main``).
    ``deallocate``: free heap buffers with ``memref.dealloc`` (see the module docstring)."""
    return loop_function_text(lower_for(module, MlirTarget.host()).main, emit_c_interface, deallocate=deallocate)


@dataclass
class LoopProgram:
    """A loop-level module and, when ``@main`` takes them as an argument, the weight blob to pass."""

    text: str
    weights: np.ndarray | None = None       # uint8, aligned; None: weights are memref.globals


def loop_program(module: ModuleOp, *, weights_argument: bool = True, emit_c_interface: bool = True,
                 deallocate: bool = False) -> LoopProgram:
    """``loop_module_text`` with a choice of where the weights live (see the module docstring):
    ``weights_argument=True`` makes ``@main``'s first argument the weight blob returned with it."""
    func = lower_for(module, MlirTarget.host()).main
    if not weights_argument:
        return LoopProgram(loop_function_text(func, emit_c_interface, deallocate=deallocate))
    blob, offsets = weight_blob(func)
    return LoopProgram(loop_function_text(func, emit_c_interface, deallocate=deallocate, weight_offsets=offsets,
                                          weight_bytes=int(blob.nbytes)), blob)


def loop_function_text(func: FuncOp, emit_c_interface: bool = True, *, deallocate: bool = False,
                       weight_offsets: dict[int, int] | None = None, weight_bytes: int = 0) -> str:
    """The module text of one lowered main function (``driver.lower_for``'s result); with
    ``weight_offsets`` (``driver.weight_blob``'s) the weights are read from a leading
    ``memref<weight_bytes x i8>`` argument instead of globals."""
    check_exportable(func)
    weights = Weights()
    functions: list[str] = []
    by_key: dict[str, str] = {}
    calls: list[tuple[str, Operation]] = []
    for op in kernels(func):
        key = kernel_key(op)
        name = by_key.get(key)
        if name is None:
            name = by_key[key] = f"k{len(by_key)}_{c_identifier(op.attributes.get('sym_name', 'kernel'))}"
            functions.append(kernel_function_text(lower_kernel(op, name), name, kernel_label(op), deallocate))
        calls.append((name, op))
    globals_text, main = _main_text(func, calls, weights, emit_c_interface, deallocate, weight_offsets, weight_bytes)
    return "module {\n" + globals_text + "".join(functions) + main + "}\n" + weights.trailer()


# ---- @main --------------------------------------------------------------------------------
def _main_text(func: FuncOp, calls: list[tuple[str, Operation]], weights: Weights, emit_c_interface: bool,
               deallocate: bool, weight_offsets: dict[int, int] | None = None, weight_bytes: int = 0
               ) -> tuple[str, str]:
    """(the ``memref.global`` lines of the weights, the text of ``@main``)."""
    em = Emitter()
    slots = output_slots(func)
    plan = plan_memory(func, needs_arena(slots))
    constants = {id(op.results[0]): op for op in func.body if op.name == "graph.constant" and op.results[0].uses}
    placement = Placement(func, weight_offsets if weight_offsets is not None else {k: 0 for k in constants}, plan)
    args = [f"%in{i}" for i in range(len(func.args))] + [f"%out{j}" for j in range(len(func.outputs))]
    types = [mlir_type(_memref(a.type)) for a in func.args] + [mlir_type(_memref(v.type)) for v in func.outputs]
    blob_t = f"memref<{max(weight_bytes, 1)}xi8>"
    params_prefix = f"%weights: {blob_t}, " if weight_offsets is not None else ""
    arena = None
    if plan.arena_bytes:
        arena_t = f"memref<{plan.arena_bytes}xi8>"
        arena = em.at_entry(f"memref.alloc() {{alignment = {ALIGN} : i64}} : {arena_t}", "arena")
    globals_text: list[str] = []
    global_of: dict[str, str] = {}
    where: dict[int, str] = {}

    def place(v: Value) -> str:
        got = where.get(id(v))
        if got is not None:
            return got
        loc = placement.of(v)
        mt = mlir_type(_memref(v.type))
        if loc.region == "input":
            got = args[loc.index]
        elif loc.region == "output":
            got = args[len(func.args) + loc.index]
        elif loc.region == "weights" and weight_offsets is not None:
            off = em.const(loc.offset, IndexType())
            got = em.at_entry(f"memref.view %weights[{off}][] : {blob_t} to {mt}", "w")
        elif loc.region == "weights":
            dense = constants[id(v)].attributes["value"]
            attr = weights.attr(dense)
            key = f"{attr} : {mt}"
            gname = global_of.get(key)
            if gname is None:
                gname = global_of[key] = f"tf_w{len(global_of)}"
                globals_text.append(f'  memref.global "private" constant @{gname} : {mt} = {attr} '
                                    f'{{alignment = {ALIGN} : i64}}\n')
            got = em.at_entry(f"memref.get_global @{gname} : {mt}", "w")
        elif loc.region == "arena":
            off = em.const(loc.offset, IndexType())
            got = em.at_entry(f"memref.view {arena}[{off}][] : memref<{plan.arena_bytes}xi8> to {mt}", "t")
        else:
            raise CompileError(f"a value lives in '{loc.region}' at run time: {STATIC_ONLY}")
        where[id(v)] = got
        return got

    for name, op in calls:
        values = list(op.operands) + list(op.results)
        operands = ", ".join(place(v) for v in values)
        sig = ", ".join(mlir_type(_memref(v.type)) for v in values)
        em.line(f"func.call @{name}({operands}) : ({sig}) -> ()")
    for j, v in placement.copies(func):
        mt = mlir_type(_memref(v.type))
        em.line(f"memref.copy {place(v)}, {args[len(func.args) + j]} : {mt} to {mt}")
    if deallocate and arena is not None:
        em.line(f"memref.dealloc {arena} : memref<{plan.arena_bytes}xi8>")
    em.line("return")
    params = params_prefix + ", ".join(f"{a}: {t}" for a, t in zip(args, types))
    attrs = " attributes {llvm.emit_c_interface}" if emit_c_interface else ""
    return "".join(globals_text), f"  func.func @main({params}){attrs} {{\n{em.body_text()}\n  }}\n"


def _memref(t) -> BufferType:
    return BufferType(t.shape, t.dtype) if isinstance(t, TensorType) else t


# ---- kernels ------------------------------------------------------------------------------
def kernel_function_text(fn: Operation, name: str, label: str = "", deallocate: bool = False) -> str:
    """One ``loop.func`` as ``func.func private @name(memref args)``."""
    block = fn.regions[0].blocks[0]
    em = Emitter()
    names: dict[int, str] = {}
    params = []
    for i, a in enumerate(block.args):
        names[id(a)] = f"%arg{i}"
        params.append(f"%arg{i}: {mlir_type(a.type, label or name)}")
    heap: list[tuple[str, str]] = []
    _block(em, block, names, {}, label or name, heap)
    if deallocate:
        for buf, mt in heap:
            em.line(f"memref.dealloc {buf} : {mt}")
    em.line("return")
    return f"  func.func private @{name}({', '.join(params)}) {{\n{em.body_text()}\n  }}\n"


def _block(em: Emitter, block: Block, names: dict[int, str], const_of: dict[str, object], where: str,
           heap: list[tuple[str, str]]) -> None:
    for op in block:
        n = op.name
        if n == "loop.for":
            _for(em, op, names, const_of, where, heap)
        elif n == "loop.if":
            em.line(f"scf.if {names[id(op.operands[0])]} {{")
            em.depth += 1
            _block(em, op.regions[0].blocks[0], names, const_of, where, heap)
            em.depth -= 1
            em.line("}")
        elif n == "loop.alloc":
            t = op.results[0].type
            mt = mlir_type(t, where)
            if t.rank == 0 or t.nbytes <= STACK_BYTES:
                names[id(op.results[0])] = em.at_entry(f"memref.alloca() : {mt}", "buf")
            else:
                buf = em.at_entry(f"memref.alloc() {{alignment = {ALIGN} : i64}} : {mt}", "buf")
                names[id(op.results[0])] = buf
                heap.append((buf, mt))
        elif n == "loop.load":
            names[id(op.results[0])] = _load(em, op, names)
        elif n == "loop.store":
            v, buf, *idx = (names[id(x)] for x in op.operands)
            em.line(f"memref.store {v}, {buf}[{', '.join(idx)}] : {mlir_type(op.operands[1].type)}")
        elif n == "loop.return":
            return
        elif n == "loop.prefetch":
            continue            # a cache hint at a flat offset; memref.prefetch takes in-bounds indices
        elif n == "scalar.const":
            c = em.const(op.attributes["value"], op.results[0].type)
            const_of[c] = op.attributes["value"]
            names[id(op.results[0])] = c
        elif n.startswith("scalar."):
            names[id(op.results[0])] = scalar_op(em, op, [names[id(v)] for v in op.operands], const_of)
        else:
            raise CompileError(f"{where}: '{n}' has no upstream-MLIR (scf/memref) form")


def _for(em: Emitter, op: Operation, names: dict[int, str], const_of: dict[str, object], where: str,
         heap: list[tuple[str, str]]) -> None:
    a = op.attributes
    if not isinstance(a["ub"], int):
        raise CompileError(f"{where}: a loop runs to the symbolic bound '{a['ub']}': {STATIC_ONLY}")
    view = ForView(op)
    iv = em.fresh("i")
    names[id(view.iv)] = iv
    lb, ub, step = (em.const(a[k], IndexType()) for k in ("lb", "ub", "step"))
    em.line(f"scf.for {iv} = {lb} to {ub} step {step} {{")
    em.depth += 1
    _block(em, view.body, names, const_of, where, heap)
    em.depth -= 1
    extra = f", tf.unroll = {a['unroll']} : i64" if a.get("unroll") else ""
    em.line(f'}} {{tf.kind = "{a["kind"]}"{extra}}}')


def _load(em: Emitter, op: Operation, names: dict[int, str]) -> str:
    return element_read(em, op, names[id(op.operands[0])], [names[id(v)] for v in op.operands[1:]], "memref.load")


__all__ = ["STACK_BYTES", "LoopProgram", "kernel_function_text", "loop_function_text", "loop_module_text",
           "loop_program"]
