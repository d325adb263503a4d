"""StableHLO text -> a graph-dialect module.

    module = import_stablehlo(text)            # or a path to a .mlir file

The text is read by the project's own parser in generic mode (``ir.parser.parse_generic``): the
generic form that ``jax.jit(f).lower(...).compiler_ir("stablehlo")`` prints with
``print_generic_op_form=True``, or what any other producer writes in that form.  The public
function (``main``, else the only public one) becomes the graph module's ``main``; calls of
private functions (``func.call``, e.g. jax's ``relu`` helper) are inlined.  Each StableHLO op goes
to the converter registered for its name (``converts``); the families live in ``elementwise.py``,
``shape_ops.py``, ``contraction.py``, ``reduce.py``, ``indexing.py`` and ``control.py``.  An op
without a converter, or a form a converter does not handle, is an ``UnsupportedOpError`` that
starts with the op's ``source:line:col``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ...errors import FrontendError
from ...ir.builtin import ModuleOp
from ...ir.core import Operation, Value
from ...ir.parser import parse_generic
from ...ir.types import TensorType
from .context import ImportContext

Converter = Callable[[ImportContext, Operation], None]
CONVERTERS: dict[str, Converter] = {}


def converts(*names: str) -> Callable[[Converter], Converter]:
    """Registers a converter for StableHLO (or CHLO) op names; it binds the op's results."""
    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = fn
        return fn
    return register


def supported_ops() -> list[str]:
    _load_families()
    return sorted(CONVERTERS)


def _load_families() -> None:
    from . import contraction, control, elementwise, indexing, reduce, shape_ops  # noqa: F401  (they register)


def read_text(model) -> tuple[str, str]:
    """(text, source name) from StableHLO text or a path to a file holding it."""
    if isinstance(model, os.PathLike) or (isinstance(model, str) and "\n" not in model and
                                           model.rstrip().endswith((".mlir", ".stablehlo", ".txt"))):
        path = Path(model)
        if not path.is_file():
            raise FrontendError(f"cannot import '{path}': no such file")
        return path.read_text(), str(path)
    if isinstance(model, str):
        return model, "<stablehlo>"
    raise FrontendError(f"expected StableHLO text or a path to a .mlir file, got {type(model).__name__}")


def import_stablehlo(model, source: str | None = None) -> ModuleOp:
    """A graph module from StableHLO text (generic op form) or a file holding it."""
    _load_families()
    text, name = read_text(model)
    top = parse_generic(text, source or name)
    functions = _functions(top, source or name)
    entry = _entry(functions, source or name)
    ftype = entry.attributes.get("function_type")
    body = entry.regions[0].blocks[0]
    for a in body.args:
        if not isinstance(a.type, TensorType) or not a.type.is_static:
            raise FrontendError(f"{entry.loc}: argument of type {a.type} is not a static tensor; the StableHLO "
                                f"importer needs static shapes (lower the JAX function with concrete inputs)")
    module = ModuleOp.create()
    func = module.add_function("main", [a.type for a in body.args], [f"arg{i}" for i in range(len(body.args))])
    ctx = ImportContext(func.builder(), source or name)
    ctx.functions = functions
    for a, v in zip(body.args, func.args):
        ctx.bind(a, v)
    outs = convert_block(ctx, body)
    func.set_return(outs)
    if ftype is not None and [str(t) for t in ftype.results] != [str(v.type) for v in outs]:
        raise FrontendError(f"{entry.loc}: the function's results {[str(v.type) for v in outs]} do not match its "
                            f"declared type {ftype}")
    return module


def _functions(top: list[Operation], source: str) -> dict[str, Operation]:
    ops = top
    if len(top) == 1 and top[0].name == "builtin.module":
        ops = list(top[0].regions[0].blocks[0])
    funcs = {}
    for op in ops:
        if op.name != "func.func":
            raise FrontendError(f"{op.loc}: expected func.func at the top of the module, got '{op.name}'")
        funcs[str(op.attributes.get("sym_name"))] = op
    if not funcs:
        raise FrontendError(f"{source}: the module has no function")
    return funcs


def _entry(functions: dict[str, Operation], source: str) -> Operation:
    if "main" in functions:
        return functions["main"]
    public = [f for f in functions.values() if f.attributes.get("sym_visibility", "public") == "public"]
    if len(public) != 1:
        raise FrontendError(f"{source}: cannot tell the entry function (no 'main'; public: "
                            f"{sorted(str(f.attributes.get('sym_name')) for f in public)})")
    return public[0]


def convert_block(ctx: ImportContext, block) -> list[Value]:
    """Converts the ops of ``block`` (its arguments already bound); returns the graph values of its
    terminator's operands (``func.return`` / ``stablehlo.return``)."""
    for op in block:
        ctx.op = op
        if op.name in ("func.return", "stablehlo.return"):
            return [ctx.get(v) for v in op.operands]
        if op.name == "func.call":
            _inline_call(ctx, op)
            continue
        convert = CONVERTERS.get(op.name)
        if convert is None:
            raise ctx.unsupported("is not supported by the StableHLO importer (supported: "
                                  "tensorforge.frontends.stablehlo.supported_ops())")
        convert(ctx, op)
        ctx.op = op
        for r in op.results:
            v = ctx.values.get(id(r))
            if v is None and id(r) not in ctx.lazy:
                raise ctx.fail(f"converter left result {r.type} unbound")
            if v is not None and (tuple(v.type.shape) != tuple(r.type.shape) or v.type.dtype is not r.type.dtype):
                raise ctx.fail(f"converted to {v.type} but StableHLO says {r.type}")
    raise FrontendError(f"{ctx.source}: a block ends without a return")


def _inline_call(ctx: ImportContext, op: Operation) -> None:
    callee = ctx.functions.get(str(op.attributes.get("callee")))
    if callee is None:
        raise ctx.fail(f"calls '@{op.attributes.get('callee')}', which the module does not define")
    body = callee.regions[0].blocks[0]
    for a, v in zip(body.args, op.operands):
        if id(v) in ctx.values:
            ctx.bind(a, ctx.values[id(v)])
        else:
            ctx.bind_lazy(a, ctx.get_broadcastable(v))
    outs = convert_block(ctx, body)
    for r, v in zip(op.results, outs):
        ctx.bind(r, v)
