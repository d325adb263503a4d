"""Calls a compiled model library: one native call per inference.

All pointers that do not change between runs (arena, weights, output buffers when reused) are
set up once; a call only writes the input and output addresses into two preallocated pointer
arrays, so the Python overhead is a few microseconds.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from ..errors import TensorforgeError
from ..ir.types import TensorType

_VOIDP_ARRAY = ctypes.c_void_p


def _aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


class NativeModel:
    """Owns the loaded library, the arena and the weights of one compiled model."""

    def __init__(self, lib: ctypes.CDLL, entry: str, input_types: Sequence[TensorType],
                 output_types: Sequence[TensorType], weights: np.ndarray, arena_bytes: int):
        self.lib = lib
        self.fn = getattr(lib, entry)
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.input_types = list(input_types)
        self.output_types = list(output_types)
        self.weights = _aligned_empty(max(len(weights), 64))
        self.weights[:len(weights)] = weights
        self.arena = _aligned_empty(max(arena_bytes, 64))
        self._in_ptrs = (ctypes.c_void_p * max(len(self.input_types), 1))()
        self._out_ptrs = (ctypes.c_void_p * max(len(self.output_types), 1))()
        self._np_dtypes = [t.dtype.np for t in self.input_types]
        self._shapes = [tuple(t.shape) for t in self.input_types]
        self._out_specs = [(tuple(t.shape), t.dtype.np) for t in self.output_types]
        self._arena_ptr = self.arena.ctypes.data
        self._weights_ptr = self.weights.ctypes.data
        self._in_addr = ctypes.addressof(self._in_ptrs)
        self._out_addr = ctypes.addressof(self._out_ptrs)

    def run(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray] | None = None
            ) -> list[np.ndarray]:
        if len(inputs) != len(self.input_types):
            raise TensorforgeError(f"the model takes {len(self.input_types)} inputs, got {len(inputs)}")
        keep = []
        for i, x in enumerate(inputs):
            dt, shape = self._np_dtypes[i], self._shapes[i]
            if type(x) is not np.ndarray or x.dtype != dt or not x.flags.c_contiguous:
                x = np.ascontiguousarray(x, dtype=dt)
            if x.shape != shape:
                raise TensorforgeError(f"input #{i} has shape {x.shape}, the model was compiled for {shape}")
            keep.append(x)
            self._in_ptrs[i] = x.ctypes.data
        if outputs is None:
            outputs = [np.empty(s, d) for s, d in self._out_specs]
        for j, o in enumerate(outputs):
            self._out_ptrs[j] = o.ctypes.data
        self.fn(self._in_addr, self._out_addr, self._arena_ptr, self._weights_ptr)
        return list(outputs)
