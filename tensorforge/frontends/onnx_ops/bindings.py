"""The symbolic dimensions (``dim_param``) of a model's inputs: names, sizes, ranges, hints.

Exports with dynamic axes declare inputs such as ``input_ids: [batch, seq]`` and compute every
reshape target from ``Shape`` of a tensor.  A dim the user binds (example inputs, or
``shapes={"batch": 1}``) becomes that size at import, so the whole shape chain folds.  A dim
nobody binds stays a *symbol*: the importer turns the shape chain into symbolic attributes
(``onnx_ops/symbolic.py``) and records each symbol's range (``lo=1``, no maximum, unless
``dim_ranges={"batch": (1, 64)}`` or ``shapes={"batch": (1, 64)}`` say otherwise, or the model
itself limits it) and a hint for the cost models, so that one compile serves every size.

``dim_param`` strings are free text (``"batch size"``, ``"seq-len"``, ``"2*N"``); ``SymbolNames``
turns each into an identifier that ``tensorforge.ir.symbolic`` accepts (``batch_size``,
``seq_len``, ``_2_N``) and remembers the original, which ``shapes=``, ``dim_ranges=`` and
``shape_hints=`` accept as well.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ...errors import FrontendError
from ...ir.types import Dim, TensorType
from .errors import UnboundDimError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"min", "max"}          # would parse as functions in dim text

DEFAULT_HINT = 128
"""The hint of a symbol that does not look like a batch size (clamped into its range)."""

_NOT_BATCH = ("seq", "len", "token", "time", "step", "past", "height", "width", "pos", "ctx", "context",
              "cache", "frame", "sample", "word", "char", "dim", "hidden", "feature", "channel")


class SymbolNames:
    """``dim_param`` text -> symbol identifier (unique, stable for one model) and back."""

    def __init__(self):
        self.symbol_of: dict[str, str] = {}
        self.original: dict[str, str] = {}

    def symbol(self, text: str) -> str:
        sym = self.symbol_of.get(text)
        if sym is not None:
            return sym
        base = text if _IDENTIFIER.match(text) and text not in _RESERVED else _sanitize(text)
        sym, k = base, 2
        while sym in self.original:
            sym, k = f"{base}_{k}", k + 1
        self.symbol_of[text] = sym
        self.original[sym] = text
        return sym

    def lookup(self, key: str) -> str | None:
        """The symbol a user's key names (the original ``dim_param`` or the identifier)."""
        if key in self.symbol_of:
            return self.symbol_of[key]
        return key if key in self.original else None

    def display(self, sym: str) -> str:
        """``'seq_len' (dim_param 'seq-len')`` when the name changed, else ``'seq'``."""
        text = self.original.get(sym, sym)
        return f"'{sym}'" if text == sym else f"'{sym}' (dim_param '{text}')"


def _sanitize(text: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", text.strip()) or "dim"
    if not (out[0].isalpha() or out[0] == "_"):
        out = "_" + out
    return out + "_" if out in _RESERVED else out


Declared = Sequence[tuple[str, Sequence[Dim]]]
"""(input name, declared dims) per model data input, in order."""


def declared_dims(name: str, shape_proto, names: SymbolNames | None = None) -> tuple[Dim, ...]:
    """An ONNX ``TensorShapeProto`` as dims; an unnamed dynamic dim gets the name ``<input>_<axis>``;
    ``names`` turns every name into a symbol identifier (a fresh ``SymbolNames`` when None)."""
    names = names if names is not None else SymbolNames()
    dims: list[Dim] = []
    for i, d in enumerate(shape_proto.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(names.symbol(d.dim_param or f"{name}_{i}"))
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
              shapes: Mapping[str, int] | None = None, names: SymbolNames | None = None) -> dict[str, int]:
    """Symbol name -> size, from ``shapes`` and the shapes of ``example_inputs``; conflicts, wrong
    ranks, static dims that differ and names no input declares are FrontendErrors.  ``names``
    maps the keys of ``shapes`` (original ``dim_param`` text or symbol) to symbols."""
    sites = symbol_sites(declared)
    binding: dict[str, int] = {}
    origin: dict[str, str] = {}
    for key, size in (shapes or {}).items():
        dim = symbol_key(key, sites, names, "shapes")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise FrontendError(f"shapes['{key}'] = {size!r}: a size is a non-negative int "
                                f"(or a (min, max) range that keeps the dim symbolic)")
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


def symbol_key(key: str, sites: Mapping[str, Any], names: SymbolNames | None, what: str) -> str:
    """The symbol that a user's key (in ``shapes``, ``dim_ranges``, ``shape_hints``) names."""
    dim = names.lookup(key) if names is not None else key
    if dim is None or dim not in sites:
        known = ", ".join(f"'{names.original.get(s, s) if names else s}'" for s in sites) or "none"
        raise FrontendError(f"{what} names '{key}', which no model input declares "
                            f"(its symbolic dimensions: {known})")
    return dim


def split_shapes(shapes: Mapping[str, Any] | None, dim_ranges: Mapping[str, Any] | None
                 ) -> tuple[dict[str, int], dict[str, tuple[int, int | None]]]:
    """``shapes`` (sizes, or ``(min, max)`` ranges) and ``dim_ranges`` as sizes and ranges, each
    range checked (``max`` may be None: no maximum); keys as the user wrote them."""
    sizes: dict[str, int] = {}
    ranges: dict[str, tuple[int, int | None]] = {}
    for what, mapping in (("shapes", shapes or {}), ("dim_ranges", dim_ranges or {})):
        for key, value in mapping.items():
            if isinstance(value, (tuple, list)):
                ranges[key] = _check_range(what, key, value)
            elif what == "dim_ranges":
                raise FrontendError(f"dim_ranges['{key}'] = {value!r}: a range is a (min, max) pair, "
                                    f"e.g. dim_ranges={{'{key}': (1, 64)}} (max None: no maximum)")
            else:
                sizes[key] = value
    both = sorted(set(sizes) & set(ranges))
    if both:
        raise FrontendError(f"'{both[0]}' is given both a size and a range; give one")
    return sizes, ranges


def _check_range(what: str, key: str, value: Sequence) -> tuple[int, int | None]:
    ok = len(value) == 2 and all(v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool))
                                 for v in value) and value[0] is not None
    lo, hi = (value[0], value[1]) if ok else (None, None)
    if not ok or lo < 1 or (hi is not None and hi < lo):
        raise FrontendError(f"{what}['{key}'] = {tuple(value)!r}: a range is (min, max) with 1 <= min <= max "
                            f"(max None: no maximum)")
    return int(lo), None if hi is None else int(hi)


def is_batch_like(original: str, sites: Sequence[tuple[str, int]]) -> bool:
    """Whether a symbol looks like a batch size: by its name, else by sitting at axis 0."""
    low = original.lower()
    if "batch" in low or low in ("n", "b", "bs", "bsz"):
        return True
    if any(word in low for word in _NOT_BATCH):
        return False
    return bool(sites) and all(axis == 0 for _, axis in sites)


def default_hint(lo: int, hi: int | None, batch_like: bool) -> int:
    """1 for a batch size, else ``DEFAULT_HINT``; clamped into ``lo..hi``."""
    want = 1 if batch_like else DEFAULT_HINT
    want = max(lo, want)
    return want if hi is None else min(hi, want)


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


__all__ = ["DEFAULT_HINT", "SymbolNames", "bind_dims", "check_static_inputs", "declared_dims", "default_hint",
           "how_to_bind", "is_batch_like", "specialize", "split_shapes", "symbol_key", "symbol_sites", "unbound_error"]
