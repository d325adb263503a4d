"""An int8 convolution over few output positions, computed transposed: positions x channels.

``qconv.py``'s GEMM puts output channels on the rows (the broadcast operand, the weights read in
place) and output positions on the vector lanes.  At 7x7 (49 positions) that wastes a quarter of
the lanes (49 columns in tiles of 32: 64 computed), and the weights, the large operand there (a
1024 -> 2048 1x1 has 2 MB of them against 50 KB of activations), are read as eight row streams of
4 bytes per step.  Measured on the GEMM alone, 2 threads, weights out of cache as in a model:
ResNet-50's 1024 -> 2048 downsampling 0.453 -> 0.303 ms, its 512 -> 2048 1x1 0.267 -> 0.164,
the 3x3 512 at 7x7 0.393 -> 0.327, and at 14x14 0.297 -> 0.269 (1024 -> 512).

Transposed, the layer is onnxruntime's orientation:

* **The activations are the broadcast operand**, ``A' = [P, Kp]`` uint8, one row per output position
  (its window): a 1x1 conv transposes the image's ``[C, P]`` matrix (the input itself, or the
  subsampled copy of a strided one) in 16x16 byte blocks of SSE2 unpacks; a wider window pads the
  image with the zero point, transposes it to ``[Hp * Wp, C]`` the same way, and copies all ``C``
  channels of each tap into the position's row (K in tap-major order).  ``vpdpbusd`` takes them
  unsigned as they are (int8 input: flipped by the GEMM's ``a_signed`` path).
* **The weights are the vector operand**, packed once at compile time into ``qgemm.pack_b``'s
  panels of 16 output channels, K in the activations' order (``pack_weights``): one contiguous
  stream, no lane wasted while the output channels are a multiple of 16.
* **The zero point** is the GEMM's column term ``comp[o] = -zp_u8 * rowsum(w)[o]`` (``zp_u8``: the
  zero point of the unsigned activation the kernel sees), so the sums are ``qconv.py``'s exactly.
* **The epilogue** is ``qconv.py``'s ``tf_qconv_dequantize``: each finished block of sums
  (positions x 32 channels, in cache) is transposed in a per-thread buffer and run through it as
  channels x positions, which writes the uint8 (or float32) output in NCHW.

Used for one-group int8 convs with constant weights, at least ``MIN_CHANNELS`` output channels and
at most ``MAX_POSITIONS`` output positions per image (``fits``), on AVX-512 VNNI; ``qconv_direct.py``
keeps the stride-1 layers it takes.  In whole QDQ models (onnxruntime's ``quantize_static``, batch
1, 2 threads, one process, outputs bit-identical): ResNet-50 1.057x and 1.083x, MobileNetV2 1.024x
and 1.032x.  With 196 positions (14x14) as the limit both ran slower than with 49 (MobileNetV2
0.957x: its 14x14 1x1 layers are short-K ones, already in registers).

**A batch** of at least as many images as threads is shared out: each thread lays out the rows of
its whole images one after another and runs one GEMM over them (M = images x positions, the GEMM in
a team of one), the epilogue splitting each block of rows at the images' edges.  At 7x7 an image
alone fills 49 of the 64 rows of its 16-row blocks and reads every weight once per image; four
images fill 196 of 208 and read them once.  Batch 8, one process, bit-identical: ResNet-50 1.054x,
MobileNetV2 1.049x over the usual path (image after image with both threads on each, the
transposed path had run 0.93x and 0.97x); 196 positions per image folded: 1.01x and 0.99x, so the
limit stays.
"""
from __future__ import annotations

import os

import numpy as np

from . import qgemm
from .conv_helpers import team

MAX_POSITIONS = 49        # 7x7 maps (14x14 ran slower in whole models: see above)
MIN_CHANNELS = 64         # output channels: whole 16-lane vectors, a few panels per thread
ENV = "TENSORFORGE_QCONV_TRANSPOSED"    # "0": these layers keep qconv.py's orientation (comparisons)


def enabled() -> bool:
    return os.environ.get("TENSORFORGE_QCONV_TRANSPOSED", "1") != "0"


def fits(N: int, O: int, OH: int, OW: int) -> bool:
    """Whether an int8 conv of ``N`` images with ``O`` output channels over ``OH x OW`` positions
    runs transposed.  A batch of at least as many images as threads gives each thread whole images
    and computes a thread's images as one GEMM (``{name}_transposed``'s folded path): image after
    image with both threads on each it ran slower than the usual path (ResNet-50 b8 0.93x,
    MobileNetV2 b8 0.97x)."""
    return enabled() and O >= MIN_CHANNELS and OH * OW <= MAX_POSITIONS


def pack_weights(w_shifted: np.ndarray, channels: int, taps: int) -> np.ndarray:
    """``qconv_weights``' ``(O, Kp)`` uint8 rows ``w + 128`` (k = c * taps + t) as the transposed
    GEMM's B operand: the int8 ``w`` as a ``[Kp, O]`` matrix, its K in tap-major order
    (k = t * channels + c, the order in which the kernel lays out a position's window: one copy of
    all channels per tap), packed by ``qgemm.pack_b`` (16 channels per panel).  The K padding
    (``w + 128 = 0``) becomes -128 here; the kernel pads the activations there with the value the
    GEMM reads as 0, so it adds nothing."""
    w = (np.asarray(w_shifted, np.uint8) ^ np.uint8(0x80)).view(np.int8)
    k = channels * taps
    w = np.concatenate([w[:, :k].reshape(-1, channels, taps).transpose(0, 2, 1).reshape(-1, k), w[:, k:]], axis=1)
    return np.ascontiguousarray(qgemm.pack_b(np.ascontiguousarray(w.T)))


def source(name: str, target, signed: bool, threads: int, tiling: "qgemm.Tiling | None" = None) -> str:
    """C text of ``void NAME_transposed(<qconv.py's arguments, with the packed weights of
    pack_weights as const int8_t *wt in place of w_shifted>)``.  Needs ``qconv.py``'s helpers
    (``tf_qconv_scratch``, ``tf_qconv_quantize``, ``tf_qconv_pad_plane``, ``tf_qconv_subsample_plane``, the
    epilogue) before it."""
    gemm = f"{name}_gemm_t"
    zp_u8 = "(uint32_t)zp + 128u" if signed else "(uint32_t)zp"
    pad = "0x80" if signed else "0"       # K padding: the activation the GEMM sees there is 0
    par = f"{team(threads)} if (P * Kp * O >= {qgemm.PARALLEL_MIN_MACS})" if threads > 1 else "if (0)"
    return "\n" + qgemm.source(gemm, target, a_signed=signed, threads=threads, row_comp=True, tiling=tiling) + f"""
/* The epilogue of a block of the transposed sums (rows: positions i0..i1, columns: channels
   j0..j1, row stride ldc): transposed into this thread's buffer as channels x positions and run
   through tf_qconv_dequantize, which writes the uint8 output at [channel][position]; a float32
   result, left in the buffer over the sums, is copied to the output. */
typedef struct {{ tf_qconv_epi *e; float *yf; long P; }} {name}_tctx;
#ifndef TF_QCONV_TRANSPOSE_DEFINED
#define TF_QCONV_TRANSPOSE_DEFINED
/* d[j * ds + i] = s[i * ss + j] for a 16 x 16 block of bytes (qconv.py's tf_qconv_transpose16). */
static inline void tf_qconv_t16x16(const uint8_t *s, long ss, uint8_t *d, long ds)
{{
  __m128i a[16];
  for (int i = 0; i < 16; i++) a[i] = _mm_loadu_si128((const __m128i *)(s + i * ss));
  tf_qconv_transpose16(a);
  for (int j = 0; j < 16; j++) _mm_storeu_si128((__m128i *)(d + j * ds), a[j]);
}}

/* d[j * ds + i] = s[i * ss + j] for rows x cols bytes: 16 x 16 blocks, the edges one by one. */
static void tf_qconv_transpose_u8(const uint8_t *s, long ss, uint8_t *d, long ds, long rows, long cols)
{{
  const long r16 = rows / 16 * 16, c16 = cols / 16 * 16;
  for (long i = 0; i < r16; i += 16)
    for (long j = 0; j < c16; j += 16) tf_qconv_t16x16(s + i * ss + j, ss, d + j * ds + i, ds);
  for (long i = 0; i < rows; i++)
    for (long j = i < r16 ? c16 : 0; j < cols; j++) d[j * ds + i] = s[i * ss + j];
}}

/* d[j * ds + i] = s[i * ss + j] for rows x cols int32: 4 x 4 blocks of SSE2 unpacks, edges one by one. */
static void tf_qconv_transpose_i32(const int32_t *s, long ss, int32_t *d, long ds, long rows, long cols)
{{
  const long r4 = rows / 4 * 4, c4 = cols / 4 * 4;
  for (long i = 0; i < r4; i += 4)
    for (long j = 0; j < c4; j += 4) {{
      const __m128i a0 = _mm_loadu_si128((const __m128i *)(s + i * ss + j)),
                    a1 = _mm_loadu_si128((const __m128i *)(s + (i + 1) * ss + j)),
                    a2 = _mm_loadu_si128((const __m128i *)(s + (i + 2) * ss + j)),
                    a3 = _mm_loadu_si128((const __m128i *)(s + (i + 3) * ss + j));
      const __m128i t0 = _mm_unpacklo_epi32(a0, a1), t1 = _mm_unpacklo_epi32(a2, a3);
      const __m128i t2 = _mm_unpackhi_epi32(a0, a1), t3 = _mm_unpackhi_epi32(a2, a3);
      _mm_storeu_si128((__m128i *)(d + j * ds + i), _mm_unpacklo_epi64(t0, t1));
      _mm_storeu_si128((__m128i *)(d + (j + 1) * ds + i), _mm_unpackhi_epi64(t0, t1));
      _mm_storeu_si128((__m128i *)(d + (j + 2) * ds + i), _mm_unpacklo_epi64(t2, t3));
      _mm_storeu_si128((__m128i *)(d + (j + 3) * ds + i), _mm_unpackhi_epi64(t2, t3));
    }}
  for (long i = 0; i < rows; i++)
    for (long j = i < r4 ? c4 : 0; j < cols; j++) d[j * ds + i] = s[i * ss + j];
}}
#endif

static void {name}_t_epilogue(void *vctx, int32_t *c, long ldc, long i0, long i1, long j0, long j1)
{{
  const {name}_tctx *t = (const {name}_tctx *)vctx;
  const long rows = i1 - i0, cols = j1 - j0;
  int32_t *tr = (int32_t *)tf_qconv_scratch(9, (size_t)(rows * cols) * sizeof(int32_t));
  if (!tr) return;
  tf_qconv_transpose_i32(c, ldc, tr, rows, rows, cols);
  tf_qconv_dequantize(t->e, tr, rows, j0, j1, i0, i1);
  if (t->yf)
    for (long j = 0; j < cols; j++) memcpy(t->yf + (j0 + j) * t->P + i0, tr + j * rows, (size_t)rows * sizeof(float));
}}

/* How one image's rows of A' are made: K and its padding, the positions, and whether the input is
   read as it is (direct), subsampled (a strided 1x1) or through a zero-point padded window
   (Hp x Wp) transposed to positions x channels. */
typedef struct {{ long K, Kp, P, Hp, Wp; int direct, subsampled, window; }} {name}_tgeom;

static {name}_tgeom {name}_t_geometry(long C, long H, long W, long kh, long kw, long sh, long sw, long ph, long pw,
                                      long dh, long dw, long OH, long OW)
{{
  {name}_tgeom g;
  g.K = C * kh * kw;
  g.Kp = (g.K + 3) / 4 * 4;
  g.P = OH * OW;
  g.direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W;
  g.subsampled = kh == 1 && kw == 1 && ph == 0 && pw == 0 && !g.direct && (OH - 1) * sh < H && (OW - 1) * sw < W;
  g.window = !g.direct && !g.subsampled;
  g.Hp = (OH - 1) * sh + (kh - 1) * dh + 1;
  g.Wp = (OW - 1) * sw + (kw - 1) * dw + 1;
  return g;
}}

/* The calling thread's buffers for m images' rows of A' and one image's staging (quantized input,
   subsampled or padded planes, their transpose); 0 when one could not be had. */
static int {name}_t_buffers(const {name}_tgeom *g, long C, long H, long W, long m, float in_scale, uint8_t **at,
                            uint8_t **col, uint8_t **xt, uint8_t **xq)
{{
  *at = (uint8_t *)tf_qconv_scratch(1, (size_t)(m * g->P * g->Kp));
  *col = g->direct ? 0 : (uint8_t *)tf_qconv_scratch(0, (size_t)(g->window ? C * g->Hp * g->Wp : g->K * g->P));
  *xt = g->window ? (uint8_t *)tf_qconv_scratch(2, (size_t)(C * g->Hp * g->Wp)) : 0;
  *xq = in_scale != 0.0f ? (uint8_t *)tf_qconv_scratch(5, (size_t)(C * H * W)) : 0;
  return *at && (g->direct || *col) && (!g->window || *xt) && (in_scale == 0.0f || *xq);
}}

/* Image n's rows of A' at at ([P, Kp]: the input quantized into xq (float input), subsampled or padded
   and transposed into col / xt as g says, K padding included), as orphaned omp for loops of the
   caller's region (a team of one when the images are shared out). */
static void {name}_t_prepare(const {name}_tgeom *g, long n, long C, long H, long W, long kh, long kw, long sh, long sw,
                             long ph, long pw, long dh, long dw, long OH, long OW, const void *x, float in_scale, int32_t zp,
                             uint8_t *at, uint8_t *col, uint8_t *xt, uint8_t *xq)
{{
  const long K = g->K, Kp = g->Kp, P = g->P, Hp = g->Hp, Wp = g->Wp;
  const uint8_t *xn = xq ? xq : (const uint8_t *)x + n * C * H * W;
  const uint8_t *src = g->direct ? xn : col;
  #pragma omp for schedule(static) nowait
  for (long p = 0; p < P; p++)
    if (Kp > K) memset(at + p * Kp + K, {pad}, (size_t)(Kp - K));
  if (xq) {{
    #pragma omp for schedule(dynamic, 4)
    for (long c = 0; c < C; c++)
      tf_qconv_quantize((const float *)x + (n * C + c) * H * W, H * W, in_scale, (float)zp, xq + c * H * W);
  }}
  if (g->subsampled) {{
    #pragma omp for schedule(dynamic, 4)
    for (long c = 0; c < C; c++) tf_qconv_subsample_plane(xn + c * H * W, W, OH, OW, sh, sw, col + c * OH * OW);
  }}
  if (g->window) {{
    /* the padded planes, transposed to [Hp * Wp, C]; then a position's row of A' is one copy
       of all C channels per tap (K in tap-major order, as pack_weights orders the weights) */
    #pragma omp for schedule(dynamic, 4)
    for (long c = 0; c < C; c++) tf_qconv_pad_plane(xn + c * H * W, H, W, ph, pw, Hp, Wp, (uint8_t)zp, col + c * Hp * Wp);
    #pragma omp for schedule(static)
    for (long c0 = 0; c0 < C; c0 += 64)
      tf_qconv_transpose_u8(col + c0 * Hp * Wp, Hp * Wp, xt + c0, C, C - c0 < 64 ? C - c0 : 64, Hp * Wp);
    #pragma omp for schedule(static)
    for (long p = 0; p < P; p++) {{
      const long oh = p / OW, ow = p % OW;
      for (long t = 0; t < kh * kw; t++)
        memcpy(at + p * Kp + t * C, xt + ((oh * sh + (t / kw) * dh) * Wp + ow * sw + (t % kw) * dw) * C, (size_t)C);
    }}
  }} else {{
    /* [K, P] -> [P, Kp] in bands of 64 k (the K padding, set above, multiplies as 0) */
    #pragma omp for schedule(static)
    for (long k0 = 0; k0 < K; k0 += 64)
      tf_qconv_transpose_u8(src + k0 * P, P, at + k0, Kp, K - k0 < 64 ? K - k0 : 64, P);
  }}
}}

/* The epilogue of a block of a thread's images' sums, rows i0..i1 of images k = i / P: each image's
   part through {name}_t_epilogue with that image's context. */
typedef struct {{ {name}_tctx *img; long P; }} {name}_fctx;

static void {name}_f_epilogue(void *vctx, int32_t *c, long ldc, long i0, long i1, long j0, long j1)
{{
  const {name}_fctx *f = (const {name}_fctx *)vctx;
  for (long i = i0; i < i1;) {{
    const long k = i / f->P, e = (k + 1) * f->P < i1 ? (k + 1) * f->P : i1;
    {name}_t_epilogue(&f->img[k], c + (i - i0) * ldc, ldc, i - k * f->P, e - k * f->P, j0, j1);
    i = e;
  }}
}}

void {name}_transposed(long N, long C, long H, long W, long O, long kh, long kw, long sh, long sw, long ph, long pw,
                       long dh, long dw, long OH, long OW, const void *x, float in_scale, const int8_t *wt,
                       const int32_t *w_sums, int32_t zp, const float *scale, const float *bias, const int32_t *acc_bias,
                       const void *residual, int relu, float hi, float mid_m, int32_t mid_zp, float mid_s, float mid_o,
                       float res_s, float res_o, float out_scale, int32_t out_zp, void *y)
{{
  const {name}_tgeom g = {name}_t_geometry(C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW);
  const long Kp = g.Kp, P = g.P;
  const int quant = out_scale != 0.0f;
  int32_t *comp = (int32_t *)tf_qconv_scratch(3, (size_t)O * sizeof(int32_t));
  if (!comp) return;
  /* the sums start from -zp * rowsum(w): (x - zp) . w with x the unsigned activation the GEMM sees */
  const uint32_t zps = {zp_u8};
  for (long o = 0; o < O; o++) comp[o] = (int32_t)(0u - zps * (uint32_t)w_sums[o]);
  /* image n's epilogue context e and the transposed epilogue's t (pointing at e) */
#define {name.upper()}_T_CONTEXT(n, e, t) do {{ \
    (e) = tf_qconv_epilogue_of(scale, bias, acc_bias, residual, relu, hi, mid_m, mid_zp, mid_s, mid_o, res_s, res_o, \
                               quant ? (uint8_t *)y + (n) * O * P : 0, out_scale, out_zp, (n), O * P, P); \
    (t) = ({name}_tctx){{&(e), quant ? 0 : (float *)y + (n) * O * P, P}}; \
  }} while (0)
  if (N > 1 && N >= tf_qconv_max_threads()) {{
    /* a batch: each thread its share of whole images, their rows of A' one after another and one
       GEMM over them all (M = images x P): at 7x7 the lanes of every 16-row block are used, where
       an image alone fills 49 of 64, and the weights are read once per thread, not once per image */
    #pragma omp parallel {team(threads)}
    {{
#ifdef _OPENMP
      const long T = omp_get_num_threads(), t = omp_get_thread_num();
#else
      const long T = 1, t = 0;
#endif
      const long n0 = N * t / T, m = N * (t + 1) / T - n0;
      uint8_t *at, *col, *xt, *xq;
      if (m && {name}_t_buffers(&g, C, H, W, m, in_scale, &at, &col, &xt, &xq)) {{
        tf_qconv_epi epis[m];
        {name}_tctx imgs[m];
        for (long k = 0; k < m; k++) {{
          {name.upper()}_T_CONTEXT(n0 + k, epis[k], imgs[k]);
          #pragma omp parallel num_threads(1)
          {name}_t_prepare(&g, n0 + k, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, x, in_scale, zp, at + k * P * Kp,
                           col, xt, xq);
        }}
        {name}_fctx f = {{imgs, P}};
        #pragma omp parallel num_threads(1)
        {gemm}(m * P, O, Kp, at, Kp, wt, comp, 0, {name}_f_epilogue, &f, 0, O);
      }}
    }}
  }} else {{
    uint8_t *at, *col, *xt, *xq;
    if ({name}_t_buffers(&g, C, H, W, 1, in_scale, &at, &col, &xt, &xq))
      for (long n = 0; n < N; n++) {{
        tf_qconv_epi epi;
        {name}_tctx tctx;
        {name.upper()}_T_CONTEXT(n, epi, tctx);
        #pragma omp parallel {par}
        {{
          {name}_t_prepare(&g, n, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, x, in_scale, zp, at, col, xt, xq);
          {gemm}(P, O, Kp, at, Kp, wt, comp, 0, {name}_t_epilogue, &tctx, 0, O);
        }}
      }}
  }}
#undef {name.upper()}_T_CONTEXT
}}
"""


__all__ = ["ENV", "MAX_POSITIONS", "MIN_CHANNELS", "enabled", "fits", "pack_weights", "source"]
