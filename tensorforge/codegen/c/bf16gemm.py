"""C source of a bf16 GEMM: ``C[m, n] = bias[n] + sum_k bf16(A[m, k]) * Bbf16[k, n]``, f32 out.

Float32 activations times weights stored as bfloat16 (the top 16 bits of a float32), accumulated in
float32 the way AVX512_BF16's ``vdpbf16ps`` does it.  This module generates the C around that
instruction (``_mm512_dpbf16_ps``), and a plain C fallback that computes the same bits without it.
It follows the int8 generator ``qgemm.py`` (layout of B, tiles, blocking, threads, text contract).
Where the target has AMX-BF16, parts of more than a few rows run on AMX tiles instead
(``bf16gemm_amx.py``, over the same packed operands): the bits stated below are the vector
kernel's, the tiles' are held to float32's error bound.

* **What one ``vdpbf16ps`` computes** (Intel SDM pseudo-code, checked bit for bit on Zen 4, see
  ``tests/codegen/test_bf16gemm.py``): per f32 lane ``i`` two *fused* multiply-adds, the odd
  element of the pair first::

      acc = fma(a.bf16[2i+1], b.bf16[2i+1], acc)
      acc = fma(a.bf16[2i],   b.bf16[2i],   acc)

  each rounded to nearest even, with every input denormal (both bf16 factors and the f32
  accumulator) read as a zero of its sign (DAZ) and every result that is tiny *after rounding*
  (rounded to 24 bits with an unbounded exponent, x86's tininess rule) flushed to a zero of its
  sign (FTZ), whatever MXCSR says.  A product of two bf16 is exact in f32's precision, so each
  step rounds once.  NaN payloads are not part of the contract (the hardware's choice between two
  NaN operands is not IEEE's); where a result is NaN all three implementations give NaN.
* **bf16 rounding** (``to_bf16_bits``, ``_mm512_cvtne2ps_pbh``): round to nearest even, NaN
  truncated and made quiet (``| 0x40``), f32 denormals to a zero of their sign (``vcvtne2ps2bf16``
  does that; a denormal bf16 would be read as zero by ``vdpbf16ps`` anyway), overflow to inf.
* **The accumulation order** (the contract; ``reference`` emulates it, both C paths follow it):
  K is padded to ``2 * ceil(K / 2)`` with a zero, and every C element is *one* sequential chain::

      acc = bias[n]  (0.0 without bias)
      for p in 0 .. ceil(K/2) - 1:
          acc = fma(A[m, 2p+1], B[2p+1, n], acc);  acc = fma(A[m, 2p], B[2p, n], acc)
      C[m, n] = acc

  (the padded step of odd K is ``acc + 0 * 0``, which turns ``-0`` into ``+0``; with K = 0 the
  bias is stored as is, no step reads it).  There are no split accumulators and no final
  summation: K blocks continue the chain from C (an f32 store and reload are exact), so the result
  depends neither on the tiling, nor on the thread count, nor on which path ran.  Tiles with few
  rows get their latency-covering independent chains from more *columns* instead of splitting k.
* **Why B is packed ``[ceil(N/nr)][ceil(K/2)][nr][2]``** (uint16 bf16 bits).  One k-pair of
  ``nr = 16`` columns is one 64-byte zmm in the order ``vdpbf16ps`` wants (element 0 of a lane =
  even k).  K and N are zero padded, so only the stores of C need masks.
* **A** is rounded to bf16 once per row block into a small buffer (``a_block`` bytes, rows padded
  to 64 bytes) by ``_mm512_cvtne2ps_pbh`` through masked loads (never past a row's end); the
  kernel then broadcasts one 32-bit k-pair per row.  If that buffer cannot be allocated the block
  runs the scalar code, which gives the same bits.
* **The micro-kernel** keeps ``mr`` rows x ``nrv`` vectors of f32 accumulators (8 x 2 = 16
  independent chains covers the latency of ``vdpbf16ps``); per k-pair it loads ``nrv`` vectors
  of B, broadcasts a pair of each A row and issues ``mr * nrv`` ``vdpbf16ps``.  The rows left over
  by a row block (``M % mr``, e.g. a batch-1 GEMV) use tiles that are wider in N (up to
  ``max_vecs`` vectors, about 16 accumulators) so they still have enough independent chains.
* **Blocking and threads** as in ``qgemm``: row blocks, column tiles, K blocks of at most ``kc``
  (a multiple of 2) whose C tiles stay in L2, row tiles inside; OpenMP over a grid of row x column
  parts (ignored without ``-fopenmp``).
* **Fallback.**  Without AVX512_BF16 the same packed B feeds a plain C loop: ``fmaf`` per step
  with explicit DAZ/FTZ (the FTZ decision for a result that rounds to exactly +-FLT_MIN is made
  from the exact sum, by TwoSum in double), so it is bit-identical to the vector path.  It is
  not fast.  Compiling either with ``-ffast-math`` voids the contract (gcc may then drop the
  NaN/zero-sign handling).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...dialects.graph.quant import pack_bf16
from ...ir.lowbits import from_bf16_bits, to_bf16_bits

from . import amx, bf16gemm_amx
from .conv_helpers import team
from .qgemm import COMMON, PARALLEL_MIN_MACS, SCALAR, _check_nr, _guarded, grid_driver

AVX512_BF16 = "avx512_bf16"
LANES = 16
FLT_MIN = 2.0 ** -126


# ----------------------------------------------------------------------------- NumPy side

def packed_size(K: int, N: int, nr: int = 16) -> int:
    """uint16 elements of ``pack_b``'s output: whole panels of ``nr`` columns x whole k-pairs."""
    _check_nr(nr)
    return -(-N // nr) * nr * -(-K // 2) * 2


def pack_b(b: np.ndarray, nr: int = 16) -> np.ndarray:
    """float32 weights (K, N) rounded to bf16 (``to_bf16_bits``) as ``[ceil(N/nr)][ceil(K/2)][nr][2]``
    uint16, zero padded, C-contiguous: the order in which the kernel loads them (the layout of
    ``graph.bf16_matmul``, ``dialects/graph/quant.pack_bf16``, here with its 4-D shape)."""
    _check_nr(nr)
    b = np.asarray(b, dtype=np.float32)
    if b.ndim != 2:
        raise ValueError(f"b must be 2-D (K, N), got shape {b.shape}")
    K, N = b.shape
    return pack_bf16(b, nr).reshape(-(-N // nr), -(-K // 2), nr, 2)


def _daz(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < FLT_MIN, np.copysign(0.0, x), x)


def fma_step(acc, a, b) -> np.ndarray:
    """One ``vdpbf16ps`` half-step, elementwise: ``acc + a * b`` (float32 arrays; ``a``, ``b``
    bf16 values) with one RNE rounding, DAZ on all three inputs and FTZ (tininess after rounding)
    on the result.  Exact: the product is exact in float64, TwoSum gives the sum's error, which
    makes the float64 sum round-to-odd before the final rounding to 24 bits (no double rounding)."""
    with np.errstate(all="ignore"):
        acc64 = _daz(np.asarray(acc, np.float32).astype(np.float64))
        p = _daz(np.asarray(a, np.float32).astype(np.float64)) * _daz(np.asarray(b, np.float32).astype(np.float64))
        s = acc64 + p
        bb = s - acc64
        err = (acc64 - (s - bb)) + (p - bb)
        even = (s.view(np.uint64) & 1) == 0
        nudge = np.isfinite(s) & (err != 0) & even
        s = np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        # Round to 24 bits with an unbounded exponent (scaled up where f32 would go denormal).
        small = np.abs(s) < 2.0 ** -100
        scaled = (s * 2.0 ** 64).astype(np.float32).astype(np.float64) * 2.0 ** -64
        r = np.where(small, scaled, s.astype(np.float32).astype(np.float64))
        r = np.where(np.abs(r) < FLT_MIN, np.copysign(0.0, s), r)
        return r.astype(np.float32)


def reference(a, b, bias=None) -> np.ndarray:
    """The kernel's exact result (float32 (M, N)) by the contract of the module docstring: A and
    B rounded to bf16, then per element one chain of DAZ/FTZ fused multiply-adds from ``bias``,
    k-pairs in order, the odd k of each pair first."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    M, K = a.shape
    if b.shape[0] != K:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not multiply")
    N = b.shape[1]
    pairs = -(-K // 2)
    ab = np.zeros((M, 2 * pairs), np.float32)
    ab[:, :K] = from_bf16_bits(to_bf16_bits(a))
    bb = np.zeros((2 * pairs, N), np.float32)
    bb[:K] = from_bf16_bits(to_bf16_bits(b))
    acc = np.zeros((M, N), np.float32)
    if bias is not None:
        acc[:] = np.asarray(bias, dtype=np.float32).reshape(1, N)     # keeps -0.0 (0.0 + -0.0 would not)
    for p in range(pairs):
        for k in (2 * p + 1, 2 * p):
            acc = fma_step(acc, ab[:, k, None], bb[None, k, :])
    return acc


# ----------------------------------------------------------------------------- ISA choice

def isa(target) -> str:
    """``"avx512_bf16"`` when ``target.features`` has AVX512-F, -BW (masks of 32 bf16) and
    AVX512_BF16; else ``"scalar"``."""
    features = target.features or frozenset()
    if {"avx512_bf16", "avx512bw", "avx512f"} <= features:
        return AVX512_BF16
    return SCALAR


@dataclass(frozen=True)
class Tiling:
    """``mr`` rows x ``nrv`` vectors of accumulators, the k-pair loop unrolled ``unroll`` times, K
    blocks of at most ``kc`` k (a multiple of 2), row blocks of about ``a_block`` bytes of bf16 A,
    and tiles of the leftover rows up to ``max_vecs`` vectors wide.  The order of the arithmetic
    does not depend on any of these (see the module docstring)."""

    mr: int = 8
    nrv: int = 2
    unroll: int = 4
    kc: int = 2048
    a_block: int = 256 * 1024
    max_vecs: int = 8

    def __post_init__(self) -> None:
        if min(self.mr, self.nrv, self.unroll, self.kc, self.a_block, self.max_vecs) < 1 or self.kc % 2:
            raise ValueError(f"invalid tiling {self}")

    @classmethod
    def for_target(cls, target) -> "Tiling":
        """Default tiling; the A block takes a quarter of the target's L2."""
        return cls(a_block=max(16 * 1024, target.l2 // 4))

    def vecs(self, rows: int) -> int:
        """Vectors of a tile of ``rows`` rows: ``nrv`` for full tiles; leftover rows get about 16
        accumulators (at least ``nrv``, at most ``max_vecs``)."""
        if rows >= self.mr:
            return self.nrv
        return max(self.nrv, min(self.max_vecs, 16 // rows))


# ----------------------------------------------------------------------------- C text

SIGNATURE = ("void {name}(long M, long N, long K, const float *A, long lda, const uint16_t *Bp, "
             "const float *bias, float *C, long ldc)")


def source(name: str, target, threads: int = 1, nr: int = 16, tiling: Tiling | None = None) -> str:
    """Self-contained C text defining ``void NAME(long M, long N, long K, const float *A, long lda,
    const uint16_t *Bp, const float *bias, float *C, long ldc)``; ``Bp`` is ``pack_b(b, nr)``,
    ``bias`` may be NULL, ``lda``/``ldc`` count elements.  Helpers are named by configuration and
    guarded, so several kernels can share a file."""
    _check_nr(nr)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    path = isa(target)
    scalar = _Config(False, nr, Tiling(mr=1, nrv=1))
    if path == SCALAR:
        return "\n".join([_prelude(scalar), _guarded(scalar, _scalar_block(scalar)), _driver(name, scalar, threads)])
    if nr % LANES:
        raise ValueError(f"nr={nr} must be a multiple of {LANES} for the {path} kernel")
    cfg = vector_config(target, nr, tiling)
    return "\n".join([_prelude(cfg), _guarded(scalar, _scalar_block(scalar)), _guarded(cfg, _vector_helpers(cfg)),
                      _driver(name, cfg, threads)])


def vector_config(target, nr: int = LANES, tiling: Tiling | None = None) -> "_Config":
    """The vector path's configuration for ``target``: on AMX tiles where it has AMX-BF16 (and
    ``nr`` is one panel per tile's 16 columns)."""
    return _Config(True, nr, tiling or Tiling.for_target(target),
                   amx=nr == LANES and bf16gemm_amx.available(target), l2=target.l2)


@dataclass(frozen=True)
class _Config:
    vector: bool
    nr: int
    tiling: Tiling
    amx: bool = False      # parts of more than a few rows run on AMX tiles (bf16gemm_amx.py)
    l2: int = 2 << 20

    @property
    def width(self) -> int:
        """Columns a full tile covers (thread parts are multiples of it)."""
        if self.amx:
            return amx.BLOCK
        return self.tiling.nrv * LANES if self.vector else self.nr

    @property
    def grain(self) -> int:
        """Rows a full tile covers (thread parts and row blocks are multiples of it)."""
        return amx.BLOCK if self.amx else self.tiling.mr

    @property
    def prefix(self) -> str:
        t = self.tiling
        kind = (f"{AVX512_BF16}_{t.mr}x{t.nrv}_u{t.unroll}_kc{t.kc}_ab{t.a_block}_w{t.max_vecs}"
                + (f"_amx{self.l2}" if self.amx else "") if self.vector else "scalar")
        return f"tf_bf16gemm_{kind}_nr{self.nr}"


_BF16_COMMON = """\
#include <math.h>
#include <float.h>
#include <stdlib.h>
#ifndef TF_BF16GEMM_COMMON_DEFINED
#define TF_BF16GEMM_COMMON_DEFINED
/* f32 -> bf16 (as the f32 it stands for), as vcvtne2ps2bf16 rounds: to nearest even, NaN
   truncated and quieted, denormals to a zero of their sign. */
static inline float tf_bf16gemm_round(float x)
{
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) u = (u | 0x00400000u) & 0xffff0000u;
  else if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  else u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}
static inline float tf_bf16gemm_value(uint16_t b)
{
  const uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}
static inline float tf_bf16gemm_daz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }
/* r = fmaf(a, b, c) rounded to exactly +-FLT_MIN or below: flush it to a zero of its sign when
   it is tiny after rounding to 24 bits with an unbounded exponent (x86's rule), i.e. when the
   exact |a b + c| < FLT_MIN - 2^-151 (the tie rounds up to FLT_MIN).  a b is exact in double and
   TwoSum gives the exact sum s + e. */
static float tf_bf16_ftz(float r, float a, float b, float c)
{
  if (fabsf(r) < FLT_MIN) return copysignf(0.0f, r);
  const double p = (double)a * (double)b, cd = (double)c, s = p + cd, bb = s - p;
  double e = (p - (s - bb)) + (cd - bb);
  const double t = 0x1p-126 - 0x1p-151, as = fabs(s);
  if (s < 0) e = -e;
  return (as < t || (as == t && e < 0)) ? copysignf(0.0f, r) : r;
}
/* One vdpbf16ps half-step: c + a b, one rounding to nearest even, DAZ in, FTZ out. */
static inline float tf_bf16gemm_fma(float a, float b, float c)
{
  a = tf_bf16gemm_daz(a);
  b = tf_bf16gemm_daz(b);
  c = tf_bf16gemm_daz(c);
  const float r = fmaf(a, b, c);
  return __builtin_expect(fabsf(r) <= FLT_MIN, 0) ? tf_bf16_ftz(r, a, b, c) : r;
}
#endif
"""

_VEC_PRELUDE = """\
#ifndef TF_BF16GEMM_VEC_DEFINED
#define TF_BF16GEMM_VEC_DEFINED
static inline __mmask16 tf_bf16gemm_mask16(long n)
{
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
static inline __mmask32 tf_bf16gemm_mask32(long n)
{
  return n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1u);
}
/* Row a[0, K) as bf16 into dst[0, 2 * ceil(K / 2)) (the pad element zero), 32 at a time through
   masked loads, which never touch memory past the row's end. */
static inline void tf_bf16gemm_pack_row(uint16_t *dst, const float *a, long K)
{
  const long k2 = (K + 1) / 2 * 2;
  for (long k = 0; k < k2; k += 32) {
    const __m512 lo = _mm512_maskz_loadu_ps(tf_bf16gemm_mask16(K - k), a + k);
    const __m512 hi = _mm512_maskz_loadu_ps(tf_bf16gemm_mask16(K - k - 16), a + k + 16);
    _mm512_mask_storeu_epi16(dst + k, tf_bf16gemm_mask32(k2 - k), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}
/* Row a[0, K) as the bf16 pairs of a GEMM row buffer: tf_bf16gemm_pack_row, the pairs past K up to
   astride zeroed (the AMX sweep reads whole 16-pair K blocks). */
static inline void tf_bf16gemm_round_row(uint32_t *dst, const float *a, long K, long astride)
{
  tf_bf16gemm_pack_row((uint16_t *)dst, a, K);
  memset(dst + (K + 1) / 2, 0, (size_t)(astride - (K + 1) / 2) * 4);
}
#endif
"""


def _prelude(cfg: _Config) -> str:
    """Includes, the ISA check and the helpers every kernel of the path shares."""
    if not cfg.vector:
        return COMMON + _BF16_COMMON
    check = (f"#if !(defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512F__))\n"
             f"#error \"tensorforge bf16 GEMM generated for {AVX512_BF16}, which this compiler's -march does not enable\"\n"
             f"#endif\n")
    tiles = amx.common("dpbf16ps") if cfg.amx else ""
    return f"#include <immintrin.h>\n{COMMON}{_BF16_COMMON}{check}{_VEC_PRELUDE}{tiles}"


_BLOCK_PARAMS = ("long m0, long m1, long n0, long n1, long N, long K, const float *A, long lda, "
                 "const uint16_t *Bp, const float *bias, float *C, long ldc")
_TILE_PARAMS = ("long kp, const uint32_t *A, long lda, const uint16_t *const *bv, const float *init, long ldi, "
                "float *C, long ldc, long nvalid")


def _scalar_block(cfg: _Config) -> str:
    """The exact fallback over the packed B: one row x (part of) one panel at a time, the chain
    of each column in the contract's order.  Column ranges may start inside a panel (the vector
    path falls back here with its own column parts)."""
    nr, p = cfg.nr, cfg.prefix
    return f"""\
static void {p}_block({_BLOCK_PARAMS})
{{
  const long kp = (K + 1) / 2, pstride = kp * {2 * nr};
  (void)N;
  for (long j = n0; j < n1;) {{
    const long c0 = j % {nr}, cols = tf_qgemm_min({nr} - c0, n1 - j);
    const uint16_t *bp = Bp + (j / {nr}) * pstride + 2 * c0;
    for (long i = m0; i < m1; i++) {{
      const float *a = A + i * lda;
      float acc[{nr}];
      for (long c = 0; c < cols; c++) acc[c] = bias ? bias[j + c] : 0.0f;
      for (long q = 0; q < kp; q++) {{
        const float a0 = tf_bf16gemm_round(a[2 * q]), a1 = 2 * q + 1 < K ? tf_bf16gemm_round(a[2 * q + 1]) : 0.0f;
        const uint16_t *b = bp + q * {2 * nr};
        for (long c = 0; c < cols; c++)
          acc[c] = tf_bf16gemm_fma(a0, tf_bf16gemm_value(b[2 * c]), tf_bf16gemm_fma(a1, tf_bf16gemm_value(b[2 * c + 1]), acc[c]));
      }}
      for (long c = 0; c < cols; c++) C[i * ldc + j + c] = acc[c];
    }}
    j += cols;
  }}
}}
"""


def _acc(r: int, j: int) -> str:
    return f"c{r}_{j}"


def _masks(vecs: int) -> list[str]:
    return [f"    const __mmask16 k{j} = tf_bf16gemm_mask16(nvalid - {j * LANES});" for j in range(vecs)]


def _tile(cfg: _Config, rows: int, vecs: int) -> str:
    """``rows`` x ``vecs`` tile: C[rows, vecs*16] (masked to nvalid columns) = init (bias with
    ldi = 0, C itself for a later K block, zeros when NULL) + kp k-pairs of bf16 A (rows ``lda``
    pairs apart) times the B vectors ``bv``."""
    R, V, nr, unroll = range(rows), range(vecs), cfg.nr, cfg.tiling.unroll
    lines = [f"  const uint32_t *a{r} = A + {r} * lda;" for r in R]
    lines += [f"  const uint16_t *b{j} = bv[{j}];" for j in V]
    lines += [f"  __builtin_prefetch(C + {r} * ldc, 1, 3);" for r in R]
    lines.append("  __m512 " + ", ".join(_acc(r, j) for r in R for j in V) + ";")
    lines += ["  if (init) {"] + _masks(vecs)
    lines += [f"    {_acc(r, j)} = _mm512_maskz_loadu_ps(k{j}, init + {r} * ldi + {j * LANES});" for r in R for j in V]
    lines += ["  } else {"] + [f"    {_acc(r, j)} = _mm512_setzero_ps();" for r in R for j in V] + ["  }"]

    def step(q: str) -> str:
        out = ["    {"] + [f"      const __m512bh w{j} = (__m512bh)_mm512_loadu_si512((const void *)(b{j} + ({q}) * {2 * nr}));"
                          for j in V]
        for r in R:
            out.append(f"      const __m512bh x{r} = (__m512bh)_mm512_set1_epi32((int)a{r}[{q}]);")
            out += [f"      {_acc(r, j)} = _mm512_dpbf16_ps({_acc(r, j)}, x{r}, w{j});" for j in V]
        return "\n".join(out) + "\n    }"

    lines += [f"  long q = 0;\n  for (; q + {unroll} <= kp; q += {unroll}) {{"] + [step(f"q + {u}") for u in range(unroll)]
    lines += ["  }\n  for (; q < kp; q++) {", step("q"), "  }"]
    lines += ["  {"] + _masks(vecs)
    lines += [f"    _mm512_mask_storeu_ps(C + {r} * ldc + {j * LANES}, k{j}, {_acc(r, j)});" for r in R for j in V]
    lines.append("  }")
    return f"static void {cfg.prefix}_tile{rows}x{vecs}({_TILE_PARAMS})\n{{\n" + "\n".join(lines) + "\n}\n"


def _vector_helpers(cfg: _Config) -> str:
    t, p = cfg.tiling, cfg.prefix
    vmax = max(t.vecs(r) for r in range(1, t.mr + 1))
    tiles = [_tile(cfg, rows, vecs) for rows in range(1, t.mr + 1) for vecs in range(1, t.vecs(rows) + 1)]
    table = ",\n  ".join("{" + ", ".join(f"{p}_tile{r}x{j}" if j <= t.vecs(r) else "0" for j in range(1, vmax + 1)) + "}"
                         for r in range(1, t.mr + 1))
    widths = ", ".join(str(t.vecs(r)) for r in range(1, t.mr + 1))
    g = cfg.grain
    amx_sweep = bf16gemm_amx.sweep(p, cfg.l2) if cfg.amx else ""
    amx_call = (f"  if ({p}_amx_sweep(i0, i1, n0, n1, K, Ab, astride, Bp, bias, C, ldc)) return;\n"
                if cfg.amx else "")
    return "".join(tiles) + f"""\
static void (*const {p}_tiles[{t.mr}][{vmax}])({_TILE_PARAMS}) = {{
  {table}}};
static const int {p}_vecs[{t.mr}] = {{{widths}}};

/* Rows [i0, i1) (their bf16 pairs at Ab, astride pairs apart) x columns [n0, n1) in tiles of
   ``rows`` rows: column tiles, K blocks (the first from bias, later ones from C), row tiles. */
static void {p}_sweep(int rows, long i0, long i1, long n0, long n1, long K, const uint32_t *Ab, long astride,
                      const uint16_t *Bp, const float *bias, float *C, long ldc)
{{
  const long kp_all = (K + 1) / 2, pstride = kp_all * {2 * cfg.nr};
  const long nkb = kp_all > {t.kc // 2} ? (kp_all + {t.kc // 2 - 1}) / {t.kc // 2} : 1;
  const long kcp = (kp_all + nkb - 1) / nkb;
  const int vmax = {p}_vecs[rows - 1];
  for (long j = n0; j < n1; j += vmax * {LANES}) {{
    long boff[{vmax}];
    int vecs = 0;
    for (int v = 0; v < {vmax}; v++) {{
      const long c = j + v * {LANES};
      const int used = v < vmax && c < n1;
      boff[v] = used ? (c / {cfg.nr}) * pstride + (c % {cfg.nr}) * 2 : 0;
      vecs += used;
    }}
    for (long kb = 0; kb < nkb; kb++) {{
      const long q0 = kb * kcp, q1 = tf_qgemm_min(q0 + kcp, kp_all);
      const uint16_t *bv[{vmax}];
      for (int v = 0; v < {vmax}; v++) bv[v] = Bp + boff[v] + q0 * {2 * cfg.nr};
      for (long i = i0; i < i1; i += rows)
        {p}_tiles[rows - 1][vecs - 1](q1 - q0, Ab + (i - i0) * astride + q0, astride, bv,
            kb ? C + i * ldc + j : (bias ? bias + j : 0), kb ? ldc : 0, C + i * ldc + j, ldc, n1 - j);
    }}
  }}
}}

{amx_sweep}
/* Rows [i0, i1) (their bf16 pairs at Ab, astride pairs apart, zero padded to a multiple of 16
   pairs) x columns [n0, n1) of C = bias + A B: {"on AMX tiles where the part has more than a few rows, else " if cfg.amx else ""}full row tiles, then the leftover rows in wider tiles. */
static void {p}_rows({bf16gemm_amx.PARAMS})
{{
{amx_call}  const long full = i0 + (i1 - i0) / {t.mr} * {t.mr};
  if (full > i0) {p}_sweep({t.mr}, i0, full, n0, n1, K, Ab, astride, Bp, bias, C, ldc);
  if (i1 > full) {p}_sweep((int)(i1 - full), full, i1, n0, n1, K, Ab + (full - i0) * astride, astride, Bp, bias, C, ldc);
}}

/* Rows [m0, m1) x columns [n0, n1) of C: row blocks of A rounded to bf16 into a buffer (rows of
   astride k-pairs, zero padded, 64-byte aligned), then {p}_rows. */
static void {p}_block({_BLOCK_PARAMS})
{{
  const long kp_all = (K + 1) / 2, astride = (kp_all + 15) / 16 * 16;
  const long mc = tf_qgemm_max({g}, {t.a_block} / (4 * astride + 4) / {g} * {g});
  const long rows_max = tf_qgemm_min(mc, m1 - m0);
  const size_t bytes = ((size_t)(rows_max * astride * 4) + 63) / 64 * 64;
  uint32_t *abuf = bytes ? (uint32_t *)aligned_alloc(64, bytes) : 0;
  if (bytes && !abuf) {{
    tf_bf16gemm_scalar_nr{cfg.nr}_block(m0, m1, n0, n1, N, K, A, lda, Bp, bias, C, ldc);
    return;
  }}
  for (long ic = m0; ic < m1; ic += mc) {{
    const long ic1 = tf_qgemm_min(ic + mc, m1);
    for (long i = ic; i < ic1; i++) tf_bf16gemm_round_row(abuf + (i - ic) * astride, A + i * lda, K, astride);
    {p}_rows(ic, ic1, n0, n1, K, abuf, astride, Bp, bias, C, ldc);
  }}
  free(abuf);
}}
"""


def _driver(name: str, cfg: _Config, threads: int) -> str:
    """The public entry: C split into a grid of row x column parts, one per thread, as in
    ``qgemm`` (``grid_driver``).  On AMX tiles (``_amx_driver``) A is rounded to bf16 once first."""
    if cfg.amx:
        return _amx_driver(name, cfg, threads)
    return grid_driver(SIGNATURE.format(name=name), f"{cfg.prefix}_block", "bias", cfg.grain, cfg.width, threads)


# Rows of A rounded to bf16 per pass of the AMX driver: a buffer of at most this many bytes.
AMX_A_BYTES = 32 << 20


def _amx_driver(name: str, cfg: _Config, threads: int) -> str:
    """The entry on AMX tiles: A rounded to bf16 once, by all threads, into one buffer (rows of
    whole 16-pair K blocks, zero padded; passes of at most ``AMX_A_BYTES``), then the grid of parts
    sweeps it.  ``PREFIX_block`` rounds the rows of its part, so with the grid's column parts every
    part rounded all of A again (BERT-base bf16 b8: 8 parts, 29% of the model's time in that
    conversion), and re-streamed its B slice once per row block of the buffer.  A GEMV-sized M, or
    no memory for the buffer, takes the usual grid."""
    p = cfg.prefix
    usual = grid_driver("static " + SIGNATURE.format(name=f"{name}_usual"), f"{p}_block", "bias", cfg.grain, cfg.width,
                        threads)
    grid = grid_driver("static " + SIGNATURE.format(name=f"{name}_grid").replace("const float *A", "const uint32_t *A"),
                       f"{name}_rounded_block", "bias", cfg.grain, cfg.width, threads, orphaned=threads > 1)
    region = f"#pragma omp parallel {team(threads)} if (rows * N * (K + 1) >= {PARALLEL_MIN_MACS})" if threads > 1 else ""
    rows_for = "#pragma omp for schedule(static)" if threads > 1 else ""
    return f"""{usual}
/* A part of C from the rounded rows (``lda`` pairs apart, row 0 at A). */
static void {name}_rounded_block(long m0, long m1, long n0, long n1, long N, long K, const uint32_t *A, long lda,
                              const uint16_t *Bp, const float *bias, float *C, long ldc)
{{
  (void)N;
  {p}_rows(m0, m1, n0, n1, K, A + m0 * lda, lda, Bp, bias, C, ldc);
}}
{grid}
{SIGNATURE.format(name=name)}
{{
  if (M <= 0 || N <= 0) return;
  const long kp_all = (K + 1) / 2, astride = (kp_all + 15) / 16 * 16;
  const long chunk = astride ? tf_qgemm_max(32, {AMX_A_BYTES} / (astride * 4) / 32 * 32) : M;
  uint32_t *abuf = M > {bf16gemm_amx.VECTOR_ROWS} && astride
                   ? (uint32_t *)aligned_alloc(64, ((size_t)tf_qgemm_min(M, chunk) * astride * 4 + 63) / 64 * 64) : 0;
  if (!abuf) {{
    {name}_usual(M, N, K, A, lda, Bp, bias, C, ldc);
    return;
  }}
  for (long m0 = 0; m0 < M; m0 += chunk) {{
    const long rows = tf_qgemm_min(chunk, M - m0);
    {region}
    {{
      {rows_for}
      for (long i = 0; i < rows; i++) tf_bf16gemm_round_row(abuf + i * astride, A + (m0 + i) * lda, K, astride);
      {name}_grid(rows, N, K, abuf, astride, Bp, bias, C + m0 * ldc, ldc);
    }}
  }}
  free(abuf);
}}
"""
