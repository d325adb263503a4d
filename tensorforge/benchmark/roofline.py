"""The machine's ceilings for ``tensorforge bench``: peak GEMM GFLOP/s and copy bandwidth.

Measured once (``tensorforge bench --roofline``) and cached as JSON in the tensorforge cache
directory, keyed by CPU model and core count, so later runs reuse them.  The GEMM peak is
NumPy's BLAS on a large fp32 matmul on all threads (BLAS is the best GEMM the machine has),
run in a fresh process without ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE``: an environment that
pins OpenBLAS to an older core type (this workplace sets Haswell, an AVX2 kernel) halves it on an
AVX-512 machine (measured here: 200 GFLOP/s in-process against 390-415 clean on 2 threads), and a
peak below what our own kernels reach makes every "% of peak" meaningless.  The bandwidth is a
large array copy split over all cores, counting read and write bytes.  Both are best-of-several,
because on a shared machine the fastest run is the least disturbed.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from ..codegen.c.toolchain import cache_dir

CACHE_NAME = "roofline.json"


@dataclass(frozen=True)
class Roofline:
    gemm_gflops: float       # on ``threads`` threads
    copy_gbs: float          # read + write bytes per second / 1e9
    threads: int
    cpu: str
    measured: str            # UTC time of the measurement
    load: float = 0.0        # 1-minute load average then (above ``threads``: the numbers are low)

    def peak_gflops(self, threads: int | None = None) -> float:
        """Peak for ``threads`` threads, assuming GEMM throughput scales with cores (it does on
        a machine whose cores each have their own FMA units)."""
        if not threads:
            return self.gemm_gflops
        return self.gemm_gflops * min(threads, self.threads) / self.threads

    def balance(self, threads: int | None = None) -> float:
        """Flops per byte at which a model turns from memory-bound to compute-bound."""
        return self.peak_gflops(threads) / self.copy_gbs


def host_key() -> dict:
    """What the cached numbers are valid for: the CPU model and how many cores we may use."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1}


# environment variables that make OpenBLAS run another CPU's kernels or cache blocking
_BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def measure_gemm_gflops(n: int = 2048, repeats: int = 5) -> float:
    """Best-of-``repeats`` GFLOP/s of an ``n``^3 fp32 matmul in NumPy's BLAS (its default threads),
    in a fresh process without ``_BLAS_OVERRIDES`` (in this one when that process fails)."""
    env = {k: v for k, v in os.environ.items() if k not in _BLAS_OVERRIDES}
    code = ("import sys; from tensorforge.benchmark.roofline import _gemm_gflops_here; "
            f"print(_gemm_gflops_here({int(n)}, {int(repeats)}))")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        if out.returncode == 0:
            return float(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        pass
    return _gemm_gflops_here(n, repeats)


def _gemm_gflops_here(n: int, repeats: int) -> float:
    """``measure_gemm_gflops`` in this process, as its BLAS is configured."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    c = np.empty((n, n), np.float32)
    np.matmul(a, b, out=c)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


def measure_copy_gbs(threads: int, mib: int = 512, repeats: int = 5) -> float:
    """Best-of-``repeats`` copy bandwidth of a ``mib`` MiB array (larger than most L3 caches),
    split into one chunk per thread (NumPy releases the GIL while copying)."""
    n = mib * (1 << 20) // 4
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    bounds = np.linspace(0, n, threads + 1).astype(int)
    chunks = [(dst[lo:hi], src[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats + 1):          # the first round faults the pages in
            t0 = time.perf_counter()
            list(pool.map(lambda c: np.copyto(*c), chunks))
            best = min(best, time.perf_counter() - t0)
    return 2.0 * src.nbytes / best / 1e9


def measure_roofline() -> Roofline:
    key = host_key()
    return Roofline(measure_gemm_gflops(), measure_copy_gbs(key["threads"]), key["threads"], key["cpu"],
                    time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), load_average())


def load_average() -> float:
    """The 1-minute load average (0 where the OS does not say)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def cache_path():
    return cache_dir() / CACHE_NAME


def cached_roofline() -> Roofline | None:
    """The cached measurement for this host, or None (none yet, another host, unreadable)."""
    try:
        data = json.loads(cache_path().read_text())
        r = Roofline(**data)
    except (OSError, ValueError, TypeError):
        return None
    key = host_key()
    return r if (r.cpu, r.threads) == (key["cpu"], key["threads"]) else None


def get_roofline(measure: bool = False) -> Roofline | None:
    """With ``measure``, measures and caches; otherwise the cached values (None if there are none)."""
    if not measure:
        return cached_roofline()
    r = measure_roofline()
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(r), indent=1))
    os.replace(tmp, path)
    return r
