"""Calls a compiled model library: one native call per inference.

Everything that does not change between runs (arena, weights, the two pointer arrays handed to
``tf_run``) is set up once.  A call checks each input against the model's signature, writes its
address into the preallocated input pointer array, takes the outputs and makes one ctypes call;
the GIL is released while the kernels run.  NumPy arrays and torch tensors are both accepted
without copies when they already have the right dtype, shape and layout (their addresses go to
the kernels); torch in gives torch out (``torch.from_numpy`` of the memory the kernels wrote).

Outputs of at least ``pool_min_bytes`` (64 KiB) come from the model's ``OutputPool``
(``buffers.py``): a call writes into the memory of an earlier result once the caller has dropped
it and every view of it (told by the reference count of the array that owns the memory), so a
large output is not mmap'ed and faulted in afresh on every call; a result the caller still holds
is never written.  The pool keeps at most two buffers per output per concurrent call
(``set_output_pool`` changes or disables it); smaller outputs come from ``np.empty``.  With
``out=`` the caller's arrays are written instead.

A model's arena holds the intermediates of the run in progress, so each call borrows one from
the model's bounded pool (``buffers.Pool``): calls from several threads run in parallel, each in
its own arena (with its own pointer arrays), up to ``max_concurrency`` at once; more callers wait
for a free arena.  The default bound is as many calls as fit on the cores at the model's thread
count (all cores / ``threads``): with ``threads=1``, one call per core.  Weights are shared
(read-only), and so are the per-shape checks and placements (immutable once made).  An arena
(or output) that does not fit in memory is a ``TensorforgeError`` naming the bytes.

A model with symbolic dims (``symbols`` and a ``DynamicPlan``) runs through ``tf_run_dyn``:
each call binds every symbol from the first input axis that is exactly that symbol, checks
every axis and range before anything runs (one-line errors; ``out=`` is untouched on an error),
places the intermediates for those dims (``arena_plan.py``, cached per distinct input shapes),
grows the borrowed arena when a call needs more (each arena keeps its own size: reused while
big enough), and passes the dims and offsets.  The static path is the same code as before: a
dynamic model swaps in its own ``_run_in``.

Data-dependent sizes (the count of a nonzero, unique, compress or NMS: a symbol whose
``SymbolRange.bound`` is set) are bound by no input: a call sets each at its upper bound (the
buffers and the outputs are allocated at it), hands the kernels a fresh copy of the dims array,
whose slot the op's kernel overwrites with the true count, reads the counts back afterwards and
returns each output that depends on one as its true-shaped prefix.  Such outputs cannot be
written into ``out=`` arrays (their shape is not known before the call).
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputShapeError, TensorforgeError
from ..ir.symbolic import SymbolTable, evaluate, evaluate_shape
from .arena_plan import DynamicPlan
from .buffers import POOL_MIN_BYTES, OutputPool, Pool, allocate, check_available, is_aligned, out_of_memory
from .signature import TensorSpec, as_array

# The C ABI of a model library (codegen/c/model.py emits it).
ENTRY = "tf_run"                  # void tf_run(void* const* in, void* const* out, char* arena, const char* w)
# models with symbolic dims: void tf_run_dyn(in, out, arena, w, const int64_t* dims, const int64_t* offsets)
DYN_ENTRY = "tf_run_dyn"
SHAPE_CACHE = 64                  # distinct input shape tuples whose checks and placement a model keeps
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


# what to do when a call's memory is not there (static models: sizes fixed at compile time)
_STATIC_ADVICE = ("compile the model for a smaller batch, or let fewer calls run at once "
                  "(model.native.set_max_concurrency): each holds its own arena")
_DYNAMIC_ADVICE = ("call the model with a smaller batch (smaller inputs), or compile it with a smaller maximum "
                   "for the symbolic dims (dim_ranges= / dynamic_shapes=) so such calls are refused up front")


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


def _buffer_address(x: np.ndarray) -> int:
    """Data address of a C-contiguous array: the buffer protocol is ~5x faster than ``x.ctypes``."""
    try:
        return _addressof(_from_buffer(x))
    except (TypeError, ValueError):       # read-only or empty
        return x.ctypes.data


def _data_offset() -> int | None:
    """Where an ndarray object keeps its data pointer: NumPy's ABI puts ``char *data`` right after
    ``PyObject_HEAD`` (``PyArrayObject_fields``), so reading it costs one ctypes load, half of the
    buffer protocol's price.  Checked here on live arrays; None (buffer protocol) where it
    does not hold (a Python built with a different object header)."""
    if sys.implementation.name != "cpython":          # id() is an address only in CPython
        return None
    head = object.__basicsize__
    probes = [np.empty(n, np.uint8) for n in (1, 64, 4096)] + [np.arange(6.0).reshape(2, 3)[1:]]
    probes.append(np.frombuffer(b"abc", np.uint8))               # read-only
    try:
        if all(ctypes.c_void_p.from_address(id(p) + head).value == p.ctypes.data for p in probes):
            return head
    except (ValueError, OSError):
        pass
    return None


_DATA_OFFSET = _data_offset()
_void_at = ctypes.c_void_p.from_address

if _DATA_OFFSET is not None:
    def _address(x: np.ndarray) -> int:
        """Data address of an ndarray (exact type) read from the object itself (see ``_data_offset``)."""
        return _void_at(id(x) + _DATA_OFFSET).value or 0
else:
    _address = _buffer_address


def _new_outputs(specs: Sequence[tuple[tuple[int, ...], np.dtype]], advice: str) -> list[np.ndarray]:
    """Fresh output arrays of these (shape, dtype), or the out-of-memory ``TensorforgeError``."""
    try:
        return [np.empty(shape, dtype) for shape, dtype in specs]
    except MemoryError:
        raise out_of_memory(_nbytes(specs), "the outputs of a call", advice) from None


def _nbytes(specs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> int:
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in specs)


_torch_tensor: type | None = None     # torch.Tensor once torch is imported (for the fast path)


def loaded_torch():
    return sys.modules.get("torch")


def is_torch_tensor(x: Any) -> bool:
    global _torch_tensor
    torch = loaded_torch()
    if torch is None or not isinstance(x, torch.Tensor):
        return False
    _torch_tensor = torch.Tensor
    return True


class _Arena:
    """The working memory of one call in progress: the arena for the intermediates, the input
    and output pointer arrays ``tf_run`` reads, and the ctypes arguments pointing at them
    (ctypes objects, not ints: ctypes passes them without a per-call conversion).  One per
    concurrent caller, so no two calls ever write the same pointer slot or intermediate."""

    __slots__ = ("buffer", "in_ptrs", "out_ptrs", "args", "raw")

    def __init__(self, nbytes: int, n_in: int, n_out: int, weights_address: int, what: str, advice: str):
        self.in_ptrs = (ctypes.c_void_p * max(n_in, 1))()
        self.out_ptrs = (ctypes.c_void_p * max(n_out, 1))()
        self.buffer = allocate(max(nbytes, 64), what, advice)
        self.args = (ctypes.c_void_p(ctypes.addressof(self.in_ptrs)), ctypes.c_void_p(ctypes.addressof(self.out_ptrs)),
                     ctypes.c_void_p(self.buffer.ctypes.data), ctypes.c_void_p(weights_address))
        self.raw = tuple(a.value for a in self.args)       # the same addresses as ints, for fastcall

    def grow(self, nbytes: int, what: str, advice: str) -> None:
        """A bigger arena for this slot (dynamic models); on failure the old one stays usable."""
        self.buffer = allocate(nbytes, what, advice)
        self.args = self.args[:2] + (ctypes.c_void_p(self.buffer.ctypes.data),) + self.args[3:]
        self.raw = tuple(a.value for a in self.args)


class NativeModel:
    """Owns the loaded library, the pool of arenas and the weights of one compiled model.

    ``library_path``/``source``/``build`` say where the code came from; ``save`` writes them
    into an artifact (runtime/artifact.py).  ``max_concurrency`` bounds the calls that run at
    once (default: all cores / ``threads``); see ``set_max_concurrency``.
    """

    def __init__(self, lib: ctypes.CDLL, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                 weights: np.ndarray, arena_bytes: int, threads: int | None = None,
                 library_path: Path | None = None, source: str | None = None,
                 build: dict[str, Any] | None = None, symbols: SymbolTable | None = None,
                 plan: DynamicPlan | None = None, max_concurrency: int | None = None):
        self.lib = lib
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.library_path = library_path
        self.source = source
        self.build = dict(build or {})        # target record, digest, origin ("compiled", "artifact", ...)
        self.arena_bytes = int(arena_bytes)
        self.symbols = symbols or SymbolTable()
        self.plan = plan
        if plan is None and not all(s.is_static for s in self.inputs + self.outputs):
            raise TensorforgeError("a model with symbolic shapes needs its dynamic memory plan")
        self.fn = self._function(DYN_ENTRY if plan is not None else ENTRY,
                                 [ctypes.c_void_p] * (6 if plan is not None else 4), None)
        self._set_threads = self._function(SET_THREADS, [ctypes.c_int], None)
        self._get_threads = self._function(GET_THREADS, [], ctypes.c_int)
        if weights.dtype != np.uint8 or weights.ndim != 1 or not is_aligned(weights):
            blob = allocate(max(weights.nbytes, 64), "the model's weights", "free memory or load a smaller model")
            blob[:weights.nbytes] = np.ascontiguousarray(weights).reshape(-1).view(np.uint8)
            weights = blob
        self.weights = weights
        self._n_in = len(self.inputs)
        self._in_dtypes = [s.np_dtype for s in self.inputs]
        self._in_shapes = [s.shape for s in self.inputs]
        self._out_specs = [(s.shape, s.np_dtype) for s in self.outputs]
        # large outputs come from a pool of buffers reused once the caller drops a result
        self._output_pool = OutputPool(0)
        self._output_pool_size: int | None = None        # None: follows max_concurrency
        self._pool_min_bytes = POOL_MIN_BYTES
        self._out_plan = [(shape, dtype, _nbytes([(shape, dtype)])) if all(isinstance(d, int) for d in shape)
                          else None for shape, dtype in self._out_specs]
        self._static_pooled = False
        self._in_torch_dtypes: list = [None] * self._n_in     # filled on the first torch input
        self._handle = lib._handle
        self._threads = 0
        self._max_concurrency: int | None = None          # None: follows the thread count
        # the factory holds plain values, not the model: no reference cycle keeps a dropped model alive
        self._pool: Pool[_Arena] = Pool(functools.partial(
            _Arena, self.arena_bytes, len(self.inputs), len(self.outputs), self.weights.ctypes.data,
            "the arena of a call (its intermediates)", _DYNAMIC_ADVICE if plan is not None else _STATIC_ADVICE), 1)
        self.set_threads(threads or default_threads())
        if max_concurrency is not None:
            self.set_max_concurrency(max_concurrency)
        self.pool_min_bytes = POOL_MIN_BYTES
        # the first arena now, so a static model that does not fit fails at compile/load time
        self._pool.release(self._pool.acquire())
        if plan is not None:
            self._init_dynamic()
        self._setup_fast()         # sets self._fast: the C call path (fastcall.py), if it applies

    def _setup_fast(self) -> None:
        """The C call path (``fastcall.py``) for a static model whose outputs all come from
        ``np.empty``; None where it does not apply or cannot be built (the Python path runs)."""
        from . import fastcall
        self._fast = None
        specs = self.inputs + self.outputs
        if (self.plan is not None or self._static_pooled or not fastcall.enabled()
                or max(len(self.inputs), len(self.outputs)) > fastcall.MAX_ARGS
                or any(len(s.shape) > fastcall.MAX_RANK or not s.is_static for s in specs)):
            return
        ext = fastcall.extension()
        if ext is None:
            return
        address = lambda f: ctypes.cast(f, ctypes.c_void_p).value   # noqa: E731
        described = lambda specs: tuple((tuple(int(d) for d in s.shape), np.dtype(s.np_dtype).num)  # noqa: E731
                                        for s in specs)
        self._fast = ext.Caller(
            address(self.fn), address(self._get_threads), address(self._set_threads), self._threads,
            described(self.inputs), described(self.outputs),
            self._pool.acquire, self._pool.release, _lib_threads, self._handle)
        if all(d is not None for d in self._in_torch_dtypes):
            self._fast_accepts_torch()

    def _fast_accepts_torch(self) -> None:
        torch = loaded_torch()
        if self._fast is not None and torch is not None:
            self._fast.set_torch(torch.Tensor, torch.from_numpy, tuple(self._in_torch_dtypes))

    @property
    def uses_fast_call(self) -> bool:
        """Whether calls take the C call path (``fastcall.py``) when their inputs match exactly."""
        return self._fast is not None

    # ---- arenas: one per call in progress ------------------------------------------------
    @property
    def max_concurrency(self) -> int:
        """How many calls of this model run at once (each in its own arena); more callers wait."""
        return self._pool.bound

    def set_max_concurrency(self, n: int | None) -> None:
        """Lets at most ``n`` calls run at once; None restores the default, all cores / ``threads``
        (one call per core with ``threads=1``).  Arenas are made on demand and kept, so memory
        grows to at most ``n`` arenas."""
        self._pool.set_bound(n if n is not None else self._default_concurrency())
        self._max_concurrency = None if n is None else int(n)
        self._sync_output_pool()

    def _default_concurrency(self) -> int:
        return max(1, default_threads() // self._threads)

    @property
    def arenas(self) -> list[np.ndarray]:
        """The arena of every slot made so far (at most ``max_concurrency``), oldest first."""
        return [a.buffer for a in self._pool.items]

    @property
    def arena(self) -> np.ndarray:
        """The arena the next call of a lone caller gets: the one its last call used."""
        return self._latest_arena().buffer

    @property
    def _call_args(self) -> tuple:
        """``tf_run``'s arguments as the last call left them (``overhead.py`` reuses them)."""
        return self._latest_arena().args

    def _latest_arena(self) -> _Arena:
        latest = self._pool.latest
        return latest if latest is not None else self._pool.items[0]

    @property
    def is_dynamic(self) -> bool:
        """Whether the model runs at any size its symbols' ranges allow (one library for all)."""
        return self.plan is not None

    def _function(self, name: str, argtypes: list, restype):
        try:
            fn = getattr(self.lib, name)
        except AttributeError:
            raise TensorforgeError(f"the model library {self.library_path} has no '{name}': it was not built "
                                   f"by this tensorforge version; compile the model again") from None
        fn.argtypes, fn.restype = argtypes, restype
        return fn

    # ---- the output pool ---------------------------------------------------------------
    @property
    def output_pool(self) -> OutputPool:
        """The model's pool of output buffers (see ``buffers.OutputPool``)."""
        return self._output_pool

    @property
    def output_pool_size(self) -> int:
        """How many output buffers the model keeps for reuse (in flight or idle); by default two
        per output per concurrent call (a loop ``y = model(x)`` still holds the last result
        while the next call runs)."""
        return self._output_pool.capacity

    def set_output_pool(self, n: int | None) -> None:
        """Keeps at most ``n`` output buffers for reuse (0: none, every call allocates its
        outputs, the memory is freed with the results); None restores the default."""
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0):
            raise TensorforgeError(f"the output pool size must be a non-negative integer or None, got {n!r}")
        self._output_pool_size = None if n is None else int(n)
        self._sync_output_pool()

    def _sync_output_pool(self) -> None:
        n = self._output_pool_size
        self._output_pool.set_capacity(2 * self._pool.bound * len(self.outputs) if n is None else n)

    @property
    def pool_min_bytes(self) -> int:
        """Outputs of at least this many bytes come from the pool; smaller ones from ``np.empty``."""
        return self._pool_min_bytes

    @pool_min_bytes.setter
    def pool_min_bytes(self, n: int) -> None:
        self._pool_min_bytes = int(n)
        self._static_pooled = any(p is not None and p[2] >= self._pool_min_bytes for p in self._out_plan)
        if hasattr(self, "_fast"):                  # not while __init__ runs: it sets it up last
            self._setup_fast()

    def _take_outputs(self, plan: Sequence[tuple[tuple[int, ...], np.dtype, int]], optrs,
                      advice: str) -> tuple[list, list | None]:
        """The output arrays of a call without ``out=`` (views of pooled buffers for the large
        ones, ``np.empty`` for the others) with their addresses in ``optrs``, and the slots taken
        (give them back with ``_give_outputs`` once the kernels have run)."""
        outs: list = []
        slots: list | None = None
        pool, min_bytes = self._output_pool, self._pool_min_bytes
        try:
            for j, (shape, dtype, nbytes) in enumerate(plan):
                if nbytes >= min_bytes and nbytes > 0 and pool.capacity:
                    slot, o = pool.take(nbytes, shape, dtype, "an output of a call", advice)
                    if slots is None:
                        slots = []
                    slots.append(slot)
                    optrs[j] = slot.address if slot is not None else o.ctypes.data
                else:
                    try:
                        o = np.empty(shape, dtype)
                    except MemoryError:
                        raise out_of_memory(nbytes, "an output of a call", advice) from None
                    optrs[j] = _address(o)
                outs.append(o)
        except BaseException:
            self._give_outputs(slots)
            raise
        return outs, slots

    def _give_outputs(self, slots: list | None) -> None:
        if slots:
            give = self._output_pool.give
            for s in reversed(slots):       # the first output's on top: the next call's first output takes it
                give(s)

    # ---- threads ---------------------------------------------------------------------
    @property
    def threads(self) -> int:
        return self._threads

    def set_threads(self, n: int) -> None:
        """Runs later calls on ``n`` OpenMP threads (``n`` >= 1), each call on its own team.

        The count lives in the library and ``tf_run`` applies it on entry with
        ``omp_set_num_threads``, which sets the *calling* thread's OpenMP setting: so every
        thread that calls the model gets it, with nothing to set per thread.  Unless
        ``max_concurrency`` was set, the default concurrency follows (all cores / ``n``)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise TensorforgeError(f"threads must be a positive integer, got {n!r}")
        self._threads = int(n)
        self._apply_threads()
        if getattr(self, "_fast", None) is not None:
            self._fast.set_threads(self._threads)
        if self._max_concurrency is None:
            self._pool.set_bound(self._default_concurrency())
            self._sync_output_pool()

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
        fast = self._fast
        if fast is not None:
            result = fast(inputs)
            if result is not NotImplemented:
                return result
        return self.call_python(inputs)

    def call_python(self, inputs: Sequence[Any]):
        """A call through the Python path (what ``__call__`` falls back to)."""
        if len(inputs) != self._n_in:
            return self._call_slow(inputs)
        pool = self._pool
        arena = pool.acquire()
        try:
            outs = self._run_in(arena, inputs, None)
        finally:
            pool.release(arena)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _call_slow(self, inputs):
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
        pool = self._pool
        arena = pool.acquire()
        try:
            return self._run_in(arena, inputs, out)
        finally:
            pool.release(arena)

    def _run_in(self, arena: _Arena, inputs: Sequence[Any], out: Sequence[Any] | None) -> list:
        """One call of a static model in the borrowed ``arena``."""
        ptrs = arena.in_ptrs
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
        slots = None
        if out is None:
            if self._static_pooled:
                outs, slots = self._take_outputs(self._out_plan, arena.out_ptrs, _STATIC_ADVICE)
            else:
                outs = _new_outputs(self._out_specs, _STATIC_ADVICE)
                optrs = arena.out_ptrs
                for j, o in enumerate(outs):
                    optrs[j] = _address(o)
        else:
            outs = self._set_outputs(out, arena.out_ptrs)
        if _lib_threads.get(self._handle) != self._threads:
            self._apply_threads()
        if slots is None:
            self.fn(*arena.args)
        else:
            try:
                self.fn(*arena.args)
            finally:
                self._give_outputs(slots)
        if as_torch and out is None:
            from_numpy = loaded_torch().from_numpy
            return [from_numpy(o) for o in outs]
        return outs

    def _slow_input(self, i: int, x: Any) -> tuple[int, Any, bool]:
        """(address, object to keep alive, is torch) for anything but an exact NumPy match."""
        spec = self.inputs[i]
        if is_torch_tensor(x):
            if self._in_torch_dtypes[i] is None:
                self._in_torch_dtypes = [torch_dtype(s) for s in self.inputs]
                self._fast_accepts_torch()
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
        want = torch_dtype(spec)
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

    def _set_outputs(self, out: Sequence[Any], optrs) -> list:
        """Checks the ``out=`` arrays of a static call and writes their addresses into ``optrs``."""
        if len(out) != len(self.outputs):
            raise TensorforgeError(f"out= needs {len(self.outputs)} array(s), got {len(out)}")
        for j, o in enumerate(out):
            shape, dtype = self._out_specs[j]
            if type(o) is _ndarray and o.dtype == dtype and o.shape == shape:
                flags = o.flags
                if flags.c_contiguous and flags.writeable:
                    optrs[j] = _address(o)
                    continue
            optrs[j] = self._out_address(j, o)
        return list(out)

    def _out_address(self, j: int, o: Any) -> int:
        """The address of ``out[j]`` when it is not a plain writeable match, or a clear error."""
        spec = self.outputs[j]
        what = f"out[{j}] for output {spec.describe()}"
        if is_torch_tensor(o):
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


    # ---- models with symbolic dims -----------------------------------------------------
    def _init_dynamic(self) -> None:
        """Where each symbol is read from, and the per-shape cache; swaps in the dynamic run."""
        self._sites: dict[str, tuple[int, int]] = {}
        # data-dependent sizes: no input binds them, the kernels compute them (slot in dims, name)
        dd = set(self.symbols.data_dependent())
        self._counts = [(k, s) for k, s in enumerate(self.plan.symbols) if s in dd]
        self._count_outputs = [j for j, spec in enumerate(self.outputs) if set(spec.symbols) & dd]
        for i, spec in enumerate(self.inputs):
            for axis, d in enumerate(spec.shape):
                if isinstance(d, str) and d in self.plan.symbols and d not in self._sites and d not in dd:
                    self._sites[d] = (i, axis)
        unbound = [s for s in self.plan.symbols if s not in self._sites and s not in dd]
        if unbound:
            raise TensorforgeError(f"the symbol(s) {', '.join(unbound)} are no input axis of their own, so a call "
                                   f"cannot bind them; declare them on an input dimension")
        self._shape_cache: dict[tuple, _Bound] = {}
        self._shape_lock = threading.Lock()          # serialises misses; hits read the dict lock-free
        self._run_in = self._run_dynamic

    def bind(self, shapes: Sequence[Sequence[int]]) -> dict[str, int]:
        """The symbols' values for inputs of ``shapes``, after checking every axis and range;
        raises a one-line ``TensorforgeError`` naming the input, axis, value and range.
        Data-dependent sizes are given at their upper bounds (a run computes the true ones)."""
        if not self.is_dynamic:
            return {}
        bound = self._bound(tuple(tuple(int(d) for d in s) for s in shapes))
        return dict(zip(self.plan.symbols, bound.values))

    def output_shapes(self, shapes: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """The outputs' shapes for inputs of ``shapes`` (checked as a call would); an output whose
        size depends on the input values is given at its upper bound (what a call allocates)."""
        if not self.is_dynamic:
            return [tuple(s.shape) for s in self.outputs]
        return [shape for shape, _ in self._bound(tuple(tuple(int(d) for d in s) for s in shapes)).out_specs]

    def _bound(self, shapes: tuple) -> "_Bound":
        """The checks and placement for these input shapes: cached, and shared by every caller
        (a ``_Bound`` never changes once made, and the ``dims``/``offsets`` arrays are only read)."""
        hit = self._shape_cache.get(shapes)
        if hit is not None:
            return hit
        with self._shape_lock:
            hit = self._shape_cache.get(shapes)
            if hit is None:
                hit = self._new_bound(shapes)
                if len(self._shape_cache) >= SHAPE_CACHE:
                    self._shape_cache.pop(next(iter(self._shape_cache)))
                self._shape_cache[shapes] = hit
            return hit

    def _new_bound(self, shapes: tuple) -> "_Bound":
        values = self._check_shapes(shapes)
        env = dict(zip(self.plan.symbols, values))
        offsets, arena_bytes = self.plan.offsets_for(values)
        out_specs = [(evaluate_shape(s.shape, env), s.np_dtype) for s in self.outputs]
        check_available(_nbytes(out_specs), f"the outputs of a call at {self.plan.describe_dims(values)}",
                        _DYNAMIC_ADVICE)
        return _Bound(values, (ctypes.c_int64 * max(len(values), 1))(*values),
                      (ctypes.c_int64 * max(len(offsets), 1))(*offsets), arena_bytes, out_specs)

    def _check_shapes(self, shapes: tuple) -> tuple[int, ...]:
        """The symbol values (model order) for these input shapes, or the first error found."""
        for spec, shape in zip(self.inputs, shapes):
            if len(shape) != len(spec.shape):
                raise InputShapeError(f"input '{spec.name}' has rank {len(shape)} (shape {list(shape)}); the "
                                       f"model takes {spec.dtype}{spec.shape_text}")
        env: dict[str, int] = {}
        for sym, (i, axis) in self._sites.items():
            value, r = shapes[i][axis], self.symbols.get(sym)
            if not r.contains(value):
                raise InputShapeError(f"input '{self.inputs[i].name}' axis {axis} is {value}, outside "
                                       f"{sym}'s range {r.describe()}")
            env[sym] = value
        for i, (spec, shape) in enumerate(zip(self.inputs, shapes)):
            for axis, (d, got) in enumerate(zip(spec.shape, shape)):
                self._check_axis(i, axis, d, got, env)
        if self._counts:
            env = self.symbols.at_bounds(env)      # data-dependent sizes at their upper bounds
        return tuple(env[s] for s in self.plan.symbols)

    def _check_axis(self, i: int, axis: int, d, got: int, env: dict[str, int]) -> None:
        name = self.inputs[i].name
        if isinstance(d, int):
            if got != d:
                raise InputShapeError(f"input '{name}' axis {axis} is {got}; the model was compiled for {d} "
                                       f"({self.inputs[i].dtype}{self.inputs[i].shape_text})")
            return
        want = evaluate(d, env)
        if got == want:
            return
        if d in self._sites:
            j, a = self._sites[d]
            raise InputShapeError(f"inputs '{self.inputs[j].name}' axis {a} ({want}) and '{name}' axis {axis} "
                                   f"({got}) must agree on '{d}'")
        raise InputShapeError(f"input '{name}' axis {axis} is {got}, but {d} = {want} for "
                               f"{self.plan.describe_dims([env[s] for s in self.plan.symbols])}")

    def _run_dynamic(self, arena: _Arena, inputs: Sequence[Any], out: Sequence[Any] | None) -> list:
        """One call of a model with symbolic dims in the borrowed ``arena``."""
        ptrs = arena.in_ptrs
        keep = []                 # arrays whose addresses the call uses
        shapes = []
        as_torch = False
        for i, x in enumerate(inputs):
            ptr, kept, is_torch = self._dynamic_input(i, x)
            ptrs[i] = ptr
            keep.append(kept)
            shapes.append(tuple(kept.shape))
            as_torch |= is_torch
        bound = self._bound(tuple(shapes))
        if self._counts:
            return self._run_counting(arena, bound, out, as_torch)
        outs, slots = self._prepare_call(arena, bound, out)
        try:
            self.fn(*arena.args, bound.dims, bound.offsets)
        finally:
            self._give_outputs(slots)
        if as_torch and out is None:
            from_numpy = loaded_torch().from_numpy
            return [from_numpy(o) for o in outs]
        return outs

    def _prepare_call(self, arena: _Arena, bound: "_Bound",
                      out: Sequence[Any] | None) -> tuple[list, list | None]:
        """The output arrays of a dynamic call (pooled or new ones, or the checked ``out=``) with
        their addresses in ``arena``'s pointer array, ``arena`` big enough for ``bound`` (grown,
        never shrunk) and the library's thread count applied; and the pooled slots taken."""
        if out is not None:
            outs = self._set_dynamic_outputs(out, [shape for shape, _ in bound.out_specs], arena.out_ptrs)
        if bound.arena_bytes > arena.buffer.nbytes:     # grows; reused while big enough
            arena.grow(bound.arena_bytes, f"the arena of a call at {self.plan.describe_dims(bound.values)}",
                       _DYNAMIC_ADVICE)
        slots = None
        if out is None:
            outs, slots = self._take_outputs(bound.out_plan, arena.out_ptrs, _DYNAMIC_ADVICE)
        if _lib_threads.get(self._handle) != self._threads:
            self._apply_threads()
        return outs, slots

    def _run_counting(self, arena: _Arena, bound: "_Bound", out: Sequence[Any] | None, as_torch: bool) -> list:
        """A call of a model with data-dependent sizes (inputs already placed in ``arena``)."""
        if out is not None and self._count_outputs:
            names = ", ".join(f"'{self.outputs[j].name}' {self.outputs[j].shape_text}" for j in self._count_outputs)
            raise TensorforgeError(f"out= cannot be used with this model: the shape of output(s) {names} depends on "
                                   f"the input values ({', '.join(s for _, s in self._counts)} are computed by the "
                                   f"run); call without out=")
        outs, slots = self._prepare_call(arena, bound, out)
        dims = np.array(bound.values, dtype=np.int64)      # the kernels write the counts into it (per call)
        try:
            self.fn(*arena.args, dims.ctypes.data, bound.offsets)
        finally:
            self._give_outputs(slots)
        if out is not None:
            return list(out)
        env = dict(zip(self.plan.symbols, (int(d) for d in dims)))
        for k, name in self._counts:
            if not 0 <= env[name] <= bound.values[k]:
                raise TensorforgeError(f"the kernel computing '{name}' reported {env[name]}, outside 0..{bound.values[k]}")
        for j in self._count_outputs:
            shape = evaluate_shape(self.outputs[j].shape, env)
            o = outs[j]
            n = int(np.prod(shape, dtype=np.int64))
            # the kernels wrote the true-shaped result compactly at the start of the buffer
            prefix = o.reshape(-1)[:n].reshape(shape)
            outs[j] = prefix.copy() if 2 * n < o.size else prefix
        if as_torch:
            from_numpy = loaded_torch().from_numpy
            return [from_numpy(o) for o in outs]
        return outs

    def _dynamic_input(self, i: int, x: Any) -> tuple[int, Any, bool]:
        """(address, contiguous array or tensor, is torch) with dtype and device checked; the
        shape is checked against the symbols afterwards, for all inputs together."""
        spec = self.inputs[i]
        what = f"input #{i} {spec.describe()}"
        if is_torch_tensor(x):
            want = torch_dtype(spec)
            if x.dtype != want:
                raise TensorforgeError(f"{what}: got {x.dtype}; convert it with .to({want})")
            if x.device.type != "cpu":
                raise TensorforgeError(f"{what}: the tensor is on {x.device}; move it with .cpu()")
            x = x if x.is_contiguous() else x.contiguous()
            return x.data_ptr(), x, True
        x = np.ascontiguousarray(as_array(x, spec, what))
        return _address(x), x, False

    def _set_dynamic_outputs(self, out: Sequence[Any], shapes: list[tuple[int, ...]], optrs) -> list:
        """Checks every ``out=`` array against this call's output shapes, then writes their
        addresses into ``optrs``."""
        if len(out) != len(self.outputs):
            raise TensorforgeError(f"out= needs {len(self.outputs)} array(s), got {len(out)}")
        addresses = []
        for j, (o, shape) in enumerate(zip(out, shapes)):
            spec = self.outputs[j]
            what = f"out[{j}] for output {spec.describe()}"
            if is_torch_tensor(o):
                if o.dtype != torch_dtype(spec) or o.device.type != "cpu" or tuple(o.shape) != shape \
                        or not o.is_contiguous():
                    raise TensorforgeError(f"{what}: got a {o.dtype} tensor {list(o.shape)} on {o.device}; this call "
                                           f"needs a contiguous CPU {torch_dtype(spec)} tensor of shape {list(shape)}")
                addresses.append(o.data_ptr())
                continue
            if not isinstance(o, _ndarray) or o.dtype != spec.np_dtype or o.shape != shape:
                got = f"{o.dtype}{list(o.shape)}" if isinstance(o, _ndarray) else type(o).__name__
                raise TensorforgeError(f"{what}: got {got}; this call needs np.empty({shape}, np.{spec.np_dtype})")
            if not (o.flags.c_contiguous and o.flags.writeable):
                raise TensorforgeError(f"{what}: must be a writeable C-contiguous array")
            addresses.append(o.ctypes.data)
        for j, a in enumerate(addresses):
            optrs[j] = a
        return list(out)


class _Bound:
    """What one distinct tuple of input shapes needs for a call: the symbol values (as the C
    ``dims`` array too), the buffers' offsets, the arena size and the outputs' (shape, dtype).
    Never changed once made, so concurrent calls share it."""

    __slots__ = ("values", "dims", "offsets", "arena_bytes", "out_specs", "out_plan")

    def __init__(self, values: tuple[int, ...], dims, offsets, arena_bytes: int, out_specs: list):
        self.values, self.dims, self.offsets = values, dims, offsets
        self.arena_bytes, self.out_specs = arena_bytes, out_specs
        self.out_plan = [(tuple(shape), np.dtype(dtype), _nbytes([(shape, dtype)])) for shape, dtype in out_specs]


def torch_dtype(spec: TensorSpec):
    return getattr(loaded_torch(), _TORCH_DTYPES[spec.dtype])


_TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8",
                 "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "bool": "bool"}
