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

from ..errors import TensorforgeError
from .native import NativeModel

_LOOP_C = r"""
#include <time.h>
typedef void (*tf_run_fn)(void* const*, void* const*, char*, const char*);
/* cpu != 0: the calling thread's CPU time (time other processes run on its core is left out) */
double tf_time_loop(void* fn, void* const* in, void* const* out, char* arena, const char* w, long n, int cpu) {
  struct timespec a, b;
  clockid_t clock = cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  clock_gettime(clock, &a);
  for (long i = 0; i < n; i++) ((tf_run_fn)fn)(in, out, arena, w);
  clock_gettime(clock, &b);
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
        "tf_time_loop", [ctypes.c_void_p] * 5 + [ctypes.c_long, ctypes.c_int], ctypes.c_double)
    return fn


def measure_call_overhead(model: NativeModel, inputs: Sequence[Any], call: Callable[[], Any] | None = None,
                          blocks: int = 15, calls_per_block: int = 200, cpu_time: bool = False) -> CallOverhead:
    """Times ``call`` (default: ``model.run(inputs)``) against ``tf_run`` in a C loop.

    ``cpu_time``: both sides count the calling thread's CPU time instead of wall time, so the time
    other processes take the core away is left out (a loaded machine); meaningful on one thread
    (the kernels then run on the calling thread).

    The C loop reuses the pointers of the last Python call (whose result it holds meanwhile), so
    both touch the same memory.  (Dynamic models take two more arguments: not supported here.)
    """
    if model.is_dynamic:
        raise TensorforgeError("measure_call_overhead times tf_run: not for models with symbolic dims")
    call = call or (lambda: model.run(inputs))
    clock = time.thread_time if cpu_time else time.perf_counter
    loop = _loop_function()
    call()                                              # warm-up
    entry = ctypes.cast(model.fn, ctypes.c_void_p).value
    c_times, py_times = [], []
    for _ in range(blocks):
        # re-applies this model's thread count and leaves this call's pointers in the arena; the
        # result is held while the C loop writes into it (once dropped, its memory may be reused)
        held = call()
        in_addr, out_addr, arena, weights = (a.value for a in model._call_args)
        c_times.append(loop(entry, in_addr, out_addr, arena, weights, calls_per_block, int(cpu_time)))
        del held
        t0 = clock()
        for _ in range(calls_per_block):
            call()
        py_times.append((clock() - t0) / calls_per_block)
    diffs = sorted(p - c for p, c in zip(py_times, c_times))
    q = statistics.quantiles(diffs, n=4) if len(diffs) >= 2 else [diffs[0]] * 3
    return CallOverhead(statistics.median(c_times) * 1e6, statistics.median(py_times) * 1e6,
                        blocks, calls_per_block, (q[2] - q[0]) * 1e6, min(c_times) * 1e6, min(py_times) * 1e6)


_NOOP_C = r"""
void tf_noop_run(void* const* in, void* const* out, char* arena, const char* w) {
  (void)in; (void)out; (void)arena; (void)w;
}
"""


def measure_python_path(model: NativeModel, call: Callable[[], Any], calls: int = 2000, repeats: int = 15,
                        cpu_time: bool = True) -> tuple[float, float]:
    """(median, fastest) microseconds of ``call`` with the model's ``tf_run`` swapped for an empty C
    function of the same signature: the Python call path alone (checks, pointers, outputs, the
    ctypes call), without the kernels and without what running them between Python calls costs
    in caches.  For a measurement on a model nothing else is calling (the swap is not
    thread-safe); outputs are left unwritten meanwhile."""
    from ..codegen.c.toolchain import compile_c
    if model.is_dynamic:
        raise TensorforgeError("measure_python_path swaps tf_run: not for models with symbolic dims")
    noop = compile_c(_NOOP_C, name="tf_noop_run").function("tf_noop_run", [ctypes.c_void_p] * 4, None)
    clock = time.thread_time if cpu_time else time.perf_counter
    real = model.fn
    model.fn = noop
    model._setup_fast()             # the C call path (fastcall.py) calls the function it was made with
    try:
        call()
        times = []
        for _ in range(repeats):
            t0 = clock()
            for _ in range(calls):
                call()
            times.append((clock() - t0) / calls * 1e6)
    finally:
        model.fn = real
        model._setup_fast()
    return statistics.median(times), min(times)
