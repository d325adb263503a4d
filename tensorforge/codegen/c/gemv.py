"""C source of the GEMV path of a generated GEMM: ``C[M,N] (+)= A[M,K] @ Bp`` for M <= ``GEMV_MAX_M``.

A batch-1 (or batch-few) linear layer is memory-bound: every weight is used M times, so the
time is the time to stream the packed B once.  The blocked GEMM of ``microkernels.py`` pays for
things that only matter when B is reused (packing A into a malloc'd buffer per call, K blocks of
``kc`` that reload and store C ``K/kc`` times, an ``mr``-row register tile with 1 live row); the
GEMV does none of them:

* it reads the packed B (``Bp[N/nr][K][nr]``, the layout ``pack_b`` writes at compile time, so the
  weights need no second packing and the blocked path still serves every other M) panel by panel,
  each panel over all of K in one pass.  A panel is one contiguous run; ``STREAMS`` panels are
  read side by side (one core gets ~20% more DRAM bandwidth from several sequential streams
  than from one), and a software prefetch runs ``PREFETCH_BYTES`` ahead of each.  Other panel
  widths measured no better (``benchmarks/gemv.py --kernel``: 8, 16 and 32 columns within noise
  at M = 1; every packing is a permutation of the same bytes);
* where registers are left, ``P`` independent partial sums per output vector over k (k = P*t + p
  goes to partial p) hide the FMA latency, added pairwise at the end.  The additions' order
  differs from a plain dot product (float32 rounding only); no reassociation flag is involved, so
  NaN and Inf propagate as in a plain sum (a NaN product makes the sum NaN; +Inf and -Inf products
  give NaN in any order);
* A is read in place (row-major or transposed), one broadcast per row and k, shared by the panels;
* the finished row segment of a panel gets the epilogue (inline snippets, or the callback
  ``epi(ctx, c, ldc, i0, j0, rows, cols)`` with ``i0 = 0``, ``rows = M``, ``cols <= nr``) while in L1;
* the panels are handed out to OpenMP threads in chunks when B holds at least
  ``GEMV_PARALLEL_MIN_BYTES`` (measured break-even ~512 KB on the 2-core EPYC: a parallel region
  costs ~4-5 us) and the caller is not inside an active parallel region (``omp_in_parallel()``:
  the one-GEMM-per-thread batch path of ``tensorize.py`` and the chunked convolution paths call
  the GEMM from their threads).  The GEMM's own ``threads`` parameter is not consulted: it is
  sized by multiply-adds (``tensorize.PARALLEL_MIN_MACS``), which say nothing about a streaming
  kernel.  On a shared machine a threaded call can wait a whole scheduler time slice (4-12 ms,
  measured, against ~0.1 ms of work) for a descheduled thread, so the threads are kept honest by
  the clock: a threaded call more than ``STALL_FACTOR`` times slower per byte than the running
  serial estimate sends the next ``MIN_BACKOFF`` .. ``MAX_BACKOFF`` large calls (doubling while
  threads keep losing) to one thread.  Each panel is always computed by one thread with the same
  code, so the numbers do not depend on the split.

``TENSORFORGE_GEMV_MAX_M=0`` in the environment at code generation disables the path (for
benchmarking the blocked GEMM at small M); the dispatch is on the runtime M, so a GEMM called
with a symbolic batch takes the GEMV for small batches and the blocked path otherwise.
"""
from __future__ import annotations

import os

# Rows up to which the prepacked entry takes the GEMV path (0 disables it).
GEMV_MAX_M = 4
# Packed B bytes from which the GEMV splits its panels between threads.  Measured (benchmarks/gemv.py
# --kernel, M = 1, 2 threads against 1): 256 KB x0.78, 512 KB x1.04, 1 MB x1.26, 2 MB x1.43.
GEMV_PARALLEL_MIN_BYTES = 1 << 20
# Panels streamed at once by one thread (one core reaches more DRAM bandwidth with several streams).
STREAMS = 4
# Software prefetch distance in bytes ahead of the B stream (0: leave it to the hardware prefetcher).
PREFETCH_BYTES = 512
# Large calls sent to one thread after a threaded call lost to the serial estimate (doubling up to
# the maximum while threaded calls keep losing).
MIN_BACKOFF = 16
MAX_BACKOFF = 4096
# ... "lost" meaning slower than this many times the serial estimate: a stall (a thread that held
# a chunk and was descheduled: a time slice, 10-100x the work), not the few microseconds a worker
# takes to wake after an idle spell.  tensorforge's OpenMP runtime has the caller take every chunk
# a late worker has not claimed, so such a call runs about as fast as a serial one; counting it as
# lost (factor 1) sent the next 16-4096 calls to one thread after every pause, and MLP
# 784-1024-1024-10 at batch 1 ran 0.095 ms against 0.060 ms threaded (onnxruntime 0.076).
STALL_FACTOR = 2
# How the threads share the panels: "dynamic" (chunks on demand) or "static" (one even range each).
SCHEDULE = "dynamic"
# Most bytes of B in one chunk of panels handed to a thread.
CHUNK_BYTES = 1 << 20
# The marker comment in the generated text (tests look for it in a model's source).
MARKER = "tensorforge gemv path"


def max_m() -> int:
    """``GEMV_MAX_M``, or the ``TENSORFORGE_GEMV_MAX_M`` environment override."""
    value = os.environ.get("TENSORFORGE_GEMV_MAX_M")
    return GEMV_MAX_M if value in (None, "") else max(0, int(value))


def _registers_used(rows: int, nv: int, G: int, P: int) -> int:
    """Vector registers a step needs: the accumulators, the B vectors (one row only: each B
    vector feeds a single FMA, as its memory operand, so it needs none), the A broadcasts and one spare."""
    return P * G * rows * nv + (G * nv if rows > 1 else 0) + rows + 1


def partials(rows: int, nv: int, registers: int, G: int = 1) -> int:
    """Partial sums over k per output vector: at most 4, within the vector registers."""
    return max([1] + [P for P in range(1, 5) if _registers_used(rows, nv, G, P) <= registers])


def streams(rows: int, nv: int, registers: int) -> tuple[int, int]:
    """(panels streamed at once, partial sums) for ``rows`` rows: the most panels up to
    ``STREAMS`` whose accumulators fit the registers, then partial sums for the registers left."""
    G = max([1] + [G for G in range(1, STREAMS + 1) if _registers_used(rows, nv, G, 1) <= registers])
    return G, partials(rows, nv, registers, G)


def source(name: str, nr: int, vw: int, registers: int, trans_a: bool, mode: str, rows_max: int) -> str:
    """C functions ``<name>_gemv<m>`` (m = 1..rows_max) and the dispatcher ``<name>_gemv``.

    ``mode``: "callback" (``e->fn``), "inline" (``<name>_epi`` on each vector) or "" (none).
    The caller defines ``<name>_epi_t`` (and ``<name>_epi`` for "inline") before this text.
    """
    nv = nr // vw
    kernels = [_kernel(name, rows, nr, vw, nv, registers, trans_a, mode) for rows in range(1, rows_max + 1)]
    cases = "\n".join(f"    case {m}: {name}_gemv{m}(q0, q1, N, K, A, lda, Bp, C, ldc, accumulate, e); break;"
                      for m in range(1, rows_max + 1))
    if SCHEDULE == "static":
        par = f"""      #pragma omp parallel num_threads(nth)
      {{
        const long t = omp_get_thread_num(), T = omp_get_num_threads();
        {name}_gemv_range(panels * t / T, panels * (t + 1) / T, M, N, K, A, lda, Bp, C, ldc, accumulate, e);
      }}"""
    else:   # chunks of panels on demand: a thread that starts late (descheduled) takes fewer
        # A chunk: a multiple of the panels streamed at once (G), about 8 per thread, at most
        # CHUNK_BYTES of B (a thread descheduled in the middle of its chunk holds up the others).
        G = STREAMS
        par = f"""      const long per = tf_min(panels / ({8 * G} * nth), {CHUNK_BYTES}L / ({G * nr * 4}L * (K > 0 ? K : 1)));
      const long chunk = {G} * (per > 1 ? per : 1), chunks = (panels + chunk - 1) / chunk;
      #pragma omp parallel for schedule(dynamic, 1) num_threads(nth)
      for (long c = 0; c < chunks; c++)
        {name}_gemv_range(c * chunk, tf_min((c + 1) * chunk, panels), M, N, K, A, lda, Bp, C, ldc, accumulate, e);"""
    return f"""
/* {MARKER}: M <= {rows_max} rows stream each {nr}-column panel of the packed B once over all of K
   (no K blocks, no A packing, no allocation); panels split between threads for large B. */
#ifdef _OPENMP
#include <omp.h>
#endif
{''.join(kernels)}
static void {name}_gemv_range(long q0, long q1, long M, long N, long K, const float *A, long lda,
    const float *Bp, float *C, long ldc, int accumulate, const {name}_epi_t *e) {{
  switch (M) {{
{cases}
    default: break;
  }}
}}

/* Whether threads pay, judged by the clock (relaxed atomics: concurrent callers only blur the
   estimate): the first two large calls run serially and set the serial picoseconds per byte; a
   threaded call over {STALL_FACTOR}x that estimate (a descheduled thread on a shared machine: a whole
   time slice) sends the next `backoff` large calls to one thread, doubling while threads keep losing.
   Every panel is computed by one thread with the same code, so the result does not depend on it. */
static long {name}_gemv_ser_ps, {name}_gemv_skip, {name}_gemv_backoff;

static void {name}_gemv(long M, long N, long K, const float *A, long lda, const float *Bp, float *C, long ldc,
    int accumulate, const {name}_epi_t *e) {{
  const long panels = (N + {nr - 1}) / {nr}, bytes = panels * K * {nr * 4}L;
#ifdef _OPENMP
  if (panels > 1 && bytes >= {GEMV_PARALLEL_MIN_BYTES}L && !omp_in_parallel()) {{
    const int cap = omp_get_max_threads();
    const int nth = panels < cap ? (int)panels : cap;
    if (nth > 1) {{
      const long ser = __atomic_load_n(&{name}_gemv_ser_ps, __ATOMIC_RELAXED);
      const long skip = __atomic_load_n(&{name}_gemv_skip, __ATOMIC_RELAXED);
      const double t0 = omp_get_wtime();
      if (ser > 0 && skip <= 0) {{
{par}
        const long ps = (long)((omp_get_wtime() - t0) * 1e12 / (double)bytes);
        long backoff = 0;
        if (ps > {STALL_FACTOR} * ser) {{
          backoff = __atomic_load_n(&{name}_gemv_backoff, __ATOMIC_RELAXED);
          backoff = backoff ? tf_min(2 * backoff, {MAX_BACKOFF}) : {MIN_BACKOFF};
          __atomic_store_n(&{name}_gemv_skip, backoff, __ATOMIC_RELAXED);
        }}
        __atomic_store_n(&{name}_gemv_backoff, backoff, __ATOMIC_RELAXED);
      }} else {{
        {name}_gemv_range(0, panels, M, N, K, A, lda, Bp, C, ldc, accumulate, e);
        const long ps = (long)((omp_get_wtime() - t0) * 1e12 / (double)bytes);
        /* the first large call only warms up (page faults, cold caches); the second calibrates */
        __atomic_store_n(&{name}_gemv_ser_ps, ser > 0 ? (3 * ser + ps) / 4 : ser < 0 ? ps : -1, __ATOMIC_RELAXED);
        if (skip > 0) __atomic_store_n(&{name}_gemv_skip, skip - 1, __ATOMIC_RELAXED);
      }}
      return;
    }}
  }}
#endif
  {name}_gemv_range(0, panels, M, N, K, A, lda, Bp, C, ldc, accumulate, e);
}}
"""


def _kernel(name: str, rows: int, nr: int, vw: int, nv: int, registers: int, trans_a: bool, mode: str) -> str:
    """``<name>_gemv<rows>``: panels [q0, q1) of C's ``rows`` rows, ``G`` panels at a time (G
    streams from memory: one core reaches more DRAM bandwidth with several), then one at a time."""
    G, P = streams(rows, nv, registers)
    groups = f"""  for (; q + {G} <= q1; q += {G}) {{
{_panels(name, rows, nr, vw, nv, G, P, trans_a, mode)}
  }}
""" if G > 1 else ""
    single = _panels(name, rows, nr, vw, nv, 1, partials(rows, nv, registers), trans_a, mode)
    return f"""
static __attribute__((noinline)) void {name}_gemv{rows}(long q0, long q1, long N, long K, const float *restrict A,
    long lda, const float *restrict Bp, float *restrict C, long ldc, int accumulate, const {name}_epi_t *e) {{
  (void)lda; (void)e; (void)accumulate;
  long q = q0;
{groups}  for (; q < q1; q++) {{
{single}
  }}
}}
"""


def _panels(name: str, rows: int, nr: int, vw: int, nv: int, G: int, P: int, trans_a: bool, mode: str) -> str:
    """C statements computing panels q .. q+G-1 over all of K, P partial sums per vector, then
    their stores, epilogues and callbacks."""
    def a(r: int, k: str) -> str:
        return f"A[({k}) * lda + {r}]" if trans_a else f"A[{r} * lda + {k}]"

    ind = "    "
    ptrs = "".join(f"{ind}const float *restrict b{g} = Bp + (q + {g}) * K * {nr};\n" for g in range(G))
    acc = ", ".join(f"s{p}_{g}_{r}_{v} = {{0}}" for p in range(P) for g in range(G) for r in range(rows)
                    for v in range(nv))

    def step(p: int, k: str, indent: str) -> str:
        lines = [f"{indent}{{ const tf_vf " + ", ".join(f"b{g}_{v} = tf_ld(b{g} + {p * nr + v * vw})"
                                                       for g in range(G) for v in range(nv)) + ";"]
        for r in range(rows):
            lines.append(f"{indent}  {{ const float ar = {a(r, k)}; "
                         + " ".join(f"s{p}_{g}_{r}_{v} += b{g}_{v} * ar;" for g in range(G) for v in range(nv)) + " }")
        lines.append(f"{indent}}}")
        return "\n".join(lines)

    main = "\n".join(step(p, f"k + {p}", ind + "  ") for p in range(P))
    if PREFETCH_BYTES:
        main = "".join(f"{ind}  __builtin_prefetch(b{g} + {PREFETCH_BYTES // 4 + i * 16});\n"
                       for g in range(G) for i in range(-(-P * nr // 16))) + main
    advance = ", ".join(f"b{g} += {P * nr}" for g in range(G))
    main_loop = f"""{ind}for (; k + {P} <= K; k += {P}, {advance}) {{
{main}
{ind}}}
"""
    tail = "" if P == 1 else f"""{ind}for (; k < K; k++, {", ".join(f"b{g} += {nr}" for g in range(G))}) {{
{step(0, "k", ind + "  ")}
{ind}}}
"""

    def total(g: int, r: int, v: int) -> str:
        terms = [f"s{p}_{g}_{r}_{v}" for p in range(P)]
        while len(terms) > 1:   # pairwise: (s0 + s1) + (s2 + s3)
            terms = [f"({terms[i]} + {terms[i + 1]})" if i + 1 < len(terms) else terms[i]
                     for i in range(0, len(terms), 2)]
        return terms[0]

    out = []
    for g in range(G):
        out.append(f"{ind}{{ const long j = (q + {g}) * {nr}, cols = tf_min({nr}, N - j);")
        for r in range(rows):
            for v in range(nv):
                epi = f" x = {name}_epi(x, {r}, j + {v * vw}, n, e);" if mode == "inline" else ""
                out.append(f"""{ind}  {{ const int n = (int)tf_min({vw}, cols - {v * vw});
{ind}    if (n > 0) {{ float *cp = C + {r} * ldc + j + {v * vw}; tf_vf x = {total(g, r, v)};
{ind}      if (accumulate) x += tf_ld_n(cp, n);{epi}
{ind}      if (n == {vw}) tf_st(cp, x); else tf_st_n(cp, x, n); }} }}""")
        if mode == "callback":
            out.append(f"{ind}  if (e->fn) e->fn(e->ctx, C + j, ldc, 0, j, {rows}, cols);")
        out.append(f"{ind}}}")
    return f"""{ptrs}{ind}tf_vf {acc};
{ind}long k = 0;
{main_loop}{tail}{chr(10).join(out)}"""
