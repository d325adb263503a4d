"""bf16 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3) on ``vdpbf16ps``.

``bf16conv.py`` runs a 3x3 layer as a GEMM over K = 9 C: the activations are packed per image from
the padded planes, nine taps per channel, and each output takes 9 C multiply-adds.  A bf16
ResNet-50 spends most of its time there (its 3x3 stride-1 layers: 37% of the model's
multiply-adds and most of the packing), while the float32 build of the same model runs those
layers by Winograd (``winograd.py``), with 2.25x (F(2x2)) to 4x fewer multiply-adds: bf16's 2x
over float32's FMAs was being spent on 2.25x more arithmetic.  Here the bf16 layer takes
F(2x2, 3x3) as the float32 one does:

* **Weights**, at compile time (``transform_weights``): the layer's bf16 weights (``g``, exactly
  as stored) transformed in float64, ``U_e = (G g G^T)[e]`` for the 16 positions ``e`` of the
  transform domain, rounded to bf16 (round to nearest even), as 16 GEMM A operands of
  ``bf16_conv_weights``' row layout, ``[16][O][2 * ustride]``.
* **Input transform** per call: ``V = B^T d B`` of every 4x4 patch (every 2x2 output tile) of the
  zero-padded image in float32, then per transform position ``e`` rounded to bf16 pairs in the
  packed-B panels of ``bf16gemm`` (``vcvtne2ps2bf16``, as the direct path packs activations).
* **16 GEMMs** ``M_e[O, tiles] = U_e[O, C] @ V_e[C, tiles]`` on ``bf16gemm``'s tiles, each on one
  thread, float32 accumulation (``vdpbf16ps``) over the channel pairs.
* **Output transform** ``Y = A^T M A`` in float32, then the bias, the residual and relu / clip in
  float32, in the direct path's order, per output row while it is in cache.

Numerics: the transforms' constants are 0, +-1 and 1/2, so ``U`` and ``V`` are exact sums of a few
bf16-rounded values, rounded once more to bf16.  The error is of the order of the direct bf16
path's (both round the operands of every product to 8 significant bits and accumulate in float32):
``tests/codegen/test_bf16_winograd.py`` bounds it against a float64 reference at a small
multiple of the direct path's on the same layers.  As in float32 (``docs/numerics.md``), an
infinite input is mixed with its neighbours before the products, so it can give NaN where the
direct sum gives an infinity; ``TENSORFORGE_BF16_WINOGRAD=0`` keeps every layer on the direct path.

Not used where the bf16 GEMMs run on AMX tiles (``enabled``).  Used for one-group 3x3 stride-1 undilated convs with constant weights whose images have at least
``MIN_TILES`` output tiles (14x14 maps and larger; at 7x7 it measured level) and at most
``MAX_TILES`` (the per-image buffers: 16 x tiles x (input channels bf16 + output channels float32)).
A batch of at least as many images as threads gives each thread whole images
(``conv_helpers.each_image``).  Measured (one process, interleaved, 2 threads): per layer 64@56
0.73 -> 0.52 ms, 128@28 0.64 -> 0.43, 256@14 0.63 -> 0.46 against the direct bf16 path; ResNet-50
bf16 b1 1.041x, b8 1.068x.  The transforms are AVX-512 over 16 tiles at a time, writing V as bf16
pairs straight into the GEMMs' panels: gcc's vectorisation of the scalar loops (16 store streams,
a stride-2 read) stayed scalar, and a float32 V converted in a second pass cost as much again.
"""
from __future__ import annotations

import os

import numpy as np

from ...ir.lowbits import from_bf16_bits, to_bf16_bits
from .conv_helpers import each_image
from .winograd import TRANSFORMS, combination, transform_weights as f32_transform_weights

MIN_TILES = 49            # 14x14 outputs; 7x7 layers (16 tiles, 49 of 64 outputs used) stay direct
MAX_TILES = 4096          # 128x128 outputs per image
ENV = "TENSORFORGE_BF16_WINOGRAD"    # "0": every bf16 conv takes the direct path (comparisons)


def enabled(target=None) -> bool:
    """Off by ``TENSORFORGE_BF16_WINOGRAD=0``, and on hosts whose bf16 GEMMs run on AMX tiles
    (``bf16gemm_amx``): there the direct path's GEMM is so much faster that the transforms cost
    more than the multiply-adds they save (ResNet-50 bf16 b1 18.1 ms direct against 21.4 ms with
    Winograd, b8 99.9 against 111.1 ms, one process)."""
    from . import bf16gemm_amx
    return os.environ.get("TENSORFORGE_BF16_WINOGRAD", "1") != "0" and not bf16gemm_amx.available(target)


def tiles(OH: int, OW: int) -> int:
    """2x2 output tiles of one image."""
    return -(-OH // 2) * -(-OW // 2)


def fits(kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], OH: int, OW: int,
         target=None) -> bool:
    """Whether a one-group bf16 conv with constant weights runs by F(2x2, 3x3) on ``target``
    (default: this host)."""
    return (enabled(target) and tuple(kernel) == (3, 3) and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
            and MIN_TILES <= tiles(OH, OW) <= MAX_TILES)


def ustride(channels: int) -> int:
    """k-pairs per row of the transformed weights: the channels' pairs, a multiple of 16 (64-byte rows)."""
    return -(-(-(-channels // 2)) // 16) * 16


def transform_weights(w_bits: np.ndarray, channels: int) -> np.ndarray:
    """``bf16_conv_weights``' rows (``O x 2 stride`` bf16 bits, k = c * 9 + tap) as the 16 A operands
    ``U_e = (G g G^T)[e]``: ``[16][O][2 * ustride(channels)]`` bf16 bits, channel pairs zero padded."""
    w = np.asarray(w_bits)
    if w.dtype.itemsize != 2:
        raise ValueError(f"bf16 weights must be 16-bit, got {w.dtype}")
    o = w.shape[0]
    g = from_bf16_bits(w.view(np.uint16)[:, :channels * 9])
    u = f32_transform_weights(g, o, channels, m=2)          # [16, O, C] float32, computed in float64
    out = np.zeros((16, o, 2 * ustride(channels)), np.uint16)
    out[:, :, :channels] = to_bf16_bits(u)
    return out


def source(name: str, rows: str, par: str, threads: int) -> str:
    """C text of ``void NAME_winograd(long N, long C, long H, long W, long O, long ph, long pw, long OH,
    long OW, const float *x, const uint16_t *u, long ustride, const float *bias, const float *residual,
    int relu, float hi, float *y)``: ``u`` is ``transform_weights``' array.  Needs ``bf16conv.py``'s
    helpers (its scratch buffers, padding, ``tf_bf16conv_pairs``), its GEMM's ``rows`` function
    (``bf16gemm``'s ``PREFIX_rows``: any rows of A by packed panels) and lane masks (``tf_bf16gemm_mask16``); ``par``: the OpenMP clauses of the parallel
    region; ``threads``: the team size (a batch of as many images shares them out,
    ``conv_helpers.each_image``).  The epilogue is the direct
    path's (``bf16conv.py``): ``((y + bias) + residual)``, then relu and the clip, in float32."""
    _, BT, AT = TRANSFORMS[2]
    # the rows combined down, split into even and odd columns (tile tx reads columns 2 tx .. 2 tx + 3:
    # even[tx], odd[tx], even[tx + 1], odd[tx + 1]), so that every loop over tiles is unit-stride
    down = " ".join(f"{h}[{i}][k] = {combination(BT[i], [f'd{j}[2 * k + {par}]' for j in range(4)])};"
                    for i in range(4) for h, par in (("ev[h]", 0), ("od[h]", 1)))
    # tiles 16 at a time in AVX-512 registers (GCC's vector operators on __m512), the last 16 masked;
    # gcc's own vectorisation of these loops left them scalar at run time (16 store streams)
    loads = "\n".join(f"            const __m512 {n}{i}{ab} = _mm512_maskz_loadu_ps(m, {a}[h][{i}] + tx{' + 1' if ab == 'b' else ''});"
                      for i in range(4) for n, a in (("e", "ev"), ("o", "od")) for ab in "ab")
    cols = lambda i: [f"e{i}a", f"o{i}a", f"e{i}b", f"o{i}b"]    # noqa: E731
    # V of the pair's first channel waits in v[e]; with the second's, one bf16 pair per tile (32 bits)
    across = "\n".join(f"            {{ const __m512 x = {combination(BT[j], cols(i))}; "
                        f"if (!h) v[{4 * i + j}] = x; else tf_bf16w_store(v[{4 * i + j}], x, va + {4 * i + j} * be, "
                        f"vz + {4 * i + j} * be, ma, mz); }}"
                        for i in range(4) for j in range(4))
    mloads = "\n".join(f"          const __m512 m{e} = _mm512_maskz_loadu_ps(m, me + {e} * oe + tx);" for e in range(16))
    down_m = "\n".join(f"          const __m512 s{r}_{j} = {combination(AT[r], [f'm{4 * i + j}' for i in range(4)])};"
                        for r in range(2) for j in range(4))
    across_m = "\n".join(f"          y[{2 * r + c}] = {combination(AT[c], [f's{r}_{j}' for j in range(4)])};"
                          for r in range(2) for c in range(2))
    return f"""
#ifndef TF_BF16W_STORE_DEFINED
#define TF_BF16W_STORE_DEFINED
/* lo (channel c) and hi (c + 1) of 16 tiles rounded to bf16 (vcvtne2ps2bf16) as one pair per tile,
   32 bits each, stored under ma at a and under mz at z (a tile run split between two panels). */
static inline void tf_bf16w_store(__m512 lo, __m512 hi, uint32_t *a, uint32_t *z, __mmask16 ma, __mmask16 mz)
{{
  const __m512i p = tf_bf16conv_pairs(lo, hi);
  _mm512_mask_storeu_epi32((void *)a, ma, p);
  if (mz) _mm512_mask_storeu_epi32((void *)z, mz, p);
}}
#endif

/* bf16 3x3 stride-1 convolution by Winograd F(2x2, 3x3) (bf16_winograd.py): per image, the padded
   planes, V = B^T d B of every tile as bf16 pairs in the GEMMs' panels, per transform position e
   M_e = U_e @ V_e (one GEMM per thread at a time), then Y = A^T M A and the
   epilogue per output row. */
static void {name}_winograd_image(long n, long C, long H, long W, long O, long ph, long pw, long OH, long OW,
                                 const float *x, const uint16_t *u, long ustride, const float *bias,
                                 const float *residual, int relu, float hi, float *y)
{{
  const long TH = (OH + 1) / 2, TW = (OW + 1) / 2, T = TH * TW, KP = (C + 1) / 2, P = OH * OW, K = 9 * C;
  const long panels = (T + 15) / 16, ldm = panels * 16, Hp = 2 * TH + 2, Wp = 2 * TW + 2;
  /* elements between two transform positions' matrices: 16 (32) more than the matrix, since at a
     multiple of 4 KiB (64 channels x 784 tiles) the 16 streams of a tile loop share L1 sets.  V_e:
     bf16 pairs [panels][KP][16] (bf16gemm's packed B); M_e: floats [O][ldm] */
  const long be = panels * KP * 16 + 16, oe = O * ldm + 32;
  float *xp = (float *)tf_bf16conv_scratch(0, (size_t)(C * Hp * Wp) * sizeof(float));
  uint32_t *vb = (uint32_t *)tf_bf16conv_scratch(3, (size_t)(16 * be) * sizeof(uint32_t));
  float *mb = (float *)tf_bf16conv_scratch(4, (size_t)(16 * oe) * sizeof(float));
  if (!xp || !vb || !mb) return;
  const float *xn = x + n * C * H * W;
  const float *rn = residual ? residual + n * O * P : 0;
  float *yn = y + n * O * P;
  #pragma omp parallel {par}
  {{
    #pragma omp for schedule(dynamic, 4)
    for (long c = 0; c < C; c++) tf_bf16conv_pad_plane(xn + c * H * W, H, W, ph, pw, Hp, Wp, 0.0f, xp + c * Hp * Wp);
    /* V = B^T d B: per channel pair and tile row, each channel's four input rows combined down, then
       across per tile, 16 tiles at a time; the pair's values rounded to bf16 pairs in the panels */
    #pragma omp for schedule(dynamic, 8)
    for (long job = 0; job < KP * TH; job++) {{
      const long cp = job / TH, ty = job % TH;
      float ev[2][4][TW + 1], od[2][4][TW + 1];
      for (int h = 0; h < 2; h++) {{
        if (2 * cp + h >= C) {{ memset(ev[h], 0, sizeof ev[h]); memset(od[h], 0, sizeof od[h]); continue; }}
        const float *d0 = xp + (2 * cp + h) * Hp * Wp + 2 * ty * Wp, *d1 = d0 + Wp, *d2 = d1 + Wp, *d3 = d2 + Wp;
        for (long k = 0; k <= TW; k++) {{ {down} }}
      }}
      for (long tx = 0; tx < TW; tx += 16) {{
        const __mmask16 m = tf_bf16gemm_mask16(TW - tx);
        /* the 16 tiles from t: lanes [0, 16 - s) in panel t / 16 from offset s, the rest at the start
           of the next panel (vz + lane, lane >= 16 - s) */
        const long t = ty * TW + tx, s = t % 16;
        uint32_t *va = vb + (t / 16) * KP * 16 + cp * 16 + s, *vz = va + KP * 16 - 16;
        const __mmask16 ma = m & (__mmask16)(0xFFFFu >> s), mz = m & (__mmask16)~(0xFFFFu >> s);
        __m512 v[16];
        for (int h = 0; h < 2; h++) {{
{loads}
{across}
        }}
      }}
    }}
    /* M_e = U_e @ V_e, one GEMM per thread at a time */
    #pragma omp for schedule(dynamic, 1)
    for (long e = 0; e < 16; e++) {{
      const uint32_t *ue = (const uint32_t *)u + e * O * ustride;
      float *me = mb + e * oe;
      {rows}(0, O, 0, T, C, ue, ustride, (const uint16_t *)(vb + e * be), 0, me, ldm);
    }}
    /* Y = A^T M A per output channel and tile row, then bias, residual, relu / clip per row */
    #pragma omp for schedule(dynamic, 8)
    for (long job = 0; job < O * TH; job++) {{
      const long o = job / TH, ty = job % TH;
      const float *me = mb + o * ldm + ty * TW;
      const __m512 b = _mm512_set1_ps(bias[o]), lo = _mm512_set1_ps(relu ? 0.0f : -INFINITY);
      const __m512 top = _mm512_set1_ps(relu ? hi : INFINITY);
      const __m512i even = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
      const __m512i odd = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
      for (long tx = 0; tx < TW; tx += 16) {{
        const __mmask16 m = tf_bf16gemm_mask16(TW - tx);
        __m512 y[4];
{mloads}
{down_m}
{across_m}
        /* per output row: the two columns of each tile interleaved, + bias, + residual, relu / clip
           (compares, so NaN passes as in the direct path's epilogue), stored under the row's mask */
        for (int r = 0; r < 2 && 2 * ty + r < OH; r++) {{
          const long at = o * P + (2 * ty + r) * OW + 2 * tx, left = OW - 2 * tx;
          for (int h = 0; h < 2; h++) {{
            const long n16 = left - 16 * h;
            if (n16 <= 0) break;
            const __mmask16 k = tf_bf16gemm_mask16(n16);
            __m512 v = _mm512_permutex2var_ps(y[2 * r], h ? odd : even, y[2 * r + 1]);
            v = _mm512_add_ps(v, b);
            if (rn) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, rn + at + 16 * h));
            v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
            v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, top, _CMP_GT_OQ), top);
            _mm512_mask_storeu_ps(yn + at + 16 * h, k, v);
          }}
        }}
      }}
    }}
  }}
}}

void {name}_winograd(long N, long C, long H, long W, long O, long ph, long pw, long OH, long OW, const float *x,
                     const uint16_t *u, long ustride, const float *bias, const float *residual, int relu, float hi,
                     float *y)
{{
{each_image(f"{name}_winograd_image(n, C, H, W, O, ph, pw, OH, OW, x, u, ustride, bias, residual, relu, hi, y);", threads, "tf_bf16conv")}
}}
"""


__all__ = ["ENV", "MAX_TILES", "MIN_TILES", "enabled", "fits", "source", "tiles", "transform_weights", "ustride"]
