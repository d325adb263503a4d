"""The public entry point: ``tensorforge.compile(model, example_inputs=None, target="cpu")``.

``model`` is a ``torch.nn.Module``, an ``onnx.ModelProto``, a path to an ``.onnx`` file or an
already built ``ModuleOp``.  The result is called like the model: NumPy in, NumPy out; torch in,
torch out.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import TensorforgeError
from .ir.builtin import ModuleOp
from .ir.interpreter import run_function
from .ir.verifier import verify

TARGETS = ("cpu", "opencl", "cuda", "mlir", "interpreter")


def import_model(model: Any, example_inputs: Sequence | None = None,
                 shapes: Mapping[str, Any] | None = None, dynamic_shapes: Any = None,
                 dim_ranges: Mapping[str, Any] | None = None,
                 shape_hints: Mapping[str, int] | None = None) -> ModuleOp:
    """Turns any supported model object into a graph-level module (no optimisation).

    For ONNX models, ``example_inputs`` and ``shapes`` (``{"batch": 1, "seq": 128}``) bind the
    symbolic dimensions (``dim_param``) of the inputs, which specialises the model to those
    sizes; the dims nothing binds stay symbolic, with the ranges of ``dim_ranges``
    (``{"batch": (1, 64)}``, or the same pairs in ``shapes``; default ``1..``) and the hints of
    ``shape_hints`` (``{"seq": 128}``).  For a ``torch.nn.Module``, ``dynamic_shapes``
    (torch.export's spec) makes dims symbolic."""
    torch_mod = sys.modules.get("torch")
    if (dim_ranges or shape_hints) and not _is_onnx_model(model):
        raise TensorforgeError("dim_ranges= and shape_hints= describe the symbolic dimensions (dim_param) of an "
                               "ONNX model; a torch.nn.Module takes torch.export's dynamic_shapes=")
    if dynamic_shapes is not None and not (torch_mod and isinstance(model, torch_mod.nn.Module)):
        raise TensorforgeError("dynamic_shapes= is torch.export's spec for a torch.nn.Module; an ONNX "
                               "model keeps the dims it declares with dim_param symbolic")
    if isinstance(model, ModuleOp):
        if shapes:
            raise TensorforgeError("shapes= binds the symbolic dimensions of an ONNX model; a graph module "
                                   "already has its types")
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if path.endswith(".mlir") or "stablehlo." in path:        # StableHLO text, or a file of it
            from .frontends.stablehlo import import_stablehlo
            if shapes:
                raise TensorforgeError("shapes= binds the symbolic dimensions of an ONNX model; StableHLO "
                                       "has static types")
            return import_stablehlo(model)
        if not path.endswith(".onnx"):
            raise TensorforgeError(f"cannot compile '{path}': expected an .onnx file or a StableHLO .mlir file "
                                   f"(or pass a torch.nn.Module / onnx.ModelProto / JAX function)")
        from .frontends.onnx import import_onnx
        return import_onnx(path, example_inputs=example_inputs, shapes=shapes, dim_ranges=dim_ranges,
                           shape_hints=shape_hints)
    kind = type(model).__module__ + "." + type(model).__name__
    if kind.startswith("onnx") and type(model).__name__ == "ModelProto":
        from .frontends.onnx import import_onnx
        return import_onnx(model, example_inputs=example_inputs, shapes=shapes, dim_ranges=dim_ranges,
                           shape_hints=shape_hints)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        if shapes:
            raise TensorforgeError("shapes= binds the symbolic dimensions of an ONNX model; a torch.nn.Module "
                                   "takes its shapes from example_inputs")
        if example_inputs is None:
            raise TensorforgeError("compiling a torch.nn.Module needs example_inputs "
                                   "(a tuple of tensors with the shapes you will run)")
        from .frontends.torch import import_torch
        if dynamic_shapes is not None:      # torch.export's spec: symbolic dims with ranges
            from .frontends.torch_symbolic import import_torch_dynamic
            return import_torch_dynamic(model, tuple(example_inputs), dynamic_shapes)
        return import_torch(model, tuple(example_inputs))
    raise TensorforgeError(f"cannot compile a {kind}: pass a torch.nn.Module, an onnx.ModelProto, a JAX "
                           f"function, or a path to an .onnx or StableHLO .mlir file")


def _is_jax_function(model: Any) -> bool:
    """A Python function (or jitted one) to lower with jax; modules, paths and protos are not."""
    if isinstance(model, (ModuleOp, str, os.PathLike, bytes)):
        return False
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None and isinstance(model, torch_mod.nn.Module):
        return False
    from .frontends.stablehlo.jax_bridge import is_jax_function
    return is_jax_function(model)


def _is_onnx_model(model: Any) -> bool:
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model).endswith(".onnx")
    return type(model).__name__ == "ModelProto" and type(model).__module__.startswith("onnx")


class CompiledModel:
    """A compiled model: call it with arrays (NumPy or torch) in the order of the model's inputs.

    ``module`` is the optimised graph-level module (kept for inspection and the interpreter; None
    for a model loaded from an artifact); ``native`` is the loaded library when the target is
    native code.  ``output_tree`` (set by the torch frontend) rebuilds the structure a torch
    model returned (a ``ModelOutput``, a cache, a dict) when the model is called with torch
    tensors; NumPy callers, ``run`` and models loaded from a ``.tfm`` get the flat outputs.
    """

    def __init__(self, module: ModuleOp | None, target: str = "interpreter", native=None,
                 source: str | None = None):
        self.module = module
        self.target = target
        self.func = module.main if module is not None else None
        self.native = native
        self.source = source
        self.output_tree = _output_tree(module)

    @property
    def input_types(self):
        if self.func is None:
            return [s.tensor_type for s in self.native.inputs]
        return [a.type for a in self.func.args]

    @property
    def output_types(self):
        if self.func is None:
            return [s.tensor_type for s in self.native.outputs]
        return [v.type for v in self.func.outputs]

    # ---- the signature: names, shapes with symbols, ranges (native and interpreter alike) ----
    @property
    def symbols(self):
        """The model's ``SymbolTable``: each symbolic dim's range (empty for a static model)."""
        if self.native is not None:
            return self.native.symbols
        from .ir.symbolic import symbol_table_of
        return symbol_table_of(self.func)

    @property
    def input_specs(self) -> list:
        """Each input as a ``TensorSpec``: name, shape (ints, or symbol expressions such as
        ``"batch"``), element type; ``symbols`` holds the ranges."""
        if self.native is not None:
            return list(self.native.inputs)
        from .runtime.signature import specs_from_values
        return specs_from_values(self.func.args, [a.type for a in self.func.args], "input")

    @property
    def output_specs(self) -> list:
        """Each output as a ``TensorSpec`` (shapes in terms of the inputs' symbols)."""
        if self.native is not None:
            return list(self.native.outputs)
        from .runtime.signature import specs_from_values
        return specs_from_values(self.func.outputs, [v.type for v in self.func.outputs], "output")

    def describe(self) -> str:
        """The signature for people, e.g. ``x: f32[batch, 3, 224, 224]  batch in 1..64``."""
        from .runtime.signature import describe_signature
        return describe_signature(self.input_specs, self.output_specs, self.symbols)

    def run_numpy(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self.native is not None:
            return self.native.run(inputs)
        return run_function(self.func, inputs)

    def run(self, *inputs, out: Sequence | None = None) -> list:
        """Like calling the model, but always returns a list, and with ``out=`` writes the results
        into the given arrays (native targets), so a serving loop allocates nothing."""
        if self.native is not None:
            return self.native.run(inputs, out)
        if out is not None:
            raise TensorforgeError("out= needs a native target (target='cpu')")
        result = self._call_flat(*inputs)
        return list(result) if isinstance(result, tuple) else [result]

    def __call__(self, *inputs):
        native = self.native
        if native is not None and self.output_tree is None:
            fast = getattr(native, "_fast", None)   # the C call path (runtime/fastcall.py)
            if fast is not None:
                result = fast(inputs)
                if result is not NotImplemented:
                    return result
                return native.call_python(inputs)
            return native(*inputs)
        result = self._call_flat(*inputs)
        if self.output_tree is not None and any(type(x).__module__.startswith("torch") for x in inputs):
            return self.output_tree(list(result) if isinstance(result, tuple) else [result])
        return result

    def _call_flat(self, *inputs):
        """The outputs as the graph has them: one array, or a tuple of them."""
        if self.native is not None:
            return self.native(*inputs)
        torch_mod = None
        arrays = []
        for x in inputs:
            if type(x).__module__.startswith("torch"):
                import torch as torch_mod  # noqa: F811
                arrays.append(x.detach().cpu().numpy())
            else:
                arrays.append(np.asarray(x))
        outs = self.run_numpy(arrays)
        if torch_mod is not None:
            outs = [torch_mod.from_numpy(np.ascontiguousarray(o)) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    @property
    def threads(self) -> int:
        return self._native_only("threads").threads

    def set_threads(self, n: int) -> None:
        """Runs later calls on ``n`` threads (the default is all cores)."""
        self._native_only("set_threads").set_threads(n)

    def save(self, path: str | os.PathLike, include_graph: bool = True) -> None:
        """Writes a ``.tfm`` artifact that ``tensorforge.load`` runs without torch or onnx.

        ``include_graph`` also stores the optimised graph (constants included, so the file grows
        by about the weights' size) for ``tensorforge explain`` and ``tune`` on the .tfm file."""
        from .runtime.artifact import save
        native = self._native_only("save")
        graph_text = None
        if include_graph and self.module is not None:
            from .ir.printer import print_module
            graph_text = print_module(self.module, inline_resources=True)
        save(native, path, graph_text)

    def _native_only(self, what: str):
        if self.native is None:
            raise TensorforgeError(f"{what} needs a native target; this model runs in the "
                                   f"{self.target} (compile with target='cpu')")
        if self.target == "mlir":      # a cross-check build: no artifact, no thread pool
            raise TensorforgeError(f"{what} needs a native target; target='mlir' models are not saved and run "
                                   f"on one thread (compile with target='cpu')")
        return self.native


PRECISIONS = ("f32", "int8", "bf16", "bf16-or-f32")


def _with_precision(model: Any, example_inputs: Sequence | None, options: dict) -> Any:
    """``model`` quantized when ``options`` asks for ``precision="int8"`` (popping the options
    ``quantize`` takes: ``calibration``, ``calibration_method``, ``exclude``, ``per_channel``,
    ``keep_first_last``, ``max_error``, ``residuals``, ``depthwise``)."""
    precision = options.pop("precision", "f32")
    calibration = options.pop("calibration", None)
    extra = {k: options.pop(k) for k in ("exclude", "per_channel", "keep_first_last", "max_error", "residuals", "depthwise")
             if k in options}
    if "calibration_method" in options:
        extra["method"] = options.pop("calibration_method")
    if precision not in PRECISIONS:
        raise TensorforgeError(f"unknown precision '{precision}' (choose from {', '.join(PRECISIONS)})")
    if precision != "int8":
        if calibration is not None or extra:
            raise TensorforgeError("calibration options need precision='int8'")
        if precision == "f32":
            return model
        from .quantization.bf16 import bf16_module, check_supported
        return bf16_module(model, example_inputs) if check_supported(precision) else model
    if calibration is None:
        raise TensorforgeError("precision='int8' needs calibration=: samples of the model's inputs (a list of "
                               "arrays or tensors, or of tuples), or statistics saved from tensorforge.calibration_stats")
    from .quantization import Calibration, quantize
    saved = isinstance(calibration, (Calibration, str))
    return quantize(model, None if saved else calibration, example_inputs,
                    calibration=calibration if saved else None, **extra)


def compile(model: Any, example_inputs: Sequence | None = None, target: str = "cpu",
            threads: int | None = None, passes: Any = None, db: Any = "auto",
            shapes: Mapping[str, Any] | None = None, dynamic_shapes: Any = None,
            dim_ranges: Mapping[str, Any] | None = None, shape_hints: Mapping[str, int] | None = None,
            **options: Any) -> CompiledModel:
    """Imports, checks, optimises and compiles ``model``.

    ``target="cpu"`` (the default) generates C for the host and loads it; ``"opencl"`` and
    ``"cuda"`` generate GPU kernels from the same IR (docs/gpu.md: OpenCL runs on any OpenCL
    driver, CUDA is compiled by NVRTC and runs on an NVIDIA GPU); ``"mlir"`` exports the loop level
    as upstream MLIR compiled by mlir-opt-19/llc-19 alone (a slow cross-check of the C backend,
    static shapes only); ``"interpreter"`` runs
    the verified graph in the NumPy reference interpreter.  ``threads`` is how many threads
    the native model runs on (default: all cores; change it later with ``set_threads``).
    ``passes`` selects the graph optimisation: None for
    ``tensorforge.passes.pipeline.default_pipeline(target)``, a pipeline string such as
    ``"const-fold,dce"``, a ``PassManager``, or False for none.  A ``ModuleOp`` given as
    ``model`` is copied, not changed.  ``db``: a tuning database (path or ``TuningDatabase``) whose
    best record of every kernel is applied, no tuning run; the default ``"auto"`` uses the default
    database when that file exists; None compiles untuned.  Native code honours IEEE 754 as
    PyTorch and ONNX do (NaN and infinities propagate, -0.0 keeps its sign); ``fast_math=True``
    compiles with ``-ffast-math`` instead, faster on some models but a NaN may then come out as
    a number (docs/numerics.md).

    ONNX: the symbolic dimensions (``dim_param``) that nothing binds stay symbolic, so
    ``compile("model.onnx")`` compiles one model for every size.  ``shapes`` binds them by name
    (``{"batch": 1, "seq": 128}``), as example inputs do (a static model: faster kernels);
    ``dim_ranges`` (or ``shapes`` with pairs) gives ranges, ``{"batch": (1, 64)}`` (default
    ``1..``, narrowed where the model needs it); ``shape_hints`` the sizes that kernels are
    tuned for (default: 1 for a batch, 128 otherwise, or the example input's size).  A model
    whose shape operands are inputs compiles per distinct value of those inputs on the call,
    and one the symbolic import cannot handle per distinct input shape, with a
    ``TensorforgeWarning`` (``tensorforge.specialize``; at most ``max_specializations=8`` kept;
    0 raises the import's error instead).
    ``dynamic_shapes`` (a ``torch.nn.Module`` only) is ``torch.export``'s spec, e.g.
    ``{"x": {0: torch.export.Dim("batch", min=1, max=64)}}``: the model compiles once for every
    size in the declared ranges.

    ``precision="int8"`` with ``calibration=`` (samples of the inputs, or saved statistics)
    quantizes the linear layers first (``tensorforge.quantize``; ``calibration_method``,
    ``exclude``, ``per_channel`` as it takes them).  ``precision="bf16"`` runs the linear layers
    with bf16 weights and activations and float32 sums (AVX512_BF16; an error on CPUs without it,
    where ``"bf16-or-f32"`` compiles float32 with a warning).
    """
    if target not in TARGETS:
        raise TensorforgeError(f"unknown target '{target}' (choose from {', '.join(TARGETS)})")
    if target in ("opencl", "cuda", "mlir") and options.get("precision", "f32") != "f32":
        raise TensorforgeError(f"precision='{options['precision']}' has CPU kernels only (VNNI, AVX512_BF16); "
                               f"compile for target='cpu', or leave precision at 'f32' on {target}")
    if _is_jax_function(model):
        from .frontends.stablehlo.jax_bridge import compile_jax
        return compile_jax(model, example_inputs, lambda module: compile(
            module, None, target=target, threads=threads, passes=passes, db=db, **options))
    model = _with_precision(model, example_inputs, options)
    from . import specialize
    max_specializations = options.pop("max_specializations", None)
    if options.pop("onnx_structured_io", True) and _is_onnx_model(model):
        from .frontends.onnx_structured import compile_structured   # sequence/optional inputs or outputs
        structured = compile_structured(model, target=target, threads=threads, passes=passes, db=db, shapes=shapes,
                                        example_inputs=example_inputs, dim_ranges=dim_ranges,
                                        shape_hints=shape_hints, max_specializations=max_specializations,
                                        onnx_structured_io=False, **options)
        if structured is not None:
            return structured

    def per_shape(error: TensorforgeError) -> CompiledModel:
        """The specialising model (one compile per distinct shape or shape-valued input), or ``error``."""
        cm = specialize.compile_specializing(model, error, example_inputs=example_inputs, shapes=shapes,
                                             dim_ranges=dim_ranges, shape_hints=shape_hints, target=target,
                                             threads=threads, passes=passes, db=db,
                                             max_specializations=max_specializations, **options)
        if cm is None:
            raise error
        return cm

    error = None
    try:
        module = import_model(model, example_inputs, shapes, dynamic_shapes, dim_ranges, shape_hints)
        if target != "interpreter" and not _has_symbol_table(module):    # symbols with ranges compile dynamic
            from .frontends.onnx_ops.bindings import check_static_inputs
            check_static_inputs([(a.name_hint or f"arg{a.index}", a.type) for a in module.main.args])
    except TensorforgeError as e:
        error = e
    if error is not None or specialize.needs_onnx_io(model, module):
        return per_shape(error)
    symbolic_onnx = _is_onnx_model(model) and any(isinstance(d, str) for a in module.main.args for d in a.type.shape)
    try:
        return _compile_module(module, model, target, threads, passes, db, options)
    except TensorforgeError as e:
        from .errors import CompileError, TuningDatabaseError
        if not symbolic_onnx or isinstance(e, (CompileError, TuningDatabaseError)):
            raise                  # not about the symbols: the C compiler, the database
        error = e                  # the symbolic model does not compile: per-shape fallback (with a warning)
    return per_shape(error)


def _compile_module(module: ModuleOp, model: Any, target: str, threads: int | None, passes: Any, db: Any,
                    options: dict) -> CompiledModel:
    """Verifies, optimises and compiles an imported module (``model`` is what the user passed)."""
    verify(module)
    if passes is not False and passes != "":
        from .passes.pipeline import optimize
        module = module.clone() if module is model else module
        optimize(module, target, passes)
        verify(module)
    if target == "interpreter":
        return CompiledModel(module, target="interpreter")
    from .runtime.control_flow import ControlFlowModel, has_control_flow
    if target in ("opencl", "cuda", "mlir"):
        if has_control_flow(module.main):
            raise TensorforgeError(f"models with control flow (If/Loop/Scan) have no {target} build yet; "
                                   f"compile with target='cpu'")
        from .codegen.driver import build
        native, source = build(module, target, db=db, **options)
        return CompiledModel(module, target=target, native=native, source=source)
    if has_control_flow(module.main):   # graph.if/loop/scan: native segments and bodies (docs/control_flow.md)
        def compile_part(part: ModuleOp):
            return _compile_module(part, None, target, threads, passes, db, options).run_numpy
        return CompiledModel(module, target=target, native=ControlFlowModel(module.main, compile_part, threads))
    from .codegen.c.build import build_native
    from .tune.apply import tuning_from_db
    native, source = build_native(module, threads=threads, tuning=tuning_from_db(db), **options)
    return CompiledModel(module, target=target, native=native, source=source)


def _has_symbol_table(module: ModuleOp) -> bool:
    """Whether the main function declares ranges for its symbolic dims (then it compiles dynamic)."""
    from .ir.symbolic import symbol_table_of
    return bool(symbol_table_of(module.main).ranges)


def _output_tree(module: ModuleOp | None):
    """The torch frontend's rebuild of a model's structured outputs, if it imported ``module``
    (looked up only when that frontend is loaded: a NumPy-only process never imports torch)."""
    frontend = sys.modules.get("tensorforge.frontends.torch")
    return frontend.output_tree(module) if frontend is not None and module is not None else None


def load(path: str | os.PathLike, threads: int | None = None, sha256: str | None = None) -> CompiledModel:
    """A model saved with ``CompiledModel.save``; needs neither torch nor onnx.

    Loading a ``.tfm`` runs native code from the file, as unpickling does: load only files you
    trust.  ``sha256`` pins the file you trust, e.g. ``load("model.tfm", sha256="9f86d0...")``
    with the 64 hex digits ``sha256sum model.tfm`` printed where you saved it; another file is
    an ``ArtifactError`` showing both digests.  Every member (library, C source, weights, graph)
    is checked against the manifest's SHA-256 before any code runs, so a damaged file is an
    ``ArtifactError`` naming the damaged member.

    If the saved library was built for another target, its saved C is compiled for this
    machine when a C compiler is present, else a ``TensorforgeError`` says what differs.
    """
    from .runtime.artifact import load as load_artifact
    native = load_artifact(path, threads=threads, sha256=sha256)
    return CompiledModel(None, target="cpu", native=native, source=native.source)
