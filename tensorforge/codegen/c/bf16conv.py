"""C source of a bf16 2-D convolution (``graph.bf16_conv``): AVX512_BF16's ``vdpbf16ps`` on the
tiles of ``bf16gemm.py``, the output NCHW without a transpose.

* **Roles.**  As in the int8 conv (``qconv.py``) the weights are the rows of the GEMM, the
  broadcast operand: stored as bf16 at compile time (``bf16_conv_weights``: ``[O][stride]``
  k-pairs, read in place by ``bf16gemm``'s sweep, which takes rows of bf16 pairs), and the
  activations are the packed vector operand, made per image at run time: for stride 1 straight
  from the zero-padded image (one masked load per output-row run of a panel per tap), otherwise
  from an im2col into a ``K x P`` float matrix (none for a 1x1 stride-1 conv, whose im2col is
  ``x``); per 16-pixel panel and k-pair one ``vcvtne2ps2bf16`` of two rows and a lane interleave
  into the ``[P/16][K/2][16][2]`` layout ``bf16gemm.pack_b`` makes of weights.
* **Numerics.**  Every output is one chain of ``vdpbf16ps`` steps from 0 over its k-pairs in
  weight order (``bf16gemm.reference`` on the im2col matrices gives the same bits), then
  ``+ bias[o]``, ``+ residual``, relu / clip in float32, in that order, on each block of the
  output right after the GEMM finishes it.
* **Threads**: im2col rows, panels and a grid of about 4 parts per thread (multiples of the tile:
  8 x 32 vector, 32 x 32 on AMX, where the grid splits rows first) are dynamically scheduled loops
  of one parallel region per image.

AVX512_BF16 only: ``precision="bf16"`` is refused (or falls back to float32) on other CPUs.
"""
from __future__ import annotations

from . import bf16_winograd, bf16gemm, qgemm
from .conv_helpers import each_image, expand, team

_HELPERS = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>
#ifndef TF_BF16CONV_HELPERS_DEFINED
#define TF_BF16CONV_HELPERS_DEFINED
@IM2COL@
/* 16 lanes of rows k (lo) and k + 1 (hi) as bf16 (vcvtne2ps2bf16: round to nearest even) pairs,
   [16][2]: one 32-bit pair per lane. */
static inline __m512i tf_bf16conv_pairs(__m512 lo, __m512 hi)
{
  const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);            /* [lo 0..15, hi 0..15] */
  return _mm512_permutexvar_epi16(inter, v);
}

/* 16 pixels of rows k (lo) and k + 1 (hi) as bf16 pairs, [16][2], at dst. */
static inline void tf_bf16conv_store_pairs(__m512 lo, __m512 hi, uint16_t *dst)
{
  _mm512_storeu_si512((void *)dst, tf_bf16conv_pairs(lo, hi));
}

/* Pixels [p0, p0 + 16) of the K x P float matrix col (row stride ldc) as one panel of kp k-pairs,
   bf16 (round to nearest even, vcvtne2ps2bf16), [kp][16][2]; rows >= K and pixels >= P are 0. */
static void tf_bf16conv_pack_panel(const float *col, long ldc, long K, long kp, long p0, long P, uint16_t *bp)
{
  const long n = P - p0 < 16 ? P - p0 : 16;
  const __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
  for (long q = 0; q < kp; q++) {
    const long k = 2 * q;
    const __m512 lo = _mm512_maskz_loadu_ps(m, col + k * ldc + p0);
    const __m512 hi = k + 1 < K ? _mm512_maskz_loadu_ps(m, col + (k + 1) * ldc + p0) : _mm512_setzero_ps();
    tf_bf16conv_store_pairs(lo, hi, bp + q * 32);
  }
}

/* tf_bf16conv_pack_panel for a stride-1 conv straight from the zero-padded image xp (planes of
   Hp x Wp): the 16 pixels of a panel lie on a few output rows, each a run of tap k's padded row,
   so row k of the panel is one masked 16-float load per run (masked lanes never fault).  koff[k]:
   where tap k = (c, i, j) starts in xp.  Saves the K x P float im2col: 9 floats per input float
   of a 3x3 conv, written and read again. */
static void tf_bf16conv_pack_panel_padded(const float *xp, const long *koff, long Wp, long OW, long K, long kp,
                                          long p0, long P, uint16_t *bp)
{
  const long n = P - p0 < 16 ? P - p0 : 16;
  long base[16];
  __mmask16 seg[16];
  int segs = 0;
  for (long lane = 0, p = p0; lane < n; segs++) {
    const long oh = p / OW, ow = p % OW, len = OW - ow < n - lane ? OW - ow : n - lane;
    base[segs] = oh * Wp + ow - lane;                       /* lane L reads base + L */
    seg[segs] = (__mmask16)(((1u << len) - 1u) << lane);
    lane += len;
    p += len;
  }
  /* the pair's rows in two named vectors, not an array: gcc kept r[2] on the stack, each masked
     load merging into a value just stored (half of a batch-8 ResNet-50's packing time) */
  for (long q = 0; q < kp; q++) {
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
    const float *s0 = xp + koff[2 * q];
    for (int g = 0; g < segs; g++) lo = _mm512_mask_loadu_ps(lo, seg[g], s0 + base[g]);
    if (2 * q + 1 < K) {
      const float *s1 = xp + koff[2 * q + 1];
      for (int g = 0; g < segs; g++) hi = _mm512_mask_loadu_ps(hi, seg[g], s1 + base[g]);
    }
    tf_bf16conv_store_pairs(lo, hi, bp + q * 32);
  }
}

@MAX_THREADS@
@PAD_PLANE@
@SCRATCH@#endif
"""
_HELPERS = expand(_HELPERS, "tf_bf16conv", "float", 6)


def source(name: str, target, threads: int = 1) -> str:
    """C text defining ``void NAME(long N, long C, long H, long W, long O, long kh, long kw, long sh,
    long sw, long ph, long pw, long dh, long dw, long OH, long OW, const float *x, const uint16_t *w,
    long wstride, const float *bias, const float *residual, int relu, float hi, float *y)``: ``w``
    is ``bf16_conv_weights`` (``wstride`` k-pairs a row), ``residual`` may be NULL, ``relu`` 0 or
    1 with ``hi`` INFINITY or the clip; ``y`` is N x O x OH x OW float32.  Also
    ``NAME_winograd`` (``bf16_winograd.source``), the 3x3 stride-1 layers' F(2x2, 3x3)."""
    if bf16gemm.isa(target) != bf16gemm.AVX512_BF16:
        raise ValueError("the bf16 convolution kernel needs AVX512_BF16")
    cfg = bf16gemm.vector_config(target)
    mr, width, p = cfg.grain, cfg.width, cfg.prefix
    # Row parts first on AMX tiles: a part's sweep reuses its rows of weights across all its
    # columns, and column parts each read all the weights again.  ResNet-50 bf16 b1 18-20 -> 13.7 ms
    # (2.96x float32), MobileNetV2 b1 4.75 -> 4.04 ms; b8 level (a batch shares out whole images).
    # Minimising the re-reads (tm P + tn O) measured 14.25 and 4.46 ms.  The vector kernel keeps
    # column parts first (they share no packed activations).
    split = qgemm.part_split(threads * 4, rows_first=cfg.amx)
    par = f"{team(threads)} if (P * K * O >= {1 << 20})" if threads > 1 else "if (0)"
    return bf16gemm.source(f"{name}_gemm", target, threads) + _HELPERS + f"""
/* One output row's epilogue, row[j0:j1] = clip?(relu?(row + b (+ res))), in one pass over the row
   (one loop per operation took four passes over each output block, about 5% of a bf16 ResNet-50);
   the same float32 operations in the same order.  The variant is picked once per row. */
static void {name}_epilogue(float *restrict row, const float *restrict res, float b, int relu, float hi, long j0, long j1)
{{
#define TF_BF16CONV_EPI(RES, RELU, CLIP) \
  for (long q = j0; q < j1; q++) {{ \
    float v = row[q] + b; \
    if (RES) v = v + res[q]; \
    if (RELU) v = v < 0.0f ? 0.0f : v; \
    if (CLIP) v = v > hi ? hi : v; \
    row[q] = v; \
  }}
  const int clip = relu && hi < INFINITY;
  if (res && relu && !clip) TF_BF16CONV_EPI(1, 1, 0)
  else if (res && !relu) TF_BF16CONV_EPI(1, 0, 0)
  else if (!res && relu && !clip) TF_BF16CONV_EPI(0, 1, 0)
  else if (!res && !relu) TF_BF16CONV_EPI(0, 0, 0)
  else if (res) TF_BF16CONV_EPI(1, 1, 1)
  else TF_BF16CONV_EPI(0, 1, 1)
#undef TF_BF16CONV_EPI
}}

/* Image n: its activations packed (from the padded image for stride 1, else through an im2col),
   the GEMM's grid of parts, the epilogue on each finished part; one parallel region (a team of one
   when the images themselves are shared out: see {name}). */
static void {name}_image(long n, long C, long H, long W, long O, long kh, long kw, long sh, long sw, long ph, long pw,
                         long dh, long dw, long OH, long OW, const float *x, const uint16_t *w, long wstride,
                         const float *bias, const float *residual, int relu, float hi, float *y)
{{
  const long K = C * kh * kw, KP = (K + 1) / 2, P = OH * OW, panels = (P + 15) / 16;
  const int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W;
  const int fused = !direct && sh == 1 && sw == 1;     /* packed from the padded image, no im2col */
  const long Hp = (OH - 1) * sh + (kh - 1) * dh + 1, Wp = (OW - 1) * sw + (kw - 1) * dw + 1;
  float *col = direct ? 0 : (float *)tf_bf16conv_scratch(0, (size_t)(fused ? C * Hp * Wp : K * P) * sizeof(float));
  uint16_t *bp = (uint16_t *)tf_bf16conv_scratch(1, (size_t)(panels * KP * 32) * sizeof(uint16_t));
  long *koff = fused ? (long *)tf_bf16conv_scratch(2, (size_t)K * sizeof(long)) : 0;
  if ((!direct && !col) || !bp || (fused && !koff)) return;
  for (long k = 0; fused && k < K; k++)
    koff[k] = (k / (kh * kw)) * Hp * Wp + ((k / kw) % kh) * dh * Wp + (k % kw) * dw;
  const long ntiles = (P + {width - 1}) / {width}, mtiles = (O + {mr - 1}) / {mr};
{split}
  const float *xn = x + n * C * H * W;
  const float *src = direct ? xn : col;
  float *yn = y + n * O * P;
  const float *rn = residual ? residual + n * O * P : 0;
  #pragma omp parallel {par}
  {{
    if (fused) {{
      #pragma omp for schedule(dynamic, 4)
      for (long c = 0; c < C; c++) tf_bf16conv_pad_plane(xn + c * H * W, H, W, ph, pw, Hp, Wp, 0.0f, col + c * Hp * Wp);
      #pragma omp for schedule(dynamic, 2)
      for (long pn = 0; pn < panels; pn++)
        tf_bf16conv_pack_panel_padded(col, koff, Wp, OW, K, KP, pn * 16, P, bp + pn * KP * 32);
    }} else {{
      if (!direct) {{
        #pragma omp for schedule(dynamic, 4)
        for (long k = 0; k < K; k++)
          tf_bf16conv_im2col_row(xn, k, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, 0.0f, col + k * P);
      }}
      #pragma omp for schedule(dynamic, 2)
      for (long pn = 0; pn < panels; pn++) tf_bf16conv_pack_panel(src, P, K, KP, pn * 16, P, bp + pn * KP * 32);
    }}
    #pragma omp for schedule(dynamic, 1)
    for (long part = 0; part < tm * tn; part++) {{
      const long pm = part / tn, pq = part % tn;
      const long i0 = mtiles * pm / tm * {mr}, i1 = O < mtiles * (pm + 1) / tm * {mr} ? O : mtiles * (pm + 1) / tm * {mr};
      const long j0 = ntiles * pq / tn * {width}, j1 = P < ntiles * (pq + 1) / tn * {width} ? P : ntiles * (pq + 1) / tn * {width};
      if (i0 >= i1 || j0 >= j1) continue;
      {p}_rows(i0, i1, j0, j1, K, (const uint32_t *)w + i0 * wstride, wstride, bp, 0, yn, P);
      for (long o = i0; o < i1; o++) {{
        float *restrict row = yn + o * P;
        const float *restrict res = rn ? rn + o * P : 0;
        {name}_epilogue(row, res, bias[o], relu, hi, j0, j1);
      }}
    }}
  }}
}}

void {name}(long N, long C, long H, long W, long O, long kh, long kw, long sh, long sw, long ph, long pw,
            long dh, long dw, long OH, long OW, const float *x, const uint16_t *w, long wstride,
            const float *bias, const float *residual, int relu, float hi, float *y)
{{
{each_image(f"{name}_image(n, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, x, w, wstride, bias, residual, relu, hi, y);", threads, "tf_bf16conv")}
}}
""" + bf16_winograd.source(name, f"{p}_rows", par, threads)


__all__ = ["source"]
