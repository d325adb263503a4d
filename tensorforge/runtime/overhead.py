"""How much a Python call of a native model costs on top of its kernels.

The kernels' own time is measured by calling ``tf_run`` from a tight C loop (same pointers,
same arena); the Python time by calling the model as a user would.  Blocks of both alternate,
so a slow spell of a shared machine hits both, and the medians of the per-block means are
compared.  Needs a C compiler (the loop is compiled once and cached).
"""
from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .native import NativeModel

_LOOP_C = r"""
#include <time.h>
typedef void (*tf_run_fn)(void* const*, void* const*, char*, const char*);
double tf_time_loop(void* fn, void* const* in, void* const* out, char* arena, const char* w, long n) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) ((tf_run_fn)fn)(in, out, arena, w);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec)) / (double)n;
}
"""


@dataclass
class CallOverhead:
    c_loop_us: float          # tf_run called from C: the kernels' own time
    python_us: float          # one model call from Python
    blocks: int
    calls_per_block: int
    spread_us: float          # interquartile range of the per-block overhead (noise)
    c_loop_min_us: float      # fastest block of each: what is left when the machine is quiet
    python_min_us: float

    @property
    def overhead_us(self) -> float:
        """Median Python time minus median C time."""
        return self.python_us - self.c_loop_us

    @property
    def overhead_min_us(self) -> float:
        """Fastest Python block minus fastest C block: robust to other tenants' load."""
        return self.python_min_us - self.c_loop_min_us


def _loop_function():
    from ..codegen.c.toolchain import compile_c
    fn = compile_c(_LOOP_C, name="tf_time_loop").function(
        "tf_time_loop", [ctypes.c_void_p] * 5 + [ctypes.c_long], ctypes.c_double)
    return fn


def measure_call_overhead(model: NativeModel, inputs: Sequence[Any], call: Callable[[], Any] | None = None,
                          blocks: int = 15, calls_per_block: int = 200) -> CallOverhead:
    """Times ``call`` (default: ``model.run(inputs)``) against ``tf_run`` in a C loop.

    The C loop reuses the pointers of the last Python call, so both touch the same memory.
    """
    call = call or (lambda: model.run(inputs))
    loop = _loop_function()
    call()                                              # warm-up; leaves valid pointers behind
    entry = ctypes.cast(model.fn, ctypes.c_void_p).value
    in_addr, out_addr, arena, weights = (a.value for a in model._call_args)
    c_times, py_times = [], []
    for _ in range(blocks):
        call()                                          # re-apply this model's thread count
        c_times.append(loop(entry, in_addr, out_addr, arena, weights, calls_per_block))
        t0 = time.perf_counter()
        for _ in range(calls_per_block):
            call()
        py_times.append((time.perf_counter() - t0) / calls_per_block)
    diffs = sorted(p - c for p, c in zip(py_times, c_times))
    q = statistics.quantiles(diffs, n=4) if len(diffs) >= 2 else [diffs[0]] * 3
    return CallOverhead(statistics.median(c_times) * 1e6, statistics.median(py_times) * 1e6,
                        blocks, calls_per_block, (q[2] - q[0]) * 1e6, min(c_times) * 1e6, min(py_times) * 1e6)
