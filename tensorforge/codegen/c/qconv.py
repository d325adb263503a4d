"""C source of an exact int8 2-D convolution (``graph.qconv``): ``y = W x im2col(x)`` in int32.

The convolution is the int8 GEMM of ``qgemm.py`` with the roles of its operands chosen so that
the output is NCHW without a transpose:

* **Weights are the rows (the broadcast operand).**  ``vpdpbusd`` multiplies unsigned bytes (the
  broadcast side) by signed bytes (the vector side).  The weights, int8, are stored as
  ``w + 128`` (uint8, ``dialects/graph/quant.qconv_weights``) and read in place, one output
  channel per row of A.  The activations become the signed side: uint8 ``x`` as
  ``x' = x ^ 0x80 = x - 128`` (int8 ``x`` as it is, ``x' = x``).
* **Activations are packed per image at run time** into the ``[ceil(P/16)][K/4][16][4]`` panels
  the GEMM loads (``pack_vnni``'s layout, P output pixels as its columns): an im2col into a
  ``K x P`` byte matrix (per kernel row and output row a ``memcpy`` of the in-range span and a
  fill of the padding with the zero point, for stride 1; a gather otherwise; nothing at all for a
  1x1 stride-1 unpadded conv, whose im2col is ``x`` itself), then 4 x 16 byte blocks interleaved
  into 64-byte quads with SSE2 unpacks.  K is padded to a multiple of 4 with ``x' = 0``.
* **The algebra.**  ``sum_k (w + 128) x' = sum_k w x' + 128 sum_k x'``, and the wanted
  ``sum_k w (x - zp) = sum_k w x' - zp' sum_k w`` (``zp' = zp - 128`` for uint8 input), so the
  GEMM starts each output from ``colterm[p] + rowterm[o]`` with ``colterm[p] = -128 sum_k x'[k, p]``
  (summed while packing, SSSE3 ``pmaddubsw`` by ones) and ``rowterm[o] = -zp' * rowsum(w)[o]``
  (``qgemm.source(row_comp=True)``).  Padding holds ``zp`` itself, whose term cancels.  All of
  it is integer arithmetic modulo 2**32 (uint32 in C): bit-exact, no saturation.
* **Dequantizing epilogue**: optionally the output is float32, ``acc * scale[o] + bias[o]``
  (or ``(acc + acc_bias[o]) * scale[o]``: an integer bias added to the sums), plus
  a residual tensor, then relu, computed in place on each block of the output right after the
  GEMM finishes it (``qgemm``'s epilogue hook), while it is in cache: a quantized ResNet block
  writes its float32 result once instead of int32 sums that later kernels convert.
* **Short-K 1x1 convs** (stride 1, unpadded, K padded to at most 160: MobileNet's expansions and
  projections, ResNet's first stage) skip the GEMM driver: a thread packs 64 pixels into four
  panels and keeps each 4-row x 64-pixel block of sums in registers from the first k-quad through
  the epilogue to the output (``tf_qconv_short_k``).
* **Threads**: the im2col (over kernel rows), the packing (over pixel panels) and the GEMM's
  grid of output parts (``grid_driver``, orphaned) are OpenMP loops of one parallel region per
  image, scheduled dynamically (a core slowed by another process takes fewer chunks).
"""
from __future__ import annotations

from . import qconv_direct, qconv_transposed, qdepthwise_lanes, qgemm
from .conv_helpers import each_image, expand, team

def _short_rows(rows: int, vecs: int) -> str:
    """``tf_qconv_short_rowsRxNV``: rows [o, o + R) x the first NV vectors of the 64 pixels of a
    packed group bp (four panels) of a short-K 1x1 conv, the sums kept in registers from the
    first k-quad to the epilogue: R x NV accumulators start from the pixels' term ct plus the
    row's (rowterm and the integer bias: integer addition modulo 2^32, so the same bits as adding
    the bias after the sums), take Kp / 4 vpdpbusd each and go straight through
    ``tf_qconv_epilogue_vec`` to the output.  Named variables, as qgemm's tiles: with arrays
    indexed in loops gcc kept accumulators and B vectors on the stack inside the k loop."""
    R, V = range(rows), range(vecs)
    acc = ", ".join(f"c{r}_{v}" for r in R for v in V)
    lines = [f"static inline __attribute__((always_inline)) void tf_qconv_short_rows{rows}x{vecs}(",
             "    const tf_qconv_epi *e, const tf_qconv_epi16 *x, const uint8_t *w, long Kp, const int8_t *bp,",
             "    const __m512i *ct, const int32_t *rowterm, float *yf, long P, long o, long p0, const __mmask16 *km,",
             "    int mid, int res, int res8, int relu, int clip, int quant)", "{", f"  __m512i {acc};"]
    for r in R:
        lines.append(f"  const uint8_t *a{r} = w + (o + {r}) * Kp;")
        lines.append(f"  const __m512i t{r} = _mm512_add_epi32(_mm512_set1_epi32(rowterm[o + {r}]), "
                     f"_mm512_set1_epi32(e->ibias ? e->ibias[o + {r}] : 0));")
        lines += [f"  c{r}_{v} = _mm512_add_epi32(ct[{v}], t{r});" for v in V]
    lines += [f"  const int8_t *b{v}p = bp + {v} * 16 * Kp;" for v in V]
    lines.append("  for (long q = 0; q < Kp / 4; q++) {")
    lines += [f"    const __m512i b{v} = _mm512_loadu_si512((const void *)(b{v}p + q * 64));" for v in V]
    for r in R:
        lines.append(f"    const __m512i x{r} = _mm512_set1_epi32(tf_qgemm_ld4(a{r} + 4 * q));")
        lines += [f"    c{r}_{v} = tf_qgemm_dpbusd512(c{r}_{v}, x{r}, b{v});" for v in V]
    lines.append("  }")
    for r in R:
        lines += ["  {", f"    const long i = o + {r};",
                  "    const __m512 s = _mm512_set1_ps(e->scale[i]), bias = _mm512_set1_ps(e->bias ? e->bias[i] : 0.0f);",
                  "    const float *rf = res ? e->residual + i * e->ldo : 0;",
                  "    const uint8_t *r8 = res8 ? e->residual8 + i * e->ldo : 0;",
                  "    uint8_t *q = quant ? e->q + i * e->ldo : 0;",
                  "    float *f = quant ? 0 : yf + i * P;"]
        lines += [f"    tf_qconv_epilogue_vec(x, c{r}_{v}, s, bias, rf, r8, q, f, p0 + {16 * v}, km[{v}], mid, res, res8, relu, "
                  "clip, quant);" for v in V]
        lines.append("  }")
    return "\n".join(lines + ["}", ""])


# 3x3 depthwise planes at least this wide take the byte-permute vpdpbusd form (where the CPU has
# VBMI and VNNI); narrower ones the float loops (14x14 and 7x7 planes go to the staged form first).
# With a padded copy of every channel, 56-wide planes and below ran 1.1-1.4x faster on the float
# loops; reading the plane with masked loads instead, QDQ MobileNetV2 in one process against the
# copy at 96 (kernel timers at batch 8: 144@56 1.07 -> 0.69 ms, 144@56/2 0.52 -> 0.25, 192@28
# 0.34 -> 0.25, 96@112/2 0.80 -> 0.58): whole model b8 1.045x with the limit at 96, 1.088x at 56,
# 1.092x at 28; b1 1.009x, 1.071x, 1.091x (paired medians).
DW_VNNI_MIN_WIDTH = 28

# 3x3 depthwise layers (stride 1 or 2) whose input planes have at most this many pixels
# (MobileNetV2's 14x14 and 7x7 layers) go 16 channels at a time, then one epilogue call: with VBMI
# and VNNI 16 channels in the vector lanes by vpdpbusd (qdepthwise_lanes.py: QDQ MobileNetV2 in
# one process, paired, bit-identical: b8 1.057x, b1 1.045x, then with a plain epilogue in the
# lanes too 1.025x and 1.023x more; 28x28 planes stay, 0.92x alone); elsewhere all 16 staged as
# float runs, then summed.  Staged and summed one channel at a time, the first loads of
# the sums read the run just stored (a store-forwarding stall in every channel: at 7x7, half the
# kernel's samples).  Inside QDQ MobileNetV2 (kernel timers, one process): 960@7 0.038 -> 0.028 ms,
# 576@14 0.046 -> 0.041, 576@14/2 0.033 -> 0.028 while the unchanged layers ran 5-10% slower;
# at 28x28 level or slower, so those keep the channel-at-a-time loop.
DW_STAGED_MAX_PIXELS = 196

# Padded K up to which a 1x1 stride-1 unpadded conv with an epilogue keeps its sums in registers
# (``tf_qconv_short_k``) instead of taking the GEMM path.  One process, two threads, against the
# GEMM path, QDQ layers: MobileNetV2's K 16 at 112x112 1.70x, K 96 at 56x56 1.47x, K 64 and 96 at
# 14x14 1.2-1.5x, K 160 at 7x7 1.2-1.3x, ResNet-50's K 64 at 56x56 1.42x.  Past K 160 it was level
# or slower (K 256-512: 0.88-1.15x): the GEMM's 8 x 32 tiles and shared packing pay off over a
# long K.
SHORT_K_MAX = 160


def short_k(kh: int, kw: int, sh: int, sw: int, pads: tuple[int, ...], h: int, w: int, oh: int, ow: int,
            channels: int) -> bool:
    """Whether an int8 conv with an epilogue, on an AVX-512 VNNI host, takes ``tf_qconv_short_k``
    (the C function ``NAME_image`` decides the same at run time): its GEMM tiling is then no knob."""
    return ((kh, kw, sh, sw) == (1, 1, 1, 1) and not any(pads[:2]) and (oh, ow) == (h, w)
            and (channels + 3) // 4 * 4 <= SHORT_K_MAX)


_HELPERS = r"""
@QGEMM_COMMON@
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#if defined(__SSSE3__)
#include <immintrin.h>
#endif
#ifndef TF_QCONV_HELPERS_DEFINED
#define TF_QCONV_HELPERS_DEFINED
@IM2COL@
#if defined(__SSSE3__)
/* 16 rows of 16 bytes transposed in place: r[k] becomes byte k of every row, in row order (four
   rounds of the perfect shuffle, row i interleaved with row i + 8: 64 unpacks where the scalar
   loop took 256 loads and stores).  qconv_transposed.py transposes byte matrices with it,
   qdepthwise_lanes.py a group's channels into the lanes and its outputs back. */
static inline void tf_qconv_transpose16(__m128i *r)
{
  for (int round = 0; round < 4; round++) {
    __m128i t[16];
    for (int i = 0; i < 8; i++) {
      t[2 * i] = _mm_unpacklo_epi8(r[i], r[i + 8]);
      t[2 * i + 1] = _mm_unpackhi_epi8(r[i], r[i + 8]);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
  }
}

/* Rows r[0..3] (16 pixels each) as one packed quad: 16 x 4 interleaved bytes at dst; each pixel's
   4 bytes are added to its int32 lane of sums4 (pmaddubsw by ones, then pmaddwd by ones). */
static inline void tf_qconv_store_quad(const __m128i *r, int8_t *dst, __m128i *sums4)
{
  const __m128i ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
  const __m128i a = _mm_unpacklo_epi8(r[0], r[1]), b = _mm_unpackhi_epi8(r[0], r[1]);
  const __m128i c = _mm_unpacklo_epi8(r[2], r[3]), d = _mm_unpackhi_epi8(r[2], r[3]);
  const __m128i o[4] = {_mm_unpacklo_epi16(a, c), _mm_unpackhi_epi16(a, c), _mm_unpacklo_epi16(b, d),
                        _mm_unpackhi_epi16(b, d)};
  for (int g = 0; g < 4; g++) {
    _mm_storeu_si128((__m128i *)dst + g, o[g]);
    sums4[g] = _mm_add_epi32(sums4[g], _mm_madd_epi16(_mm_maddubs_epi16(ones8, o[g]), ones16));
  }
}
#endif

/* Pixels [p0, p0 + 16) of the K x P byte matrix `col` (row stride ldc) as one packed panel
   of kq = Kp / 4 quads: bp[q][p][t] = col[4q + t][p0 + p] ^ flip, rows >= K and pixels >= P
   as 0 after the flip.  Returns nothing; colterm[p] = -128 * sum_k bp[k][p] (valid pixels). */
static void tf_qconv_pack_panel(const uint8_t *col, long ldc, long K, long kq, long p0, long P,
                                uint8_t flip, int8_t *bp, int32_t *colterm)
{
  const long n = P - p0 < 16 ? P - p0 : 16;
#if defined(__SSSE3__)
  const __m128i vflip = _mm_set1_epi8((char)flip);
  __m128i sums4[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
  for (long q = 0; q < kq; q++) {
    __m128i r[4];
    for (int t = 0; t < 4; t++) {
      const long k = 4 * q + t;
      if (k < K && n == 16) {
        r[t] = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(col + k * ldc + p0)), vflip);
      } else {
        uint8_t tmp[16] = {0};
        if (k < K) for (long p = 0; p < n; p++) tmp[p] = col[k * ldc + p0 + p] ^ flip;
        r[t] = _mm_loadu_si128((const __m128i *)tmp);
      }
    }
    tf_qconv_store_quad(r, bp + q * 64, sums4);
  }
  int32_t sums[16];
  for (int g = 0; g < 4; g++) _mm_storeu_si128((__m128i *)(sums + 4 * g), sums4[g]);
#else
  int32_t sums[16] = {0};
  for (long q = 0; q < kq; q++)
    for (int p = 0; p < 16; p++)
      for (int t = 0; t < 4; t++) {
        const long k = 4 * q + t;
        const int8_t v = (k < K && p < n) ? (int8_t)(col[k * ldc + p0 + p] ^ flip) : 0;
        bp[q * 64 + p * 4 + t] = v;
        sums[p] += v;
      }
#endif
  for (long p = 0; p < n; p++) colterm[p0 + p] = (int32_t)(0u - 128u * (uint32_t)sums[p]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define TF_QCONV_PACK4 1
/* Four whole panels (pixels [p0, p0 + 64), every one a valid pixel) of tf_qconv_pack_panel at
   once, in 512-bit registers: per k-quad four 64-byte row loads, the byte interleave within
   128-bit lanes (lane l = panel l), a 4 x 4 transpose of the lanes into one register per panel,
   four 64-byte stores, and the pixels' sums by pmaddubsw/pmaddwd.  A 1x1 layer's activations
   over 256 channels: the per-panel loop took a quarter of the layer. */
static void tf_qconv_pack_panels4(const uint8_t *col, long ldc, long K, long kq, long p0, uint8_t flip, long Kp,
                                  int8_t *bp, int32_t *colterm)
{
  const __m512i vflip = _mm512_set1_epi8((char)flip), ones8 = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
  __m512i sums[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  for (long q = 0; q < kq; q++) {
    __m512i r[4];
    for (int t = 0; t < 4; t++) {
      const long k = 4 * q + t;
      r[t] = k < K ? _mm512_xor_si512(_mm512_loadu_si512((const void *)(col + k * ldc + p0)), vflip) : _mm512_setzero_si512();
    }
    const __m512i a = _mm512_unpacklo_epi8(r[0], r[1]), b = _mm512_unpackhi_epi8(r[0], r[1]);
    const __m512i c = _mm512_unpacklo_epi8(r[2], r[3]), d = _mm512_unpackhi_epi8(r[2], r[3]);
    const __m512i o0 = _mm512_unpacklo_epi16(a, c), o1 = _mm512_unpackhi_epi16(a, c);
    const __m512i o2 = _mm512_unpacklo_epi16(b, d), o3 = _mm512_unpackhi_epi16(b, d);
    /* lane l of o0..o3: pixels 0-3, 4-7, 8-11, 12-15 of panel l; gather each panel's four lanes */
    const __m512i t0 = _mm512_shuffle_i32x4(o0, o1, 0x44), t1 = _mm512_shuffle_i32x4(o2, o3, 0x44);
    const __m512i t2 = _mm512_shuffle_i32x4(o0, o1, 0xEE), t3 = _mm512_shuffle_i32x4(o2, o3, 0xEE);
    const __m512i pan[4] = {_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD),
                            _mm512_shuffle_i32x4(t2, t3, 0x88), _mm512_shuffle_i32x4(t2, t3, 0xDD)};
    for (int l = 0; l < 4; l++) {
      _mm512_storeu_si512((void *)(bp + l * 16 * Kp + q * 64), pan[l]);
      sums[l] = _mm512_add_epi32(sums[l], _mm512_madd_epi16(_mm512_maddubs_epi16(ones8, pan[l]), ones16));
    }
  }
  for (int l = 0; l < 4; l++) {
    int32_t v[16];
    _mm512_storeu_si512((void *)v, sums[l]);
    for (int p = 0; p < 16; p++) colterm[p0 + 16 * l + p] = (int32_t)(0u - 128u * (uint32_t)v[p]);
  }
}
#endif

/* One channel's H x W plane padded with the zero point to Hp x Wp (the conv's whole input window;
   bytes, so uint8 and int8 alike).  The GEMM path keeps slack around the planes, so that the
   packer's 16-byte loads never check bounds. */
@PAD_PLANE@
/* One channel's W-wide plane x subsampled by (sh, sw) to OH x OW at dst: a strided 1x1 conv's
   input (its output positions read every sh-th row and sw-th column), copied once. */
static void tf_qconv_subsample_plane(const uint8_t *x, long W, long OH, long OW, long sh, long sw, uint8_t *dst)
{
  for (long oh = 0; oh < OH; oh++)
    for (long ow = 0; ow < OW; ow++) dst[oh * OW + ow] = x[oh * sh * W + ow * sw];
}
#if defined(__SSE4_1__)
#define TF_QCONV_FUSED_PACK 1
/* 16 bytes p[0], p[sw], ..., p[15 sw] for sw = 1 or 2 (two loads, even bytes kept). */
static inline __m128i tf_qconv_load16(const uint8_t *p, long sw, __m128i even)
{
  if (sw == 1) return _mm_loadu_si128((const __m128i *)p);
  return _mm_unpacklo_epi64(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p), even),
                            _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), even));
}

/* tf_qconv_pack_panel for a conv of column stride 1 or 2, straight from the padded image: the 16 pixels of a
   panel lie on a few output rows, each a run of the padded input per kernel tap (every byte, or
   every other one), so row k of the panel is one 16-byte load (two) per run, blended by lane.  koff[k]: where tap k
   (c, i, j) starts in the padded image. */
static void tf_qconv_pack_panel_padded(const uint8_t *xp, const long *koff, long Wp, long sh, long sw, long OW,
                                       long K, long kq,
                                       long p0, long P, uint8_t flip, int8_t *bp, int32_t *colterm)
{
  const long n = P - p0 < 16 ? P - p0 : 16;
  long base[16];
  __m128i sel[16];
  int segs = 0;
  const __m128i lanes = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
  for (long lane = 0, p = p0; lane < n; segs++) {
    const long oh = p / OW, ow = p % OW, len = OW - ow < n - lane ? OW - ow : n - lane;
    base[segs] = oh * sh * Wp + (ow - lane) * sw;             /* lane L reads base + sw * L */
    sel[segs] = _mm_cmpgt_epi8(_mm_set1_epi8((char)lane), lanes);   /* lanes before this run: keep */
    lane += len;
    p += len;
  }
  const __m128i vflip = _mm_set1_epi8((char)flip);
  __m128i sums4[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
  for (long q = 0; q < kq; q++) {
    __m128i r[4];
    for (int t = 0; t < 4; t++) {
      const long k = 4 * q + t;
      if (k >= K) { r[t] = _mm_setzero_si128(); continue; }
      const uint8_t *src = xp + koff[k];
      __m128i v = tf_qconv_load16(src + base[0], sw, even);
      for (int g = 1; g < segs; g++) v = _mm_blendv_epi8(tf_qconv_load16(src + base[g], sw, even), v, sel[g]);
      r[t] = _mm_xor_si128(v, vflip);
    }
    tf_qconv_store_quad(r, bp + q * 64, sums4);
  }
  int32_t sums[16];
  for (int g = 0; g < 4; g++) _mm_storeu_si128((__m128i *)(sums + 4 * g), sums4[g]);
  for (long p = 0; p < n; p++) colterm[p0 + p] = (int32_t)(0u - 128u * (uint32_t)sums[p]);
}
#endif

@MAX_THREADS@
/* The dequantizing epilogue, in place: C[o, p] (int32) becomes the float32
   relu?(C * scale[o] + bias[o] (+ residual[o, p])) (ReLU6: clipped at hi too), each operation
   rounded as the graph's, or with ibias (bias NULL) relu?((C + ibias[o]) * scale[o] ...): the
   integer bias added to the sums before the conversion, onnxruntime's QLinearConv arithmetic;
   or, with q, that value quantized to uint8 q[o, p] (C is then a scratch buffer).  With mid, the
   value is rounded through uint8 (mid_m, mid_zp) and dequantized (* mid_s + mid_o) before the
   residual; with residual8 the residual is uint8, dequantized (* rs + ro). */
typedef struct {
  const float *scale, *bias, *residual; int relu; float hi; uint8_t *q; float qm, qzp;
  const uint8_t *residual8; float rs, ro; int mid; float mid_m, mid_zp, mid_s, mid_o;
  long ldo;                          /* row stride of the output and the residual */
  const int32_t *ibias;
} tf_qconv_epi;

/* The epilogue's description from the kernels' arguments, for image n of an O x P output. */
static tf_qconv_epi tf_qconv_epilogue_of(const float *scale, const float *bias, const int32_t *acc_bias, const void *residual, int relu, float hi,
                                         float mid_m, int32_t mid_zp, float mid_s, float mid_o, float res_s,
                                         float res_o, uint8_t *q, float out_scale, int32_t out_zp, long n, long OP,
                                         long ldo)
{
  tf_qconv_epi e = {scale, bias, 0, relu, hi, q, out_scale, (float)out_zp, 0, res_s, res_o, mid_m != 0.0f, mid_m,
                    (float)mid_zp, mid_s, mid_o, ldo, acc_bias};
  if (residual && res_s != 0.0f) e.residual8 = (const uint8_t *)residual + n * OP;
  else if (residual) e.residual = (const float *)residual + n * OP;
  return e;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
@SCRATCH@
/* uint8 q = clip(round_half_even(x * m) + zp, 0, 255), float32 operations as the graph's
   QuantizeLinear ops the convolution took in (``input_scale``). */
static void tf_qconv_quantize(const float *x, long n, float m, float zpf, uint8_t *q)
{
  for (long i = 0; i < n; i++) {
    float v = x[i] * m;
    v = nearbyintf(v);
    v = v + zpf;
    v = (v < 0.0f ? 0.0f : v) > 255.0f ? 255.0f : (v < 0.0f ? 0.0f : v);
    q[i] = (uint8_t)v;
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define TF_QCONV_VECTOR_EPILOGUE 1
/* tf_qconv_dequantize 16 lanes at a time, the same float32 operations in the same order.  The
   epilogue runs on narrow blocks (a GEMM tile is 32 columns wide), where the scalar loops'
   per-row set-up cost as much as the arithmetic.  The compares of the C
   ternaries are max/min with the operands in the order that gives the same NaN and -0.0 results
   (VMAXPS/VMINPS return their second operand when either is NaN or both are zeros): for a short-K
   layer (a 1x1 conv over 64 channels) the epilogue has as many instructions as the GEMM. */
/* One uint8 quantization's constants as vectors: v * m clamped to [lo, hi] = [-zp, 255 - zp],
   rounded, + zp (set up once per epilogue call, not per vector). */
typedef struct { __m512 m, lo, hi, zpf; __m512i zp; } tf_qconv_q16;

static inline tf_qconv_q16 tf_qconv_q16_of(float m, float zp)
{
  const tf_qconv_q16 q = {_mm512_set1_ps(m), _mm512_set1_ps(-zp), _mm512_set1_ps(255.0f - zp), _mm512_set1_ps(zp),
                          _mm512_set1_epi32((int)zp)};
  return q;
}

/* 16 uint8 quantizations as bytes: clip(round(v * m) + zp, 0, 255), NaN -> 0.  Only the lower
   clamp is explicit (it also takes NaN to -zp); the narrowing saturates at 255, which covers the
   upper one and values past int32 (converted to 0x80000000, unsigned above 255). */
static inline __m128i tf_qconv_quantize16_u8(__m512 v, const tf_qconv_q16 *q)
{
  v = _mm512_max_ps(_mm512_mul_ps(v, q->m), q->lo);
  return _mm512_cvtusepi32_epi8(_mm512_add_epi32(_mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                                 q->zp));
}

/* The value rounded through uint8 and dequantized, float32(quantize(v)) * s + o, without leaving
   float: the rounded clamp plus zp is the same small integer the uint8 holds.  The clip moves
   before the rounding: clamping v * m to the integers [-zp, 255 - zp] commutes with rounding to
   nearest (a monotonic map that fixes integers), and adding zp is then exact. */
static inline __m512 tf_qconv_requantize16(__m512 v, const tf_qconv_q16 *q, __m512 s, __m512 o)
{
  v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, q->m), q->lo), q->hi);     /* NaN -> lo */
  v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), q->zpf);
  return _mm512_add_ps(_mm512_mul_ps(v, s), o);
}

/* float32(q) * s + o for 16 uint8 lanes. */
static inline __m512 tf_qconv_dequantize16(__m512i q, __m512 s, __m512 o)
{
  return _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q), s), o);
}

/* The epilogue's constants as vectors, once per call: the per-vector code then reloads and
   converts nothing.  With the variant chosen once per call too (below), a block of sums in L1
   takes 4.4-5.4 cycles a vector to uint8 with relu (8 before), 10.7-12 for a QDQ ResNet block's
   tail (14); the short-K 1x1 convs it dominated run 1.33-1.45x faster (one process, one thread). */
typedef struct {
  tf_qconv_q16 out, mid; __m512 mid_s, mid_o, rs, ro, hi;
} tf_qconv_epi16;

/* One vector of the epilogue: the sums acc (the integer bias already added) of row i, columns
   [j, j + 16) masked by k, to the row's output (uint8 at q + j, or float32 at f + j); s, b: the
   row's scale and float bias as vectors.  The variant flags are template constants (every call
   site passes constants), folded by the compiler.  tf_qconv_epilogue_value is its float value
   before the output's quantization, lane by lane (qdepthwise_lanes.py: lanes that are channels). */
static inline __attribute__((always_inline)) __m512 tf_qconv_epilogue_value(
    const tf_qconv_epi16 *x, __m512i acc, __m512 s, __m512 b, const float *rf, const uint8_t *r8, long j, __mmask16 k,
    int mid, int res, int res8, int relu, int clip)
{
  __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), s), b);
  if (mid) v = tf_qconv_requantize16(v, &x->mid, x->mid_s, x->mid_o);
  if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, rf + j));
  if (res8) v = _mm512_add_ps(v, tf_qconv_dequantize16(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, r8 + j)), x->rs, x->ro));
  if (relu) {
    v = _mm512_max_ps(_mm512_setzero_ps(), v);         /* v < 0 ? 0 : v */
    if (clip) v = _mm512_min_ps(x->hi, v);            /* v > hi ? hi : v */
  }
  return v;
}

static inline __attribute__((always_inline)) void tf_qconv_epilogue_vec(
    const tf_qconv_epi16 *x, __m512i acc, __m512 s, __m512 b, const float *rf, const uint8_t *r8, uint8_t *q, float *f,
    long j, __mmask16 k, int mid, int res, int res8, int relu, int clip, int quant)
{
  const __m512 v = tf_qconv_epilogue_value(x, acc, s, b, rf, r8, j, k, mid, res, res8, relu, clip);
  if (quant) _mm_mask_storeu_epi8(q + j, k, tf_qconv_quantize16_u8(v, &x->out));
  else _mm512_mask_storeu_ps(f + j, k, v);
}

/* One row segment [j0, j1) of rows i of C (int32 sums, row i at c) through the epilogue; the
   variant is picked once per row (mid, residual, relu and output form as template flags the
   compiler folds: every call site passes constants). */
static inline __attribute__((always_inline)) void tf_qconv_epilogue_row(
    const tf_qconv_epi *e, const tf_qconv_epi16 *x, const int32_t *c, long i, long j0, long j1, int mid, int res,
    int res8, int relu, int clip, int quant)
{
  /* one of the biases is 0: the float one after the scale, or the integer one before it */
  const __m512 s = _mm512_set1_ps(e->scale[i]), b = _mm512_set1_ps(e->bias ? e->bias[i] : 0.0f);
  const __m512i ib = _mm512_set1_epi32(e->ibias ? e->ibias[i] : 0);
  const float *rf = res ? e->residual + i * e->ldo : 0;
  const uint8_t *r8 = res8 ? e->residual8 + i * e->ldo : 0;
  uint8_t *q = quant ? e->q + i * e->ldo : 0;
  float *f = (float *)(c - j0);             /* the float result goes back over the sums */
  for (long j = j0; j < j1; j += 16) {
    const __mmask16 k = j1 - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (j1 - j)) - 1u);
    tf_qconv_epilogue_vec(x, _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, c + (j - j0)), ib), s, b, rf, r8, q, f, j, k,
                          mid, res, res8, relu, clip, quant);
  }
}

/* The epilogue's vectors of a call. */
static inline tf_qconv_epi16 tf_qconv_epi16_of(const tf_qconv_epi *e)
{
  const tf_qconv_epi16 x = {tf_qconv_q16_of(e->qm, e->qzp), tf_qconv_q16_of(e->mid_m, e->mid_zp),
                            _mm512_set1_ps(e->mid_s), _mm512_set1_ps(e->mid_o), _mm512_set1_ps(e->rs),
                            _mm512_set1_ps(e->ro), _mm512_set1_ps(e->hi)};
  return x;
}

/* Whether epilogue e is a plain uint8 one (scale, bias, relu or relu6, the next layer's
   quantization; no residual, no rounding through uint8 before one): the variants below, and what
   the channels-in-lanes depthwise kernel runs in its registers (qdepthwise_lanes.py). */
static inline int tf_qconv_plain_u8(const tf_qconv_epi *e)
{
  return e->q && !e->residual && !e->residual8 && !e->mid;
}

/* Calls STEP(MID, RES, RES8, RELU, CLIP, QUANT) with the variant of epilogue e as constants: the
   variants a conv's epilogue takes (QDQ models: plain, relu, relu6, a ResNet block's tail, an
   inverted residual's projection; tensorforge.quantize's: the same tails without the rounding
   through uint8 before the residual) each get code of their own, anything else the generic one. */
#define TF_QCONV_VARIANTS(e, STEP) do { \
  const int clip_ = (e)->hi < INFINITY; \
  const int plain_ = tf_qconv_plain_u8(e); \
  const int tail_ = (e)->q && !(e)->residual && (e)->residual8; \
  if (plain_ && (e)->relu && !clip_) STEP(0, 0, 0, 1, 0, 1); \
  else if (plain_ && !(e)->relu) STEP(0, 0, 0, 0, 0, 1); \
  else if (plain_ && (e)->relu && clip_) STEP(0, 0, 0, 1, 1, 1); \
  else if (tail_ && (e)->mid && (e)->relu && !clip_) STEP(1, 0, 1, 1, 0, 1); \
  else if (tail_ && (e)->mid && !(e)->relu) STEP(1, 0, 1, 0, 0, 1); \
  else if (tail_ && !(e)->mid && (e)->relu && !clip_) STEP(0, 0, 1, 1, 0, 1); \
  else if (tail_ && !(e)->mid && !(e)->relu) STEP(0, 0, 1, 0, 0, 1); \
  else STEP((e)->mid, (e)->residual != 0, (e)->residual8 != 0, (e)->relu, clip_, (e)->q != 0); \
} while (0)
#endif

static void tf_qconv_dequantize(void *vctx, int32_t *C, long ldc, long i0, long i1, long j0, long j1)
{
  const tf_qconv_epi *e = (const tf_qconv_epi *)vctx;
#ifdef TF_QCONV_VECTOR_EPILOGUE
  const tf_qconv_epi16 x = tf_qconv_epi16_of(e);
#define TF_QCONV_ROWS(MID, RES, RES8, RELU, CLIP, QUANT) \
  for (long i = i0; i < i1; i++) \
    tf_qconv_epilogue_row(e, &x, C + (i - i0) * ldc, i, j0, j1, MID, RES, RES8, RELU, CLIP, QUANT)
  TF_QCONV_VARIANTS(e, TF_QCONV_ROWS);
#undef TF_QCONV_ROWS
#else
  float v[64];                       /* one row of the block (at most a tile's width): simple loops vectorize */
  for (long j = j0; j < j1; j += 64) {
    const long n = j1 - j < 64 ? j1 - j : 64;
    for (long i = i0; i < i1; i++) {
      const float s = e->scale[i], b = e->bias ? e->bias[i] : 0.0f;
      const int32_t ib = e->ibias ? e->ibias[i] : 0;
      int32_t *c = C + (i - i0) * ldc + (j - j0);
      for (long t = 0; t < n; t++) v[t] = (float)(c[t] + ib) * s;
      for (long t = 0; t < n; t++) v[t] = v[t] + b;
      if (e->mid) {
        uint8_t m8[64];
        tf_qconv_quantize(v, n, e->mid_m, e->mid_zp, m8);
        for (long t = 0; t < n; t++) v[t] = (float)m8[t] * e->mid_s;
        for (long t = 0; t < n; t++) v[t] = v[t] + e->mid_o;
      }
      if (e->residual8) {
        const uint8_t *r = e->residual8 + i * e->ldo + j;
        float d[64];
        for (long t = 0; t < n; t++) d[t] = (float)r[t] * e->rs;
        for (long t = 0; t < n; t++) v[t] = v[t] + (d[t] + e->ro);
      }
      if (e->residual) {
        const float *r = e->residual + i * e->ldo + j;
        for (long t = 0; t < n; t++) v[t] = v[t] + r[t];
      }
      if (e->relu)
        for (long t = 0; t < n; t++) v[t] = v[t] < 0.0f ? 0.0f : v[t];
      if (e->relu && e->hi < INFINITY)
        for (long t = 0; t < n; t++) v[t] = v[t] > e->hi ? e->hi : v[t];
      if (e->q) {
        tf_qconv_quantize(v, n, e->qm, e->qzp, e->q + i * e->ldo + j);
      } else {
        memcpy(c, v, (size_t)n * sizeof(float));
      }
    }
  }
#endif
}

#if defined(TF_QCONV_VECTOR_EPILOGUE) && defined(TF_QCONV_PACK4) && defined(__AVX512VNNI__)
#define TF_QCONV_SHORT_K 1
@DPBUSD512@@SHORT_ROWS@
/* Pixels [p0, p0 + n) (n <= 64) of the K x P byte matrix src as four packed panels bp (those past
   n zero), their term in colterm[0, n); km and ct: the group's vector masks and terms. */
static void tf_qconv_pack_group(const uint8_t *src, long P, long K, long Kp, long p0, long n, uint8_t flip, int8_t *bp,
                                int32_t *colterm, __mmask16 *km, __m512i *ct)
{
  if (n == 64) {
    tf_qconv_pack_panels4(src + p0, P, K, Kp / 4, 0, flip, Kp, bp, colterm);
  } else {
    memset(bp, 0, (size_t)(64 * Kp));
    for (long l = 0; 16 * l < n; l++) tf_qconv_pack_panel(src + p0, P, K, Kp / 4, 16 * l, n, flip, bp + l * 16 * Kp, colterm);
  }
  for (int v = 0; v < 4; v++) {
    const long left = n - 16 * v;
    km[v] = left >= 16 ? (__mmask16)0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
    ct[v] = _mm512_maskz_loadu_epi32(km[v], colterm + 16 * v);
  }
}

/* Whether tf_qconv_short_k takes a 1x1 stride-1 conv of padded depth Kp (qconv.SHORT_K_MAX). */
static inline int tf_qconv_short_k_fits(long Kp)
{
  return Kp <= @SHORT_K_MAX@;
}

/* A short-K 1x1 stride-1 unpadded conv (its im2col is the K x P input src itself) inside the
   caller's parallel region: each thread packs a group of 64 pixels into its own four panels and
   computes the output channels of them (tf_qconv_short_rows), so packing and GEMM need no
   barrier between them and the group's panels stay in L1.  A small image (14 x 14: 4 groups)
   also splits the channels, into at least 16 tasks, each packing its group again (64 x K bytes,
   little beside its share of the multiply-adds).  yf: the float32 output (no q). */
static void tf_qconv_short_k(const tf_qconv_epi *e, const uint8_t *src, long K, long Kp, long P, long O,
                             const uint8_t *w, const int32_t *rowterm, uint8_t flip, float *yf)
{
  const tf_qconv_epi16 x = tf_qconv_epi16_of(e);
  int8_t *bp = (int8_t *)tf_qconv_scratch(1, (size_t)(64 * Kp));
  int32_t *colterm = (int32_t *)tf_qconv_scratch(2, 64 * sizeof(int32_t));
  const long groups = (P + 63) / 64;
  long splits = (16 + groups - 1) / groups;
  if (splits > O / 8) splits = O / 8 > 1 ? O / 8 : 1;
  const long rows = ((O + splits - 1) / splits + 3) / 4 * 4;
  long packed = -1;                        /* the group this thread's panels hold */
  __mmask16 km[4];
  __m512i ct[4];
  #pragma omp for schedule(dynamic, 1)
  for (long t = 0; t < groups * splits; t++) {
    const long g = t / splits, o0 = t % splits * rows, o1 = o0 + rows < O ? o0 + rows : O;
    const long p0 = 64 * g, n = P - p0 < 64 ? P - p0 : 64;
    if (!bp || !colterm || o0 >= O) continue;
    if (g != packed) tf_qconv_pack_group(src, P, K, Kp, p0, n, flip, bp, colterm, km, ct);
    packed = g;
    /* the group's vectors (the last group may hold fewer) and rows as constants */
#define TF_QCONV_SHORT_ROWS(NV, MID, RES, RES8, RELU, CLIP, QUANT) do { \
    long o = o0; \
    for (; o + 4 <= o1; o += 4) \
      tf_qconv_short_rows4x##NV(e, &x, w, Kp, bp, ct, rowterm, yf, P, o, p0, km, MID, RES, RES8, RELU, CLIP, QUANT); \
    for (; o < o1; o++) \
      tf_qconv_short_rows1x##NV(e, &x, w, Kp, bp, ct, rowterm, yf, P, o, p0, km, MID, RES, RES8, RELU, CLIP, QUANT); \
  } while (0)
#define TF_QCONV_SHORT_STEP(MID, RES, RES8, RELU, CLIP, QUANT) do { \
    if (n > 48) TF_QCONV_SHORT_ROWS(4, MID, RES, RES8, RELU, CLIP, QUANT); \
    else if (n > 32) TF_QCONV_SHORT_ROWS(3, MID, RES, RES8, RELU, CLIP, QUANT); \
    else if (n > 16) TF_QCONV_SHORT_ROWS(2, MID, RES, RES8, RELU, CLIP, QUANT); \
    else TF_QCONV_SHORT_ROWS(1, MID, RES, RES8, RELU, CLIP, QUANT); \
  } while (0)
    TF_QCONV_VARIANTS(e, TF_QCONV_SHORT_STEP);
#undef TF_QCONV_SHORT_STEP
#undef TF_QCONV_SHORT_ROWS
  }
}
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#endif
"""
_HELPERS = expand(_HELPERS, "tf_qconv", "uint8_t", 10).replace(
    "@SHORT_ROWS@", "\n".join(_short_rows(r, v) for r in (4, 1) for v in range(1, 5))).replace(
    "@SHORT_K_MAX@", str(SHORT_K_MAX)).replace("@DPBUSD512@", qgemm.DPBUSD512).replace(
    "@QGEMM_COMMON@", qgemm.COMMON)


def source(name: str, target, signed: bool, threads: int = 1, tiling: "qgemm.Tiling | None" = None) -> str:
    """C text defining ``void NAME(long N, long C, long H, long W, long O, long kh, long kw, long sh,
    long sw, long ph, long pw, long dh, long dw, long OH, long OW, const void *x, float in_scale,
    const uint8_t *w_shifted, const int32_t *w_sums, int32_t zp, const float *scale, const float
    *bias, const int32_t *acc_bias, const void *residual, int relu, float hi, float mid_m, int32_t mid_zp, float mid_s, float mid_o,
    float res_s, float res_o, float out_scale, int32_t out_zp, void *y)`` for
    ``signed`` (int8) or uint8 activations
    ``x``, or float32 ``x`` quantized to uint8 in the kernel when ``in_scale`` is not 0
    (``clip(round(x * in_scale) + zp, 0, 255)``, one image at a time, in cache); ``y`` is
    ``N x O x OH x OW``: the int32 sums when ``scale`` is NULL, else float32
    ``max?(sums * scale[o] + bias[o] (+ residual), 0)`` (``residual`` may be NULL; ``relu`` 0 or 1, and below ``hi``: INFINITY, or 6 for ReLU6),
    or, with ``acc_bias`` instead of ``bias`` (NULL), ``(sums + acc_bias[o]) * scale[o]`` first, applied to each block of the output as the GEMM finishes it; with ``out_scale`` not 0 that
    float is quantized to uint8 (``clip(round(v * out_scale) + out_zp, 0, 255)``) and ``y`` is
    uint8 (the int32 sums go to a scratch buffer).  ``mid_m`` not 0 rounds the value through uint8
    (``mid_m``, ``mid_zp``) and back (``* mid_s + mid_o``) before the residual; ``res_s`` not 0
    makes the residual uint8, dequantized as ``r * res_s + res_o``.  Self-contained and guarded like ``qgemm.source``;
    ``tiling``: the GEMM's blocking (default ``qgemm.Tiling.for_target``; the int8 tuner's knob)."""
    gemm = f"{name}_gemm"
    flip = "0x00" if signed else "0x80"
    zp_shift = "" if signed else " - 128u"
    par = f"{team(threads)} if (P * Kp * O >= {qgemm.PARALLEL_MIN_MACS})" if threads > 1 else "if (0)"
    direct = qgemm.isa(target) == qgemm.AVX512_VNNI and qconv_direct.enabled(target)
    par_pragma = par.replace('"', '\\"')
    direct_text = qconv_direct.source(f"{name}_direct", par.replace("P * Kp * O", "OH * OW * O * C * kh * kw")) if direct else ""
    direct_call = f"""
  if ({name}_direct_fits(O, kh, kw, sh, sw, OH, OW)) {{
    /* stride 1 over many positions: the direct kernel on interleaved planes (qconv_direct.py) */
    {name}_direct_all(N, C, H, W, O, kh, kw, ph, pw, dh, dw, OH, OW, x, in_scale, w_shifted, 0, w_sums, zp, scale, bias, acc_bias,
                      residual, relu, hi, mid_m, mid_zp, mid_s, mid_o, res_s, res_o, out_scale, out_zp, y);
    return;
  }}""" if direct else ""
    direct_text += f"""
/* Every image through {name}_direct, with the weights arranged at compile time or per call. */
static void {name}_direct_all(long N, long C, long H, long W, long O, long kh, long kw, long ph, long pw, long dh,
                              long dw, long OH, long OW, const void *x, float in_scale, const uint8_t *w_shifted,
                              const int32_t *arranged, const int32_t *w_sums, int32_t zp, const float *scale,
                              const float *bias, const int32_t *acc_bias, const void *residual, int relu, float hi, float mid_m, int32_t mid_zp,
                              float mid_s, float mid_o, float res_s, float res_o, float out_scale, int32_t out_zp, void *y)
{{
  const long P = OH * OW, Kp = (C * kh * kw + 3) / 4 * 4;
  const int32_t *rowterm = {name}_rowterm(O, w_sums, zp);
  if (!rowterm) return;
  /* image n (conv_helpers.each_image shares out a batch's images) */
#define {name.upper()}_DIRECT_IMAGE(n) {{ \
    uint8_t *xq = in_scale != 0.0f ? (uint8_t *)tf_qconv_scratch(5, (size_t)(C * H * W)) : 0; \
    if (in_scale == 0.0f || xq) {{ \
      if (xq) {{ \
        _Pragma("omp parallel for schedule(dynamic, 4) {par_pragma}") \
        for (long c = 0; c < C; c++) \
          tf_qconv_quantize((const float *)x + ((n) * C + c) * H * W, H * W, in_scale, (float)zp, xq + c * H * W); \
      }} \
      tf_qconv_epi epi = tf_qconv_epilogue_of(scale, bias, acc_bias, residual, relu, hi, mid_m, mid_zp, mid_s, mid_o, res_s, \
          res_o, out_scale != 0.0f ? (uint8_t *)y + (n) * O * P : 0, out_scale, out_zp, n, O * P, P); \
      {name}_direct(C, H, W, O, kh, kw, ph, pw, dh, dw, OH, OW, xq ? xq : (const uint8_t *)x + (n) * C * H * W, \
                    (uint8_t)zp, {flip}, w_shifted, Kp, arranged, rowterm, scale ? &epi : 0, (char *)y + (n) * O * P * 4); \
    }} }}
{each_image(f"{name.upper()}_DIRECT_IMAGE(n)", threads, "tf_qconv")}
#undef {name.upper()}_DIRECT_IMAGE
}}

/* {name} for a layer the direct kernel takes (stride 1; decided at compile time), its weights
   arranged by qconv_direct.arrange_weights. */
void {name}_arranged(long N, long C, long H, long W, long O, long kh, long kw, long ph, long pw, long dh, long dw,
                     long OH, long OW, const void *x, float in_scale, const int32_t *arranged, const int32_t *w_sums,
                     int32_t zp, const float *scale, const float *bias, const int32_t *acc_bias, const void *residual, int relu, float hi,
                     float mid_m, int32_t mid_zp, float mid_s, float mid_o, float res_s, float res_o, float out_scale,
                     int32_t out_zp, void *y)
{{
  {name}_direct_all(N, C, H, W, O, kh, kw, ph, pw, dh, dw, OH, OW, x, in_scale, 0, arranged, w_sums, zp, scale, bias, acc_bias,
                    residual, relu, hi, mid_m, mid_zp, mid_s, mid_o, res_s, res_o, out_scale, out_zp, y);
}}""" if direct else ""
    rowterm = f"""
/* The per-output-channel term -zp' * rowsum(w) both paths start their sums from (in this
   thread's scratch). */
static const int32_t *{name}_rowterm(long O, const int32_t *w_sums, int32_t zp)
{{
  int32_t *rowterm = (int32_t *)tf_qconv_scratch(3, (size_t)O * sizeof(int32_t));
  const uint32_t zps = (uint32_t)zp{zp_shift};
  for (long o = 0; rowterm && o < O; o++) rowterm[o] = (int32_t)(0u - zps * (uint32_t)w_sums[o]);
  return rowterm;
}}
"""
    vnni512 = qgemm.isa(target) == qgemm.AVX512_VNNI
    transposed_text = qconv_transposed.source(name, target, signed, threads, tiling) if vnni512 else ""
    return (qgemm.source(gemm, target, a_signed=False, threads=threads, row_comp=True, tiling=tiling,
                         weights_in_a=True) + _HELPERS
            + rowterm + direct_text + transposed_text + f"""
/* Image n through the GEMM path: its input quantized (float input), padded or copied, packed into
   VNNI panels, multiplied, the epilogue on each finished block; one parallel region (a team of
   one when the images themselves are shared out: see {name}). */
static void {name}_image(long n, long C, long H, long W, long O, long kh, long kw, long sh, long sw, long ph, long pw,
                         long dh, long dw, long OH, long OW, const void *x, float in_scale, const uint8_t *w_shifted,
                         int32_t zp, const float *scale, const float *bias, const int32_t *acc_bias, const void *residual, int relu, float hi,
                         float mid_m, int32_t mid_zp, float mid_s, float mid_o, float res_s, float res_o, float out_scale,
                         int32_t out_zp, void *y, const int32_t *rowterm, const long *koff)
{{
  const long K = C * kh * kw, Kp = (K + 3) / 4 * 4, P = OH * OW, panels = (P + 15) / 16;
  const int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W;
  /* a strided 1x1 conv without padding (ResNet's downsampling shortcut) is the direct one on the
     subsampled image, copied once: C x OH x OW bytes, a quarter of the input at stride 2 */
  const int subsampled = kh == 1 && kw == 1 && ph == 0 && pw == 0 && !direct && (OH - 1) * sh < H && (OW - 1) * sw < W;
  const int fused = koff != 0;
#ifdef TF_QCONV_SHORT_K
  /* a short-K 1x1 layer (MobileNet's expansions and projections) keeps its sums in registers */
  const int short_k = direct && scale && tf_qconv_short_k_fits(Kp);
#else
  const int short_k = 0;
#endif
  /* the padded input the windows read: 32 bytes of slack before, 64 after (the packer's loads) */
  const long Hp = (OH - 1) * sh + (kh - 1) * dh + 1, Wp = (OW - 1) * sw + (kw - 1) * dw + 1;
  /* this thread's buffers (scratch is per thread) */
  uint8_t *col = direct ? 0 : (uint8_t *)tf_qconv_scratch(0, (size_t)(fused ? C * Hp * Wp + 96 : K * P));   /* subsampled: C x P */
  int8_t *bp = short_k ? 0 : (int8_t *)tf_qconv_scratch(1, (size_t)(panels * 16 * Kp));
  int32_t *colterm = short_k ? 0 : (int32_t *)tf_qconv_scratch(2, (size_t)(panels * 16) * sizeof(int32_t));
  uint8_t *xq = in_scale != 0.0f ? (uint8_t *)tf_qconv_scratch(5, (size_t)(C * H * W)) : 0;
  if ((!direct && !col) || (!short_k && (!bp || !colterm)) || (in_scale != 0.0f && !xq)) return;
  if (fused) {{
    /* the planes are written whole (tf_qconv_pad_plane); only the slack around them, which the
       packer's loads may touch for lanes it then discards, is set here */
    memset(col, (uint8_t)zp, 32);
    memset(col + 32 + C * Hp * Wp, (uint8_t)zp, 64);
  }}
  /* a uint8 output (which graph.qconv's verifier allows only with the float epilogue): the GEMM
     sums each tile in a local buffer for the epilogue (qgemm, C == NULL) */
  const int local = out_scale != 0.0f;
  const uint8_t *xn = xq ? xq : (const uint8_t *)x + n * C * H * W;
  const uint8_t *src = direct ? xn : col;
  tf_qconv_epi epi = tf_qconv_epilogue_of(scale, bias, acc_bias, residual, relu, hi, mid_m, mid_zp, mid_s, mid_o, res_s, res_o,
                                          out_scale != 0.0f ? (uint8_t *)y + n * O * P : 0, out_scale, out_zp, n, O * P, P);
  #pragma omp parallel {par}
  {{
    if (xq) {{
      #pragma omp for schedule(dynamic, 4)
      for (long c = 0; c < C; c++)
        tf_qconv_quantize((const float *)x + (n * C + c) * H * W, H * W, in_scale, (float)zp, xq + c * H * W);
    }}
#ifdef TF_QCONV_SHORT_K
    if (short_k) {{
      tf_qconv_short_k(&epi, xn, K, Kp, P, O, w_shifted, rowterm, {flip}, local ? 0 : (float *)y + n * O * P);
    }} else
#endif
    if (fused) {{
#ifdef TF_QCONV_FUSED_PACK
      #pragma omp for schedule(dynamic, 4)
      for (long c = 0; c < C; c++) tf_qconv_pad_plane(xn + c * H * W, H, W, ph, pw, Hp, Wp, (uint8_t)zp, col + 32 + c * Hp * Wp);
      #pragma omp for schedule(dynamic, 4)
      for (long pn = 0; pn < panels; pn++)
        tf_qconv_pack_panel_padded(col + 32, koff, Wp, sh, sw, OW, K, Kp / 4, pn * 16, P, {flip}, bp + pn * 16 * Kp,
                                   colterm);
#endif
    }} else {{
      if (subsampled) {{
        #pragma omp for schedule(dynamic, 4)
        for (long c = 0; c < C; c++) tf_qconv_subsample_plane(xn + c * H * W, W, OH, OW, sh, sw, col + c * OH * OW);
      }} else if (!direct) {{
        #pragma omp for schedule(dynamic, 4)
        for (long k = 0; k < K; k++)
          tf_qconv_im2col_row(xn, k, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, (uint8_t)zp, col + k * P);
      }}
#ifdef TF_QCONV_PACK4
      const long fours = P / 64;                    /* groups of four whole panels */
#else
      const long fours = 0;
#endif
      #pragma omp for schedule(dynamic, 1)
      for (long g = 0; g < fours + (panels - 4 * fours); g++) {{
#ifdef TF_QCONV_PACK4
        if (g < fours) {{
          tf_qconv_pack_panels4(src, P, K, Kp / 4, g * 64, {flip}, Kp, bp + g * 64 * Kp, colterm);
          continue;
        }}
#endif
        const long pn = 4 * fours + (g - fours);
        tf_qconv_pack_panel(src, P, K, Kp / 4, pn * 16, P, {flip}, bp + pn * 16 * Kp, colterm);
      }}
    }}
    /* the GEMM's parts are an omp for of this region (after the packing loop's barrier) */
    if (!short_k)
      {gemm}(O, P, Kp, w_shifted, Kp, bp, colterm, rowterm, scale ? tf_qconv_dequantize : 0, &epi,
           local ? (int32_t *)0 : (int32_t *)y + n * O * P, P);
  }}
}}

void {name}(long N, long C, long H, long W, long O, long kh, long kw, long sh, long sw, long ph, long pw,
            long dh, long dw, long OH, long OW, const void *x, float in_scale, const uint8_t *w_shifted,
            const int32_t *w_sums, int32_t zp, const float *scale, const float *bias, const int32_t *acc_bias,
            const void *residual, int relu, float hi, float mid_m, int32_t mid_zp, float mid_s, float mid_o,
            float res_s, float res_o, float out_scale, int32_t out_zp, void *y)
{{{direct_call}
  const long K = C * kh * kw;
  const int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W;
  const int subsampled = kh == 1 && kw == 1 && ph == 0 && pw == 0 && !direct && (OH - 1) * sh < H && (OW - 1) * sw < W;
#ifdef TF_QCONV_FUSED_PACK
  const int fused = !direct && !subsampled && (sw == 1 || sw == 2);
#else
  const int fused = 0;
#endif
  const long Hp = (OH - 1) * sh + (kh - 1) * dh + 1, Wp = (OW - 1) * sw + (kw - 1) * dw + 1;
  const int32_t *rowterm = {name}_rowterm(O, w_sums, zp);
  long *koff = fused ? (long *)tf_qconv_scratch(4, (size_t)K * sizeof(long)) : 0;
  if (!rowterm || (fused && !koff)) return;
  for (long k = 0; fused && k < K; k++)
    koff[k] = (k / (kh * kw)) * Hp * Wp + ((k / kw) % kh) * dh * Wp + (k % kw) * dw;
#define {name.upper()}_IMAGE(n) {name}_image(n, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, x, in_scale, w_shifted, zp, \
    scale, bias, acc_bias, residual, relu, hi, mid_m, mid_zp, mid_s, mid_o, res_s, res_o, out_scale, out_zp, y, rowterm, koff)
{each_image(f"{name.upper()}_IMAGE(n);", threads, "tf_qconv")}
#undef {name.upper()}_IMAGE
}}
""")


def _tap_rows(name: str, kw: int) -> tuple[str, str]:
    """(a C function adding one window row of ``kw`` taps to the sums in one expression: ``kw`` loads,
    one load and store of the sums, its pointers ``restrict`` parameters so that gcc vectorizes it;
    the statements of ``depthwise_source``'s flat loop that call it for windows ``kw`` taps wide)."""
    params = ", ".join(f"const float *restrict s{i}" for i in range(kw))
    weights = ", ".join(f"float w{i}" for i in range(kw))
    terms = " + ".join(f"s{i}[j] * w{i}" for i in range(kw))
    args = ", ".join(f"src[r + {i}]" for i in range(kw)) + ", " + ", ".join(f"wt[r + {i}]" for i in range(kw))
    helper = f"""static void {name}_row{kw}(float *restrict acc, long L, {params}, {weights})
{{
  for (long j = 0; j < L; j++) acc[j] += {terms};
}}
"""
    call = f"""  if (kw == {kw} && taps % {kw} == 0) {{
    for (long r = 0; r < taps; r += {kw}) {name}_row{kw}(acc, L, {args});
    return;
  }}"""
    return helper, call


def depthwise_source(name: str, signed: bool, threads: int = 1) -> str:
    """C text defining ``void NAME(long N, long C, long H, long W, long kh, long kw, long sh, long sw,
    long ph, long pw, long dh, long dw, long OH, long OW, const void *x, float in_scale, const
    uint8_t *w_shifted, long kp, const int32_t *w_sums, int32_t zp, const float *scale, const float
    *bias, const int32_t *acc_bias, const void *residual, int relu, float hi, float mid_m, int32_t mid_zp, float mid_s, float mid_o,
            float res_s, float res_o, float out_scale, int32_t out_zp, void *y)``:
    the depthwise (one filter per channel) form of ``source``'s convolution, with the same
    arguments, epilogue and output types.  A depthwise conv has a handful of taps per output, too
    few for the GEMM: every output sums its taps as float multiply-adds of ``x - zp`` by ``w``
    (gcc vectorizes them; measured about 3x the int32 widening loop), exact because every product
    and partial sum is an integer below 2^24 (taps of at most 64 x 255 x 128 < 2^21).  Per
    channel, one flat run over the whole plane: ``_same3x3`` for 3x3 convs that keep or halve the
    size, ``_flat_channel`` (padded-width runs) for other stride-1/2 undilated ones; dilated or
    wider-strided ones go row by row over the padded plane.  Channels are the OpenMP tasks."""
    elem = "int8_t" if signed else "uint8_t"
    par = f"{team(threads)} if (C * P * kh * kw >= {qgemm.PARALLEL_MIN_MACS // 8})" if threads > 1 else "if (0)"
    flip_loaded = "\n          v = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));" if signed else ""
    rows5, rows7 = _tap_rows(name, 5), _tap_rows(name, 7)
    return _HELPERS + qdepthwise_lanes.source(name, signed) + f"""
/* The taps of one channel over a flat run of L outputs: src[t] is where tap t reads output 0,
   every plane has the run's row pitch, so output j reads src[t][j] (the padded-width columns
   past OW are computed and dropped).  Rows of 7 or 14 outputs are too short to vectorize one at
   a time; one run over the whole plane is not.  3x3: all taps in one expression; 5 or 7 taps a
   row: a tap row per pass (a pass per tap, as gcc compiled it, stayed scalar: 5x5 layers ran at
   3-4 GMAC/s, a fifth of the 3x3 ones); other windows a pass per tap.  Any grouping is exact:
   the sums are integers below 2^24. */
{rows5[0]}{rows7[0]}
static void {name}_flat(float *restrict acc, long L, const float *const *src, const float *wt, long taps, long kw)
{{
  if (taps == 9) {{
    const float *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3], *s4 = src[4], *s5 = src[5], *s6 = src[6],
                *s7 = src[7], *s8 = src[8];
    const float w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3], w4 = wt[4], w5 = wt[5], w6 = wt[6], w7 = wt[7], w8 = wt[8];
    for (long j = 0; j < L; j++)
      acc[j] = s0[j] * w0 + s1[j] * w1 + s2[j] * w2 + s3[j] * w3 + s4[j] * w4 + s5[j] * w5 + s6[j] * w6 + s7[j] * w7 + s8[j] * w8;
    return;
  }}
  for (long j = 0; j < L; j++) acc[j] = 0.0f;
{rows5[1]}
{rows7[1]}
  for (long t = 0; t < taps; t++) {{
    const float *restrict sv = src[t];
    const float wv = wt[t];
    for (long j = 0; j < L; j++) acc[j] += sv[j] * wv;
  }}
}}

/* One channel's x - zp (stride 1) as the flat float run F[0, L), with pad zeros before and after
   it: the row above the first and the row below the last. */
static inline void {name}_same3x3_stage(const uint8_t *xc, long L, long pad, float zp, float *F)
{{
  for (long t = 0; t < pad; t++) F[t - pad] = F[L + t] = 0.0f;
  for (long j = 0; j < L; j++) F[j] = (float)({elem})xc[j] - zp;
}}

/* The stride-1 sums of one channel from its staged run F (row pitch OW, as above) into rows. */
static inline void {name}_same3x3_s1(const float *F, long L, long OW, const float *w, const float *m0, const float *m2,
                                     int32_t *rows)
{{
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
  const float *L0 = F - 1, *R0 = F + 1;
  for (long j = 0; j < L; j++)
    rows[j] = (int32_t)(m0[j] * (L0[j - OW] * w0 + L0[j] * w3 + L0[j + OW] * w6) + (F[j - OW] * w1 + F[j] * w4 + F[j + OW] * w7)
                        + m2[j] * (R0[j - OW] * w2 + R0[j] * w5 + R0[j + OW] * w8));
}}

/* Stride 2: one channel's even and odd columns of x - zp as the flat runs F and O (L = H x OW each,
   pad zeros before and after each). */
static inline void {name}_same3x3_stage2(const uint8_t *xc, long L, long pad, float zp, float *F, float *O)
{{
  for (long t = 0; t < pad; t++) F[t - pad] = F[L + t] = O[t - pad] = O[L + t] = 0.0f;
  for (long j = 0; j < L; j++) {{ F[j] = (float)({elem})xc[2 * j] - zp; O[j] = (float)({elem})xc[2 * j + 1] - zp; }}
}}

/* The stride-2 sums of one channel (H input rows, OW outputs a row) from its staged runs F and O
   into out; rows: L int32 of scratch.  The output centred on flat position j of the even columns
   (no right mask: the odd column right of an even one is inside an even-width image). */
static inline void {name}_same3x3_s2(const float *F, const float *O, long H, long OW, const float *w, const float *m0,
                                     int32_t *rows, int32_t *out)
{{
  const long L = H * OW;
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
  const float *L0 = O - 1, *R0 = O;                        /* columns left and right of F's */
#define {name}_S2(j) (int32_t)(m0[j] * (L0[(j) - OW] * w0 + L0[j] * w3 + L0[(j) + OW] * w6) \
                       + (F[(j) - OW] * w1 + F[j] * w4 + F[(j) + OW] * w7) + (R0[(j) - OW] * w2 + R0[j] * w5 + R0[(j) + OW] * w8))
  if (OW >= 16)          /* rows long enough to vectorize one at a time: only the kept ones */
    for (long oh = 0; oh < H / 2; oh++) {{
      int32_t *o = out + oh * OW;
      const long j0 = 2 * oh * OW;
      /* in chunks of 16, the last one overlapping the one before: one vector each, where a loop
         over the row left its remainder (12 of 28 outputs) to scalar code */
      for (long t0 = 0; t0 < OW; t0 += 16) {{
        const long c = t0 + 16 <= OW ? t0 : OW - 16;
        for (long t = c; t < c + 16; t++) o[t] = {name}_S2(j0 + t);
      }}
    }}
  else {{
    for (long j = 0; j < L; j++)
      rows[j] = {name}_S2(j);
    for (long oh = 0; oh < H / 2; oh++) memcpy(out + oh * OW, rows + 2 * oh * OW, (size_t)OW * sizeof(int32_t));
  }}
#undef {name}_S2
}}

/* One channel of a 3x3 depthwise conv with pads of 1 that keeps the size (stride 1) or halves
   an even one (stride 2), the commonest kind (MobileNet's): x - zp as one flat float run with a
   row of zeros before and after it, no padded copy, and every output row in one flat loop; the
   taps that would read across a row's left (right) edge are multiplied by the column mask m0
   (m2): 0 in the first (last) column, 1 elsewhere (exact: the sums are integers below 2^24).
   Stride 2 reads the even and odd columns as two runs; output rows of 16 or more are computed
   one kept row at a time, shorter ones as one flat run over every row, keeping the even ones
   (twice the multiply-adds of the rows kept, in a loop long enough to vectorize). */
static void {name}_same3x3(const uint8_t *xc, long H, long W, long s, float zp, const float *w, const float *m0,
                           const float *m2, int32_t *out)
{{
  const long OW = W / s, L = H * OW, pad = OW + 1, span = L + 2 * pad;
  float *buf = (float *)tf_qconv_scratch(7, (size_t)(s * span) * sizeof(float));
  int32_t *rows = s == 2 ? (int32_t *)tf_qconv_scratch(8, (size_t)L * sizeof(int32_t)) : 0;
  if (!buf || (s == 2 && !rows)) return;
  float *F = buf + pad;
  if (s == 1) {{
    {name}_same3x3_stage(xc, L, pad, zp, F);
    {name}_same3x3_s1(F, L, OW, w, m0, m2, out);
  }} else {{
    {name}_same3x3_stage2(xc, L, pad, zp, F, F + span);
    {name}_same3x3_s2(F, F + span, H, OW, w, m0, rows, out);
  }}
}}

#if defined(__AVX512VBMI__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define {name.upper()}_VNNI3X3 1
/* {name}_same3x3 in integers: a tap row's three weights are one dword [w0, w1, w2, 0] and, for 16
   outputs, the three input bytes each reads (plus one multiplied by 0) are gathered from one
   64-byte load of the input row into 16 dwords by a byte permute (VBMI); vpdpbusd adds the
   products, x unsigned by signed w, to the int32 sums.  Three load-permute-vpdpbusd steps make 16
   outputs (the float form: a conversion pass, nine multiplies, eight adds, two column masks and a
   conversion back).  The loads read the channel's plane itself: lane l holds column ow*s - 1 + l,
   and the lanes left of column 0 or past the row's end are masked off (no fault, no read) and
   hold the zero point, as do rows above and below the plane.  A padded copy of each channel cost
   as much as the sums on 56- and 28-wide planes.  Exact: sum w (x - zp) = sum w x - zp sum w; int8
   input runs as x ^ 0x80 with the zero point flipped alike. */
static void {name}_same3x3_vnni(const uint8_t *xc, long H, long W, long s, uint8_t zp, const uint8_t *wc, int32_t *out)
{{
  const uint8_t flip = {"0x80" if signed else "0x00"}, pz = (uint8_t)(zp ^ flip);
  const long OH = H / s, OW = W / s;
  const __m512i zpv = _mm512_set1_epi8((char)zp), pzv = _mm512_set1_epi8((char)pz);
  int32_t wsum = 0;
  __m512i wv[3];
  for (int i = 0; i < 3; i++) {{
    int8_t b[4] = {{0, 0, 0, 0}};
    for (int k = 0; k < 3; k++) {{ b[k] = (int8_t)((int32_t)wc[3 * i + k] - 128); wsum += b[k]; }}
    int32_t d;
    memcpy(&d, b, 4);
    wv[i] = _mm512_set1_epi32(d);
  }}
  const __m512i init = _mm512_set1_epi32((int32_t)(0u - (uint32_t)pz * (uint32_t)wsum));
  uint8_t ix[64];
  for (int j = 0; j < 16; j++)
    for (int k = 0; k < 4; k++) ix[4 * j + k] = (uint8_t)(j * s + k);
  const __m512i idx = _mm512_loadu_si512((const void *)ix);
  for (long oh = 0; oh < OH; oh++) {{
    for (long ow = 0; ow < OW; ow += 16) {{
      const long c0 = ow * s - 1, lo = c0 < 0 ? -c0 : 0, hi = W - c0 < 64 ? W - c0 : 64;
      const __mmask64 m = (~0ULL << lo) & (hi >= 64 ? ~0ULL : (1ULL << hi) - 1ULL);
      __m512i acc = init;
      for (int i = 0; i < 3; i++) {{
        const long iy = oh * s + i - 1;
        __m512i v = pzv;
        if (iy >= 0 && iy < H) {{
          v = _mm512_mask_loadu_epi8(zpv, m, (const void *)((uintptr_t)(xc + iy * W) + (uintptr_t)c0));{flip_loaded}
        }}
        acc = _mm512_dpbusd_epi32(acc, _mm512_permutexvar_epi8(idx, v), wv[i]);
      }}
      const long n = OW - ow < 16 ? OW - ow : 16;
      _mm512_mask_storeu_epi32(out + oh * OW + ow, (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1u), acc);
    }}
  }}
}}
#endif

/* Row iy of a channel (H x W, any of them: rows outside are all padding) padded to Wp columns as
   float x - zp: padding, which holds the zero point, is 0. */
static inline void {name}_float_row(const uint8_t *xc, long iy, long H, long W, long pw, long Wp, float zp, float *d)
{{
  long lo = pw < 0 ? 0 : (pw > Wp ? Wp : pw), hi = pw + W < Wp ? pw + W : Wp;
  if (iy < 0 || iy >= H || hi < lo) lo = hi = Wp;
  for (long c = 0; c < lo; c++) d[c] = 0.0f;
  const uint8_t *src = xc + iy * W - pw;
  for (long c = lo; c < hi; c++) d[c] = (float)({elem})src[c] - zp;
  for (long c = hi; c < Wp; c++) d[c] = 0.0f;
}}

/* One channel of a stride-1 or stride-2 undilated depthwise conv through {name}_flat, read from
   the channel's unpadded plane xc: the padded plane as float x - zp (row pitch Wp); for stride 2,
   its four phase planes, phase (a, b) holding padded position (2 y + a, 2 x + b) at y * pitch + x
   (pitch ceil(Wp / 2)), so tap (i, k) of output j of the run reads phase (i % 2, k % 2) at
   j + (i / 2) pitch + k / 2: every padded row converted and split once (a plane per tap row, its
   rows converted again for each, cost 5x5/2 layers twice the time of their multiply-adds). */
static void {name}_flat_channel(const uint8_t *xc, long H, long W, long ph, long pw, long Hp, long Wp, long kh,
                                long kw, long s, long OH, long OW, float zp, const float *wt, int32_t *out)
{{
  const long pitch = s == 1 ? Wp : (Wp + 1) / 2, L = OH * pitch, Hq = (Hp + 1) / 2;
  const long len = (s == 1 ? Hp * Wp : Hq * pitch) + pitch + kw;          /* floats per plane */
  float *pl = (float *)tf_qconv_scratch(7, (size_t)((s == 1 ? 1 : 4) * len + 2 * pitch) * sizeof(float));
  float *acc = (float *)tf_qconv_scratch(8, (size_t)L * sizeof(float));
  const float *src[64];
  if (!pl || !acc) return;
  if (s == 1) {{
    for (long r = 0; r < Hp; r++) {name}_float_row(xc, r - ph, H, W, pw, Wp, zp, pl + r * Wp);
    for (long i = Hp * Wp; i < len; i++) pl[i] = 0.0f;
    for (long i = 0; i < kh; i++)
      for (long k = 0; k < kw; k++) src[i * kw + k] = pl + i * Wp + k;
  }} else {{
    float *row = pl + 4 * len;                              /* one padded row, 2 * pitch wide */
    row[2 * pitch - 1] = 0.0f;
    for (long r = 0; r < 2 * Hq; r++) {{
      {name}_float_row(xc, r - ph, H, W, pw, Wp, zp, row);
      float *e = pl + (2 * (r & 1)) * len + (r >> 1) * pitch, *o = e + len;
      for (long c = 0; c < pitch; c++) {{ e[c] = row[2 * c]; o[c] = row[2 * c + 1]; }}
    }}
    for (long q = 0; q < 4; q++)
      for (long t = Hq * pitch; t < len; t++) pl[q * len + t] = 0.0f;
    for (long i = 0; i < kh; i++)
      for (long k = 0; k < kw; k++) src[i * kw + k] = pl + (2 * (i & 1) + (k & 1)) * len + (i >> 1) * pitch + (k >> 1);
  }}
  {name}_flat(acc, L, src, wt, kh * kw, kw);
  for (long oh = 0; oh < OH; oh++)
    for (long ow = 0; ow < OW; ow++) out[oh * OW + ow] = (int32_t)acc[oh * pitch + ow];
}}

/* Channel c of image n as uint8: x itself, or, for float32 input (xq), quantized into xq first. */
static inline const uint8_t *{name}_channel(long n, long c, long C, long HW, const void *x, float in_scale, int32_t zp,
                                            uint8_t *xq)
{{
  if (!xq) return (const uint8_t *)x + (n * C + c) * HW;
  tf_qconv_quantize((const float *)x + (n * C + c) * HW, HW, in_scale, (float)zp, xq + c * HW);
  return xq + c * HW;
}}

/* A channel's taps w (stored w + 128) as floats. */
static inline void {name}_weights(const uint8_t *wc, long taps, float *wt)
{{
  for (long t = 0; t < taps; t++) wt[t] = (float)((int32_t)wc[t] - 128);
}}

/* Image n of the depthwise conv: every channel's sums, then its epilogue (epi), into sums (or,
   for a uint8 output, a per-thread buffer); xq: the image's quantized copy for float input. */
static void {name}_image(long n, long C, long H, long W, long kh, long kw, long sh, long sw, long ph, long pw, long dh,
                         long dw, long OH, long OW, const void *x, float in_scale, const uint8_t *w_shifted, long kp,
                         int32_t zp, const float *scale, uint8_t *xq, int same, const float *masks, const tf_qconv_epi *e,
                         int32_t *sums)
{{
  const long P = OH * OW, Hp = (OH - 1) * sh + (kh - 1) * dh + 1, Wp = (OW - 1) * sw + (kw - 1) * dw + 1;
  const int local = e->q != 0;
  /* small planes: a task's 16 channels staged, summed, then through one epilogue call */
  const int staged = same && H * W <= {DW_STAGED_MAX_PIXELS};
  const long L = H * OW, span = sh * (L + 2 * (OW + 1));             /* a channel's runs */
#ifdef {name.upper()}_LANES
  /* ... in integers, 16 channels in the lanes (qdepthwise_lanes.py): transposed rows */
  const size_t stage_bytes = (size_t)(Hp * (Wp + 4) * 16);
  const int lanes = staged;
#else
  const size_t stage_bytes = (size_t)(16 * span) * sizeof(float);
  const int lanes = 0;
#endif
  #pragma omp parallel {par}
  {{
  int32_t *own = local ? (int32_t *)malloc(sizeof(int32_t) * (size_t)P * (staged ? 16 : 1)) : 0;
  float *stage = staged ? (float *)tf_qconv_scratch(7, stage_bytes) : 0;
  int32_t *rows = staged && sh == 2 && !lanes ? (int32_t *)tf_qconv_scratch(8, (size_t)L * sizeof(int32_t)) : 0;
  #pragma omp for schedule(dynamic, 1)
  for (long g = 0; g < (C + 15) / 16; g++) {{
  const long c0 = 16 * g, c1 = c0 + 16 < C ? c0 + 16 : C;
  if ((local && !own) || (staged && (!stage || (sh == 2 && !lanes && !rows)))) continue;
  if (staged) {{
    int32_t *out = local ? own : sums + c0 * P;
#ifdef {name.upper()}_LANES
    const uint8_t *xc0 = {name}_channel(n, c0, C, H * W, x, in_scale, zp, xq);
    for (long c = c0 + 1; c < c1; c++) {name}_channel(n, c, C, H * W, x, in_scale, zp, xq);   /* float input: quantized */
    const int done = {name}_lanes3x3(xc0, H * W, H, W, sh, ph, pw, OH, OW, c0, c1 - c0, (uint8_t)zp, w_shifted + c0 * kp, kp,
                                     scale ? e : 0, (uint8_t *)stage, out);
    if (scale && !done) tf_qconv_dequantize((void *)e, out, P, c0, c1, 0, P);
#else
    for (long c = c0; c < c1; c++) {{
      float *F = stage + (c - c0) * span + OW + 1;
      const uint8_t *xc = {name}_channel(n, c, C, H * W, x, in_scale, zp, xq);
      if (sh == 1) {name}_same3x3_stage(xc, L, OW + 1, (float)zp, F);
      else {name}_same3x3_stage2(xc, L, OW + 1, (float)zp, F, F + span / 2);
    }}
    for (long c = c0; c < c1; c++) {{
      float wt[9];
      {name}_weights(w_shifted + c * kp, 9, wt);
      const float *F = stage + (c - c0) * span + OW + 1;
      if (sh == 1) {name}_same3x3_s1(F, L, OW, wt, masks, masks + H * OW, out + (c - c0) * P);
      else {name}_same3x3_s2(F, F + span / 2, H, OW, wt, masks, rows, out + (c - c0) * P);
    }}
    if (scale) tf_qconv_dequantize((void *)e, out, P, c0, c1, 0, P);
#endif
    continue;
  }}
  for (long c = c0; c < c1; c++) {{
    const uint8_t *xc = {name}_channel(n, c, C, H * W, x, in_scale, zp, xq);
    const uint8_t *wc = w_shifted + c * kp;
    int32_t *out = local ? own : sums + c * P;
    float wt[64];
    {name}_weights(wc, kh * kw < 64 ? kh * kw : 64, wt);
    if (same) {{
#ifdef {name.upper()}_VNNI3X3
      if (W >= {DW_VNNI_MIN_WIDTH}) {name}_same3x3_vnni(xc, H, W, sh, (uint8_t)zp, wc, out);
      else
#endif
      {name}_same3x3(xc, H, W, sh, (float)zp, wt, masks, masks + H * OW, out);
    }} else if (dh == 1 && dw == 1 && sh == sw && (sh == 1 || sh == 2) && kh * kw <= 64) {{
      {name}_flat_channel(xc, H, W, ph, pw, Hp, Wp, kh, kw, sh, OH, OW, (float)zp, wt, out);
    }} else {{                                          /* dilated or strided past 2: row by row */
      uint8_t plane[Hp * Wp];
      tf_qconv_pad_plane(xc, H, W, ph, pw, Hp, Wp, (uint8_t)zp, plane);
      float fp[Hp * Wp];                               /* x - zp, exact in float */
      for (long i = 0; i < Hp * Wp; i++) fp[i] = (float)({elem})plane[i] - (float)zp;
      float row[OW];
      for (long oh = 0; oh < OH; oh++) {{
        for (long ow = 0; ow < OW; ow++) row[ow] = 0.0f;
        for (long i = 0; i < kh; i++)
          for (long j = 0; j < kw; j++) {{
            const float wv = (float)((int32_t)wc[i * kw + j] - 128), *r = fp + (oh * sh + i * dh) * Wp + j * dw;
            for (long ow = 0; ow < OW; ow++) row[ow] += r[ow * sw] * wv;
          }}
        for (long ow = 0; ow < OW; ow++) out[oh * OW + ow] = (int32_t)row[ow];
      }}
    }}
    if (scale) tf_qconv_dequantize((void *)e, out, P, c, c + 1, 0, P);
  }}
  }}
  free(own);
  }}
}}

void {name}(long N, long C, long H, long W, long kh, long kw, long sh, long sw, long ph, long pw, long dh, long dw,
            long OH, long OW, const void *x, float in_scale, const uint8_t *w_shifted, long kp,
            const int32_t *w_sums, int32_t zp, const float *scale, const float *bias, const int32_t *acc_bias, const void *residual,
            int relu, float hi, float mid_m, int32_t mid_zp, float mid_s, float mid_o, float res_s, float res_o,
            float out_scale, int32_t out_zp, void *y)
{{
  const long P = OH * OW;
  /* the 3x3 kinds of {name}_same3x3 and their column masks (one pair for every channel) */
  const int same = kh == 3 && kw == 3 && dh == 1 && dw == 1 && ph == 1 && pw == 1 && sh == sw &&
                   ((sh == 1 && OH == H && OW == W) || (sh == 2 && H % 2 == 0 && W % 2 == 0 && OH == H / 2 && OW == W / 2));
  float *masks = same ? (float *)tf_qconv_scratch(4, (size_t)(2 * H * OW) * sizeof(float)) : 0;
  if (same && !masks) return;
  for (long j = 0; same && j < H * OW; j++) {{
    masks[j] = j % OW != 0;
    masks[H * OW + j] = j % OW != OW - 1;
  }}
  /* image n: the channels shared out in one region (a team of one when the images are) */
#define {name.upper()}_DW_IMAGE(n) {{ \
    int32_t *sums = (int32_t *)y + (n) * C * P;           /* the int32 or float32 output */ \
    tf_qconv_epi epi = tf_qconv_epilogue_of(scale, bias, acc_bias, residual, relu, hi, mid_m, mid_zp, mid_s, mid_o, res_s, res_o, \
                                            out_scale != 0.0f ? (uint8_t *)y + (n) * C * P : 0, out_scale, out_zp, n, C * P, P); \
    uint8_t *xq = in_scale != 0.0f ? (uint8_t *)tf_qconv_scratch(5, (size_t)(C * H * W)) : 0; \
    if (in_scale == 0.0f || xq) {name}_image(n, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, x, in_scale, w_shifted, kp, \
                                            zp, scale, xq, same, masks, &epi, sums); }}
{each_image(f"{name.upper()}_DW_IMAGE(n)", threads, "tf_qconv")}
#undef {name.upper()}_DW_IMAGE
}}
"""


__all__ = ["depthwise_source", "source"]
