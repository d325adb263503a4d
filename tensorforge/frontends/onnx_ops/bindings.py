"""Values for the symbolic dimensions (``dim_param``) of a model's inputs.

Exports with dynamic axes declare inputs such as ``input_ids: [batch, seq]`` and compute every
reshape target from ``Shape`` of a tensor.  The design's answer (dims are ints or named symbols;
compile specialises) is to bind the symbols once, at import time: from the shapes of example
inputs or from ``shapes={"batch": 1, "seq": 128}``.  The importer then sees static inputs, so
``Shape``/``Size`` are constants and the whole shape chain folds while importing.  A symbol that
stays unbound where a concrete size is needed is an ``UnboundDimError`` that says how to bind it.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ...errors import FrontendError
from ...ir.types import Dim, TensorType
from .errors import UnboundDimError

Declared = Sequence[tuple[str, Sequence[Dim]]]
"""(input name, declared dims) per model data input, in order."""


def declared_dims(name: str, shape_proto) -> tuple[Dim, ...]:
    """An ONNX ``TensorShapeProto`` as dims; an unnamed dynamic dim gets the name ``<input>_<axis>``."""
    dims: list[Dim] = []
    for i, d in enumerate(shape_proto.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or f"{name}_{i}")
    return tuple(dims)


def symbol_sites(declared: Declared) -> dict[str, tuple[str, int]]:
    """Each symbolic dim name -> the first (input, axis) that declares it."""
    sites: dict[str, tuple[str, int]] = {}
    for name, dims in declared:
        for axis, d in enumerate(dims):
            if isinstance(d, str):
                sites.setdefault(d, (name, axis))
    return sites


def how_to_bind(dims: Iterable[str]) -> str:
    """The sentence every unbound-dim error ends with."""
    names = list(dict.fromkeys(dims))
    mapping = ", ".join(f"'{d}': N" for d in names)
    cli = " ".join(f"--shape {d}=N" for d in names)
    return (f"bind {'it' if len(names) == 1 else 'them'} with example inputs "
            f"(tensorforge.compile(model, example_inputs)) or shapes={{{mapping}}} (CLI: {cli})")


def unbound_error(what: str, dims: Sequence[tuple[str, int, str]]) -> UnboundDimError:
    """``what`` needs concrete sizes but depends on the symbolic ``dims`` ((input, axis, name) each)."""
    listed = " and ".join(f"'{d}' of input '{inp}' (axis {axis})" for inp, axis, d in dims)
    several = len({d for _, _, d in dims}) > 1
    return UnboundDimError(f"{what}, but the symbolic dimension{'s' if several else ''} {listed} "
                           f"{'are' if several else 'is'} unbound; {how_to_bind(d for _, _, d in dims)}", dims)


def _example_shapes(example_inputs: Any, declared: Declared) -> list[tuple[int, ...]]:
    """Shapes of example inputs given as a sequence (model input order) or a name -> array mapping."""
    names = [n for n, _ in declared]
    if isinstance(example_inputs, Mapping):
        unknown = sorted(set(example_inputs) - set(names))
        missing = [n for n in names if n not in example_inputs]
        if unknown or missing:
            raise FrontendError(f"example inputs name {unknown or 'no unknown inputs'} and miss {missing or 'none'}; "
                                f"the model's inputs are {', '.join(names)}")
        arrays = [example_inputs[n] for n in names]
    else:
        arrays = list(example_inputs)
        if len(arrays) != len(names):
            raise FrontendError(f"{len(arrays)} example inputs for a model with {len(names)} inputs "
                                f"({', '.join(names)})")
    return [tuple(int(d) for d in np.shape(a)) for a in arrays]


def bind_dims(declared: Declared, example_inputs: Any = None,
              shapes: Mapping[str, int] | None = None) -> dict[str, int]:
    """Symbol name -> size, from ``shapes`` and the shapes of ``example_inputs``; conflicts, wrong
    ranks, static dims that differ and names no input declares are FrontendErrors."""
    sites = symbol_sites(declared)
    binding: dict[str, int] = {}
    origin: dict[str, str] = {}
    for dim, size in (shapes or {}).items():
        if dim not in sites:
            known = ", ".join(f"'{s}'" for s in sites) or "none"
            raise FrontendError(f"shapes names '{dim}', which no model input declares "
                                f"(its symbolic dimensions: {known})")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise FrontendError(f"shapes['{dim}'] = {size!r}: a size is a non-negative int")
        binding[dim], origin[dim] = int(size), "shapes"
    if example_inputs is None:
        return binding
    for (name, dims), shape in zip(declared, _example_shapes(example_inputs, declared)):
        if len(shape) != len(dims):
            raise FrontendError(f"example input for '{name}' has rank {len(shape)} (shape {shape}); the model "
                                f"declares rank {len(dims)} ({list(dims)})")
        for axis, (d, size) in enumerate(zip(dims, shape)):
            if isinstance(d, int):
                if d != size:
                    raise FrontendError(f"example input for '{name}' has size {size} at axis {axis}, where the "
                                        f"model declares {d} (shape {shape} vs {list(dims)})")
            elif binding.setdefault(d, size) != size:
                raise FrontendError(f"example input for '{name}' gives the symbolic dimension '{d}' (axis {axis}) "
                                    f"the size {size}, but {origin[d]} gave it {binding[d]}")
            else:
                origin.setdefault(d, f"the example input for '{name}'")
    return binding


def specialize(dims: Sequence[Dim], binding: Mapping[str, int]) -> tuple[Dim, ...]:
    """``dims`` with every bound symbol replaced by its size."""
    return tuple(binding.get(d, d) if isinstance(d, str) else d for d in dims)


def check_static_inputs(args: Sequence[tuple[str, TensorType]],
                        what: str = "native code needs concrete input sizes") -> None:
    """Raises ``UnboundDimError`` when an input (name, type) still has a symbolic dim: ``what`` needs
    every size (the C target plans memory and loops statically)."""
    dims = [(name, axis, d) for name, t in args for axis, d in enumerate(getattr(t, "shape", ())) if isinstance(d, str)]
    if dims:
        raise unbound_error(what, dims)


__all__ = ["bind_dims", "check_static_inputs", "declared_dims", "how_to_bind", "specialize", "symbol_sites",
           "unbound_error"]
