"""One loader for the MODEL argument of every command: a zoo name, an ``.onnx`` path, a StableHLO
``.mlir`` file or a ``.tfm`` file.

    lm = load_model("resnet18", batch=2)          # or "model.onnx", or "model.tfm"
    cm = lm.compile(threads=2)                    # a tensorforge.CompiledModel
    outs = cm.run(*lm.inputs)
    refs = lm.reference(lm.inputs)                # torch (zoo), onnxruntime (.onnx), None (.tfm)

Commands share this so that ``bench``, ``compile``, ``run``, ``explain`` and ``tune`` accept
the same spellings and fail with the same messages.  Example inputs are deterministic: the zoo's
own (fixed seed), or for ONNX models generated from the declared input types with ``seed``.
An ONNX model with symbolic dimensions needs their values (``shapes={"N": 1}``, the CLI's
``--shape N=1``); ``batch`` fixes a symbolic *leading* dimension when ``shapes`` does not name it.

A range (``ranges={"batch": (1, 64)}``, the CLI's ``--shape batch=1..64``) keeps a dimension
symbolic instead: the model compiles once for every size in the range (ONNX: the ``dim_param``
of that name; zoo models: ``batch`` is axis 0 and ``seq`` axis 1 of every input).  The example
inputs then use a size inside the range (``--batch``/the zoo's own, else the range's hint).  A
.tfm model with symbolic dims gets example inputs at ``shapes``' sizes, else at each symbol's hint.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import TensorforgeError

__all__ = ["LoadedModel", "load_model", "model_kind", "onnxruntime_session", "parse_shape_specs", "parse_shapes",
           "random_inputs", "torch_outputs"]

ZOO_AXES = {"batch": 0, "seq": 1}     # the dims a zoo model's --shape ranges may name, and their axes

Reference = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


@dataclass
class LoadedModel:
    """A model named on the command line, with example inputs and (where there is one) a reference.

    ``model`` is a ``torch.nn.Module`` (zoo), an ``onnx.ModelProto`` (onnx) or an already
    compiled ``tensorforge.CompiledModel`` (tfm).  ``inputs`` are NumPy arrays in the model's
    input order; ``torch_inputs`` are the same values as tensors for zoo models (None otherwise).
    ``input_shapes`` holds the static shape chosen for every ONNX input (passed to the importer).
    """

    name: str
    kind: str                                   # "zoo" | "onnx" | "stablehlo" | "tfm"
    model: Any
    inputs: list[np.ndarray]
    reference: Reference | None = None
    torch_inputs: tuple | None = None
    input_names: list[str] = field(default_factory=list)
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    path: str | None = None
    reference_note: str = ""                    # why there is no reference, when there is none
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)   # dims compiled dynamic

    @property
    def reference_name(self) -> str | None:
        """What ``reference`` runs: "torch", "onnxruntime" or None."""
        if self.reference is None:
            return None
        return "torch" if self.kind == "zoo" else "onnxruntime"

    def import_module(self):
        """The graph-level module before optimisation (zoo and onnx only)."""
        if self.kind == "zoo":
            import warnings
            from ..frontends.torch import import_torch
            with warnings.catch_warnings():      # torch.export's notices about its own internals
                warnings.simplefilter("ignore", FutureWarning)
                if self.ranges:
                    from ..frontends.torch_symbolic import import_torch_dynamic
                    return import_torch_dynamic(self.model, self.torch_inputs, self._torch_dynamic_shapes())
                return import_torch(self.model, self.torch_inputs)
        if self.kind == "onnx":
            from ..frontends.onnx import import_onnx
            return import_onnx(self.model, input_shapes=self.input_shapes, dim_ranges=self.ranges,
                               shape_hints=self._example_sizes())
        if self.kind == "stablehlo":
            from ..frontends.stablehlo import import_stablehlo
            return import_stablehlo(self.path)
        from ..runtime.artifact import read_graph
        text = read_graph(self.path) if self.path else None
        if text is None:
            raise TensorforgeError(f"'{self.name}' was saved without its graph (compile --no-graph); "
                                   f"pass the zoo name or .onnx file it was compiled from")
        from ..ir.parser import parse_module
        return parse_module(text, source=self.path)

    def _example_sizes(self) -> dict[str, int]:
        """The size each ranged ONNX dim has in the example inputs (the hint kernels are tuned for)."""
        sizes: dict[str, int] = {}
        for name, x in zip(self.input_names, self.inputs):
            for d, n in zip(self.input_shapes.get(name, ()), np.shape(x)):
                if isinstance(d, str) and d in self.ranges:
                    sizes.setdefault(d, int(n))
        return sizes

    def _torch_dynamic_shapes(self) -> tuple:
        """torch.export's ``dynamic_shapes`` for the ranges: ``batch`` on axis 0, ``seq`` on axis 1."""
        from torch.export import Dim
        dims = {n: Dim(n, min=lo, max=hi) for n, (lo, hi) in self.ranges.items()}
        return tuple({ZOO_AXES[n]: d for n, d in dims.items() if ZOO_AXES[n] < t.dim()} or None
                     for t in self.torch_inputs)

    def compile(self, threads: int | None = None, **options: Any):
        """A native ``CompiledModel`` (a .tfm file is loaded, not recompiled; ``options`` then ignored)."""
        import tensorforge
        if self.kind == "tfm":
            cm = self.model
            if threads is not None:
                cm.set_threads(threads)
            return cm
        return tensorforge.compile(self.import_module(), threads=threads, **options)


def model_kind(spec: str) -> str:
    """"tfm", "onnx", "stablehlo" (``.mlir``) or "zoo" for a MODEL argument, by its suffix (else: a zoo name)."""
    low = spec.lower()
    if low.endswith(".tfm"):
        return "tfm"
    if low.endswith(".onnx"):
        return "onnx"
    if low.endswith(".mlir"):
        return "stablehlo"
    return "zoo"


def parse_shapes(items: Sequence[str] | None) -> dict[str, int]:
    """``["N=1", "seq=128"]`` (the CLI's repeated ``--shape``) as ``{"N": 1, "seq": 128}``."""
    shapes: dict[str, int] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if ".." in value:
            raise TensorforgeError(f"--shape '{item}': a range compiles the dim dynamic, which only "
                                   f"`tensorforge compile` does; here give one size, e.g. --shape {name.strip()}=4")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name.strip()] = int(value)
        except ValueError:
            raise TensorforgeError(f"--shape '{item}': expected NAME=VALUE with an integer value, "
                                   f"e.g. --shape batch=1") from None
        if shapes[name.strip()] < 1:
            raise TensorforgeError(f"--shape '{item}': the value must be at least 1")
    return shapes


def parse_shape_specs(items: Sequence[str] | None) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """``["N=1", "batch=1..64"]`` as sizes ``{"N": 1}`` and ranges ``{"batch": (1, 64)}``: a
    range keeps the dim symbolic (compile once for all its sizes), a size binds it."""
    sizes: dict[str, int] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        lo, dots, hi = value.partition("..")
        if not dots:
            sizes.update(parse_shapes([item]))
            continue
        try:
            if not sep or not name.strip():
                raise ValueError
            bounds = (int(lo), int(hi))
        except ValueError:
            raise TensorforgeError(f"--shape '{item}': expected NAME=MIN..MAX with integer bounds, "
                                   f"e.g. --shape batch=1..64") from None
        if not 1 <= bounds[0] <= bounds[1]:
            raise TensorforgeError(f"--shape '{item}': the range needs 1 <= MIN <= MAX")
        ranges[name.strip()] = bounds
    return sizes, ranges


def load_model(spec: str, batch: int | None = None, shapes: Mapping[str, int] | None = None,
               seed: int = 0, threads: int | None = None,
               ranges: Mapping[str, tuple[int, int]] | None = None) -> LoadedModel:
    """Loads MODEL ``spec``; every failure a user can cause is a ``TensorforgeError`` saying what to do.

    ``batch`` is the zoo batch size (or the value of a symbolic leading ONNX dimension);
    ``shapes`` gives values for named symbolic ONNX dimensions (and the sizes of a dynamic .tfm
    model's example inputs); ``ranges`` keeps dims symbolic over ``(min, max)`` (see the module
    docstring); ``seed`` drives generated ONNX inputs; ``threads`` is used by the onnxruntime
    reference and a loaded .tfm model.
    """
    kind = model_kind(spec)
    ranges = dict(ranges or {})
    if kind == "tfm":
        if ranges:
            raise TensorforgeError(f"--shape {next(iter(ranges))}=MIN..MAX: '{spec}' is already compiled; ranges "
                                   f"are for `tensorforge compile` (give a size inside its range, e.g. "
                                   f"--shape {next(iter(ranges))}=N)")
        return _load_tfm(spec, threads, seed, batch, dict(shapes or {}))
    if kind == "onnx":
        return _load_onnx(spec, batch, dict(shapes or {}), seed, threads, ranges)
    if kind == "stablehlo":
        if ranges or shapes or batch is not None:
            raise TensorforgeError(f"'{spec}' is StableHLO, whose shapes are static: --batch and --shape do not apply")
        return _load_stablehlo(spec, seed)
    return _load_zoo(spec, batch, ranges)


def random_inputs(specs: Sequence[tuple[tuple[int, ...], np.dtype]], seed: int = 0) -> list[np.ndarray]:
    """Deterministic inputs for ``(shape, dtype)`` pairs: floats ~ N(0, 1), integers in [0, 2), bools.

    Integers stay in [0, 2) because they are usually token ids, type ids or masks, and 0 and 1
    are valid for every vocabulary.
    """
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind in "iu":
            out.append(rng.integers(0, 2, size=shape).astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            raise TensorforgeError(f"cannot generate example inputs of type {dtype}; pass --inputs files")
    return out


# -- zoo ---------------------------------------------------------------------------------------

def _load_zoo(name: str, batch: int | None, ranges: dict[str, tuple[int, int]] | None = None) -> LoadedModel:
    from .. import models
    ranges = ranges or {}
    unknown = sorted(set(ranges) - set(ZOO_AXES))
    if unknown:
        raise TensorforgeError(f"--shape {unknown[0]}=MIN..MAX: a zoo model's dynamic dims are named "
                               f"{' and '.join(ZOO_AXES)} (axis 0 and 1 of its inputs)")
    if "batch" in ranges and batch is None:
        lo, hi = ranges["batch"]
        batch = min(hi, max(lo, 8))       # the example (and the hint kernels are scheduled for)
    if name not in models.names():
        hint = " (a file path must end in .onnx or .tfm)" if os.sep in name or "." in name else ""
        raise TensorforgeError(f"unknown model '{name}'{hint}: give a zoo name (see `tensorforge zoo`), "
                               f"an .onnx file or a .tfm file")
    try:
        import torch
    except ImportError:
        raise TensorforgeError(f"zoo model '{name}' needs PyTorch: pip install 'tensorforge[torch]'") from None
    module, torch_inputs = models.get(name, batch)
    inputs = [t.numpy() for t in torch_inputs]

    def reference(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
        return [t.numpy() for t in torch_outputs(out)]

    _check_example_in_ranges(name, inputs, ranges)
    return LoadedModel(name, "zoo", module, inputs, reference, torch_inputs=tuple(torch_inputs),
                       input_names=[f"input{i}" for i in range(len(inputs))], ranges=dict(ranges))


def _check_example_in_ranges(name: str, inputs: Sequence[np.ndarray], ranges: Mapping[str, tuple[int, int]]) -> None:
    for dim, (lo, hi) in ranges.items():
        axis = ZOO_AXES[dim]
        sizes = {a.shape[axis] for a in inputs if a.ndim > axis}
        if not sizes:
            raise TensorforgeError(f"--shape {dim}={lo}..{hi}: no input of '{name}' has an axis {axis}")
        bad = sorted(v for v in sizes if not lo <= v <= hi)
        if bad:
            raise TensorforgeError(f"--shape {dim}={lo}..{hi}: the example inputs of '{name}' have {dim} {bad[0]}, "
                                   f"outside the range (choose another --batch or range)")


def torch_outputs(out) -> list:
    """A torch model's result (tensor, tuple, list or dict, nested) as a flat list of tensors."""
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in torch_outputs(o)]
    return [out.detach()]


# -- onnx --------------------------------------------------------------------------------------

def _load_onnx(path: str, batch: int | None, shapes: dict[str, int], seed: int,
               threads: int | None, ranges: dict[str, tuple[int, int]] | None = None) -> LoadedModel:
    from ..frontends.onnx import load_model as load_onnx
    if not os.path.isfile(path):
        raise TensorforgeError(f"cannot load '{path}': no such file")
    proto = load_onnx(path)
    import onnx
    inits = {t.name for t in proto.graph.initializer}
    data_inputs = [vi for vi in proto.graph.input if vi.name not in inits]
    ranges = ranges or {}
    unused = set(shapes) | set(ranges)
    input_shapes: dict[str, tuple] = {}
    specs = []
    for vi in data_inputs:
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise TensorforgeError(f"ONNX input '{vi.name}' of '{path}' has no declared shape; "
                                   f"this loader needs a rank and dimension names")
        dims, example = [], []
        for axis, d in enumerate(tt.shape.dim):
            if d.dim_param and d.dim_param in ranges and not (d.HasField("dim_value") and d.dim_value > 0):
                lo, hi = ranges[d.dim_param]
                dims.append(d.dim_param)       # stays symbolic: compiled for the whole range
                example.append(shapes.get(d.dim_param, batch if axis == 0 and batch else min(hi, max(lo, 8))))
                unused.discard(d.dim_param)
                continue
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif d.dim_param and d.dim_param in shapes:
                dims.append(shapes[d.dim_param])
                unused.discard(d.dim_param)
            elif axis == 0 and batch is not None:
                dims.append(int(batch))
            else:
                what = f"'{d.dim_param}'" if d.dim_param else "an unnamed dimension"
                fix = f"--shape {d.dim_param}=VALUE" if d.dim_param else "a model with named dims"
                if axis == 0:
                    fix += " (or --batch B)"
                if d.dim_param:
                    fix += f", or a range --shape {d.dim_param}=MIN..MAX to compile it dynamic"
                raise TensorforgeError(f"ONNX input '{vi.name}' of '{path}' has the symbolic dimension {what} "
                                       f"at axis {axis}: give its value with {fix}")
            example.append(dims[-1])
        input_shapes[vi.name] = tuple(dims)
        specs.append((tuple(example), onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)))
    if unused:
        raise TensorforgeError(f"--shape names {', '.join(sorted(unused))}, which no input of '{path}' has")
    inputs = random_inputs(specs, seed)
    names = [vi.name for vi in data_inputs]
    name = os.path.splitext(os.path.basename(path))[0]
    reference, note = _onnxruntime_reference(proto, names, threads)
    return LoadedModel(name, "onnx", proto, inputs, reference, input_names=names, input_shapes=input_shapes,
                       path=path, reference_note=note, ranges=dict(ranges))


def onnxruntime_session(model_bytes: bytes, threads: int | None = None):
    """An onnxruntime CPU session with all graph optimisations on ``threads`` intra-op threads
    (None when onnxruntime is not installed); ``bench`` times the same session kind."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _onnxruntime_reference(proto, names: list[str], threads: int | None) -> tuple[Reference | None, str]:
    """onnxruntime as the reference, or None and why not.  The session is made here, not on first
    use, so that a model onnxruntime cannot load (e.g. an IR version newer than it knows) is
    compiled and reported as unchecked instead of failing after the compile."""
    try:
        session = onnxruntime_session(proto.SerializeToString(), threads)
    except Exception as exc:  # onnxruntime raises its own exception types for models it rejects
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"onnxruntime cannot run this model ({reason})"
    if session is None:
        return None, "the reference (onnxruntime) is not installed"

    def reference(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(session.run(None, dict(zip(names, arrays))))

    return reference, ""


# -- tfm ---------------------------------------------------------------------------------------

def _load_stablehlo(path: str, seed: int) -> LoadedModel:
    """A StableHLO text file: random inputs of its entry function's types, no reference (the
    producer is not here to run it; bench a JAX function as FILE.py:FACTORY to get jax.jit)."""
    from ..frontends.stablehlo import import_stablehlo
    module = import_stablehlo(path)
    args = module.main.args
    inputs = random_inputs([(tuple(a.type.shape), a.type.dtype.np) for a in args], seed)
    name = os.path.splitext(os.path.basename(path))[0]
    return LoadedModel(name, "stablehlo", module, inputs, None, input_names=[f"arg{i}" for i in range(len(args))],
                       path=path, reference_note="a StableHLO file carries no runnable reference")


def _load_tfm(path: str, threads: int | None, seed: int, batch: int | None = None,
              shapes: Mapping[str, int] | None = None) -> LoadedModel:
    import tensorforge
    if not os.path.isfile(path):
        raise TensorforgeError(f"cannot load '{path}': no such file")
    cm = tensorforge.load(path, threads=threads)
    specs = cm.native.inputs
    concrete = example_shapes(specs, cm.symbols, shapes or {}, batch, path)
    inputs = random_inputs([(shape, s.np_dtype) for shape, s in zip(concrete, specs)], seed)
    name = os.path.splitext(os.path.basename(path))[0]
    return LoadedModel(name, "tfm", cm, inputs, None, input_names=[s.name for s in specs], path=path)


def example_shapes(specs, table, sizes: Mapping[str, int], batch: int | None = None,
                   what: str = "the model") -> list[tuple[int, ...]]:
    """Concrete input shapes for specs with symbolic dims: each symbol at ``sizes[name]``, else
    ``batch`` for the symbol of the first input's axis 0, else its hint; out-of-range sizes and
    names the model does not have are errors (the call would reject them anyway, less clearly)."""
    from ..ir.symbolic import evaluate_shape
    symbols = list(dict.fromkeys(s for spec in specs for s in spec.symbols))
    unknown = sorted(set(sizes) - set(symbols))
    if unknown:
        raise TensorforgeError(f"--shape {unknown[0]}: {what} has no dimension named {unknown[0]} "
                               f"(its symbols: {', '.join(symbols) or 'none, it is static'})")
    first = specs[0].shape[0] if specs and specs[0].shape else None
    env = {}
    for sym in symbols:
        r = table.get(sym)
        value = sizes.get(sym, batch if batch is not None and sym == first else r.representative)
        if not r.contains(value):
            raise TensorforgeError(f"--shape {sym}={value}: outside {sym}'s range {r.describe()}")
        env[sym] = value
    return [evaluate_shape(s.shape, env) for s in specs]


# -- command-line options ----------------------------------------------------------------------

MODEL_HELP = "a zoo name (see `tensorforge zoo`), an .onnx file, a StableHLO .mlir file or a compiled .tfm file"


def add_model_arguments(parser, nargs: str | None = None, default=None) -> None:
    """The MODEL argument and the options ``load_model`` takes, for every command alike."""
    if nargs is None:
        parser.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    else:
        parser.add_argument("models", metavar="MODEL", nargs=nargs, default=default, help=MODEL_HELP)
    parser.add_argument("--batch", type=int, default=None, metavar="B",
                        help="batch size of a zoo model (default: the model's), or the value of an ONNX "
                             "model's symbolic leading dimension")
    parser.add_argument("--shape", action="append", default=[], metavar="DIM=N|DIM=MIN..MAX",
                        help="value of a symbolic dimension, e.g. --shape seq=128; a range such as "
                             "--shape batch=1..64 (compile) keeps it dynamic over that range (repeatable)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the generated example inputs of .onnx/.tfm models (default 0)")


def add_db_argument(parser) -> None:
    """``--db``: the tuning database whose records a compile applies (``tensorforge tune`` fills it)."""
    parser.add_argument("--db", default="auto", metavar="PATH",
                        help="tuning database to apply when compiling (default: the default database "
                             "if it exists; 'none': untuned)")


def add_fast_math_argument(parser) -> None:
    """``--fast-math``: the opt-in of ``tensorforge.compile(..., fast_math=True)`` (docs/numerics.md)."""
    parser.add_argument("--fast-math", dest="fast_math", action="store_true",
                        help="compile with -ffast-math: faster on some models, but NaN and Inf are not "
                             "honoured and a NaN may come out as a number (default: IEEE semantics)")


def db_option(value: str | None):
    """The ``db=`` argument of ``tensorforge.compile`` for a ``--db`` value."""
    return None if value in (None, "none") else value
