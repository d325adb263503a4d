"""The graph walk of one ONNX import: inputs, initializers, the node loop, outputs.

Nodes are converted in the (topological) order ONNX requires; each goes to its handler, whose
unread attributes and missing outputs are reported as unsupported.  Pure ops nobody uses
(shape arithmetic folded into attributes) are dropped at the end.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from ...errors import FrontendError, TensorforgeError, UnsupportedOpError
from ...ir.builtin import ModuleOp
from ...ir.core import Value
from ...ir.opdef import PURE
from ...ir.symbolic import SymbolRange, SymbolTable, set_symbol_table, shape_symbols
from ...ir.types import Dim, DType, TensorType
from .bindings import (SymbolNames, bind_dims, declared_dims, default_hint, is_batch_like, specialize, split_shapes,
                       symbol_key, symbol_sites)
from .context import MAX_TENSOR_BYTES, ImportContext, OnnxNode
from .dtypes import onnx_type_name, tensor_to_numpy, to_dtype

MAX_OPSET = onnx.defs.onnx_opset_version()


def _default_opset(model) -> int | None:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return None


class Importer:
    """One import: the name -> value table and the node loop."""

    def __init__(self, model, bind_inputs: Mapping[str, np.ndarray], input_shapes: Mapping[str, Sequence[Dim]],
                 example_inputs: Any = None, shapes: Mapping[str, Any] | None = None,
                 dim_ranges: Mapping[str, Any] | None = None, shape_hints: Mapping[str, int] | None = None):
        from . import handler_tables
        self.handlers, self.rejected = handler_tables()
        self.model = model
        self.graph = model.graph
        self.bind_inputs = dict(bind_inputs)
        self.input_shapes = dict(input_shapes)
        self.example_inputs = example_inputs
        self.shapes = dict(shapes or {})
        self.dim_ranges = dict(dim_ranges or {})
        self.shape_hints = dict(shape_hints or {})
        self.names = SymbolNames()
        self.opset = _default_opset(model)
        self.values: dict[str, Value] = {}
        self.initializers = {t.name: t for t in self.graph.initializer}

    # ---- inputs ---------------------------------------------------------------------------
    def _declared(self, vi) -> tuple[tuple[Dim, ...], DType]:
        """An input's declared dims (``input_shapes`` first) and element type."""
        name = vi.name
        if not vi.type.HasField("tensor_type"):
            kind = vi.type.WhichOneof("value") or "unknown"
            raise UnsupportedOpError(f"model input '{name}' has type {kind}; only tensors are supported")
        tt = vi.type.tensor_type
        dtype = to_dtype(tt.elem_type)
        if dtype is None:
            raise UnsupportedOpError(f"model input '{name}' has element type {onnx_type_name(tt.elem_type)}, "
                                     f"which tensorforge does not support")
        if name in self.input_shapes:
            return tuple(d if isinstance(d, int) else self.names.symbol(str(d))
                         for d in self.input_shapes[name]), dtype
        if not tt.HasField("shape"):
            raise UnsupportedOpError(f"model input '{name}' has no declared rank; pass input_shapes={{'{name}': ...}}")
        dims = declared_dims(name, tt.shape, self.names)
        static = [d for d in dims if isinstance(d, int)]
        if math.prod(static) * dtype.itemsize > MAX_TENSOR_BYTES:
            raise FrontendError(f"model input '{name}' declares the shape {list(dims)}, which would take "
                                f"{math.prod(static) * dtype.itemsize / 2**40:.1f} TiB: a dimension is corrupt or wrong "
                                f"(fix the model, or override it with input_shapes={{'{name}': ...}})")
        return dims, dtype

    def _build_function(self):
        unknown = set(self.bind_inputs) - {vi.name for vi in self.graph.input}
        if unknown:
            raise FrontendError(f"bind_inputs names unknown model input(s): {', '.join(sorted(unknown))}")
        data = [vi for vi in self.graph.input if vi.name not in self.initializers and vi.name not in self.bind_inputs]
        declared = [(vi.name, *self._declared(vi)) for vi in data]
        dims_of = [(n, dims) for n, dims, _ in declared]
        sites = symbol_sites(dims_of)
        sizes, ranges = split_shapes(self.shapes, self.dim_ranges)
        binding = bind_dims(dims_of, self.example_inputs, sizes, self.names)
        ranges = {symbol_key(k, sites, self.names, "dim_ranges" if k in self.dim_ranges else "shapes"): r
                  for k, r in ranges.items()}
        examples = {sym: binding.pop(sym) for sym in list(binding) if sym in ranges}   # ranged: stays symbolic
        args = [n for n, _, _ in declared]
        types = [TensorType(specialize(dims, binding), dtype) for _, dims, dtype in declared]
        module = ModuleOp.create()
        func = module.add_function("main", types, args)
        for name, arg in zip(args, func.args):
            self.values[name] = arg
        self.table = self._symbol_table(types, sites, ranges, examples)
        return module, func

    def _symbol_table(self, types, sites, ranges, examples) -> SymbolTable:
        """The symbols left in the inputs: ranges (the user's, else 1..), hints (the user's, the
        example input's, else ``default_hint``; final once the import tightened the ranges)."""
        hints = {symbol_key(k, sites, self.names, "shape_hints"): v for k, v in self.shape_hints.items()}
        table = SymbolTable()
        self.user_bounds: dict[str, tuple[bool, bool]] = {}
        self.hints: dict[str, int | None] = {}
        left = list(dict.fromkeys(s for t in types for s in shape_symbols(t.shape)))
        for sym in left:
            lo, hi = ranges.get(sym, (1, None))
            table.add(SymbolRange(sym, lo, hi))
            self.user_bounds[sym] = (sym in ranges, sym in ranges and hi is not None)
            hint = hints.get(sym, examples.get(sym))
            if hint is not None and (isinstance(hint, bool) or not isinstance(hint, (int, np.integer))
                                     or not lo <= hint <= (hi if hi is not None else hint)):
                where = "shape_hints" if sym in hints else "the example inputs"
                raise FrontendError(f"{where} give {self.names.display(sym)} the size {hint!r}, outside its range "
                                    f"{SymbolRange(sym, lo, hi).describe()}")
            self.hints[sym] = None if hint is None else int(hint)
        bound = sorted(set(hints) - set(left))
        if bound:
            raise FrontendError(f"shape_hints names {self.names.display(bound[0])}, which shapes= or the example "
                                f"inputs bind to a size")
        return table

    def _final_table(self) -> SymbolTable:
        """The symbol table with the hints clamped into the (possibly tightened) ranges."""
        table = SymbolTable()
        for sym, r in self.table.ranges.items():
            hint = self.hints.get(sym)
            if hint is None:
                where = [(a.name_hint, axis) for a in self.func.args for axis, d in enumerate(a.type.shape) if d == sym]
                hint = default_hint(r.lo, r.hi, is_batch_like(self.names.original.get(sym, sym), where))
            else:
                hint = max(r.lo, hint if r.hi is None else min(r.hi, hint))
            table.add(SymbolRange(sym, r.lo, r.hi, r.divisor, hint))
        return table

    def _lookup(self, name: str, ctx: ImportContext, user: str) -> Value:
        v = self.values.get(name)
        if v is not None:
            return v
        if name in self.initializers:
            t = self.initializers[name]
            if to_dtype(t.data_type) is None:
                raise UnsupportedOpError(f"initializer '{name}' has element type {onnx_type_name(t.data_type)}, "
                                         f"which tensorforge does not support")
            arr = tensor_to_numpy(t, what=f"initializer '{name}'")
            v = ctx.const(arr, to_dtype(t.data_type))
        elif name in self.bind_inputs:
            vi = next(x for x in self.graph.input if x.name == name)
            dtype = to_dtype(vi.type.tensor_type.elem_type)
            if dtype is None:
                raise UnsupportedOpError(f"model input '{name}' has element type "
                                         f"{onnx_type_name(vi.type.tensor_type.elem_type)}")
            v = ctx.const(np.asarray(self.bind_inputs[name]).astype(dtype.np), dtype)
        else:
            raise FrontendError(f"{user} uses value '{name}', which is not defined before it "
                                f"(the graph is not topologically sorted, or a name is wrong)")
        v.name_hint = name
        self.values[name] = v
        return v

    # ---- the node loop ----------------------------------------------------------------------
    def run(self) -> ModuleOp:
        module, func = self._build_function()
        self.func = func
        ctx = ImportContext(func, self.opset or 0, self.table, self.user_bounds, self.names)
        ctx.importer = self                       # subgraphs (If/Loop/Scan bodies) run this node loop
        for index, proto in enumerate(self.graph.node):
            self._convert(ctx, proto, index)
        ctx.node = None
        ctx.builder.loc = None
        outputs = [self._lookup(vi.name, ctx, "the graph output list") for vi in self.graph.output]
        for vi, v in zip(self.graph.output, outputs):
            self._check_declared(vi, v)
        from .sequence import flatten_outputs    # sequence/optional outputs: their tensors, in order
        func.set_return(flatten_outputs(func, outputs))
        _drop_dead_ops(func)
        set_symbol_table(func, self._final_table())
        return module

    def _node_opset(self, proto) -> int:
        from .flex_attention import DOMAIN as PREVIEW, OPS as PREVIEW_OPS
        from .training import DOMAIN as TRAINING, OPS as TRAINING_OPS
        from .registry import ML_DOMAIN, ML_OPS
        # Other domains: the op types imported from each, at the version the model imports.
        other_domains = {TRAINING: TRAINING_OPS, PREVIEW: PREVIEW_OPS, ML_DOMAIN: ML_OPS}
        if proto.op_type in other_domains.get(proto.domain, ()):
            return next((int(i.version) for i in self.model.opset_import if i.domain == proto.domain), 1)
        if proto.domain not in ("", "ai.onnx"):
            raise UnsupportedOpError(f"ONNX node '{proto.name or proto.op_type}' ({proto.op_type}) is in domain "
                                     f"'{proto.domain}'; only the default ONNX domain is supported")
        if self.opset is None:
            raise FrontendError("the model does not import the default ONNX opset (opset_import is empty)")
        if self.opset > MAX_OPSET:
            raise UnsupportedOpError(f"the model uses opset {self.opset}; the newest this importer knows is "
                                     f"{MAX_OPSET}")
        return self.opset

    def _convert(self, ctx: ImportContext, proto, index: int) -> None:
        opset = self._node_opset(proto)
        user = f"ONNX node '{proto.name or proto.op_type}' ({proto.op_type})"
        inputs = [self._lookup(n, ctx, user) if n else None for n in proto.input]
        for i, v in enumerate(inputs):
            if v is not None and not isinstance(v, Value) and _takes_tensor(proto.op_type, opset, proto.domain, i):
                kind = "an optional" if type(v).__name__ == "OptValue" else "a sequence"
                raise FrontendError(f"{user}: input #{i} ('{proto.input[i]}') is {kind}, but {proto.op_type} "
                                    f"takes a tensor there")
        node = OnnxNode(proto, opset, inputs, index)
        ctx.node = node
        ctx.builder.loc = node.name
        if proto.op_type in self.rejected:
            raise node.unsupported(f"rejected: {self.rejected[proto.op_type]}")
        handler = self.handlers.get(proto.op_type)
        if handler is None:
            raise node.unsupported("this op type is not supported")
        try:
            result = handler(ctx, node)
        except UnsupportedOpError:
            raise
        except TensorforgeError as e:
            if str(e).startswith(node.describe()):
                raise
            raise FrontendError(f"{node.describe()}: {e}") from e
        except (RecursionError, MemoryError, ArithmeticError, LookupError, ValueError, TypeError,
                AttributeError, AssertionError) as e:
            # A handler that broke on inputs it did not expect (an axis out of range, a negative
            # size, an attribute of the wrong length): name the node; the original is __cause__.
            raise FrontendError(f"{node.describe()}: cannot import this node ({type(e).__name__}: {e}); its inputs "
                                f"or attributes are probably invalid (onnx.checker.check_model(model, full_check=True) "
                                f"names the problem); if the model is valid, please report this as a tensorforge "
                                f"bug") from e
        unused = node.unused_attrs()
        if unused:
            raise node.unsupported(f"attribute(s) {', '.join(unused)} not supported")
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        for i, name in enumerate(node.outputs):
            if not name:
                continue
            v = results[i] if i < len(results) else None
            if v is None:
                raise node.unsupported(f"output #{i} ('{name}') is not supported")
            if v.name_hint is None:
                v.name_hint = name
            self.values[name] = v

    @staticmethod
    def _check_declared(vi, v: Value) -> None:
        """A graph output's computed element type must be the declared one (a frontend bug otherwise)."""
        if not vi.type.HasField("tensor_type"):
            return
        if not isinstance(v, Value):          # a sequence or optional where the model declares a tensor
            kind = {"SeqValue": "a sequence", "OptValue": "an optional"}.get(type(v).__name__, type(v).__name__)
            raise FrontendError(f"graph output '{vi.name}' is declared a tensor but the import computes {kind}: "
                                f"the model's output type is wrong")
        code = vi.type.tensor_type.elem_type
        if code and to_dtype(code) is not None and to_dtype(code) is not v.type.dtype:
            raise FrontendError(f"graph output '{vi.name}' is declared {onnx_type_name(code)} but the "
                                f"import computes {v.type.dtype}")


@functools.lru_cache(maxsize=None)
def _tensor_only_inputs(op_type: str, opset: int, domain: str) -> tuple[tuple[bool, ...], bool]:
    """Per formal input of the op's ONNX schema, whether it takes only tensors (no sequence or
    optional); and whether the last one is variadic.  Empty when onnx has no schema for it."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return (), False
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    flags = tuple(all(t.startswith(("tensor(", "sparse_tensor(")) for t in allowed.get(f.type_str, [f.type_str]))
                  for f in schema.inputs)
    variadic = bool(schema.inputs) and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    return flags, variadic


def _takes_tensor(op_type: str, opset: int, domain: str, i: int) -> bool:
    flags, variadic = _tensor_only_inputs(op_type, opset, domain or "")
    if i < len(flags):
        return flags[i]
    return bool(variadic and flags and flags[-1])


def check_model(model) -> None:
    """What the importer relies on before it reads anything (``load_model`` calls it): default-domain
    opset versions, and text where ONNX has strings (protobuf hands back ``bytes`` for a name that
    is not UTF-8)."""
    for imp in model.opset_import:
        if not isinstance(imp.domain, str):
            raise FrontendError(f"an opset_import domain is not valid UTF-8 ({imp.domain[:40]!r}): the model is corrupt")
        if imp.domain in ("", "ai.onnx") and imp.version < 1:
            raise FrontendError(f"the model imports version {imp.version} of the default ONNX opset; versions "
                                f"start at 1: the model is corrupt")
    _check_names(model.graph, "the graph")


def _check_names(graph, where: str) -> None:
    def check(value, what: str) -> None:
        if not isinstance(value, str):
            raise FrontendError(f"{where}: {what} is not valid UTF-8 ({value[:40]!r}): the model is corrupt")

    for kind, infos in (("input", graph.input), ("output", graph.output), ("value_info", graph.value_info)):
        for k, vi in enumerate(infos):
            check(vi.name, f"the name of {kind} #{k}")
            if vi.type.HasField("tensor_type"):
                for axis, d in enumerate(vi.type.tensor_type.shape.dim):
                    check(d.dim_param, f"the dim_param of axis {axis} of {kind} '{vi.name}'")
    for k, t in enumerate(graph.initializer):
        check(t.name, f"the name of initializer #{k}")
    for k, n in enumerate(graph.node):
        for field in ("name", "op_type", "domain"):
            check(getattr(n, field), f"the {field} of node #{k}")
        for i, name in enumerate(n.input):
            check(name, f"input #{i} of node #{k} ('{n.name}')")
        for i, name in enumerate(n.output):
            check(name, f"output #{i} of node #{k} ('{n.name}')")
        for a in n.attribute:
            check(a.name, f"an attribute name of node #{k} ('{n.name}')")
            if a.type == onnx.AttributeProto.GRAPH:
                _check_names(a.g, f"{where}, node '{n.name}' attribute '{a.name}'")
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _check_names(g, f"{where}, node '{n.name}' attribute '{a.name}'")


def _drop_dead_ops(func) -> None:
    """Removes pure ops whose results nobody uses (shape computations folded into attributes)."""
    op = func.body.last
    while op is not None:
        prev = op.prev
        if op.opdef is not None and PURE in op.opdef.traits and not any(r.uses for r in op.results):
            op.erase()
        op = prev
