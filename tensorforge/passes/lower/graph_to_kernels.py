"""graph -> (graph.constant + structured.kernel): each graph op becomes one kernel, then fusion merges them.

Constants stay graph-level (they become the weight blob); every other op is replaced by a
``structured.kernel`` taking the same operands.  Each kernel records the fusion kind of the op
it came from (``tf.fusion``, from the op definition), because after lowering the graph op is
gone and the fusion engine (``tensorforge.passes.fusion``) still needs to know what may fuse
into what.

Ops with no tensor-expression form (the data-dependent ops: nonzero, compress, unique, NMS)
become *library kernels*: a ``structured.kernel`` whose body holds the graph op itself, marked
``tf.library`` (the op's name) and ``tf.fusion = "opaque"`` so nothing fuses with it; the C
backend emits hand-written C for it (``codegen/c/library_kernels.py``).  Lowering also records the
``count`` symbols of those ops in the function's symbol table with their upper bounds
(``declare_count_symbols``), so every driver that lowers (compile, CLI, tuner) gets them.

``lower_function`` is the compile path's entry: it lowers, then runs the fusion pipeline
(``fuse`` by default; ``fusion=None`` or ``""`` turns it off).  The default can be changed for a
block of code with ``fusion_default("fuse-vertical")`` (benchmarks compare with and without
fusion that way) or for a process with ``TENSORFORGE_FUSION=none``.
"""
from __future__ import annotations

import contextlib
import os
from contextvars import ContextVar
from typing import Any, Iterator

from ...dialects.graph.data_dependent import DATA_DEPENDENT_OPS, declare_count_symbols
from ...errors import UnsupportedOpError
from ...ir.builder import make_op
from ...ir.builtin import FuncOp, ModuleOp
from ...ir.core import Block, Operation, Region
from ...ir.pass_manager import Pass
from ..registry import register_pass
from .to_structured import lower_op_to_kernel
from .widen_bf16 import widen_bf16

KEEP = {"graph.constant", "func.return", "structured.kernel"}
FUSION_ATTR = "tf.fusion"          # the fusion kind of a kernel (lower-case FusionKind name)
LIBRARY_ATTR = "tf.library"        # on a library kernel: the name of the graph op its body holds
LIBRARY_OPS = DATA_DEPENDENT_OPS   # graph ops that lower to library kernels (hand-written C)

_OFF = ("", "none", "off", "false", "0")
_FUSION: ContextVar[str | None] = ContextVar("tensorforge_fusion", default=None)
# Whether the backend being lowered for has hand-written forms of the ``library_kernel_if`` ops
# (the C backend's max pool); a GPU backend lowers them as tensor expressions.
_HAND_WRITTEN: ContextVar[bool] = ContextVar("tensorforge_hand_written_kernels", default=True)


def default_fusion() -> str:
    """The fusion pipeline ``lower_function`` runs when not told: ``fusion_default`` inside a
    ``with`` block, else ``$TENSORFORGE_FUSION``, else ``fuse`` (every strategy)."""
    value = _FUSION.get()
    if value is None:
        value = os.environ.get("TENSORFORGE_FUSION", "fuse")
    return "" if value.strip().lower() in _OFF else value


@contextlib.contextmanager
def fusion_default(pipeline: str | None) -> Iterator[None]:
    """Within the block, ``lower_function`` (and so ``tensorforge.compile``) runs ``pipeline``
    (None or "none": no fusion)."""
    token = _FUSION.set("none" if pipeline is None else pipeline)
    try:
        yield
    finally:
        _FUSION.reset(token)


def library_kernel(op: Operation) -> Operation:
    """``op`` wrapped in a detached ``structured.kernel`` whose body is a copy of ``op`` on the
    block arguments (no tensor expressions): a library kernel, opaque to fusion."""
    block = Block([v.type for v in op.operands])
    inner = op.clone(dict(zip(op.operands, block.args)))
    block.append(inner)
    block.append(make_op("structured.return", list(inner.results)))
    return make_op("structured.kernel", list(op.operands), {"sym_name": op.short_name, LIBRARY_ATTR: op.name},
                   [r.type for r in op.results], regions=[Region([block])])


def is_library_op(op: Operation) -> bool:
    """Whether graph op ``op`` lowers to a library kernel: a data-dependent op, or one whose
    definition says ``library_kernel = True`` (no tensor-expression form worth having: scatter) or
    whose ``library_kernel_if(op)`` holds (a form the hand-written C does better: 2-D max pool)."""
    if op.name in LIBRARY_OPS or bool(getattr(op.opdef, "library_kernel", False)):
        return True
    when = getattr(op.opdef, "library_kernel_if", None)
    return when is not None and _HAND_WRITTEN.get() and bool(when(op))


def is_library_kernel(op: Operation) -> bool:
    """Whether ``op`` is a library kernel (its C is hand-written; no computes to schedule or tune)."""
    return op.name == "structured.kernel" and LIBRARY_ATTR in op.attributes


def library_op(kernel: Operation) -> Operation:
    """The graph op a library kernel computes (in its body, on the block arguments)."""
    return next(o for o in kernel.regions[0].blocks[0] if o.name == kernel.attributes[LIBRARY_ATTR])


def lower_ops(func: FuncOp) -> int:
    """Replaces every graph op of ``func`` by its own kernel (no fusion); returns how many."""
    missing: dict[str, int] = {}
    built = []
    declare_count_symbols(func)
    for op in func.body:
        if op.name in KEEP:
            continue
        try:
            library = is_library_op(op)
            kernel = library_kernel(op) if library else lower_op_to_kernel(op, name=op.short_name)
        except UnsupportedOpError:
            missing[op.name] = missing.get(op.name, 0) + 1
            continue
        if library:
            kernel.attributes[FUSION_ATTR] = "opaque"        # hand-written C: nothing fuses into it
        elif op.opdef is not None:
            kernel.attributes[FUSION_ATTR] = op.opdef.fusion.name.lower()
        built.append((op, kernel))
    if missing:
        for _, kernel in built:          # detached kernels still hold uses of their operands
            kernel.drop_all_references()
        listed = ", ".join(f"{n} (x{c})" for n, c in sorted(missing.items()))
        raise UnsupportedOpError(f"no native lowering for: {listed}; use target='interpreter' or add a "
                                 f"lowering in tensorforge/passes/lower/to_structured/")
    for op, kernel in built:
        func.body.insert_before(kernel, op)
        for old, new in zip(op.results, kernel.results):
            old.replace_all_uses_with(new)
        op.erase()
    return len(built)


def lower_function(func: FuncOp, target: Any = None, fusion: str | None = ...) -> int:
    """Lowers every graph op of ``func`` to kernels and fuses them with the pipeline ``fusion``
    (default: ``default_fusion()``) for ``target`` (a ``codegen.target.Target``; None: this host).
    Returns how many kernels ``func`` holds afterwards."""
    if fusion is ...:
        fusion = default_fusion()
    token = _HAND_WRITTEN.set(getattr(target, "hand_written_kernels", True))
    try:
        return _lower_function(func, target, fusion)
    finally:
        _HAND_WRITTEN.reset(token)


def _lower_function(func: FuncOp, target: Any, fusion: str) -> int:
    widen_bf16(func)
    declare_count_symbols(func)          # before fusion, whose cost model reads the symbols' hints
    if fusion and fusion.strip().lower() not in _OFF:
        from ..fusion import fuse_function
        fuse_function(func, target, fusion)
    else:
        lower_ops(func)
    return sum(1 for op in func.body if op.name == "structured.kernel")


def lower_module(module: ModuleOp, target: Any = None, fusion: str | None = ...) -> int:
    return sum(lower_function(f, target, fusion) for f in module.functions)


@register_pass
class LowerStructuredPass(Pass):
    """``lower-structured``: one kernel per graph op, no fusion (the ``fuse-*`` passes fuse)."""

    name = "lower-structured"
    summary = "replace every graph op by a structured.kernel (one kernel per op)"

    def run(self, module):
        return sum(lower_ops(f) for f in module.functions) > 0


__all__ = ["FUSION_ATTR", "LIBRARY_ATTR", "LIBRARY_OPS", "LowerStructuredPass", "is_library_kernel", "is_library_op",
           "library_kernel",
           "library_op", "default_fusion", "fusion_default", "lower_function",
           "lower_module", "lower_ops"]
