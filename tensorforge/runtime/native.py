"""Calls a compiled model library: one native call per inference.

Everything that does not change between runs (arena, weights, the two pointer arrays handed to
``tf_run``) is set up once.  A call checks each input against the model's signature, writes its
address into the preallocated input pointer array, allocates (or takes) the outputs and makes
one ctypes call; the GIL is released while the kernels run.  NumPy arrays and torch tensors are
both accepted without copies when they already have the right dtype, shape and layout; torch in
gives torch out (sharing memory with the NumPy result).

A model's arena holds the intermediates of the run in progress, so calls of one model from
several threads take turns (a lock); separate model objects run in parallel.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import TensorforgeError
from .buffers import aligned_empty, is_aligned
from .signature import TensorSpec

# The C ABI of a model library (codegen/c/model.py emits it).
ENTRY = "tf_run"                  # void tf_run(void* const* in, void* const* out, char* arena, const char* w)
SET_THREADS = "tf_set_num_threads"
GET_THREADS = "tf_get_num_threads"
PROFILE = "tf_profile"            # double[PROFILE_COUNT]: seconds per kernel call site (profiling builds only)
PROFILE_COUNT = "tf_profile_count"

_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof
_ndarray = np.ndarray

_libs_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}
# Threads last set in each loaded library (by dlopen handle). Two models built from the same C
# share one library and so one setting; each call re-applies its own when they differ.
_lib_threads: dict[int, int] = {}


def default_threads() -> int:
    """All cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def load_library(path: str | os.PathLike) -> ctypes.CDLL:
    """dlopen ``path`` once per process."""
    key = os.path.realpath(path)
    with _libs_lock:
        lib = _libs.get(key)
        if lib is None:
            try:
                lib = ctypes.CDLL(key)
            except OSError as exc:
                raise TensorforgeError(f"cannot load the model library {path}: {exc}") from exc
            _libs[key] = lib
    return lib


def _address(x: np.ndarray) -> int:
    """Data address of a C-contiguous array: the buffer protocol is ~5x faster than ``x.ctypes``."""
    try:
        return _addressof(_from_buffer(x))
    except (TypeError, ValueError):       # read-only or empty
        return x.ctypes.data


_torch_tensor: type | None = None     # torch.Tensor once torch is imported (for the fast path)


def _torch():
    return sys.modules.get("torch")


def _is_torch_tensor(x: Any) -> bool:
    global _torch_tensor
    torch = _torch()
    if torch is None or not isinstance(x, torch.Tensor):
        return False
    _torch_tensor = torch.Tensor
    return True


class NativeModel:
    """Owns the loaded library, the arena and the weights of one compiled model.

    ``library_path``/``source``/``build`` say where the code came from; ``save`` writes them
    into an artifact (runtime/artifact.py).
    """

    def __init__(self, lib: ctypes.CDLL, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                 weights: np.ndarray, arena_bytes: int, threads: int | None = None,
                 library_path: Path | None = None, source: str | None = None,
                 build: dict[str, Any] | None = None):
        self.lib = lib
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.library_path = library_path
        self.source = source
        self.build = dict(build or {})        # target record, digest, origin ("compiled", "artifact", ...)
        self.arena_bytes = int(arena_bytes)
        self.fn = self._function(ENTRY, [ctypes.c_void_p] * 4, None)
        self._set_threads = self._function(SET_THREADS, [ctypes.c_int], None)
        self._get_threads = self._function(GET_THREADS, [], ctypes.c_int)
        if weights.dtype != np.uint8 or weights.ndim != 1 or not is_aligned(weights):
            blob = aligned_empty(max(weights.nbytes, 64))
            blob[:weights.nbytes] = np.ascontiguousarray(weights).reshape(-1).view(np.uint8)
            weights = blob
        self.weights = weights
        self.arena = aligned_empty(max(self.arena_bytes, 64))
        self._in_ptrs = (ctypes.c_void_p * max(len(self.inputs), 1))()
        self._out_ptrs = (ctypes.c_void_p * max(len(self.outputs), 1))()
        # ctypes objects, not ints: ctypes passes them without a per-call conversion
        self._call_args = tuple(ctypes.c_void_p(a) for a in (
            ctypes.addressof(self._in_ptrs), ctypes.addressof(self._out_ptrs),
            self.arena.ctypes.data, self.weights.ctypes.data))
        self._n_in = len(self.inputs)
        self._in_dtypes = [s.np_dtype for s in self.inputs]
        self._in_shapes = [s.shape for s in self.inputs]
        self._out_specs = [(s.shape, s.np_dtype) for s in self.outputs]
        self._in_torch_dtypes: list = [None] * self._n_in     # filled on the first torch input
        self._handle = lib._handle
        self._lock = threading.Lock()
        self._threads = 0
        self.set_threads(threads or default_threads())

    def _function(self, name: str, argtypes: list, restype):
        try:
            fn = getattr(self.lib, name)
        except AttributeError:
            raise TensorforgeError(f"the model library {self.library_path} has no '{name}': it was not built "
                                   f"by this tensorforge version; compile the model again") from None
        fn.argtypes, fn.restype = argtypes, restype
        return fn

    # ---- threads ---------------------------------------------------------------------
    @property
    def threads(self) -> int:
        return self._threads

    def set_threads(self, n: int) -> None:
        """Runs later calls on ``n`` OpenMP threads (``n`` >= 1)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise TensorforgeError(f"threads must be a positive integer, got {n!r}")
        self._threads = int(n)
        self._apply_threads()

    def _apply_threads(self) -> None:
        self._set_threads(self._threads)
        _lib_threads[self._handle] = self._threads

    def library_threads(self) -> int:
        """What the library will use on its next run (for tests and debugging)."""
        return int(self._get_threads())

    # ---- per-kernel profile (libraries built with profile=True) ------------------------
    def _profile_table(self):
        """The library's ``tf_profile`` array as ctypes, or None when it was built without timers."""
        try:
            n = ctypes.c_int.in_dll(self.lib, PROFILE_COUNT).value
        except ValueError:
            return None
        return (ctypes.c_double * n).in_dll(self.lib, PROFILE)

    def kernel_times(self) -> np.ndarray | None:
        """Seconds spent in each kernel call site (program order) summed over the runs since the
        last ``reset_kernel_times``; None when the library was not built with ``profile=True``.
        Models loaded from the same library share these counters."""
        table = self._profile_table()
        return None if table is None else np.array(table[:], dtype=np.float64)

    def reset_kernel_times(self) -> None:
        table = self._profile_table()
        if table is not None:
            ctypes.memset(table, 0, ctypes.sizeof(table))

    # ---- calls -----------------------------------------------------------------------
    def __call__(self, *inputs):
        outs = self.run(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, inputs: Sequence[Any], out: Sequence[Any] | None = None) -> list:
        """Runs the model on ``inputs`` (NumPy arrays or torch tensors, in signature order).

        Returns a list of NumPy arrays, or of torch tensors when an input was a torch tensor.
        With ``out`` (arrays or tensors of the outputs' shapes and dtypes), results are written
        there and ``out`` is returned as a list, so a loop allocates nothing.
        """
        if len(inputs) != self._n_in:
            names = ", ".join(s.name for s in self.inputs)
            raise TensorforgeError(f"the model takes {self._n_in} input(s) ({names}), got {len(inputs)}")
        with self._lock:
            return self._run_locked(inputs, out)

    def _run_locked(self, inputs: Sequence[Any], out: Sequence[Any] | None) -> list:
        ptrs = self._in_ptrs
        dtypes, shapes, tdtypes = self._in_dtypes, self._in_shapes, self._in_torch_dtypes
        held = None               # converted inputs that must stay alive during the call
        as_torch = False
        for i, x in enumerate(inputs):
            kind = type(x)
            if kind is _ndarray:
                if x.dtype == dtypes[i] and x.shape == shapes[i] and x.flags.c_contiguous:
                    ptrs[i] = _address(x)
                    continue
            elif kind is _torch_tensor:
                as_torch = True
                if x.dtype is tdtypes[i] and x.is_cpu and x.shape == shapes[i] and x.is_contiguous():
                    ptrs[i] = x.data_ptr()
                    continue
            ptr, keep, is_torch = self._slow_input(i, x)
            ptrs[i] = ptr
            as_torch |= is_torch
            if held is None:
                held = []
            held.append(keep)
        if out is None:
            outs = [np.empty(s, d) for s, d in self._out_specs]
            optrs = self._out_ptrs
            for j, o in enumerate(outs):
                optrs[j] = _address(o)
        else:
            outs = self._set_outputs(out)
        if _lib_threads.get(self._handle) != self._threads:
            self._apply_threads()
        self.fn(*self._call_args)
        if as_torch and out is None:
            from_numpy = _torch().from_numpy
            return [from_numpy(o) for o in outs]
        return outs

    def _slow_input(self, i: int, x: Any) -> tuple[int, Any, bool]:
        """(address, object to keep alive, is torch) for anything but an exact NumPy match."""
        spec = self.inputs[i]
        if _is_torch_tensor(x):
            if self._in_torch_dtypes[i] is None:
                self._in_torch_dtypes = [_torch_dtype(s) for s in self.inputs]
            return self._torch_address(spec, x, f"input #{i} {spec.describe()}") + (True,)
        if isinstance(x, _ndarray):
            if x.dtype != spec.np_dtype:
                raise TensorforgeError(f"input #{i} {spec.describe()}: got dtype {x.dtype}; "
                                       f"convert it with .astype(np.{spec.np_dtype})")
        else:
            try:
                x = np.asarray(x, dtype=spec.np_dtype)
            except (TypeError, ValueError) as exc:
                raise TensorforgeError(f"input #{i} {spec.describe()}: cannot convert a "
                                       f"{type(x).__name__} to an array ({exc})") from None
        if x.shape != spec.shape:
            raise TensorforgeError(f"input #{i} {spec.describe()}: got shape {list(x.shape)}; "
                                   f"the model was compiled for {list(spec.shape)}")
        x = np.ascontiguousarray(x)
        return _address(x), x, False

    def _torch_address(self, spec: TensorSpec, t, what: str) -> tuple[int, Any]:
        want = _torch_dtype(spec)
        if t.dtype != want:
            raise TensorforgeError(f"{what}: got {t.dtype}; convert it with .to({want})")
        if t.device.type != "cpu":
            raise TensorforgeError(f"{what}: the tensor is on {t.device}; move it with .cpu()")
        if tuple(t.shape) != spec.shape:
            raise TensorforgeError(f"{what}: got shape {list(t.shape)}; the model was compiled for "
                                   f"{list(spec.shape)}")
        if not t.is_contiguous():
            t = t.contiguous()
        return t.data_ptr(), t

    def _set_outputs(self, out: Sequence[Any]) -> list:
        if len(out) != len(self.outputs):
            raise TensorforgeError(f"out= needs {len(self.outputs)} array(s), got {len(out)}")
        optrs = self._out_ptrs
        for j, o in enumerate(out):
            shape, dtype = self._out_specs[j]
            if type(o) is _ndarray and o.dtype == dtype and o.shape == shape and o.flags.c_contiguous:
                try:
                    optrs[j] = _addressof(_from_buffer(o))     # fails on read-only (and empty) arrays
                    continue
                except (TypeError, ValueError):
                    pass
            optrs[j] = self._out_address(j, o)
        return list(out)

    def _out_address(self, j: int, o: Any) -> int:
        """The address of ``out[j]`` when it is not a plain writeable match, or a clear error."""
        spec = self.outputs[j]
        what = f"out[{j}] for output {spec.describe()}"
        if _is_torch_tensor(o):
            ptr, kept = self._torch_address(spec, o, what)
            if kept is not o:
                raise TensorforgeError(f"{what}: must be contiguous")
            return ptr
        if not isinstance(o, _ndarray) or o.dtype != spec.np_dtype or o.shape != spec.shape:
            got = f"{o.dtype}{list(o.shape)}" if isinstance(o, _ndarray) else type(o).__name__
            raise TensorforgeError(f"{what}: got {got}; pass np.empty({spec.shape}, np.{spec.np_dtype})")
        if not (o.flags.c_contiguous and o.flags.writeable):
            raise TensorforgeError(f"{what}: must be a writeable C-contiguous array")
        return o.ctypes.data


def _torch_dtype(spec: TensorSpec):
    return getattr(_torch(), _TORCH_DTYPES[spec.dtype])


_TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8",
                 "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "bool": "bool"}
