"""Placing a model's intermediates in one arena: the greedy placer and the dynamic plan as data.

The compiler's memory planner (``passes/memory/plan.py``) decides *which* tensors need arena
space and *when* each is live; this module decides *where* they go.  One placer serves both
kinds of model, so a static model and a dynamic model called at the same sizes get the same
offsets:

* static models: the planner calls ``place`` once at compile time and bakes the offsets into C;
* dynamic models: the plan travels as data (``DynamicPlan``: per buffer a byte size that is a
  dim expression, and a live interval) inside the library's artifact; the runtime evaluates the
  sizes for the call's dims, calls the same ``place``, and caches the result per dims tuple.

This module is part of the runtime: it imports no pass and no frontend, so an artifact loads
without the compiler.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import TensorforgeError
from ..ir.symbolic import Dim, canonical, evaluate

ALIGN = 64
CACHE_SIZE = 64                   # distinct dims tuples whose placement a plan remembers


def aligned(n: int, align: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``align`` (default the arena's: every buffer starts on a
    64-byte boundary)."""
    return (n + align - 1) // align * align


def place(sizes: Sequence[int], intervals: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets for buffers of ``sizes`` bytes live over the inclusive ``intervals``, and the arena size.

    Greedy by size (TFLite, ORT): largest buffer first (ties: earliest start, then list order),
    each at the lowest 64-byte aligned offset that collides with no already placed buffer whose
    interval overlaps its own.  Returns the offsets in the order of ``sizes``.
    """
    if len(sizes) != len(intervals):
        raise ValueError(f"{len(sizes)} sizes but {len(intervals)} intervals")
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], intervals[i][0]))
    placed: list[tuple[int, int, int, int]] = []   # (offset, size, start, end)
    offsets = [0] * len(sizes)
    arena = 0
    for i in order:
        start, end = intervals[i]
        size = aligned(max(int(sizes[i]), 1))
        clashes = sorted((o, s) for o, s, a, b in placed if not (b < start or end < a))
        off = 0
        for o, s in clashes:
            if off + size <= o:
                break
            off = max(off, o + s)
        placed.append((off, size, start, end))
        offsets[i] = off
        arena = max(arena, off + size)
    return offsets, arena


@dataclass(frozen=True)
class PlannedBuffer:
    """One intermediate of a dynamic model: its byte size (an int or a dim expression) and the
    first and last op index (inclusive) at which it is live."""

    nbytes: Dim
    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {"nbytes": self.nbytes, "start": self.start, "end": self.end}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "PlannedBuffer":
        n = d["nbytes"]
        return PlannedBuffer(int(n) if isinstance(n, int) else canonical(str(n)), int(d["start"]), int(d["end"]))


class DynamicPlan:
    """The memory plan of a model with symbolic sizes, as data.

    ``symbols`` is the model's symbol order (the order of the ``dims`` array ``tf_run_dyn``
    takes); buffer ``k`` lives at ``arena + offsets[k]``.  ``offsets_for(dims)`` places the
    buffers for one set of symbol values; the last ``CACHE_SIZE`` results are kept, so a serving
    loop at a few distinct sizes evaluates nothing after the first call at each.  The cache is
    safe to use from several threads (one plan serves every concurrent call of a model); its
    results are shared, so callers must not change them.
    """

    def __init__(self, symbols: Sequence[str], buffers: Sequence[PlannedBuffer], cache_size: int = CACHE_SIZE):
        self.symbols = list(symbols)
        self.buffers = list(buffers)
        self._cache: OrderedDict[tuple[int, ...], tuple[list[int], int]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()     # get + move_to_end + evict must not interleave

    def sizes_for(self, dims: Sequence[int]) -> list[int]:
        """Each buffer's byte size for the symbol values ``dims`` (in ``symbols`` order)."""
        env = dict(zip(self.symbols, (int(d) for d in dims)))
        sizes = []
        for k, b in enumerate(self.buffers):
            n = evaluate(b.nbytes, env)
            if n < 0:
                raise TensorforgeError(f"arena buffer {k} has a negative size ({b.nbytes} = {n}) at "
                                       f"{self.describe_dims(dims)}")
            sizes.append(n)
        return sizes

    def offsets_for(self, dims: Sequence[int]) -> tuple[list[int], int]:
        """(offset of every buffer, arena bytes) for the symbol values ``dims``; cached."""
        key = tuple(int(d) for d in dims)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        result = place(self.sizes_for(key), [(b.start, b.end) for b in self.buffers])
        with self._lock:
            self._cache[key] = result
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return result

    def describe_dims(self, dims: Sequence[int]) -> str:
        return ", ".join(f"{s}={d}" for s, d in zip(self.symbols, dims))

    def to_json(self) -> dict[str, Any]:
        return {"symbols": self.symbols, "buffers": [b.to_json() for b in self.buffers]}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "DynamicPlan":
        return DynamicPlan([str(s) for s in d["symbols"]], [PlannedBuffer.from_json(b) for b in d["buffers"]])
