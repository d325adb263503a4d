"""256x256x256 matmul: the default nest against schedules built from the primitives.

    .venv/bin/python -m tests.schedule.bench_matmul            # OMP_NUM_THREADS=1 for one core

Prints min and median time over repeated calls (min is robust when other processes share the
cores), GFLOP/s, and the speed-up over the unscheduled default nest.
"""
from __future__ import annotations

import time

import numpy as np

from tensorforge.schedule import Schedule, default_schedule
from tests.schedule.kernels import build, inputs_for, lowered, matmul

SIZE = 256


def ikj(s: Schedule) -> None:
    """The textbook schedule: i-k-j with a row accumulator, j split and vectorized, i parallel."""
    s.cache_write("0", "0.0")
    s.reorder("0.2", "0.1")
    _, ji = s.split("0.1", 16)
    s.vectorize(ji)
    s.parallel("0.0")


def register_tiled(s: Schedule, ti: int = 8, tj: int = 32) -> None:
    """An ti x tj accumulator tile kept in registers across the whole k loop."""
    io, jo, ii, ji = s.tile("0.0", "0.1", ti, tj)
    s.cache_write("0", jo)
    s.reorder("0.2", ii, ji)
    s.vectorize(ji)
    s.unroll(ii, ti)
    s.parallel(io)


VARIANTS = {
    "default nest (unscheduled)": lambda s: None,
    "default_schedule()": lambda s: default_schedule(s.fn),
    "ikj + cache_write + split/vec j + par i": ikj,
    "tile 8x32 + cache_write + k outer": register_tiled,
}


def measure(f, xs, reps: int = 50) -> tuple[float, float]:
    f(*xs)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f(*xs)
        ts.append(time.perf_counter() - t)
    return float(np.min(ts)), float(np.median(ts))


def main() -> None:
    kernel = matmul(SIZE, SIZE, SIZE)
    xs = inputs_for(kernel)
    ref = xs[0].astype(np.float64) @ xs[1]
    flops = 2.0 * SIZE ** 3
    base = None
    for name, steps in VARIANTS.items():
        s = Schedule(lowered(kernel))
        steps(s)
        f = build(s.fn, "bench_matmul")
        err = float(np.abs(f(*xs)[0] - ref).max())
        mn, md = measure(f, xs)
        base = base or mn
        print(f"{name:42s} min {mn * 1e3:8.3f} ms  median {md * 1e3:8.3f} ms  {flops / mn / 1e9:7.1f} GFLOP/s  "
              f"x{base / mn:6.1f}  max err {err:.1e}")


if __name__ == "__main__":
    main()
