"""Timing for the tune_* benchmarks: contenders in alternating blocks with a pause between them.

Interleaving single calls (A B C A B C) is unfair on a 2-core machine when the contenders bring
their own thread pools (torch's OpenMP, OpenBLAS's pthreads, our libgomp): the pool that just ran
keeps its threads spinning for a while after a call and starves the next contender's threads.
So each contender runs a block (one warm-up call, then ``reps`` timed calls) after a ``pause``
that lets the other pools go to sleep, blocks alternate for ``rounds`` rounds, and the result is
the median of block medians (per-round ratios are what the scripts report next to them).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable


def time_blocks(contenders: dict[str, Callable[[], object]], rounds: int = 5, reps: int = 5,
                pause: float = 0.3) -> dict[str, list[float]]:
    """Per contender, the median seconds of each round's block."""
    out: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            time.sleep(pause)
            fn()
            samples = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t)
            out[name].append(statistics.median(samples))
    return out

