"""The inputs and outputs of a compiled model as plain data: names, static shapes, element types.

A loaded artifact knows its model only through this (no IR, no frontend), and the call path
checks user arrays against it; error messages name the input by the name the frontend gave it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import TensorforgeError
from ..ir.types import DType, TensorType


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str                      # IR element type name, e.g. "f32"

    @property
    def np_dtype(self) -> np.dtype:
        return DType.parse(self.dtype).np

    @property
    def tensor_type(self) -> TensorType:
        return TensorType(self.shape, DType.parse(self.dtype))

    def describe(self) -> str:
        return f"'{self.name}' {self.np_dtype}{list(self.shape)}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "TensorSpec":
        return TensorSpec(str(data["name"]), tuple(int(d) for d in data["shape"]), str(data["dtype"]))

    @staticmethod
    def from_type(name: str, t: TensorType) -> "TensorSpec":
        if not t.is_static:
            raise TensorforgeError(f"'{name}' has the symbolic shape {t}; native models need static shapes")
        return TensorSpec(name, tuple(int(d) for d in t.shape), t.dtype.name)


def specs_from_values(values: Sequence, types: Sequence[TensorType], prefix: str) -> list[TensorSpec]:
    """Specs named by the values' name hints (made unique), else ``<prefix><i>``."""
    names: list[str] = []
    for i, v in enumerate(values):
        name = getattr(v, "name_hint", None) or f"{prefix}{i}"
        if name in names:
            name = f"{name}_{i}"
        names.append(name)
    return [TensorSpec.from_type(n, t) for n, t in zip(names, types)]
