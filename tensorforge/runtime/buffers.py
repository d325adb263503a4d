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
