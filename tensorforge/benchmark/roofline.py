"""The machine's ceilings for ``tensorforge bench``: peak GEMM GFLOP/s and copy bandwidth.

Measured once (``tensorforge bench --roofline``) and cached as JSON in the tensorforge cache
directory, keyed by CPU model and core count, so later runs reuse them.  The GEMM peak is
NumPy's BLAS on a large fp32 matmul on all threads (BLAS is the best GEMM the machine has);
the bandwidth is a large array copy split over all cores, counting read and write bytes.
Both are best-of-several, because on a shared machine the fastest run is the least disturbed.
"""
from __future__ import annotations

import json
import os
import platform
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


def measure_gemm_gflops(n: int = 2048, repeats: int = 5) -> float:
    """Best-of-``repeats`` GFLOP/s of an ``n``^3 fp32 matmul in NumPy's BLAS (its default threads)."""
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
