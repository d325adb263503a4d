"""A model built by the upstream-MLIR backend, called through MLIR's C interface.

The library exports ``_mlir_ciface_main``, which ``{llvm.emit_c_interface}`` generates: it takes
one pointer per memref argument (the weight blob, when the model was built with its weights as an
argument, then the model's inputs, then its outputs) to a descriptor
``{allocated ptr, aligned ptr, int64 offset, int64 sizes[rank], int64 strides[rank]}`` (a rank-0
memref has no sizes or strides) and returns nothing. This module builds those descriptors with
ctypes over NumPy memory: inputs are checked against the model's signature and made contiguous,
outputs are allocated here, and every array is held by the call until the function returns.

The call interface is ``GpuModel``'s (``run(inputs) -> list``, ``model(*inputs)``, ``.inputs``,
``.outputs``, ``.source``, ``.build``): NumPy in, NumPy out; CPU torch tensors in, torch out
(torch is never imported here, only used when the caller passed a tensor).
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import CompileError, TensorforgeError
from ..ir.symbolic import SymbolTable
from .native import loaded_torch
from .signature import TensorSpec, host_inputs

ENTRY = "_mlir_ciface_main"
_descriptor_types: dict[int, type] = {}


def descriptor_type(rank: int) -> type:
    """The ctypes struct of a rank-``rank`` memref descriptor (one class per rank, reused)."""
    cls = _descriptor_types.get(rank)
    if cls is None:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        cls = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
        _descriptor_types[rank] = cls
    return cls


def descriptor(array: np.ndarray) -> ctypes.Structure:
    """A descriptor of the C-contiguous ``array`` (identity layout, strides in elements)."""
    desc = descriptor_type(array.ndim)()
    desc.allocated = desc.aligned = array.ctypes.data
    desc.offset = 0
    if array.ndim:
        desc.sizes[:] = array.shape
        desc.strides[:] = [int(np.prod(array.shape[i + 1:], dtype=np.int64)) for i in range(array.ndim)]
    return desc


def require_static(specs: Sequence[TensorSpec]) -> None:
    """A ``TensorforgeError`` (not a ``CompileError``: ``compile`` then falls back to one build per
    shape for a symbolic ONNX model) when a tensor has a symbolic dim: memref types here are static."""
    for spec in specs:
        if not spec.is_static:
            raise TensorforgeError(f"target='mlir' compiles static shapes only; {spec.describe()} is symbolic: "
                                   f"pass example inputs (or shapes=) to fix its size, or compile with target='cpu'")


class MlirModel:
    """The loaded library of one model and its signature; ``build`` holds the compile times."""

    def __init__(self, library: Path, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], source: str,
                 build: dict[str, Any] | None = None, weights: np.ndarray | None = None):
        require_static((*inputs, *outputs))
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.symbols = SymbolTable()
        self.source = source
        self.library = Path(library)
        self.build = dict(build or {})
        self.weights = weights           # uint8 blob passed first on every call (None: compiled in)
        self._weights_desc = [descriptor(weights)] if weights is not None else []
        try:
            self._lib = ctypes.CDLL(str(self.library))
            self._entry = getattr(self._lib, ENTRY)
        except (OSError, AttributeError) as exc:
            raise CompileError(f"cannot load {ENTRY} from {self.library} ({exc}); delete that file to rebuild it") \
                from exc
        self._entry.restype = None
        self._entry.argtypes = [ctypes.POINTER(descriptor_type(1))] * len(self._weights_desc) + [
            ctypes.POINTER(descriptor_type(len(s.shape))) for s in (*self.inputs, *self.outputs)]
        # The generated code may keep state in globals; one call at a time keeps that safe.
        self._call_lock = threading.Lock()

    def run(self, inputs: Sequence[Any], out: Sequence[Any] | None = None) -> list:
        """The outputs for ``inputs`` (NumPy arrays or torch tensors); torch in, torch out."""
        if out is not None:
            raise TensorforgeError("out= is supported on target='cpu' only; target='mlir' returns new arrays")
        arrays, as_torch = self._host_inputs(inputs)
        outs = [np.empty(tuple(s.shape), s.np_dtype) for s in self.outputs]
        descriptors = self._weights_desc + [descriptor(a) for a in (*arrays, *outs)]
        with self._call_lock:
            self._entry(*(ctypes.byref(d) for d in descriptors))
        if as_torch:
            from_numpy = loaded_torch().from_numpy
            return [from_numpy(o) for o in outs]
        return outs

    def __call__(self, *inputs):
        outs = self.run(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _host_inputs(self, inputs: Sequence[Any]) -> tuple[list[np.ndarray], bool]:
        return host_inputs(self.inputs, inputs)
