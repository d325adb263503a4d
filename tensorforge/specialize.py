"""ONNX models that compile per call: shape operands given as inputs, and the symbolic-import fallback.

A model's symbolic dims (``dim_param``) normally stay symbolic: ``tensorforge.compile(model)``
builds one native model for every size.  Two cases compile on the call instead, through a
``SpecializingModel``:

- **shape operands given as model inputs** (Reshape's shape, Slice's starts, TopK's K, Tile's
  repeats, Resize's sizes...): true run-time values that a graph attribute cannot hold.  The
  model specialises on the *values* of those inputs only (``NonConstantInputError`` names
  them); each specialisation keeps the other inputs' symbolic dims symbolic;
- **the fallback**: an import that cannot keep a dim symbolic (an operand needs a concrete size,
  ``UnboundDimError``, or an op only takes static shapes) or a symbolic model that fails to
  compile.  The model then specialises on the *shapes* of its inputs, one C compile per new
  shape, and says so with a one-line ``TensorforgeWarning``.

A ``Guard`` decides the key of a call from its inputs (those values, those shapes); one LRU cache
maps keys to compiled specialisations (``max_specializations``, default 8); a miss imports the
model with those inputs bound (``import_onnx(bind_inputs=..., shapes=...)``) and compiles it; an
eviction is a ``TensorforgeWarning`` that names the evicted key.  Inputs that only carry data are
never bound.  The same wrapper gives ONNX I/O conventions to models with bf16 tensors (ml_dtypes
``bfloat16`` arrays in and out, as onnxruntime does; the graph holds bf16 in f32 arrays).
"""
from __future__ import annotations

import collections
import threading
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from . import api
from .errors import TensorforgeError, TensorforgeWarning
from .ir.types import DType, TensorType

DEFAULT_MAX_SPECIALIZATIONS = 8

__all__ = ["DEFAULT_MAX_SPECIALIZATIONS", "Guard", "SpecializingModel", "compile_specializing", "needs_onnx_io"]


def _is_onnx(model: Any) -> bool:
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        import os
        return os.fspath(model).endswith(".onnx")
    return type(model).__name__ == "ModelProto" and type(model).__module__.startswith("onnx")


def needs_onnx_io(model: Any, module) -> bool:
    """An ONNX model whose imported inputs or outputs hold bf16 (as f32 arrays): its public model
    converts ml_dtypes ``bfloat16`` arrays in and returns bf16 outputs as ONNX declares them."""
    if not _is_onnx(model):
        return False
    types = [a.type for a in module.main.args] + [v.type for v in module.main.outputs]
    return any(getattr(getattr(t, "dtype", None), "is_storage_only", False) for t in types)   # bf16, float8, int4...


def compile_specializing(model: Any, error: Exception | None, *, example_inputs: Any = None,
                         shapes: Mapping[str, Any] | None = None, dim_ranges: Mapping[str, Any] | None = None,
                         shape_hints: Mapping[str, int] | None = None, target: str = "cpu",
                         max_specializations: int | None = None, **compile_options: Any):
    """What ``tensorforge.compile`` returns for an ONNX model whose import raised ``error`` (None
    for a model that only needs ONNX I/O conventions), or None when ``error`` is not one a
    specialisation resolves.

    A ``NonConstantInputError`` (a model input feeds a shape operand) specialises on the values of
    those inputs only; the symbolic dims stay symbolic in each specialisation.  Any other error
    of an import that kept symbolic dims (``UnboundDimError``: an operand needs a concrete size;
    an op that only takes static shapes) falls back to one specialisation per input shape, with
    a ``TensorforgeWarning`` that says why, when importing with those dims at sizes works."""
    from .frontends.onnx_ops.errors import NonConstantInputError, UnboundDimError
    if not _is_onnx(model) or (error is not None and not isinstance(error, TensorforgeError)):
        return None
    if error is not None and max_specializations == 0:
        return None                                   # specialising switched off: the import's error
    from .frontends.onnx import load_model
    proto = load_model(model)
    signature = _OnnxSignature(proto, example_inputs, shapes, dim_ranges, shape_hints)
    guard = Guard(signature.names, signature.declared, signature.user_binding)
    if error is not None:
        if isinstance(error, NonConstantInputError) and not isinstance(error, UnboundDimError):
            if not guard.widen(error, UnboundDimError):
                return None
        elif not guard.shape_inputs(force=True) or not _imports_at_sizes(proto, signature, error):
            return None                               # not about symbolic dims: the import's error
        else:
            guard.by_shape = True
            warn_per_shape(signature.name, error)
    return SpecializingModel(proto, signature, guard, target=target, example_inputs=example_inputs,
                             max_specializations=max_specializations, **compile_options)


def warn_per_shape(name: str, error: Exception, stacklevel: int = 4) -> None:
    """The one-line warning of the fallback to per-shape specialisation."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    warnings.warn(f"{name}: compiling one specialisation per input shape (one compile per new shape), because the "
                  f"symbolic dims cannot stay symbolic: {reason}", TensorforgeWarning, stacklevel=stacklevel)


def _imports_at_sizes(proto, signature: "_OnnxSignature", error: Exception) -> bool:
    """Whether ``error`` is about symbolic dims: importing with every dim at a size works (each at
    its hint).  An ``UnboundDimError`` says so itself."""
    from .frontends.onnx import import_onnx
    from .frontends.onnx_ops.errors import UnboundDimError
    if isinstance(error, UnboundDimError):
        return True
    sizes = dict(signature.user_binding)
    for dims in signature.declared.values():
        for d in dims:
            if isinstance(d, str) and d not in sizes:
                lo = signature.ranges.get(d, (1, None))[0]
                sizes[d] = signature.hints.get(d) or lo
    try:
        import_onnx(proto, shapes=sizes)
    except TensorforgeError:
        return False
    return True


class _OnnxSignature:
    """The data inputs (names, declared dims, the sizes the user bound, the ranges and hints of the
    dims left symbolic, dtypes) and the ONNX element types of the outputs of one ONNX model."""

    def __init__(self, proto, example_inputs: Any, shapes: Mapping[str, Any] | None,
                 dim_ranges: Mapping[str, Any] | None = None, shape_hints: Mapping[str, int] | None = None):
        from .frontends.onnx_ops.bindings import (SymbolNames, bind_dims, declared_dims, split_shapes, symbol_key,
                                                  symbol_sites)
        from .frontends.onnx_ops.dtypes import to_dtype
        inits = {t.name for t in proto.graph.initializer}
        data = [vi for vi in proto.graph.input if vi.name not in inits]
        self.symbol_names = SymbolNames()
        declared = [(vi.name, declared_dims(vi.name, vi.type.tensor_type.shape, self.symbol_names)) for vi in data]
        sites = symbol_sites(declared)
        sizes, ranges = split_shapes(shapes, dim_ranges)
        binding = bind_dims(declared, example_inputs, sizes, self.symbol_names)
        self.ranges = {symbol_key(k, sites, self.symbol_names, "dim_ranges"): r for k, r in ranges.items()}
        self.hints = {symbol_key(k, sites, self.symbol_names, "shape_hints"): v
                      for k, v in (shape_hints or {}).items()}
        for sym in self.ranges:                      # a ranged dim stays symbolic; its example size: the hint
            if sym in binding:
                self.hints.setdefault(sym, binding.pop(sym))
        self.user_binding = binding
        self.names = [n for n, _ in declared]
        self.declared = dict(declared)
        self.dtypes = {vi.name: to_dtype(vi.type.tensor_type.elem_type) for vi in data}
        self.output_codes = [vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
                             for vi in proto.graph.output]
        self.output_dims = [declared_dims(vi.name, vi.type.tensor_type.shape, self.symbol_names)
                            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape") else None
                            for vi in proto.graph.output]
        self.name = proto.graph.name or "model"

    def import_options(self, sizes: Mapping[str, int]) -> dict[str, Any]:
        """``dim_ranges``/``shape_hints`` of ``import_onnx`` for the dims that ``sizes`` leaves symbolic."""
        return {"dim_ranges": {s: r for s, r in self.ranges.items() if s not in sizes},
                "shape_hints": {s: h for s, h in self.hints.items() if s not in sizes}}

    def check_ranges(self, sizes: Mapping[str, int]) -> None:
        """A size bound per call (shape specialisation) must lie in the range the user declared."""
        for sym, size in sizes.items():
            r = self.ranges.get(sym)
            if r is not None and not (r[0] <= size and (r[1] is None or size <= r[1])):
                hi = "inf" if r[1] is None else r[1]
                raise TensorforgeError(f"the symbolic dimension '{sym}' is {size}, outside its range {r[0]}..{hi}")

    def output(self, arr: np.ndarray, code: int, as_torch: bool):
        """One graph output as ONNX declares it (bf16 as ml_dtypes ``bfloat16`` / ``torch.bfloat16``)."""
        from onnx import TensorProto

        from .frontends.onnx_ops.dtypes import from_numpy_for_onnx, to_dtype
        if as_torch:
            import torch
            t = torch.from_numpy(np.ascontiguousarray(arr))
            return t.to(torch.bfloat16) if code == TensorProto.BFLOAT16 else t
        if code and to_dtype(code) is not None:
            return from_numpy_for_onnx(np.asarray(arr), code)
        return arr


class Guard:
    """Decides which specialisation a call needs: ``key(arrays)`` from the inputs' values (the
    inputs in ``by_value``) and shapes (the inputs with symbolic dims, when ``by_shape``).

    ``widen`` grows the guard when an import names more inputs it needs; the key then changes
    shape, so the cache starts over.
    """

    def __init__(self, names: Sequence[str], declared: Mapping[str, Sequence], user_binding: Mapping[str, int]):
        from .frontends.onnx_ops.bindings import specialize
        self.names = list(names)
        self.declared = dict(declared)                 # as the model declares them
        self.user_binding = dict(user_binding)         # from compile's shapes= / example_inputs
        self.dims = {n: specialize(d, user_binding) for n, d in declared.items()}
        self.by_value: tuple[str, ...] = ()
        self.by_shape = False

    @property
    def empty(self) -> bool:
        return not self.by_value and not self.by_shape

    def shape_inputs(self, force: bool = False) -> list[str]:
        """Inputs whose sizes the specialisation binds: symbolic dims, not already bound by value."""
        if not (self.by_shape or force):
            return []
        return [n for n in self.names if n not in self.by_value and any(isinstance(d, str) for d in self.dims[n])]

    def widen(self, error: Exception, unbound_type: type) -> bool:
        """Grows the guard so that ``error`` (from importing or compiling with the current guard)
        cannot recur; False when it cannot.  An unbound symbolic dim is resolved by binding the
        inputs' shapes, never their values (they may carry data)."""
        if isinstance(error, unbound_type):
            if self.by_shape or not self.shape_inputs(force=True):
                return False
            self.by_shape = True
            return True
        more = [n for n in getattr(error, "inputs", ()) if n in self.names and n not in self.by_value]
        if not more:
            return False
        self.by_value = tuple(n for n in self.names if n in self.by_value or n in more)
        return True

    def key(self, arrays: Sequence[np.ndarray]) -> tuple:
        shaped = set(self.shape_inputs())
        parts = []
        for n, a in zip(self.names, arrays):
            if n in self.by_value:
                parts.append((n, a.dtype.str, a.shape, a.tobytes()))
            elif n in shaped:
                parts.append((n, a.shape))
        return tuple(parts)

    def bindings(self, arrays: Sequence[np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """(``bind_inputs``, ``shapes``) for importing the specialisation of ``arrays``."""
        from .frontends.onnx_ops.bindings import bind_dims
        by_name = dict(zip(self.names, arrays))
        bind = {n: by_name[n] for n in self.by_value}
        # the user's sizes of the symbols that the inputs left as inputs declare
        free = {d for n in self.names if n not in self.by_value for d in self.declared[n] if isinstance(d, str)}
        sizes = {d: s for d, s in self.user_binding.items() if d in free}
        shaped = self.shape_inputs()
        if shaped:
            sizes.update(bind_dims([(n, self.dims[n]) for n in shaped], [by_name[n] for n in shaped]))
        return bind, sizes

    def call_args(self, arrays: Sequence[Any]) -> list:
        """The arguments of a specialisation: the inputs not bound by value."""
        return [a for n, a in zip(self.names, arrays) if n not in self.by_value]

    def describe(self, key: tuple) -> str:
        parts = []
        for part in key:
            if len(part) == 2:
                parts.append(f"{part[0]}: shape {list(part[1])}")
            else:
                name, dtype, shape, data = part
                values = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)
                text = str(values.tolist())
                parts.append(f"{name} = {text if len(text) <= 60 else text[:57] + '...'}")
        return ", ".join(parts) or "(no inputs)"

    def explain(self) -> str:
        what = []
        if self.by_value:
            what.append("the values of " + ", ".join(f"'{n}'" for n in self.by_value))
        if self.by_shape:
            what.append("the shapes of " + ", ".join(f"'{n}'" for n in self.shape_inputs()))
        return " and ".join(what) or "nothing"


class SpecializingModel(api.CompiledModel):
    """A compiled ONNX model that compiles one specialisation per key of its ``Guard``.

    Called like any ``CompiledModel`` (NumPy in, NumPy out; torch in, torch out), with every model
    input, including the shape-valued ones.  ``specializations`` lists what the cache holds;
    ``specialization(*inputs)`` is the plain ``CompiledModel`` for those inputs (it takes the
    inputs that are not bound by value), which can be saved.
    """

    def __init__(self, proto, signature: _OnnxSignature, guard: Guard, *, target: str = "cpu",
                 example_inputs: Any = None, max_specializations: int | None = None,
                 threads: int | None = None, **compile_options: Any):
        super().__init__(None, target=target)
        n = DEFAULT_MAX_SPECIALIZATIONS if max_specializations is None else max_specializations
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise TensorforgeError(f"max_specializations must be a non-negative integer (0: never "
                                   f"specialise), got {n!r}")
        self.max_specializations = max(int(n), 1)
        self.proto = proto
        self.signature = signature
        self.guard = guard
        self._threads = threads
        self._options = compile_options
        self._cache: collections.OrderedDict[tuple, api.CompiledModel] = collections.OrderedDict()
        self._lock = threading.RLock()
        self._last: api.CompiledModel | None = None
        if guard.empty:                                # static: compile now, as compile() promises
            one = self.specialization()
            self.module, self.func, self.native, self.source = one.module, one.func, one.native, one.source
        elif example_inputs is not None:
            arrays = ([example_inputs[n] for n in signature.names] if isinstance(example_inputs, Mapping)
                      else list(example_inputs))
            self.specialization(*arrays)

    # ---- the cache --------------------------------------------------------------------
    def specialization(self, *inputs) -> api.CompiledModel:
        """The compiled model for ``inputs`` (every model input), compiled on a miss; a model with
        nothing to specialise on needs no inputs."""
        if not inputs and self.guard.empty:
            return self._get([None] * len(self.guard.names))
        arrays, _ = self._arrays(inputs)
        return self._get(arrays)

    @property
    def specializations(self) -> list[tuple[str, api.CompiledModel]]:
        """(key description, compiled model) of each cached specialisation, least recent first."""
        with self._lock:
            return [(self.guard.describe(k), cm) for k, cm in self._cache.items()]

    def _get(self, arrays: list[np.ndarray]) -> api.CompiledModel:
        from .frontends.onnx_ops.errors import NonConstantInputError, UnboundDimError
        with self._lock:
            while True:
                key = self.guard.key(arrays)
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    self._last = hit
                    return hit
                try:
                    compiled = self._compile(arrays)
                except NonConstantInputError as e:
                    if isinstance(e, UnboundDimError):
                        if not self._widen_to_shapes(e):
                            raise
                    elif not self.guard.widen(e, UnboundDimError):
                        raise
                    self._cache.clear()
                    continue
                except TensorforgeError as e:       # a specialisation with symbolic dims left failed
                    if not self._widen_to_shapes(e):
                        raise
                    self._cache.clear()
                    continue
                self._cache[key] = compiled
                self._last = compiled
                while len(self._cache) > self.max_specializations:
                    old, _ = self._cache.popitem(last=False)
                    warnings.warn(f"{self.signature.name}: evicted the specialisation for {self.guard.describe(old)} "
                                  f"(max_specializations={self.max_specializations}); a call with those inputs "
                                  f"compiles again. Pass a larger max_specializations= to tensorforge.compile "
                                  f"if the model sees more distinct {self.guard.explain()}",
                                  TensorforgeWarning, stacklevel=4)
                return compiled

    def _compile(self, arrays: list[np.ndarray]) -> api.CompiledModel:
        from .frontends.onnx import import_onnx
        if len(arrays) != len(self.guard.names):
            raise TensorforgeError(f"the model takes {len(self.guard.names)} input(s) "
                                   f"({', '.join(self.guard.names)}), got {len(arrays)}")
        bind, sizes = self.guard.bindings(arrays)
        self.signature.check_ranges(sizes)
        module = import_onnx(self.proto, bind_inputs=bind, shapes=sizes, **self.signature.import_options(sizes))
        return api.compile(module, target=self.target, threads=self._threads, **self._options)

    def _widen_to_shapes(self, error: Exception) -> bool:
        """Falls back to binding the input shapes too (with the warning) after ``error`` from a
        specialisation that kept symbolic dims; False when the shapes are bound already."""
        if self.guard.by_shape or not self.guard.shape_inputs(force=True):
            return False
        self.guard.by_shape = True
        warn_per_shape(self.signature.name, error, stacklevel=6)
        return True

    # ---- calls ------------------------------------------------------------------------
    def _arrays(self, inputs: Sequence[Any]) -> tuple[list[np.ndarray], bool]:
        arrays, as_torch = [], False
        for x in inputs:
            if type(x).__module__.startswith("torch"):
                import torch
                as_torch = True
                x = x.detach().cpu()
                x = (x.float() if x.dtype == torch.bfloat16 else x).numpy()
            a = np.asarray(x)
            arrays.append(_held_array(a))
        if len(arrays) != len(self.guard.names):
            raise TensorforgeError(f"the model takes {len(self.guard.names)} input(s) "
                                   f"({', '.join(self.guard.names)}), got {len(arrays)}")
        return arrays, as_torch

    def run_numpy(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays, _ = self._arrays(inputs)
        return self._get(arrays).run_numpy(self.guard.call_args(arrays))

    def run(self, *inputs, out: Sequence | None = None) -> list:
        if out is not None:
            arrays, _ = self._arrays(inputs)
            return self._get(arrays).run(*self.guard.call_args(arrays), out=out)
        result = self(*inputs)
        return list(result) if isinstance(result, tuple) else [result]

    def __call__(self, *inputs):
        arrays, as_torch = self._arrays(inputs)
        outs = self._get(arrays).run_numpy(self.guard.call_args(arrays))
        codes = self.signature.output_codes
        outs = [self.signature.output(o, codes[i] if i < len(codes) else 0, as_torch) for i, o in enumerate(outs)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ---- the CompiledModel interface ----------------------------------------------------
    @property
    def input_types(self):
        """Every model input as declared (symbolic dims as names), the shape-valued ones included."""
        return [TensorType(self.guard.dims[n], self.signature.dtypes[n]) for n in self.guard.names]

    @property
    def output_types(self):
        """The latest specialisation's output types (before the first call: as the model declares them)."""
        if self._last is not None:
            return self._last.output_types
        from .frontends.onnx_ops.dtypes import to_dtype
        dims = self.signature.output_dims
        if any(d is None for d in dims) or any(to_dtype(c) is None for c in self.signature.output_codes):
            raise TensorforgeError(f"the output types of {self.signature.name} depend on {self.guard.explain()}; "
                                   f"they are known after the first call")
        return [TensorType(d, to_dtype(c)) for d, c in zip(dims, self.signature.output_codes)]

    @property
    def symbols(self):
        """The latest specialisation's symbol table (before the first call: the declared ranges)."""
        if self._last is not None:
            return self._last.symbols
        from .ir.symbolic import SymbolRange, SymbolTable
        return SymbolTable(SymbolRange(s, lo, hi) for s, (lo, hi) in self.signature.ranges.items())

    @property
    def input_specs(self) -> list:
        """Every model input as declared, the shape-valued ones included."""
        from .runtime.signature import TensorSpec
        return [TensorSpec.from_type(n, t) for n, t in zip(self.guard.names, self.input_types)]

    @property
    def output_specs(self) -> list:
        from .runtime.signature import TensorSpec
        if self._last is not None:
            return self._last.output_specs
        try:
            types = self.output_types
        except TensorforgeError:           # they depend on the first call's inputs
            return []
        return [TensorSpec.from_type(f"output{i}", t) for i, t in enumerate(types)]

    def describe(self) -> str:
        """The signature (as ``CompiledModel.describe``) and what the model specialises on."""
        return f"{super().describe()}\nspecialises on {self.guard.explain()}"

    @property
    def threads(self) -> int:
        self._native_only("threads")
        return self._threads or _default_threads()

    def set_threads(self, n: int) -> None:
        """Runs later calls, on every specialisation, on ``n`` threads."""
        self._native_only("set_threads")
        with self._lock:
            for cm in self._cache.values():
                cm.set_threads(n)
            self._threads = int(n)

    def _native_only(self, what: str):
        if self.target == "interpreter":
            raise TensorforgeError(f"{what} needs a native target; this model runs in the interpreter "
                                   f"(compile with target='cpu')")
        return None

    def save(self, path, include_graph: bool = True) -> None:
        if self.guard.empty:
            return self.specialization().save(path, include_graph)
        raise TensorforgeError(
            f"cannot save {self.signature.name}: it compiles one specialisation per distinct "
            f"{self.guard.explain()}, and a .tfm file holds one. Save one of them: "
            f"cm.specialization(*inputs).save(path) (it takes the inputs other than "
            f"{', '.join(self.guard.by_value) or 'none'}), or bind the symbolic dims at compile "
            f"(shapes= or example_inputs)")

    def __repr__(self) -> str:
        return (f"SpecializingModel({self.signature.name!r}, target={self.target!r}, on {self.guard.explain()}, "
                f"{len(self._cache)}/{self.max_specializations} specialisations)")


def _default_threads() -> int:
    from .runtime.native import default_threads
    return default_threads()


def _held_array(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (bfloat16, float8, int4...) in the type the graph holds them in."""
    if a.dtype.kind != "V" and a.dtype.name not in _ML_NAMES:
        return a
    from .frontends.onnx_ops.dtypes import held_array
    return held_array(a)


_ML_NAMES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                       "float4_e2m1fn", "int4", "uint4", "int2", "uint2"})
