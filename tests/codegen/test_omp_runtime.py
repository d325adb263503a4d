"""tensorforge's OpenMP runtime (codegen/c/omp_runtime.py): OpenMP's semantics hold (distinct ids,
fixed team sizes, barriers, dynamic and combined loops, critical sections, nested teams of one),
also when there are more ids than CPUs so that ids must run as coroutines, across fork, and with
two callers at once; libgomp stays one environment variable away."""
import ctypes
import platform
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from tensorforge.codegen import Target
from tensorforge.codegen.c import omp_runtime
from tensorforge.codegen.c.toolchain import compile_c
from tensorforge.codegen.target import compiler_version

pytestmark = pytest.mark.skipif(
    not omp_runtime.wanted("omp", platform.machine(), compiler_version(Target.host().cc)),
    reason="the runtime is built for GCC on x86-64 Linux")

PROGRAM = r"""
#include <omp.h>

/* every id writes its slot, all wait, every id reads its neighbour's: wrong without the barrier
   (the slots are the call's own: two callers at once must not share them) */
long tf_t_barriers(int regions, int nthr)
{
  volatile long slot[64];
  long bad = 0;
  for (int r = 0; r < regions; r++) {
    #pragma omp parallel num_threads(nthr)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      for (int phase = 0; phase < 4; phase++) {
        slot[t] = 1000L * r + 10 * phase + t;
        #pragma omp barrier
        if (slot[(t + 1) % T] != 1000L * r + 10 * phase + (t + 1) % T) {
          #pragma omp critical
          bad++;
        }
        #pragma omp barrier
      }
    }
  }
  return bad;
}

/* a dynamic loop, a static one reading what other ids wrote, a nowait dynamic loop counting down,
   then a combined parallel loop */
void tf_t_loops(long n, int nthr, double *out)
{
  #pragma omp parallel num_threads(nthr)
  {
    #pragma omp for schedule(dynamic, 3)
    for (long i = 0; i < n; i++) out[i] = (double)i;
    #pragma omp for schedule(static)
    for (long i = 0; i < n; i++) out[n + i] = out[i] + out[n - 1 - i];
    #pragma omp for schedule(dynamic, 1) nowait
    for (long i = n - 1; i >= 0; i -= 2) out[n + i] *= 2.0;
  }
  #pragma omp parallel for schedule(dynamic, 7) num_threads(nthr)
  for (long i = 0; i < n; i++) out[2 * n + i] = 3.0 * (double)i;
}

/* the team: its size, which ids ran, and the size of a nested team */
int tf_t_team(int nthr, int *ids, int *nested)
{
  int size = 0;
  #pragma omp parallel num_threads(nthr)
  {
    const int t = omp_get_thread_num();
    #pragma omp critical
    {
      ids[t]++;
      size = omp_get_num_threads();
    }
    #pragma omp parallel
    nested[t] = omp_get_num_threads() + 10 * omp_in_parallel() + 100 * omp_get_thread_num();
  }
  return size;
}
"""


class Program:
    """The test program's library and its three functions."""

    def __init__(self):
        self.library = compile_c(PROGRAM, name="omp_runtime_test")
        self.barriers = self.library.function("tf_t_barriers", [ctypes.c_int, ctypes.c_int], ctypes.c_long)
        self.loops = self.library.function("tf_t_loops", [ctypes.c_long, ctypes.c_int, ctypes.c_void_p], None)
        self.team = self.library.function("tf_t_team", [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int)


@pytest.fixture(scope="module")
def lib():
    return Program()


def _loops_expected(n: int) -> np.ndarray:
    i = np.arange(n, dtype=np.float64)
    second = i + i[::-1]
    second[n - 1::-2] *= 2.0
    return np.concatenate([i, second, 3.0 * i])


def test_the_library_carries_the_runtime_not_libgomp(lib):
    assert omp_runtime.MARK in lib.library.source_path.read_text()
    if shutil.which("nm"):
        undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib.library.path)], capture_output=True,
                                   text=True, timeout=60).stdout
        assert "GOMP_" not in undefined and "omp_" not in undefined
    if shutil.which("ldd"):
        assert "libgomp" not in subprocess.run(["ldd", str(lib.library.path)], capture_output=True, text=True,
                                               timeout=60).stdout


@pytest.mark.parametrize("nthr", [2, 3, 7])
def test_barriers_hold_every_id(lib, nthr):
    assert lib.barriers(300, nthr) == 0


@pytest.mark.parametrize("nthr", [1, 2, 5])
@pytest.mark.parametrize("n", [1, 2, 37, 1000])
def test_dynamic_static_and_combined_loops_cover_every_iteration_once(lib, nthr, n):
    out = np.full(3 * n, np.nan)
    lib.loops(n, nthr, out.ctypes.data)
    np.testing.assert_array_equal(out, _loops_expected(n))


@pytest.mark.parametrize("nthr", [1, 2, 6])
def test_team_ids_are_distinct_and_nested_teams_have_one(lib, nthr):
    ids = np.zeros(64, dtype=np.int32)
    nested = np.zeros(64, dtype=np.int32)
    assert lib.team(nthr, ids.ctypes.data, nested.ctypes.data) == nthr
    assert ids[:nthr].tolist() == [1] * nthr and not ids[nthr:].any()
    # a nested region is a team of one; omp_in_parallel sees the enclosing team of more than one
    assert nested[:nthr].tolist() == [1 + 10 * (nthr > 1)] * nthr


def test_two_callers_at_once_both_get_right_results(lib):
    n, errors = 5000, []

    def call():
        for _ in range(30):
            out = np.zeros(3 * n)
            lib.loops(n, 2, out.ctypes.data)
            if not np.array_equal(out, _loops_expected(n)):
                errors.append("loops")
            if lib.barriers(5, 2) != 0:
                errors.append("barriers")

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and errors == []


_CHILD = r"""
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
lib.tf_t_barriers.argtypes, lib.tf_t_barriers.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_long
mode = sys.argv[2]
if mode == "one-cpu":
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    bad = lib.tf_t_barriers(200, 4) + lib.tf_t_barriers(50, 16)
    sys.exit(1 if bad else 0)
assert lib.tf_t_barriers(20, 2) == 0          # the parent's workers exist now
pid = os.fork()
if pid == 0:
    os._exit(1 if lib.tf_t_barriers(50, 3) else 0)
_, status = os.waitpid(pid, 0)
sys.exit(0 if os.waitstatus_to_exitcode(status) == 0 and lib.tf_t_barriers(20, 2) == 0 else 1)
"""


@pytest.mark.parametrize("mode", ["one-cpu", "fork"])
def test_more_ids_than_cpus_and_a_forked_child(lib, mode):
    """On one CPU, with 4 and 16 ids, most ids run as coroutines of whichever thread waits at a
    barrier; a forked child (no workers of its own yet) starts its own."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(lib.library.path), mode], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_libgomp_on_request(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_OPENMP", "libgomp")
    assert not omp_runtime.wanted(PROGRAM, platform.machine(), compiler_version(Target.host().cc))
    lib = compile_c(PROGRAM, name="omp_runtime_test")
    assert omp_runtime.MARK not in lib.source_path.read_text()
    out = np.zeros(3 * 37)
    lib.function("tf_t_loops", [ctypes.c_long, ctypes.c_int, ctypes.c_void_p], None)(37, 2, out.ctypes.data)
    np.testing.assert_array_equal(out, _loops_expected(37))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_are_not_left_pinned(lib):
    """A worker moves off the caller's CPU only for a region (``tfo_move_off``): left pinned, it
    would share its one CPU with the caller whenever the scheduler moves the caller there.  After
    regions with sleeps between them (workers sleep, wake, maybe move), every thread of the process
    may run on every CPU the process may."""
    import glob
    import os
    import time

    def masks() -> set[str]:
        out = set()
        for status in glob.glob("/proc/self/task/*/status"):
            try:
                with open(status) as f:
                    out |= {line.split()[1] for line in f if line.startswith("Cpus_allowed_list")}
            except OSError:           # a thread that ended meanwhile
                pass
        return out

    want = {line.split()[1] for line in open("/proc/self/status") if line.startswith("Cpus_allowed_list")}
    for _ in range(10):
        assert lib.barriers(20, 2) == 0
        time.sleep(0.005)             # past the workers' spin: they sleep and are woken
    deadline = time.monotonic() + 0.5      # well before an idle worker ends (2 s)
    while masks() != want and time.monotonic() < deadline:   # a worker restores its mask after its region
        time.sleep(0.01)
    assert masks() == want, f"thread CPU masks {masks()} != the process's {want} (cpus: {os.cpu_count()})"
