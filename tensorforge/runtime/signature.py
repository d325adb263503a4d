"""The inputs and outputs of a compiled model as plain data: names, shapes, element types.

A loaded artifact knows its model only through this (no IR, no frontend), and the call path
checks user arrays against it; error messages name the input by the name the frontend gave it.
A dim is an int or a symbolic expression string (``"batch"``, ``"2*seq"``) over the model's
symbols, whose ranges the model's ``SymbolTable`` holds (``describe_signature`` prints both).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import TensorforgeError
from ..ir.symbolic import Dim, SymbolTable, canonical, shape_symbols
from ..ir.types import DType, TensorType


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[Dim, ...]          # ints, or canonical dim expressions for symbolic axes
    dtype: str                      # IR element type name, e.g. "f32"

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def symbols(self) -> list[str]:
        """The symbols of this spec's shape in order of first appearance."""
        return shape_symbols(self.shape)

    @property
    def shape_text(self) -> str:
        """``[batch, 3, 224, 224]``: symbolic dims by name (``list(shape)`` would quote them)."""
        return "[" + ", ".join(str(d) for d in self.shape) + "]"

    def signature(self) -> str:
        """``x: f32[batch, 3, 224, 224]`` (the IR's element type names)."""
        return f"{self.name}: {self.dtype}{self.shape_text}"

    @property
    def np_dtype(self) -> np.dtype:
        return DType.parse(self.dtype).np

    @property
    def tensor_type(self) -> TensorType:
        return TensorType(self.shape, DType.parse(self.dtype))

    def describe(self) -> str:
        return f"'{self.name}' {self.np_dtype}{self.shape_text}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "TensorSpec":
        return TensorSpec(str(data["name"]), tuple(_dim_from_json(d) for d in data["shape"]), str(data["dtype"]))

    @staticmethod
    def from_type(name: str, t: TensorType) -> "TensorSpec":
        return TensorSpec(name, tuple(d if isinstance(d, str) else int(d) for d in t.shape), t.dtype.name)


def _dim_from_json(d: Any) -> Dim:
    if isinstance(d, str):
        return canonical(d)
    return int(d)


def describe_signature(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                       table: SymbolTable | None = None) -> str:
    """The model's signature for people, one line per tensor, each symbol's range after the first
    tensor that uses it::

        inputs:
          x: f32[batch, 3, 224, 224]  batch in 1..64
        outputs:
          y: f32[batch, 1000]
    """
    table = table or SymbolTable()
    shown: set[str] = set()
    lines: list[str] = []
    for title, specs in (("inputs", inputs), ("outputs", outputs)):
        lines.append(f"{title}:")
        for s in specs:
            new = [n for n in s.symbols if n not in shown]
            shown.update(new)
            ranges = "  ".join(f"{n} in {table.get(n).describe()}" for n in new)
            lines.append(f"  {s.signature()}" + (f"  {ranges}" if ranges else ""))
    return "\n".join(lines)


def specs_from_values(values: Sequence, types: Sequence[TensorType], prefix: str) -> list[TensorSpec]:
    """Specs named by the values' name hints (made unique), else ``<prefix><i>``."""
    names: list[str] = []
    for i, v in enumerate(values):
        name = getattr(v, "name_hint", None) or f"{prefix}{i}"
        if name in names:
            name = f"{name}_{i}"
        names.append(name)
    return [TensorSpec.from_type(n, t) for n, t in zip(names, types)]


def as_array(x: Any, spec: TensorSpec, what: str) -> np.ndarray:
    """``x`` (a NumPy array, or anything NumPy converts) as an array of ``spec``'s dtype: an array
    of another dtype is an error saying how to convert it (no silent cast), other objects convert."""
    from ..errors import TensorforgeError
    if isinstance(x, np.ndarray):
        if x.dtype != spec.np_dtype:
            raise TensorforgeError(f"{what}: got dtype {x.dtype}; convert it with .astype(np.{spec.np_dtype})")
        return x
    try:
        return np.asarray(x, dtype=spec.np_dtype)
    except (TypeError, ValueError) as exc:
        raise TensorforgeError(f"{what}: cannot convert a {type(x).__name__} to an array ({exc})") from None


def host_array(x: Any, spec: TensorSpec, what: str) -> np.ndarray:
    """``x`` as a C-contiguous array of a static ``spec``'s dtype and shape (``as_array`` plus the
    shape check), or an error naming ``what``."""
    from ..errors import InputShapeError
    x = as_array(x, spec, what)
    if tuple(x.shape) != tuple(spec.shape):
        raise InputShapeError(f"{what}: got shape {list(x.shape)}; the model was compiled for {list(spec.shape)}")
    return np.require(x, requirements="C")      # (np.ascontiguousarray would make a 0-d array 1-d)


def cpu_torch_array(t: Any, spec: TensorSpec, what: str) -> np.ndarray:
    """A CPU torch tensor's memory as a NumPy array (no copy), after checking dtype and device."""
    import torch
    want = getattr(torch, spec.np_dtype.name)
    if t.dtype != want:
        raise TensorforgeError(f"{what}: got {t.dtype}; convert it with .to({want})")
    if t.device.type != "cpu":
        raise TensorforgeError(f"{what}: the tensor is on {t.device}; move it with .cpu()")
    return t.detach().numpy()


def host_inputs(specs: Sequence[TensorSpec], inputs: Sequence[Any]) -> tuple[list[np.ndarray], bool]:
    """A model's inputs as checked C-contiguous host arrays (CPU torch tensors without a copy), and
    whether any was a torch tensor: what the runtimes that take host memory (OpenCL, MLIR) share."""
    if len(inputs) != len(specs):
        names = ", ".join(s.name for s in specs)
        raise TensorforgeError(f"the model takes {len(specs)} input(s) ({names}), got {len(inputs)}")
    arrays, as_torch = [], False
    for i, (spec, x) in enumerate(zip(specs, inputs)):
        what = f"input #{i} {spec.describe()}"
        is_torch = type(x).__module__.startswith("torch")
        arrays.append(host_array(cpu_torch_array(x, spec, what) if is_torch else x, spec, what))
        as_torch |= is_torch
    return arrays, as_torch
