"""Generated fp32 GEMM against NumPy's BLAS (``A @ B``) on one size, 1 and 2 threads.

    .venv/bin/python benchmarks/gemm_kernel.py                 # 1024^3, threads 1 and 2
    .venv/bin/python benchmarks/gemm_kernel.py --sweep         # also try a few tilings, 1 thread
    .venv/bin/python benchmarks/gemm_kernel.py --params mr=12,nr=32,kc=384

Each thread count runs in its own subprocess whose environment sets OPENBLAS_NUM_THREADS (read by
OpenBLAS when NumPy loads, so it must be set before the import) and drops OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE, which this workplace may set for old OpenBLAS builds and which slow a current
one. The subprocess reports which OpenBLAS kernel it then runs (threadpoolctl when installed, else
OpenBLAS's own ``get_corename`` through ctypes). The machine is shared and noisy, so every number
is a median: ``--rounds`` rounds, each timing NumPy, the prepacked-B kernel (weights packed ahead
of time) and the full kernel (B packed in every call) back to back as the median of ``--reps``
calls after a warm-up; ratios are taken within a round, then their median is reported. Two
clocks: wall time, and CPU time (this thread's with 1 thread; the process's / T with T threads),
which other tenants' load cannot inflate by descheduling us (see ``median_time``).
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import time

from tensorforge.benchmark.child import run_child

SWEEP = [dict(mr=mr, nr=nr, kc=kc) for mr, nr in ((6, 64), (12, 32), (14, 32), (4, 64), (8, 48))
         for kc in (256, 384, 512)] + [
    dict(unroll=2), dict(unroll=4), dict(pack_a=False), dict(loop_order="jr_ir"),
    dict(mr=12, nr=32, loop_order="jr_ir"), dict(nc=4096), dict(schedule="dynamic")]


def parse_params(text: str) -> dict:
    """``mr=12,nr=32,loop_order=ir_jr,pack_a=False`` into GemmParams overrides."""
    out: dict = {}
    for item in filter(None, text.split(",")):
        key, _, value = (x.strip() for x in item.partition("="))
        if key in ("loop_order", "schedule"):
            out[key] = value
        elif key == "pack_a":
            out[key] = value.lower() in ("1", "true", "yes")
        else:
            out[key] = int(value)
    return out


def blas_info() -> dict:
    """OpenBLAS version, kernel and thread count as NumPy loaded them."""
    try:
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            if info.get("internal_api") == "openblas":
                return {"via": "threadpoolctl", "version": info.get("version"),
                        "kernel": info.get("architecture"), "threads": info.get("num_threads")}
    except ImportError:
        pass
    import numpy as np
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "lib*openblas*.so*"))
    if not libs:
        return {"via": "none", "kernel": "unknown (not OpenBLAS?)"}
    lib = ctypes.CDLL(libs[0])
    for prefix, suffix in (("scipy_openblas_", "64_"), ("openblas_", "")):
        corename = getattr(lib, f"{prefix}get_corename{suffix}", None)
        if corename is None:
            continue
        corename.restype = ctypes.c_char_p
        config = getattr(lib, f"{prefix}get_config{suffix}")
        config.restype = ctypes.c_char_p
        threads = getattr(lib, f"{prefix}get_num_threads{suffix}")
        return {"via": "ctypes", "version": config().decode().split()[1], "kernel": corename().decode(),
                "threads": threads()}
    return {"via": "ctypes", "kernel": "unknown"}


def median_time(fn, reps: int, threads: int) -> tuple[float, float]:
    """Median wall time and median CPU time per call, after one warm-up call.

    The CPU clock is immune to being descheduled by the machine's other tenants (cache and memory
    contention still show): with one thread it is this thread's CPU time; with T threads it is the
    process's CPU time / T, the wall time the call would take if its threads were never preempted
    (time a thread spends spinning at a barrier for a late partner still counts, as it should).
    """
    clock = time.thread_time if threads == 1 else time.process_time
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), clock()
        fn()
        cpu.append((clock() - c) / threads)
        wall.append(time.perf_counter() - w)
    return statistics.median(wall), statistics.median(cpu)


def measure(size: int, threads: int, configs: list[dict], rounds: int, reps: int) -> dict:
    """Runs inside the per-thread-count subprocess."""
    import numpy as np
    from tensorforge.codegen import Target
    from tensorforge.codegen.c import GemmKernel, GemmParams

    target = Target.host()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((size, size), dtype=np.float32)
    B = rng.standard_normal((size, size), dtype=np.float32)
    C = np.empty((size, size), dtype=np.float32)
    expected = A.astype(np.float64) @ B.astype(np.float64)
    flop = 2.0 * size**3
    results = []
    for overrides in configs:
        try:
            params = GemmParams.for_target(target, threads=threads, **overrides)
            kernel = GemmKernel(params, target)
        except ValueError as exc:       # a sweep point that cannot exist for this vector width
            results.append({"params": overrides, "error": str(exc)})
            continue
        Bp = kernel.pack_b(B)
        kernel.prepacked(A, Bp, size, C=C)
        err = float(np.abs(C - expected).max() / np.abs(expected).max())
        rows = []   # per round: (numpy, prepacked, full) x (wall, cpu)
        for _ in range(rounds):
            t_np = median_time(lambda: A @ B, reps, threads)
            time.sleep(0.3)             # OpenBLAS's workers spin for a while after a call: let them sleep
            t_pre = median_time(lambda: kernel.prepacked(A, Bp, size, C=C), reps, threads)
            t_full = median_time(lambda: kernel(A, B, C=C), reps, threads)
            time.sleep(0.05)
            rows.append((t_np, t_pre, t_full))
        entry = {"params": dict(params.__dict__), "rel_err": err, "cache_hit": kernel.library.cache_hit}
        for clock, col in (("wall", 0), ("cpu", 1)):
            med = [statistics.median(r[i][col] for r in rows) for i in range(3)]
            entry[clock] = {
                "gflops_numpy": flop / med[0] / 1e9, "gflops_prepacked": flop / med[1] / 1e9,
                "gflops_full": flop / med[2] / 1e9,
                "ratio_prepacked": statistics.median(r[0][col] / r[1][col] for r in rows),
                "ratio_full": statistics.median(r[0][col] / r[2][col] for r in rows),
            }
        results.append(entry)
    return {"threads": threads, "blas": blas_info(), "target": target.key(), "results": results}


def run_subprocess(size: int, threads: int, configs: list[dict], rounds: int, reps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    payload = dict(size=size, threads=threads, configs=configs, rounds=rounds, reps=reps)
    return run_child(__file__, payload, env, f"{threads} thread(s)")


def report(run: dict) -> None:
    blas = run["blas"]
    print(f"\n== {run['threads']} thread(s); NumPy BLAS: OpenBLAS {blas.get('version')} kernel {blas.get('kernel')} "
          f"({blas.get('threads')} threads, read via {blas['via']}); target {run['target']}")
    print(f"{'params':58s} {'clock':5s} {'numpy':>7s} {'prepacked':>10s} {'full':>7s} {'ratio pre':>10s} {'ratio full':>10s}")
    for r in run["results"]:
        p = r["params"]
        if "error" in r:
            print(f"{str(p):58s} skipped: {r['error']}")
            continue
        label = (f"mr={p['mr']} nr={p['nr']} kc={p['kc']} mc={p['mc']} nc={p['nc']} {p['loop_order']} "
                 f"u={p['unroll']} packA={int(p['pack_a'])} {p['schedule']}")
        for clock in ("wall", "cpu"):
            if clock in r:
                m = r[clock]
                print(f"{label:58s} {clock:5s} {m['gflops_numpy']:7.1f} {m['gflops_prepacked']:10.1f} "
                      f"{m['gflops_full']:7.1f} {m['ratio_prepacked']:10.2f} {m['ratio_full']:10.2f}")
                label = ""
        print(f"{'':58s} (GFLOP/s; ratio = numpy time / ours, >1 is faster; rel err {r['rel_err']:.1e})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--params", default="", help="overrides of the default GemmParams, e.g. mr=12,nr=32,kc=384")
    ap.add_argument("--sweep", action="store_true", help="also time a few mr/nr/kc (and other) choices, 1 thread")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(measure(**spec)))
        return
    print(f"fp32 GEMM {args.size}^3; medians of {args.rounds} rounds x {args.reps} calls; thread control: "
          "OPENBLAS_NUM_THREADS in a fresh subprocess per setting (OPENBLAS_CORETYPE/L2_SIZE unset there)")
    base = [parse_params(args.params)]
    for threads in args.threads:
        report(run_subprocess(args.size, threads, base, args.rounds, args.reps))
    if args.sweep:
        report(run_subprocess(args.size, 1, SWEEP, max(2, args.rounds // 2), args.reps))


if __name__ == "__main__":
    main()
