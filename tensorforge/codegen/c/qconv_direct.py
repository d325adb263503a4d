"""A direct int8 convolution (stride 1) on channel-quad interleaved padded planes: no im2col, no packing.

``qconv.py``'s GEMM path copies every image into VNNI panels before multiplying: for a 3x3 layer
that is 9x the input in bytes, rearranged 4 x 16 at a time.  In int8 the arithmetic is a quarter
of float32's, so the copy weighs four times as much (ResNet-50's 64@56 3x3, perf: packing 32% of
the layer, the GEMM 28%).  This kernel reads the activations where a padding pass put them:

* **Layout.**  The image is padded once (zero point around it, as the GEMM path pads) and written
  as channel quads: plane ``q`` holds, for every padded position, the 4 bytes ``x'`` of channels
  ``4q .. 4q+3`` (``x' = x ^ 0x80`` for uint8 input, ``x`` for int8; channels past ``C`` are 0).
  For kernel tap ``(i, j)`` the 16 grid positions ``g .. g+15`` of the padded grid (row pitch
  ``Wp``) read positions ``g + i*dh*Wp + j*dw ..``: 64 consecutive bytes, one zmm load, in exactly
  the byte order ``vpdpbusd`` wants (4 k's of one 32-bit lane).
* **Weights** are the broadcast operand as in ``qconv.py`` (uint8 ``w + 128``), rearranged per call
  into ``[O/mr][C/4][taps][mr][4]`` (one 32-byte group of broadcasts per step; a few KB to a few
  hundred KB, which is why only layers with at least as many output positions as output channels
  take this path: below that the rearranging costs more than the packing it saves).
* **The algebra** is ``qconv.py``'s: ``sum (w + 128) x' = sum w x' + 128 sum x'``; the column term
  ``-128 sum x'`` over one output's window is a box sum of per-position channel sums (one
  ``vpdpbusd`` by ones per quad and 16 positions), and the row term ``-zp' * rowsum(w)``.  Padding
  holds the zero point, whose products cancel; padded channels hold 0.  Integer arithmetic modulo
  2**32 throughout: bit-exact.
* **Tiles** of ``mr`` output channels x ``nrv`` vectors of 16 grid positions keep their sums in
  registers over all of K (quads x taps).  A thread takes a column panel and runs every channel
  tile over it, so the panel's input rows (a few KB per quad) stay in L1.  The grid computes
  ``Wp - OW`` discarded columns per output row (2 of 58 at 56x56); the epilogue (``qconv.py``'s
  ``tf_qconv_dequantize``) runs on each output row segment of the finished tile.
"""
from __future__ import annotations

import os

import numpy as np

MR, NRV = 8, 3          # register tile: 24 accumulators + 3 input vectors + 1 broadcast of 32 zmm
RUN = 4                 # panels per work unit
MIN_GRID_SHARE = 0.75   # arranged weights: at least this share of the computed grid is output
MAX_TAPS = 64           # tap offsets live in a local array
ENV = "TENSORFORGE_QCONV_DIRECT"    # "0": every int8 conv takes the GEMM path (comparisons)


def enabled(target=None) -> bool:
    """Whether stride-1 layers may take this kernel: not where the int8 GEMM runs on AMX tiles
    (``qgemm_amx``), whose im2col + GEMM path measured faster on every ResNet-50 layer the
    direct kernel took (whole model, one process: batch 1 8.87 vs 9.32 ms, batch 8 54.7 vs
    62.2 ms), nor when ``TENSORFORGE_QCONV_DIRECT=0``."""
    from . import qgemm_amx
    return os.environ.get("TENSORFORGE_QCONV_DIRECT", "1") != "0" and not qgemm_amx.available(target)


def grid_share(kh: int, kw: int, dw: int, OH: int, OW: int) -> float:
    """Share of the tiles' computed grid positions that are outputs: the padded grid's extra
    columns per row (``(kw - 1) * dw``) and the last tile's overrun are computed and dropped."""
    wp = OW + (kw - 1) * dw
    tiles = -(-OH * wp // (16 * NRV))
    return OH * OW / (tiles * 16 * NRV)


def arranged_fits(kh: int, kw: int, sh: int, sw: int, dw: int, OH: int, OW: int) -> bool:
    """Whether a layer whose weights are arranged at compile time (``arrange_weights``) takes the
    direct kernel: stride 1, a window of 2..MAX_TAPS taps, and at least ``MIN_GRID_SHARE`` of the
    computed grid being outputs.  No weights are rearranged per call, so layers with more channels
    than positions qualify too (ResNet's 256@14 3x3: 1.10-1.15x over the GEMM path, one process;
    its 512@7, a 9-wide grid in 48-wide tiles of which 51% are outputs, 0.80-0.88x, stays)."""
    return (enabled() and sh == 1 and sw == 1 and 1 < kh * kw <= MAX_TAPS
            and grid_share(kh, kw, dw, OH, OW) >= MIN_GRID_SHARE)


def fits(O: int, kh: int, kw: int, sh: int, sw: int, OH: int, OW: int) -> bool:
    """Whether a layer takes the direct kernel: stride 1, a window of 2..MAX_TAPS taps, at least as
    many output positions as output channels (the C function ``NAME_fits`` decides the same at run
    time)."""
    return sh == 1 and sw == 1 and 1 < kh * kw <= MAX_TAPS and OH * OW >= O


def arrange_weights(w_shifted: np.ndarray, channels: int, taps: int) -> np.ndarray:
    """``qconv_weights``' ``(O, Kp)`` uint8 rows (``w + 128``, k = c * taps + t) as the kernel's
    broadcast groups ``[O/mr][C/4][taps][mr][4]`` (rows past O and channels past C: 0), the order
    the C function arranges them in when given no arranged copy; as int32 words, one per group."""
    w = np.asarray(w_shifted, np.uint8)
    o = w.shape[0]
    ot, q = -(-o // MR), -(-channels // 4)
    k = w[:, :channels * taps].reshape(o, channels, taps)
    full = np.zeros((ot * MR, q * 4, taps), np.uint8)
    full[:o, :channels] = k
    out = full.reshape(ot, MR, q, 4, taps).transpose(0, 2, 4, 1, 3)
    return np.ascontiguousarray(out).view(np.int32).reshape(ot, q, taps, MR)


def source(name: str, par: str) -> str:
    """C text defining ``static void NAME(long C, long H, long W, long O, long kh, long kw, long ph,
    long pw, long dh, long dw, long OH, long OW, const uint8_t *xn, uint8_t zp, uint8_t flip, const
    uint8_t *w_shifted, long Kp, const int32_t *arranged, const int32_t *rowterm, const tf_qconv_epi *epi,
    void *yn)``: one image's stride-1 int8 conv; ``arranged``: the weights as ``arrange_weights`` lays
    them out (compile time), or NULL to arrange ``w_shifted`` per call; ``epi`` NULL leaves the int32 sums in ``yn``, else the epilogue
    writes its uint8 output (``epi->q``) or its float32 values to ``yn``.  ``par``: the clauses of
    the OpenMP parallel region (team size and an ``if`` on the multiply-adds).  Needs
    ``qconv.py``'s helpers (scratch buffers, ``tf_qconv_epi``) and AVX-512 VNNI; the caller checks
    ``NAME_fits`` first."""
    nr = 16 * NRV
    acc = "\n".join(f"  __m512i a{r}_{v} = _mm512_add_epi32(c{v}, _mm512_set1_epi32(rt[{r}]));"
                    for r in range(MR) for v in range(NRV))
    loads = " ".join(f"const __m512i b{v} = _mm512_loadu_si512((const void *)(xt + {64 * v}));" for v in range(NRV))
    steps = "\n".join(f"        {{ const __m512i a = _mm512_set1_epi32(wt[{r}]); "
                      + " ".join(f"a{r}_{v} = tf_qgemm_dpbusd512(a{r}_{v}, a, b{v});" for v in range(NRV)) + " }"
                      for r in range(MR))
    stores = "\n".join(f"  _mm512_storeu_si512((void *)(tile + {r * nr + 16 * v}), a{r}_{v});"
                       for r in range(MR) for v in range(NRV))
    colterm = "\n".join(f"  const __m512i c{v} = _mm512_loadu_si512((const void *)(colterm + {16 * v}));"
                        for v in range(NRV))
    return f"""
#define {name.upper()}_MR {MR}
#define {name.upper()}_NR {nr}
/* Whether one image of this conv takes the direct kernel: stride 1, a window of 2..{MAX_TAPS} taps,
   at least as many output positions as output channels (see qconv_direct.py). */
static int {name}_fits(long O, long kh, long kw, long sh, long sw, long OH, long OW)
{{
  return sh == 1 && sw == 1 && kh * kw > 1 && kh * kw <= {MAX_TAPS} && OH * OW >= O;
}}

/* Channel quad q of the image as one interleaved padded plane: dst[4 pos + u] = x'[4q + u] at
   padded position pos (Hp x Wp, row pitch Wp), the padding zp ^ flip, channels >= C 0; the
   plane's slack (positions Hp*Wp .. ps) 0. */
static void {name}_plane(const uint8_t *xn, long C, long H, long W, long ph, long pw, long Hp, long Wp, long ps,
                         uint8_t zp, uint8_t flip, long q, uint8_t *dst)
{{
  const long wr = (Wp + 15) / 16 * 16;
  uint8_t rows[4][wr];
  __m128i flips[4];
  long lo = pw < 0 ? 0 : (pw > Wp ? Wp : pw), hi = pw + W < Wp ? pw + W : Wp;
  if (hi < lo) hi = lo;
  for (int u = 0; u < 4; u++) {{
    const int real = 4 * q + u < C;
    flips[u] = _mm_set1_epi8((char)(real ? flip : 0));
    memset(rows[u], real ? zp : 0, (size_t)wr);
  }}
  for (long y = 0; y < Hp; y++) {{
    const long iy = y - ph;
    const int inside = iy >= 0 && iy < H;
    for (int u = 0; u < 4 && inside; u++)
      if (4 * q + u < C) memcpy(rows[u] + lo, xn + ((4 * q + u) * H + iy) * W + (lo - pw), (size_t)(hi - lo));
    uint8_t *d = dst + 4 * y * Wp;
    for (long t = 0; t < wr; t += 16) {{
      __m128i r[4];
      for (int u = 0; u < 4; u++) r[u] = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[u] + t)), flips[u]);
      const __m128i a = _mm_unpacklo_epi8(r[0], r[1]), b = _mm_unpackhi_epi8(r[0], r[1]);
      const __m128i c = _mm_unpacklo_epi8(r[2], r[3]), e = _mm_unpackhi_epi8(r[2], r[3]);
      _mm_storeu_si128((__m128i *)(d + 4 * t), _mm_unpacklo_epi16(a, c));
      _mm_storeu_si128((__m128i *)(d + 4 * t + 16), _mm_unpackhi_epi16(a, c));
      _mm_storeu_si128((__m128i *)(d + 4 * t + 32), _mm_unpacklo_epi16(b, e));
      _mm_storeu_si128((__m128i *)(d + 4 * t + 48), _mm_unpackhi_epi16(b, e));
    }}
    if (inside)        /* back to all padding for the next row (the copied span only) */
      for (int u = 0; u < 4; u++)
        if (4 * q + u < C) memset(rows[u] + lo, zp, (size_t)(hi - lo));
  }}
  /* the last row's 16-column blocks ran past Hp*Wp: the slack is written after them */
  memset(dst + 4 * Hp * Wp, 0, (size_t)(4 * (ps - Hp * Wp)));
}}

/* One tile: mr output channels x {nr} grid positions from grid position g (x = planes + 4 g),
   all quads and taps, started from colterm[g ..] + rt[r]; the sums to tile[r * {nr} + ...]. */
static inline void {name}_tile(const uint8_t *x, long ps4, long Q, const long *toff4, long T, const int32_t *wt,
                               const int32_t *colterm, const int32_t *rt, int32_t *tile)
{{
{colterm}
{acc}
  for (long q = 0; q < Q; q++) {{
    const uint8_t *xq = x + q * ps4;
    for (long t = 0; t < T; t++, wt += {MR}) {{
      const uint8_t *xt = xq + toff4[t];
      {loads}
{steps}
    }}
  }}
{stores}
}}

static void {name}(long C, long H, long W, long O, long kh, long kw, long ph, long pw, long dh, long dw,
                   long OH, long OW, const uint8_t *xn, uint8_t zp, uint8_t flip, const uint8_t *w_shifted,
                   long Kp, const int32_t *arranged, const int32_t *rowterm, const tf_qconv_epi *epi, void *yn)
{{
  const long Hp = OH + (kh - 1) * dh, Wp = OW + (kw - 1) * dw, T = kh * kw, Q = (C + 3) / 4;
  const long OT = (O + {MR} - 1) / {MR}, G = OH * Wp, panels = (G + {nr} - 1) / {nr}, P = OH * OW;
  const long runs = (panels + {RUN} - 1) / {RUN};
  const long ps = (Hp * Wp + {nr} + (kw - 1) * dw + 15) / 16 * 16;      /* positions per plane */
  uint8_t *planes = (uint8_t *)tf_qconv_scratch(0, (size_t)(4 * Q * ps));
  int32_t *own = arranged ? 0 : (int32_t *)tf_qconv_scratch(1, (size_t)(OT * Q * T * {MR}) * sizeof(int32_t));
  const int32_t *wd = arranged ? arranged : own;
  int32_t *colterm = (int32_t *)tf_qconv_scratch(2, (size_t)(panels * {nr}) * sizeof(int32_t));
  int32_t *rt = (int32_t *)tf_qconv_scratch(6, (size_t)(OT * {MR}) * sizeof(int32_t));
  int32_t *csum = (int32_t *)tf_qconv_scratch(4, (size_t)ps * sizeof(int32_t));
  if (!planes || !wd || !colterm || !rt || !csum) return;
  long toff4[{MAX_TAPS}], toff[{MAX_TAPS}];
  for (long t = 0; t < T; t++) {{
    toff[t] = (t / kw) * dh * Wp + (t % kw) * dw;
    toff4[t] = 4 * toff[t];
  }}
  for (long o = 0; o < OT * {MR}; o++) rt[o] = o < O ? rowterm[o] : 0;
  #pragma omp parallel {par}
  {{
    #pragma omp for schedule(dynamic, 1) nowait
    for (long q = 0; q < Q; q++) {name}_plane(xn, C, H, W, ph, pw, Hp, Wp, ps, zp, flip, q, planes + 4 * q * ps);
    /* weights: wd[ot][q][t][r] = the 4 bytes w + 128 of channels 4q..4q+3, tap t, row ot*mr + r */
    #pragma omp for schedule(static)
    for (long ot = 0; ot < (own ? OT : 0); ot++)
      for (long q = 0; q < Q; q++)
        for (long t = 0; t < T; t++)
          for (long r = 0; r < {MR}; r++) {{
            const long o = ot * {MR} + r;
            uint8_t b[4] = {{0, 0, 0, 0}};
            for (int u = 0; u < 4 && o < O; u++)
              if (4 * q + u < C) b[u] = w_shifted[o * Kp + (4 * q + u) * T + t];
            memcpy(own + ((ot * Q + q) * T + t) * {MR} + r, b, 4);
          }}
    /* per-position channel sums of x' (vpdpbusd by ones), then the column term of every grid position */
    #pragma omp for schedule(static)
    for (long p0 = 0; p0 < ps; p0 += 16) {{
      __m512i s = _mm512_setzero_si512();
      const __m512i ones = _mm512_set1_epi8(1);
      for (long q = 0; q < Q; q++) s = _mm512_dpbusd_epi32(s, ones, _mm512_loadu_si512((const void *)(planes + 4 * (q * ps + p0))));
      _mm512_storeu_si512((void *)(csum + p0), s);
    }}
    #pragma omp for schedule(static)
    for (long g = 0; g < panels * {nr}; g++) {{
      uint32_t s = 0;
      for (long t = 0; t < T; t++) s += (uint32_t)csum[g + toff[t]];
      colterm[g] = (int32_t)(0u - 128u * s);
    }}
    /* work units: a channel tile over a run of panels, channel tile outer (a thread's consecutive
       units keep one tile's weights in L1 while the input rows stream through) */
    #pragma omp for schedule(dynamic, 1)
    for (long u = 0; u < OT * runs; u++) {{
      const long ot = u / runs, pn0 = (u % runs) * {RUN}, pn1 = pn0 + {RUN} < panels ? pn0 + {RUN} : panels;
      const long o0 = ot * {MR}, rows = O - o0 < {MR} ? O - o0 : {MR};
      int32_t tile[{MR} * {nr}] __attribute__((aligned(64)));
      for (long pn = pn0; pn < pn1; pn++) {{
        const long g0 = pn * {nr};
        {name}_tile(planes + 4 * g0, 4 * ps, Q, toff4, T, wd + ot * Q * T * {MR}, colterm + g0, rt + o0, tile);
        for (long oh = g0 / Wp; oh < OH && oh * Wp < g0 + {nr}; oh++) {{
          const long a = g0 > oh * Wp ? g0 : oh * Wp, b = g0 + {nr} < oh * Wp + OW ? g0 + {nr} : oh * Wp + OW;
          if (b <= a) continue;
          const long p = oh * OW + (a - oh * Wp);
          int32_t *c = tile + (a - g0);
          if (epi) tf_qconv_dequantize((void *)epi, c, {nr}, o0, o0 + rows, p, p + (b - a));
          if (!epi || !epi->q)
            for (long r = 0; r < rows; r++) memcpy((int32_t *)yn + (o0 + r) * P + p, c + r * {nr}, (size_t)(b - a) * 4);
        }}
      }}
    }}
  }}
}}
"""


__all__ = ["ENV", "MR", "NRV", "arrange_weights", "arranged_fits", "enabled", "fits", "grid_share", "source"]
