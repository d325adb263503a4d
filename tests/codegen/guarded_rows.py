"""An (M, K) array that ends right before a PROT_NONE page: a kernel that reads one element past
the last row crashes instead of passing by luck (the int8 and bf16 GEMM tests)."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np


class GuardedRows:
    """``with GuardedRows(M, K, dtype) as a``: ``a``'s last element is the last readable one."""

    def __init__(self, M: int, K: int, dtype=np.uint8):
        self.shape, self.dtype = (M, K), np.dtype(dtype)
        page = mmap.PAGESIZE
        self.size = -(-(M * K * self.dtype.itemsize) // page) * page + page
        self.map = mmap.mmap(-1, self.size, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def __enter__(self) -> np.ndarray:
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        guard = base + self.size - mmap.PAGESIZE
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        assert libc.mprotect(guard, mmap.PAGESIZE, 0) == 0, ctypes.get_errno()
        self.guard = (libc, guard)
        n = self.shape[0] * self.shape[1]
        offset = self.size - mmap.PAGESIZE - n * self.dtype.itemsize
        return np.frombuffer(self.map, self.dtype, n, offset=offset).reshape(self.shape)

    def __exit__(self, *exc) -> None:
        libc, guard = self.guard
        libc.mprotect(guard, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE)
