"""Host memory for running models: aligned buffers (the generated code assumes 64 bytes), checked
allocation that fails with a ``TensorforgeError`` instead of a raw ``MemoryError`` or a process
killed later, and the bounded pool that lends each concurrent call of a model its own arena."""
from __future__ import annotations

import sys
import threading
from typing import Callable, Generic, TypeVar

import numpy as np

from ..errors import TensorforgeError

ALIGN = 64
# Requests at least this large are compared with the free memory before allocating: Linux
# overcommits, so np.empty of more than is free usually succeeds and the process is killed when
# the kernels first touch the pages.  Smaller ones only rely on catching MemoryError.
CHECK_ABOVE = 64 << 20
_MEMINFO = "/proc/meminfo"
_CGROUP_LIMIT, _CGROUP_USAGE = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"

T = TypeVar("T")


def aligned_empty(nbytes: int, align: int = ALIGN) -> np.ndarray:
    """An uninitialised uint8 array of ``nbytes`` whose first byte is ``align``-aligned."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


def is_aligned(array: np.ndarray, align: int = ALIGN) -> bool:
    return array.ctypes.data % align == 0


def available_memory() -> int | None:
    """Bytes this process can still fill: MemAvailable + SwapFree, capped by a cgroup v2 limit;
    None where the system does not say (then only MemoryError is caught)."""
    try:
        with open(_MEMINFO) as f:
            fields = {k: v for k, _, v in (line.partition(":") for line in f)}
        free = (int(fields["MemAvailable"].split()[0]) + int(fields.get("SwapFree", "0 kB").split()[0])) * 1024
    except (OSError, KeyError, ValueError):
        return None
    try:
        with open(_CGROUP_LIMIT) as f, open(_CGROUP_USAGE) as g:
            limit = f.read().strip()
            if limit != "max":
                free = min(free, max(0, int(limit) - int(g.read())))
    except (OSError, ValueError):
        pass
    return free


def fmt_bytes(n: int) -> str:
    """``n`` bytes for people (``1.5 GiB``), after the exact count in messages."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def out_of_memory(nbytes: int, what: str, advice: str, free: int | None = None) -> TensorforgeError:
    """The one error for memory a call cannot get: the bytes needed, what for, and what to do."""
    have = f", {free} bytes ({fmt_bytes(free)}) are available" if free is not None else ""
    return TensorforgeError(f"cannot allocate {nbytes} bytes ({fmt_bytes(nbytes)}) for {what}{have}; {advice}")


def check_available(nbytes: int, what: str, advice: str) -> None:
    """Raises ``out_of_memory`` when a large request is more than the free memory (see CHECK_ABOVE)."""
    if nbytes > sys.maxsize - ALIGN:
        raise out_of_memory(nbytes, what, advice)
    if nbytes >= CHECK_ABOVE:
        free = available_memory()
        if free is not None and nbytes > free:
            raise out_of_memory(nbytes, what, advice, free)


def allocate(nbytes: int, what: str, advice: str) -> np.ndarray:
    """``aligned_empty(nbytes)``, or a ``TensorforgeError`` naming the bytes, ``what`` they are
    for and ``advice``, when the memory is not there."""
    check_available(nbytes, what, advice)
    try:
        return aligned_empty(nbytes)
    except MemoryError:
        raise out_of_memory(nbytes, what, advice, available_memory()) from None


class Pool(Generic[T]):
    """At most ``bound`` objects made by ``make``, each lent to one caller at a time.

    A model's arena holds the intermediates of the run in progress, so concurrent calls need one
    arena each; the bound caps the memory and the cores they take: callers beyond it wait until
    one is returned.  Objects are made on demand (never more than the bound) and kept.  The free
    ones sit on a stack (a list: ``append`` and ``pop`` are atomic), so an uncontended
    ``acquire`` plus ``release`` costs two C calls, and a lone caller always gets back the object
    it used last (warm in cache; its pointers are the last call's).  Only waiting, making and a
    changed bound take the lock.
    """

    def __init__(self, make: Callable[[], T], bound: int):
        self._make = make
        self._free: list[T] = []      # returned objects, the last returned on top
        self._cond = threading.Condition(threading.Lock())
        self._items: list[T] = []     # every object made and kept, oldest first
        self._count = 0               # objects made or being made
        self._waiting = 0             # callers blocked in acquire
        self._bound = 1
        self.set_bound(bound)

    @property
    def bound(self) -> int:
        return self._bound

    @property
    def items(self) -> list[T]:
        """Every object the pool holds, lent or free, oldest first."""
        with self._cond:
            return list(self._items)

    @property
    def latest(self) -> T | None:
        """The object the next uncontended ``acquire`` gets (the last one returned), if any is free."""
        free = self._free
        return free[-1] if free else None

    def set_bound(self, bound: int) -> None:
        """Lends at most ``bound`` objects at once from now on; lowering it drops the surplus as
        it comes back, raising it lets waiting callers make new ones."""
        if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or bound < 1:
            raise TensorforgeError(f"max_concurrency must be a positive integer, got {bound!r}")
        with self._cond:
            self._bound = int(bound)
            while self._count > self._bound and self._drop_free_locked():
                pass
            self._cond.notify_all()

    def acquire(self) -> T:
        """A free object, a new one while fewer than ``bound`` exist, or (blocking) the next returned."""
        try:
            return self._free.pop()
        except IndexError:
            return self._acquire_slow()

    def release(self, item: T) -> None:
        """Gives ``item`` back (or drops it when the bound was lowered) and wakes one waiting caller."""
        if self._count > self._bound and self._drop(item):
            return
        self._free.append(item)
        if self._waiting:
            with self._cond:
                self._cond.notify()

    def _acquire_slow(self) -> T:
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    try:
                        return self._free.pop()
                    except IndexError:
                        pass
                    if self._count < self._bound:
                        self._count += 1
                        break
                    self._cond.wait()
            finally:
                self._waiting -= 1
        return self._make_one()

    def _make_one(self) -> T:
        """Makes an object outside the lock (allocating a large arena takes a while) for a slot
        already counted; a failure frees the slot and lets a waiting caller try."""
        try:
            item = self._make()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._items.append(item)
        return item

    def _drop(self, item: T) -> bool:
        with self._cond:
            if self._count <= self._bound:
                return False
            self._forget_locked(item)
            return True

    def _drop_free_locked(self) -> bool:
        try:
            item = self._free.pop(0)           # the least recently used goes first
        except IndexError:
            return False
        self._forget_locked(item)
        return True

    def _forget_locked(self, item: T) -> None:
        self._count -= 1
        self._items = [x for x in self._items if x is not item]


# Outputs smaller than this come from np.empty: NumPy's small-block cache and malloc's free lists
# already hand back warm memory, and the pool's bookkeeping (~1 us) would only add to the call.
# Larger ones come from the model's ``OutputPool``: a fresh large array is mmap'ed and every page
# of it faulted in (and zeroed by the kernel) as the kernels first write it, on every call.
POOL_MIN_BYTES = 1 << 16


class OutputSlot:
    """One pooled output buffer: ``owner`` is the array that owns the memory (every view handed
    out, and every torch tensor made from one, keeps it alive), ``buffer`` its aligned uint8
    window, ``template`` a typed view of the last shape handed out (``template.view()`` is the
    cheapest way to make the next one).  ``free_refs`` is ``sys.getrefcount(slot.owner)`` when
    nothing but the slot refers to the owner: more means a caller still holds a result (or a view
    of one) in this memory."""

    __slots__ = ("owner", "buffer", "nbytes", "address", "key", "template", "free_refs")

    def __init__(self, nbytes: int, shape: tuple, dtype: np.dtype, what: str, advice: str):
        self.buffer = allocate(max(nbytes, ALIGN), what, advice)
        self.owner = self.buffer.base if self.buffer.base is not None else self.buffer
        self.nbytes = self.buffer.nbytes
        self.address = self.buffer.ctypes.data
        self.key = None
        self.template = None
        self.shape_as(shape, dtype, nbytes)
        self.free_refs = sys.getrefcount(self.owner)   # the same expression as in OutputPool.take

    def shape_as(self, shape: tuple, dtype: np.dtype, nbytes: int) -> None:
        key = (shape, dtype)
        if self.key != key:        # replaces the old template: the owner's count stays the same
            self.template = self.buffer[:nbytes].view(dtype).reshape(shape)
            self.key = key


class OutputPool:
    """A model's output buffers, reused once the caller has let go of a result.

    A call ``take``s one slot per (large) output, the kernels write it, the call hands the caller
    a fresh view of it and ``give``s the slot back.  A later ``take`` reuses a given-back slot only
    when nothing outside the pool refers to its memory any more: every NumPy view of a result
    (slices, reshapes, ``.T``...) has the owner array as its ``base`` (NumPy collapses chains of
    views), and a torch tensor from ``torch.from_numpy`` keeps its NumPy array, so
    ``sys.getrefcount(owner)`` above the slot's own count means a caller still holds something in
    it.  (A weakref finalizer on the returned array would not do: a view of it does not keep it
    alive.)  So a result is never overwritten while the caller holds it or any view of it, and a
    caller that drops results between calls gets the same, already faulted-in, memory back.

    Thread safety: ``take`` and ``give`` run under one lock; a slot being written by a call is off
    the idle list, so no two calls ever share one, and a count can only fall while a slot is
    idle (nobody can gain a reference to memory they do not already hold).

    Bounds: at most ``capacity`` slots are kept (in flight or idle); past it the least recently
    used idle slot is forgotten (its memory is freed once the caller drops its views).  A slot is
    reused for a request of ``nbytes`` when it has between ``nbytes`` and twice ``nbytes`` bytes
    (dynamic shapes: a smaller batch may reuse a bigger buffer, never a smaller one); the dtype
    does not matter (the memory is raw bytes, 64-byte aligned).  ``capacity`` 0 pools nothing.
    """

    def __init__(self, capacity: int):
        self._lock = threading.Lock()
        self._idle: list[OutputSlot] = []     # least recently given back first
        self._in_flight = 0
        self._capacity = max(0, int(capacity))
        self.reused = 0                        # takes served by an idle slot (tests, benchmarks)
        self.made = 0                          # slots allocated

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self._capacity = max(0, int(capacity))
            self._trim_locked()

    @property
    def slots(self) -> list[OutputSlot]:
        """The idle slots (tests): held by a caller or free."""
        with self._lock:
            return list(self._idle)

    def clear(self) -> None:
        """Forgets every idle slot (their memory is freed once no caller holds a view of it)."""
        with self._lock:
            self._idle.clear()

    def take(self, nbytes: int, shape: tuple, dtype: np.dtype, what: str,
             advice: str) -> tuple[OutputSlot | None, np.ndarray]:
        """(slot, a fresh typed view of its memory) for an output of ``shape``/``dtype``: a free
        idle slot of a fitting size (the most recently used first), else a new one.  The slot is
        None when the pool is full of calls in flight (the array is then a plain allocation)."""
        getrefcount = sys.getrefcount
        with self._lock:
            idle = self._idle
            for k in range(len(idle) - 1, -1, -1):
                s = idle[k]
                if nbytes <= s.nbytes <= 2 * nbytes + ALIGN and getrefcount(s.owner) == s.free_refs:
                    del idle[k]
                    self._in_flight += 1
                    self.reused += 1
                    s.shape_as(shape, dtype, nbytes)
                    return s, s.template.view()
            pooled = self._in_flight < self._capacity
            if pooled:
                self._in_flight += 1
        if not pooled:
            return None, _typed(allocate(max(nbytes, ALIGN), what, advice), nbytes, shape, dtype)
        try:
            s = OutputSlot(nbytes, shape, dtype, what, advice)     # outside the lock: large allocations
        except BaseException:
            with self._lock:
                self._in_flight -= 1
            raise
        self.made += 1
        return s, s.template.view()

    def give(self, slot: OutputSlot | None) -> None:
        """Puts a taken slot back on the idle list (the caller's result may still be in it)."""
        if slot is None:
            return
        with self._lock:
            self._in_flight -= 1
            self._idle.append(slot)
            self._trim_locked()

    def _trim_locked(self) -> None:
        excess = len(self._idle) + self._in_flight - self._capacity
        if excess > 0:
            del self._idle[:min(excess, len(self._idle))]


def _typed(buffer: np.ndarray, nbytes: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    return buffer[:nbytes].view(dtype).reshape(shape)
