"""Aligned host buffers for the arena and the weight blob (the generated code assumes 64 bytes)."""
from __future__ import annotations

import numpy as np

ALIGN = 64


def aligned_empty(nbytes: int, align: int = ALIGN) -> np.ndarray:
    """An uninitialised uint8 array of ``nbytes`` whose first byte is ``align``-aligned."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


def is_aligned(array: np.ndarray, align: int = ALIGN) -> bool:
    return array.ctypes.data % align == 0
