"""Generated int8 GEMM (``codegen/c/qgemm.py``) against the machine's ``vpdpbusd`` (and AMX ``tdpbusd``) peak and fp32 BLAS.

    .venv/bin/python benchmarks/int8_gemm.py                    # 1 and 2 threads
    .venv/bin/python benchmarks/int8_gemm.py --threads 1 --signed --rounds 5

What is measured, per thread count T (each in a fresh subprocess whose environment sets
OPENBLAS_NUM_THREADS=T before NumPy loads, and drops OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE):

* **peak**: a generated C loop that does nothing but ``vpdpbusd`` on 8, 12 or 16 independent
  register accumulators (no loads), on T OpenMP threads at once; the best of the three is the peak.
  One 512-bit ``vpdpbusd`` is 64 multiply-adds = 128 int8 ops (256-bit: 64 ops), so
  GOP/s = instructions/s x 128.  On the AVX-VNNI path the loop and the count use 256 bits.
* **AMX peak** (hosts with AMX-INT8, whose GEMM blocks then run on tiles, ``qgemm_amx.py``): a
  loop of ``tdpbusd`` on 4 independent accumulator tiles (no loads) on T threads; one instruction
  is 16 x 16 x 64 multiply-adds = 32768 ops.  The kernel's % of peak is then against this peak,
  and a column gives its speed as a multiple of the ``vpdpbusd`` peak.
* **GEMM**: the generated kernel (``qgemm.source(..., threads=T)``, B packed once beforehand,
  u8 activations unless ``--signed``) on 1024^3, two int8 convolutions' GEMMs (ResNet-50's
  stage-4 1x1s at 14x14 and 7x7: output channels x pixels x K) and BERT-base shapes (M = 128
  tokens: QKV/output projection 768x768, FFN up 768x3072 and down 3072x768; batch-1 decode M = 1), in GOP/s
  (2 M N K / time) and % of the T-thread peak.  The first call is checked bit-exact against a
  float64 matmul (exact: every sum is an integer below 2^53).
* **numpy fp32**: ``A @ B`` in float32 on the same shape, GFLOP/s, for comparison.

Every time is a median: ``--rounds`` rounds, each timing the kernel, the peak loop and NumPy back
to back, each as the median of ``--reps`` calls after one warm-up call; the table reports medians
over the rounds (wall clock).  The % of peak is the median of the per-round ratios, so a clock
that drifts between rounds (a shared machine's does, by 10% or more) cancels out.
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
SHAPES = [("square 1024^3", 1024, 1024, 1024),
          # ResNet-50's stage-4 entry 1x1 as the conv's GEMM (O x pixels x K): 196 and 49 pixels
          # pad to 13 and 4 panels of 16 (the second wastes 15 of 64 lanes)
          ("conv 512x196x1024 (14x14)", 512, 196, 1024), ("conv 2048x49x1024 (7x7)", 2048, 49, 1024),
          ("BERT proj 128x768x768", 128, 768, 768),
          ("BERT FFN up 128x768->3072", 128, 3072, 768), ("BERT FFN down 128x3072->768", 128, 768, 3072),
          ("batch-1 1x768x768", 1, 768, 768)]
PEAK_ACCUMULATORS = (8, 12, 16)
# About 0.15 G instructions per peak run: ~50 ms at one per cycle.
PEAK_INSTRUCTIONS = 150_000_000


def peak_source(accumulators: int, bits: int) -> str:
    """C text of ``tf_vnni_peak_<n>(iters, threads)``: ``accumulators`` independent dpbusd chains
    per thread, operands pinned in registers by an empty asm so gcc can neither hoist nor fold."""
    v, p = ("__m512i", "_mm512") if bits == 512 else ("__m256i", "_mm256")
    dp = "_mm512_dpbusd_epi32" if bits == 512 else "TF_PEAK_DPBUSD256"
    names = [f"c{i}" for i in range(accumulators)]
    init = "\n".join(f"  {v} {c} = {p}_set1_epi32(seed + {i});" for i, c in enumerate(names))
    body = "\n".join(f"    {c} = {dp}({c}, a, b);" for c in names)
    total = " + ".join(f"tf_peak_sum{bits}({c})" for c in names)
    return f"""
static long tf_peak_one_{accumulators}(long iters, int seed)
{{
  {v} a = {p}_set1_epi32(0x01010101 + seed), b = {p}_set1_epi32(0x02020202);
{init}
  for (long i = 0; i < iters; i++) {{
    __asm__ volatile("" : "+v"(a), "+v"(b));
{body}
  }}
  return {total};
}}

long tf_vnni_peak_{accumulators}(long iters, int threads)
{{
  long total = 0;
  #pragma omp parallel num_threads(threads) reduction(+:total)
  total += tf_peak_one_{accumulators}(iters, threads);
  return total;
}}
"""


PEAK_PRELUDE = """\
#include <immintrin.h>
#if defined(__AVXVNNI__)
#define TF_PEAK_DPBUSD256 _mm256_dpbusd_avx_epi32
#else
#define TF_PEAK_DPBUSD256 _mm256_dpbusd_epi32
#endif
static inline long tf_peak_sum512(__m512i x) { return _mm512_reduce_add_epi32(x); }
static inline long tf_peak_sum256(__m256i x)
{
  int v[8];
  _mm256_storeu_si256((__m256i *)v, x);
  return (long)v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
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
    """The ``vpdpbusd`` peak of ``threads`` threads: the best accumulator count is picked once
    (``calibration``), then ``rate()`` re-measures it whenever asked, so each GEMM timing can be
    set against a peak taken moments before (the clock of a shared machine drifts)."""

    def __init__(self, threads: int, bits: int, rounds: int, reps: int):
        from tensorforge.codegen.c import compile_c

        src = PEAK_PRELUDE + "".join(peak_source(n, bits) for n in PEAK_ACCUMULATORS)
        lib = compile_c(src, name="bench_vnni_peak")
        self.threads, self.reps = threads, reps
        self.ops_per_instruction = bits // 4        # lanes x 4 multiply-adds x 2 ops
        self.fns = {n: lib.function(f"tf_vnni_peak_{n}", [ctypes.c_long, ctypes.c_int], ctypes.c_long)
                    for n in PEAK_ACCUMULATORS}
        self.calibration = {n: statistics.median(self.rate(n) for _ in range(rounds)) for n in PEAK_ACCUMULATORS}
        self.accumulators = max(self.calibration, key=self.calibration.get)
        self.samples = [self.calibration[self.accumulators]]

    def rate(self, accumulators: int | None = None) -> float:
        """GOP/s of one median-of-reps measurement."""
        n = accumulators or self.accumulators
        iters = PEAK_INSTRUCTIONS // n
        seconds = median_time(lambda: self.fns[n](iters, self.threads), self.reps)
        gops = self.threads * iters * n * self.ops_per_instruction / seconds / 1e9
        if accumulators is None:
            self.samples.append(gops)
        return gops


AMX_PEAK_LOOP = """
static long tf_amx_peak_one(long iters)
{
  tf_amx_configure();
  uint8_t src[1024] __attribute__((aligned(64)));
  for (int i = 0; i < 1024; i++) src[i] = (uint8_t)(i * 7 + 1);
  _tile_loadd(4, src, 64); _tile_loadd(5, src, 64); _tile_loadd(6, src, 64); _tile_loadd(7, src, 64);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (long i = 0; i < iters; i++) {      /* the asm statements are volatile: nothing is folded */
    _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7); _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7);
  }
  int32_t out[256] __attribute__((aligned(64)));
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

/* 4 x iters tdpbusd per thread on 4 independent accumulator tiles (no loads); -1 when the OS
   refuses the tile state. */
long tf_amx_peak(long iters, int threads)
{
  if (!tf_amx_ready()) return -1;
  long total = 0;
  #pragma omp parallel num_threads(threads) reduction(+:total)
  total += tf_amx_peak_one(iters);
  return total;
}
"""
# tdpbusd groups (4 instructions of 16 x 16 x 64 multiply-adds) per AMX peak run: ~50 ms at 16 cycles each.
AMX_PEAK_GROUPS = 1_000_000


class AmxPeak(Peak):
    """The ``tdpbusd`` peak of ``threads`` threads (AMX-INT8): 4 independent accumulator tiles, one
    instruction = 16 x 16 x 64 multiply-adds = 32768 int8 ops; same interface as ``Peak``."""

    def __init__(self, threads: int, rounds: int, reps: int):
        from tensorforge.codegen.c import compile_c

        from tensorforge.codegen.c import qgemm_amx

        # the generated kernels' own tile configuration and permission request (qgemm_amx.COMMON)
        src = "#include <immintrin.h>\n#include <stdint.h>\n#include <string.h>\n" + qgemm_amx.COMMON + AMX_PEAK_LOOP
        lib = compile_c(src, name="bench_amx_peak")
        self.threads, self.reps = threads, reps
        self.fn = lib.function("tf_amx_peak", [ctypes.c_long, ctypes.c_int], ctypes.c_long)
        self.calibration = {4: statistics.median(self.rate(4) for _ in range(rounds))}
        self.accumulators = 4
        self.samples = [self.calibration[4]]

    def rate(self, accumulators: int | None = None) -> float:
        seconds = median_time(lambda: self.fn(AMX_PEAK_GROUPS, self.threads), self.reps)
        gops = self.threads * AMX_PEAK_GROUPS * 4 * 32768 / seconds / 1e9
        if accumulators is None:
            self.samples.append(gops)
        return gops


def kernel_function(threads: int, signed: bool):
    """The generated int8 GEMM for the host, as a ctypes function."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c import compile_c, qgemm

    target = Target.host()
    name = f"bench_qgemm_{'s8' if signed else 'u8'}_{threads}t"
    argtypes = [ctypes.c_long] * 3 + [ctypes.c_void_p, ctypes.c_long] + [ctypes.c_void_p] * 3 + [ctypes.c_long]
    return compile_c(qgemm.source(name, target, signed, threads=threads), target, name=name).function(name, argtypes)


def _aligned(x):
    """``x`` copied into 64-byte aligned memory (``runtime.buffers.aligned_empty``)."""
    from tensorforge.runtime.buffers import aligned_empty
    y = aligned_empty(x.nbytes).view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


def measure_gemm(fn, peak: Peak | None, label: str, M: int, N: int, K: int, signed: bool, rounds: int,
                 reps: int) -> dict:
    """GOP/s of the generated kernel, its share of the peak measured in the same round, and
    GFLOP/s of NumPy fp32 on one shape."""
    import numpy as np
    from tensorforge.codegen.c import qgemm

    rng = np.random.default_rng(0)
    a = (rng.integers(-128, 128, (M, K)).astype(np.int8) if signed else rng.integers(0, 256, (M, K)).astype(np.uint8))
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    za = 5 if signed else 128
    # operands 64-byte aligned, as a model's arena and weights are (NumPy's own 16-byte alignment
    # makes AMX tile rows straddle cache lines: half speed)
    a, packed = _aligned(a), _aligned(qgemm.pack_b(b))
    comp = qgemm.compensation(b, za, signed)
    c = _aligned(np.empty((M, N), np.int32))
    args = (M, N, K, a.ctypes.data, a.strides[0], packed.ctypes.data, comp.ctypes.data, c.ctypes.data, N)
    fn(*args)
    exact = ((a.astype(np.float64) - za) @ b.astype(np.float64)).astype(np.int64)
    if not np.array_equal(c, exact):
        raise SystemExit(f"int8 GEMM {label}: result differs from the float64 reference")
    af, bf = a.astype(np.float32), b.astype(np.float32)
    ops = 2.0 * M * N * K
    ours, shares, blas = [], [], []
    for _ in range(rounds):
        peak_now = peak.rate() if peak else None
        ours.append(ops / median_time(lambda: fn(*args), reps) / 1e9)
        if peak:
            shares.append(ours[-1] / peak_now)
        blas.append(ops / median_time(lambda: af @ bf, reps) / 1e9)
        time.sleep(0.3)                  # OpenBLAS workers spin a while after a call: let them sleep
    return {"label": label, "gops": statistics.median(ours), "numpy_gflops": statistics.median(blas),
            "share": statistics.median(shares) if shares else None}


def measure(threads: int, signed: bool, rounds: int, reps: int) -> dict:
    """Runs inside the per-thread-count subprocess."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c import qgemm

    from tensorforge.codegen.c import qgemm_amx

    target = Target.host()
    path = qgemm.isa(target)
    vnni = Peak(threads, 512 if path == qgemm.AVX512_VNNI else 256, rounds, reps) if path != qgemm.SCALAR else None
    amx = AmxPeak(threads, rounds, reps) if qgemm_amx.available(target) else None
    peak = amx or vnni          # the instruction the kernel's blocks run on
    fn = kernel_function(threads, signed)
    rows = [measure_gemm(fn, peak, label, M, N, K, signed, rounds, reps) for label, M, N, K in SHAPES]
    info = {name: {"gops": statistics.median(p.samples), "calibration": p.calibration}
            for name, p in (("vpdpbusd", vnni), ("tdpbusd", amx)) if p is not None}
    return {"threads": threads, "isa": "amx" if amx else path, "tiling": qgemm.Tiling.for_target(target).__dict__,
            "peaks": info, "rows": rows}


def run_subprocess(threads: int, signed: bool, rounds: int, reps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    payload = dict(threads=threads, signed=signed, rounds=rounds, reps=reps)
    return run_child(__file__, payload, env, f"{threads} thread(s)")


def report(run: dict, signed: bool) -> None:
    tiling = run["tiling"]
    blocks = ("AMX tiles: 2 x 2 tiles of 16 x 16 int32" if run["isa"] == "amx" else
              f"tile {tiling['mr']} rows x {tiling['nrv']} vectors, kc {tiling['kc']}")
    print(f"\n== {run['threads']} thread(s); path {run['isa']}, {blocks}; {'s8' if signed else 'u8'} activations")
    for name, peak in run["peaks"].items():
        per = ", ".join(f"{n}: {g:.0f}" for n, g in peak["calibration"].items())
        print(f"{name} peak {peak['gops']:.1f} GOP/s, median of every round  (by accumulators: {per})")
    vnni = run["peaks"].get("vpdpbusd", {}).get("gops")
    print(f"{'shape':30s} {'int8 GOP/s':>10s} {'% peak':>7s} {'x vpdpbusd peak':>15s} {'fp32 GFLOP/s':>13s} {'int8/fp32':>9s}")
    for row in run["rows"]:
        share = f"{100 * row['share']:6.1f}%" if row["share"] is not None else "    n/a"
        over = f"{row['gops'] / vnni:15.2f}" if vnni else f"{'n/a':>15s}"
        print(f"{row['label']:30s} {row['gops']:10.1f} {share:>7s} {over} {row['numpy_gflops']:13.1f} "
              f"{row['gops'] / row['numpy_gflops']:9.2f}")
    print("(% peak: median over rounds of the kernel's GOP/s / the peak of the instruction it runs on, "
          "measured just before it)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--signed", action="store_true", help="int8 activations (the kernel flips them to uint8)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(**json.loads(args.child))))
        return
    print(f"int8 GEMM, medians of {args.rounds} rounds x {args.reps} calls (wall clock)")
    for threads in args.threads:
        report(run_subprocess(threads, args.signed, args.rounds, args.reps), args.signed)


if __name__ == "__main__":
    main()
