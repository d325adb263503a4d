"""Generated bf16 GEMM (``codegen/c/bf16gemm.py``) against the machine's ``vdpbf16ps`` peak and fp32 BLAS.

    .venv/bin/python benchmarks/bf16_gemm.py                    # 1 and 2 threads
    .venv/bin/python benchmarks/bf16_gemm.py --threads 1 --rounds 5 --reps 9

What is measured, per thread count T (each in a fresh subprocess whose environment sets
OPENBLAS_NUM_THREADS=T before NumPy loads, and drops OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE):

* **peak**: a generated C loop that does nothing but ``vdpbf16ps`` (zmm) on 8, 12 or 16
  independent register accumulators (no loads), on T OpenMP threads at once; the best of the three
  is the peak.  One 512-bit ``vdpbf16ps`` is 16 lanes x 2 bf16 multiply-adds = 64 flops, so
  GFLOP/s = instructions/s x 64.
* **GEMM**: the generated kernel (``bf16gemm.source(..., threads=T)``, B packed to bf16 once
  beforehand, f32 A rounded to bf16 inside the kernel, with a bias) on 1024^3 and BERT-base shapes
  (M = 128 tokens: QKV/output projection 768x768, FFN up 768x3072 and down 3072x768; batch-1 decode
  M = 1), in GFLOP/s (2 M N K / time) and % of the T-thread peak.  The first call is checked
  bit-exact against ``bf16gemm.reference`` on its first and last rows.
* **numpy fp32**: ``A @ B`` in float32 on the same shape, GFLOP/s; ``bf16/fp32`` is the ratio.

Every time is a median: ``--rounds`` rounds, each timing the kernel, the peak loop and NumPy back
to back, each as the median of ``--reps`` calls after one warm-up call; the table reports medians
over the rounds (wall clock).  The % of peak is the median of the per-round ratios, so a clock
that drifts between rounds (a shared machine's does) cancels out.  Without AVX512_BF16 the scalar
fallback runs (slow; no peak is shown) unless ``--skip-scalar``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time

from tensorforge.benchmark.child import run_child

# (label, M, N, K)
SHAPES = [("square 1024^3", 1024, 1024, 1024), ("BERT proj 128x768x768", 128, 768, 768),
          ("BERT FFN up 128x768->3072", 128, 3072, 768), ("BERT FFN down 128x3072->768", 128, 768, 3072),
          ("batch-1 1x768x768", 1, 768, 768)]
PEAK_ACCUMULATORS = (8, 12, 16)
# About 0.15 G instructions per peak run: ~50 ms at one per cycle.
PEAK_INSTRUCTIONS = 150_000_000
FLOPS_PER_INSTRUCTION = 64


def peak_source(accumulators: int) -> str:
    """C text of ``tf_bf16_peak_<n>(iters, threads)``: ``accumulators`` independent vdpbf16ps
    chains per thread, operands pinned in registers by an empty asm so gcc can neither hoist nor
    fold.  The operands are small (1.0 x 2^-20 per product) so nothing overflows or goes tiny."""
    names = [f"c{i}" for i in range(accumulators)]
    init = "\n".join(f"  __m512 {c} = _mm512_set1_ps((float)(seed + {i}));" for i, c in enumerate(names))
    body = "\n".join(f"    {c} = _mm512_dpbf16_ps({c}, a, b);" for c in names)
    total = " + ".join(f"_mm512_reduce_add_ps({c})" for c in names)
    return f"""
static double tf_bf16_peak_one_{accumulators}(long iters, int seed)
{{
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F803F80), b = (__m512bh)_mm512_set1_epi32(0x35803580);
{init}
  for (long i = 0; i < iters; i++) {{
    __asm__ volatile("" : "+v"(a), "+v"(b));
{body}
  }}
  return {total};
}}

double tf_bf16_peak_{accumulators}(long iters, int threads)
{{
  double total = 0;
  #pragma omp parallel num_threads(threads) reduction(+:total)
  total += tf_bf16_peak_one_{accumulators}(iters, threads);
  return total;
}}
"""


def median_time(fn, reps: int) -> float:
    """Median wall time of ``reps`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Peak:
    """The ``vdpbf16ps`` peak of ``threads`` threads: the best accumulator count is picked once
    (``calibration``), then ``rate()`` re-measures it whenever asked, so each GEMM timing can be
    set against a peak taken moments before."""

    def __init__(self, threads: int, rounds: int, reps: int):
        from tensorforge.codegen.c import compile_c

        src = "#include <immintrin.h>\n" + "".join(peak_source(n) for n in PEAK_ACCUMULATORS)
        lib = compile_c(src, name="bench_bf16_peak")
        self.threads, self.reps = threads, reps
        self.fns = {n: lib.function(f"tf_bf16_peak_{n}", [ctypes.c_long, ctypes.c_int], ctypes.c_double)
                    for n in PEAK_ACCUMULATORS}
        self.calibration = {n: statistics.median(self.rate(n) for _ in range(rounds)) for n in PEAK_ACCUMULATORS}
        self.accumulators = max(self.calibration, key=self.calibration.get)
        self.samples = [self.calibration[self.accumulators]]

    def rate(self, accumulators: int | None = None) -> float:
        """GFLOP/s of one median-of-reps measurement."""
        n = accumulators or self.accumulators
        iters = PEAK_INSTRUCTIONS // n
        seconds = median_time(lambda: self.fns[n](iters, self.threads), self.reps)
        gflops = self.threads * iters * n * FLOPS_PER_INSTRUCTION / seconds / 1e9
        if accumulators is None:
            self.samples.append(gflops)
        return gflops


def kernel_function(threads: int):
    """The generated bf16 GEMM for the host, as a ctypes function."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c import bf16gemm, compile_c

    target = Target.host()
    name = f"bench_bf16gemm_{threads}t"
    argtypes = [ctypes.c_long] * 3 + [ctypes.c_void_p, ctypes.c_long] + [ctypes.c_void_p] * 3 + [ctypes.c_long]
    return compile_c(bf16gemm.source(name, target, threads=threads), target, name=name).function(name, argtypes)


def measure_gemm(fn, peak: Peak | None, label: str, M: int, N: int, K: int, rounds: int, reps: int) -> dict:
    """GFLOP/s of the generated kernel, its share of the peak measured in the same round, and
    GFLOP/s of NumPy fp32 on one shape."""
    import numpy as np
    from tensorforge.codegen.c import bf16gemm

    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    packed = bf16gemm.pack_b(b)
    c = np.empty((M, N), np.float32)
    args = (M, N, K, a.ctypes.data, K, packed.ctypes.data, bias.ctypes.data, c.ctypes.data, N)
    fn(*args)
    rows = sorted({0, M - 1})
    if not np.array_equal(c[rows].view(np.uint32), bf16gemm.reference(a[rows], b, bias).view(np.uint32)):
        raise SystemExit(f"bf16 GEMM {label}: result differs from bf16gemm.reference")
    flops = 2.0 * M * N * K
    ours, shares, blas = [], [], []
    for _ in range(rounds):
        peak_now = peak.rate() if peak else None
        ours.append(flops / median_time(lambda: fn(*args), reps) / 1e9)
        if peak:
            shares.append(ours[-1] / peak_now)
        blas.append(flops / median_time(lambda: a @ b, reps) / 1e9)
        time.sleep(0.3)                  # OpenBLAS workers spin a while after a call: let them sleep
    return {"label": label, "gflops": statistics.median(ours), "numpy_gflops": statistics.median(blas),
            "share": statistics.median(shares) if shares else None}


def measure(threads: int, rounds: int, reps: int) -> dict:
    """Runs inside the per-thread-count subprocess."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c import bf16gemm

    target = Target.host()
    path = bf16gemm.isa(target)
    peak = Peak(threads, rounds, reps) if path == bf16gemm.AVX512_BF16 else None
    fn = kernel_function(threads)
    rows = [measure_gemm(fn, peak, label, M, N, K, rounds, reps) for label, M, N, K in SHAPES]
    peak_info = {"gflops": statistics.median(peak.samples), "calibration": peak.calibration} if peak else None
    return {"threads": threads, "isa": path, "tiling": bf16gemm.Tiling.for_target(target).__dict__, "peak": peak_info,
            "rows": rows}


def run_subprocess(threads: int, rounds: int, reps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    return run_child(__file__, dict(threads=threads, rounds=rounds, reps=reps), env, f"{threads} thread(s)")


def report(run: dict) -> None:
    peak = run["peak"]
    tiling = run["tiling"]
    print(f"\n== {run['threads']} thread(s); path {run['isa']}, tile {tiling['mr']} rows x {tiling['nrv']} vectors, "
          f"kc {tiling['kc']}")
    if peak:
        per = ", ".join(f"{n}: {g:.0f}" for n, g in peak["calibration"].items())
        print(f"vdpbf16ps peak {peak['gflops']:.1f} GFLOP/s, median of every round  (by accumulators: {per})")
    print(f"{'shape':30s} {'bf16 GFLOP/s':>12s} {'% peak':>7s} {'fp32 GFLOP/s':>13s} {'bf16/fp32':>9s}")
    for row in run["rows"]:
        share = f"{100 * row['share']:6.1f}%" if row["share"] is not None else "    n/a"
        print(f"{row['label']:30s} {row['gflops']:12.1f} {share:>7s} {row['numpy_gflops']:13.1f} "
              f"{row['gflops'] / row['numpy_gflops']:9.2f}")
    print("(% peak: median over rounds of the kernel's GFLOP/s / the peak measured just before it)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(**json.loads(args.child))))
        return
    print(f"bf16 GEMM, medians of {args.rounds} rounds x {args.reps} calls (wall clock)")
    for threads in args.threads:
        report(run_subprocess(threads, args.rounds, args.reps))


if __name__ == "__main__":
    main()
