"""Structured level -> upstream MLIR: one ``linalg.generic`` on tensors per ``structured.compute``.

The main function lowered for ``MlirTarget`` (``graph.constant`` + ``structured.kernel`` +
``func.return``) becomes ``func.func @main(tensors) -> tensors``.  Kernels dissolve into their
computes, which read earlier computes and the function's values by SSA.  A compute becomes

    %e = tensor.empty()                              (output: the parallel extents)
    %f = linalg.fill ins(%init) outs(%e)             (reductions: the combiner's start value)
    %r = linalg.generic ins(direct reads, window) outs(%f) { body; combine with %out; linalg.yield }

A read whose indices are exactly axis variables is an affine input of the generic (its block
argument is the element); any other read is a ``tensor.extract`` at indices computed from
``linalg.index``, clamped with a select of the pad value when the read has ``pad``.  linalg must
infer every loop's extent from some operand's shape, so reduction axes that no input covers get
a ``tensor.empty`` "window" operand of their extents (as linalg's pooling ops take one), which
the body never reads.  Half-precision sums accumulate in f32 (``accumulator_dtype``, as the loop
level) and a second generic rounds them.

Weights are ``arith.constant dense_resource<tf_...>`` with the data in the file's
``{-# dialect_resources #-}`` trailer, small ones (at most 64 elements) inline.  dense_resource
rather than inline hex because MLIR uniques inline ``dense<"0x...">`` attributes in its context
(hashing every byte on load and keeping it for the context's life), while a resource blob is
parsed once and referenced by handle: the text stays readable (an op line is a line, not
megabytes) and the same handles are what tensorforge's own printer writes
(``tensorforge/ir/printer.py``), so a weight has one name in both texts.  Bufferization turns
them into ``memref.global`` constants, which the LLVM translation emits as data.
"""
from __future__ import annotations

import struct

import numpy as np

from ...dialects.structured.ops import ComputeView, KernelView
from ...errors import CompileError
from ...ir.attributes import Dense
from ...ir.builtin import FuncOp, ModuleOp
from ...ir.core import Operation, Value
from ...ir.printer import raw_bytes, resource_blob_alignment, resource_name
from ...ir.types import DType, ScalarType, TensorType
from ...passes.lower.graph_to_kernels import is_library_kernel
from ...passes.lower.structured_to_loop import accumulator_dtype
from ..driver import check_lowered, lower_for, output_slots
from .scalar import (Emitter, cast_value, element_literal, element_read, element_type, mlir_type, scalar_op,
                     scalar_value, static_dims)
from .target import MlirTarget

LARGE_ELEMENTS = 64          # constants with more elements go to the resource trailer


# ---- weights ------------------------------------------------------------------------------
class Weights:
    """Constants as MLIR elements attributes; large ones become ``dense_resource`` handles whose
    blobs ``trailer()`` writes (one blob per distinct content)."""

    __slots__ = ("blobs",)

    def __init__(self):
        self.blobs: dict[str, Dense] = {}

    def attr(self, dense: Dense) -> str:
        """The attribute without its type: ``dense<...>`` or ``dense_resource<tf_...>``."""
        a, dt = dense.array, dense.type.dtype
        element_type(dt)
        if a.size == 0:
            return "dense<>"
        flat = a.reshape(-1)
        if a.size == 1 or _bit_splat(flat):
            return f"dense<{element_literal(flat[0].item(), ScalarType(dt))}>"
        if dt is DType.bool:          # i1 data has no byte-per-element hex or blob form upstream
            return f"dense<{_nest([element_literal(x, ScalarType(dt)) for x in flat.tolist()], a.shape)}>"
        if a.size > LARGE_ELEMENTS:
            name = resource_name(dense)
            self.blobs.setdefault(name, dense)
            return f"dense_resource<{name}>"
        return f'dense<"0x{raw_bytes(a, dt).hex().upper()}">'

    def trailer(self) -> str:
        """MLIR's file-level resource section for the blobs used (empty when none): each blob is
        its alignment as a little-endian u32, then the data's bytes, in hex."""
        if not self.blobs:
            return ""
        parts = ["\n{-#\n  dialect_resources: {\n    builtin: {\n"]
        for i, (name, d) in enumerate(self.blobs.items()):
            align = struct.pack("<I", resource_blob_alignment(d.type.dtype)).hex()
            parts.append((",\n" if i else "") + f'      {name}: "0x{align}{raw_bytes(d.array, d.type.dtype).hex()}"')
        parts.append("\n    }\n  }\n#-}\n")
        return "".join(parts)


def _bit_splat(flat: np.ndarray) -> bool:
    """All elements bit-identical (keeps -0.0 and NaN payloads exact)."""
    bits = flat.view(f"u{flat.itemsize}") if flat.dtype.kind in "fiu" else flat
    return bool((bits == bits[0]).all())


def _nest(items: list[str], shape: tuple) -> str:
    for d in reversed(shape):
        items = ["[" + ", ".join(items[i:i + d]) + "]" for i in range(0, len(items), d)]
    return items[0]


# ---- checks shared by both levels ---------------------------------------------------------
def kernel_label(op: Operation) -> str:
    return f"kernel '{op.attributes.get('sym_name', 'kernel')}'{op.location_str()}"


def check_exportable(func: FuncOp) -> None:
    """The lowered ``func`` holds only constants, kernels with tensor expressions and the return,
    over static shapes; otherwise a CompileError naming the kernel or value."""
    check_lowered(func)
    kernel_ops = [op for op in func.body if op.name == "structured.kernel"]
    for op in kernel_ops:
        if is_library_kernel(op):
            raise CompileError(f"{kernel_label(op)}: '{op.attributes.get('tf.library')}' has a hand-written C "
                               f"kernel only (data-dependent or int8/bf16) and no upstream-MLIR form; compile it "
                               f"with target='cpu'")
    for i, a in enumerate(func.args):
        mlir_type(a.type, f"input {i} ('{a.name_hint or f'arg{i}'}')")
    for j, v in enumerate(func.outputs):
        mlir_type(v.type, f"output {j}")
    for op in kernel_ops:
        for inner in op.walk():
            if inner.name == "structured.compute":
                static_dims(inner.attributes["domain"], kernel_label(op))
            for r in inner.results:
                if isinstance(r.type, TensorType):
                    mlir_type(r.type, kernel_label(op))


# ---- the function -------------------------------------------------------------------------
def structured_module_text(module: ModuleOp, emit_c_interface: bool = False) -> str:
    """The upstream-MLIR module (``linalg``/``tensor``/``arith``/``math``/``func``) of a graph-level,
    already optimised ``module``: it is lowered to kernels for ``MlirTarget`` here (the module
    itself is left unchanged).  ``emit_c_interface`` marks ``@main`` ``llvm.emit_c_interface``."""
    return structured_function_text(lower_for(module, MlirTarget.host()).main, emit_c_interface)


def structured_function_text(func: FuncOp, emit_c_interface: bool = False) -> str:
    """The module text of one lowered main function (``driver.lower_for``'s result)."""
    check_exportable(func)
    em, weights = Emitter(), Weights()
    names: dict[int, str] = {id(a): f"%arg{i}" for i, a in enumerate(func.args)}
    for op in func.body:
        if op.name == "graph.constant":
            dense = op.attributes["value"]
            names[id(op.results[0])] = em.op(f"arith.constant {weights.attr(dense)} : {mlir_type(dense.type)}")
        elif op.name == "structured.kernel":
            _kernel(em, op, names)
    outs = func.outputs
    out_types = [mlir_type(v.type) for v in outs]
    if outs:
        results = [names[id(v)] if j == slot else _copy(em, names[id(v)], t)
                   for j, (v, t, slot) in enumerate(zip(outs, out_types, _own_results(func)))]
        em.line(f"return {', '.join(results)} : {', '.join(out_types)}")
    else:
        em.line("return")
    args = ", ".join(f"%arg{i}: {mlir_type(a.type)}" for i, a in enumerate(func.args))
    attrs = " attributes {llvm.emit_c_interface}" if emit_c_interface else ""
    head = f"  func.func @main({args}) -> ({', '.join(out_types)}){attrs} {{"
    return "module {\n" + head + "\n" + em.body_text() + "\n  }\n}\n" + weights.trailer()


def _own_results(func: FuncOp) -> list[int]:
    """Per output, the output index that returns its value as is (``output_slots``, the driver's
    rule for outputs a kernel writes in place), or -1: an input, a constant or a repeat, which is
    returned as a copy so that every result bufferizes to a buffer of its own (returning an
    argument or a value twice makes buffer deallocation add ``bufferization.clone`` ops, which
    the stock LLVM pipeline cannot lower)."""
    slots = output_slots(func)
    return [j if slots.get(id(v)) == j else -1 for j, v in enumerate(func.outputs)]


def _copy(em: Emitter, src: str, ty: str) -> str:
    out = em.op(f"tensor.empty() : {ty}")
    return em.op(f"linalg.copy ins({src} : {ty}) outs({out} : {ty}) -> {ty}")


def _kernel(em: Emitter, op: Operation, names: dict[int, str]) -> None:
    kv = KernelView(op)
    for a, v in zip(kv.body.args, op.operands):
        names[id(a)] = names[id(v)]
    for inner in kv.body:
        if inner.name == "structured.compute":
            names[id(inner.results[0])] = _compute(em, ComputeView(inner), names, kernel_label(op))
        elif inner.name == "structured.return":
            for r, v in zip(op.results, inner.operands):
                names[id(r)] = names[id(v)]
        else:
            raise CompileError(f"{kernel_label(op)}: '{inner.name}' has no upstream-MLIR form at the structured "
                               f"level (expected structured.compute ops)")


def _tensor(shape, dtype: DType) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{element_type(dtype)}>"


def _map(n: int, dims) -> str:
    axes = ", ".join(f"d{k}" for k in range(n))
    return f"affine_map<({axes}) -> ({', '.join(f'd{k}' for k in dims)})>"


def reduction_init(cv: ComputeView, acc: DType) -> float | int | bool:
    """The accumulator's start value, as the loop level starts it (``lower_compute``): ``init`` or
    the combiner's identity for floats, the type's extreme for integer max/min, and for bools
    true for the all-of combiners (mul, min)."""
    dtype = cv.op.attributes["dtype"]
    if dtype.is_float:
        return cv.init
    if dtype is DType.bool:
        return cv.combiner in ("mul", "min")
    lo, hi = acc.int_range
    return {"add": 0, "mul": 1, "max": lo, "min": hi}[cv.combiner]


def _direct_reads(cv: ComputeView) -> tuple[dict[int, int], list[tuple[Value, tuple[int, ...]]]]:
    """Reads whose indices are distinct axis variables (no pad): id(read) -> input number, and
    the inputs as (tensor, axes) in first-use order (equal reads share one input)."""
    pos = {id(a): k for k, a in enumerate(cv.axes)}
    inputs: list[tuple[Value, tuple[int, ...]]] = []
    index: dict[tuple[int, tuple[int, ...]], int] = {}
    of: dict[int, int] = {}
    for op in cv.reads():
        if op.attributes.get("pad") is not None:
            continue
        axes = tuple(pos.get(id(v), -1) for v in op.operands[1:])
        if -1 in axes or len(set(axes)) != len(axes):
            continue
        key = (id(op.operands[0]), axes)
        if key not in index:
            index[key] = len(inputs)
            inputs.append((op.operands[0], axes))
        of[id(op)] = index[key]
    return of, inputs


def _compute(em: Emitter, cv: ComputeView, names: dict[int, str], where: str) -> str:
    dom = static_dims(cv.domain, where)
    n, its = len(dom), cv.iterators
    dtype = cv.op.attributes["dtype"]
    acc = accumulator_dtype(dtype, cv.combiner)
    par = cv.parallel_axes
    out_t = _tensor([dom[k] for k in par], acc)
    read_input, inputs = _direct_reads(cv)
    ins = [(names[id(t)], mlir_type(t.type), _map(n, axes), element_type(t.type.dtype)) for t, axes in inputs]
    covered = set(par).union(*(axes for _, axes in inputs)) if inputs else set(par)
    window = [k for k in range(n) if k not in covered]
    if window:
        wt = _tensor([dom[k] for k in window], DType.i8)
        ins.append((em.op(f"tensor.empty() : {wt}"), wt, _map(n, window), "i8"))
    out = em.op(f"tensor.empty() : {out_t}")
    if cv.combiner != "none":
        init = em.const(reduction_init(cv, acc), ScalarType(acc))
        out = em.op(f"linalg.fill ins({init} : {element_type(acc)}) outs({out} : {out_t}) -> {out_t}")
    maps = [m for _, _, m, _ in ins] + [_map(n, par)]
    iters = ", ".join('"parallel"' if k == "p" else '"reduction"' for k in its)
    ins_text = (f" ins({', '.join(x[0] for x in ins)} : {', '.join(x[1] for x in ins)})" if ins else "")
    result = em.fresh()
    em.line(f"{result} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iters}]}}"
            f"{ins_text} outs({out} : {out_t}) {{")
    block_args = [em.fresh("in") for _ in ins]
    out_arg = em.fresh("out")
    em.line("^bb0(" + ", ".join(f"{a}: {x[3]}" for a, x in zip(block_args, ins)) + ("" if not ins else ", ")
            + f"{out_arg}: {element_type(acc)}):")
    em.depth += 1
    value = _body(em, cv, names, {k: block_args[i] for k, i in read_input.items()}, acc, where)
    if cv.combiner != "none":
        s = ScalarType(acc)
        value = scalar_value(em, cv.combiner, [out_arg, value], [s, s], s)
    em.line(f"linalg.yield {value} : {element_type(acc)}")
    em.depth -= 1
    em.line(f"}} -> {out_t}")
    if acc is dtype:
        return result
    return _round(em, result, [dom[k] for k in par], acc, dtype)


def _body(em: Emitter, cv: ComputeView, names: dict[int, str], direct: dict[int, str], acc: DType, where: str) -> str:
    """Writes the compute's scalar body; returns the yielded value's name (in ``acc``: a
    half-precision product summed in f32 is formed from widened factors, as the loop level does)."""
    vals: dict[int, str] = {}
    const_of: dict[str, object] = {}
    for k, a in enumerate(cv.axes):
        if any(u.name != "structured.read" or id(u) not in direct for u, _ in a.uses):
            vals[id(a)] = em.op(f"linalg.index {k} : index")
    dtype = cv.op.attributes["dtype"]
    value = cv.value
    wide_mul = (value.op if acc is not dtype and value.op is not None and value.op.name == "scalar.mul"
                and len(value.uses) == 1 else None)
    for op in cv.body:
        name = op.name
        if name == "structured.yield":
            v = vals[id(op.operands[0])]
            if acc is not dtype and op.operands[0].op is not wide_mul:
                v = cast_value(em, v, ScalarType(dtype), ScalarType(acc))
            return v
        if name == "structured.read":
            vals[id(op.results[0])] = direct.get(id(op)) or _extract(em, op, names, vals)
        elif name == "scalar.const":
            c = em.const(op.attributes["value"], op.results[0].type)
            const_of[c] = op.attributes["value"]
            vals[id(op.results[0])] = c
        elif op is wide_mul:
            wide = ScalarType(acc)
            a, b = (cast_value(em, vals[id(v)], v.type, wide) for v in op.operands)
            vals[id(op.results[0])] = scalar_value(em, "mul", [a, b], [wide, wide], wide)
        elif name.startswith("scalar."):
            vals[id(op.results[0])] = scalar_op(em, op, [vals[id(v)] for v in op.operands], const_of)
        else:
            raise CompileError(f"{where}: '{name}' in a compute body has no upstream-MLIR form")
    raise CompileError(f"{where}: a compute body has no structured.yield")


def _extract(em: Emitter, op: Operation, names: dict[int, str], vals: dict[int, str]) -> str:
    """A ``structured.read`` at computed indices: ``tensor.extract``, guarded when it has ``pad``."""
    return element_read(em, op, names[id(op.operands[0])], [vals[id(v)] for v in op.operands[1:]], "tensor.extract")


def _round(em: Emitter, src: str, shape: list[int], acc: DType, dtype: DType) -> str:
    """An elementwise generic converting a widened accumulator tensor to the result type."""
    n = len(shape)
    at, rt = _tensor(shape, acc), _tensor(shape, dtype)
    out = em.op(f"tensor.empty() : {rt}")
    ident = _map(n, range(n))
    result = em.fresh()
    iters = ", ".join(['"parallel"'] * n)
    em.line(f"{result} = linalg.generic {{indexing_maps = [{ident}, {ident}], iterator_types = [{iters}]}} "
            f"ins({src} : {at}) outs({out} : {rt}) {{")
    a, o = em.fresh("in"), em.fresh("out")
    em.line(f"^bb0({a}: {element_type(acc)}, {o}: {element_type(dtype)}):")
    em.depth += 1
    v = cast_value(em, a, ScalarType(acc), ScalarType(dtype))
    em.line(f"linalg.yield {v} : {element_type(dtype)}")
    em.depth -= 1
    em.line(f"}} -> {rt}")
    return result


__all__ = ["LARGE_ELEMENTS", "Weights", "check_exportable", "kernel_label", "reduction_init",
           "structured_function_text", "structured_module_text"]
