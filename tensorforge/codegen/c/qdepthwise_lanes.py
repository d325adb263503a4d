"""An int8 3x3 depthwise convolution over small planes with 16 channels in the vector lanes.

``qconv.depthwise_source`` sums each channel over its own plane with output positions in the
lanes: on MobileNetV2's 14x14 and 7x7 planes short runs (196 or 49 outputs a channel: 12 or 3
vectors and a scalar remainder) of nine float multiply-adds per 16 outputs, with two column masks,
at about 2.4 G outputs/s on two threads, where onnxruntime's channels-last kernel was twice as
fast (QDQ MobileNetV2 at batch 8, kernel timers: 384@14 0.22 against 0.13 ms, 960@7 0.21 against
0.09 ms).  This form turns 16 channels at once, in integers:

* **Rows.**  The 16 channels' padded window rows are transposed to bytes ``[position][channel]``
  (16 rows of 16 input bytes, one per channel, the row's tail under a mask, in SSE registers),
  ``x ^ flip`` (uint8 as it is, int8 shifted to uint8 by flipping the sign bit), the padding the
  zero point flipped alike, so no tap needs a mask.
* **Sums.**  For an output and a window row: one 64-byte load of the four positions from the
  window's first column, a byte permute (VBMI) into lane ``l = [x(l, p), x(l, p + 1), x(l, p + 2),
  0]`` and one ``vpdpbusd`` by the row's three weights of each channel: three of each per 16
  outputs, where the float form takes nine multiply-adds.  ``sum w (x - zp) = sum w x' - zp' sum
  w``: each lane starts from ``-zp' sum w``; integer arithmetic modulo 2^32, bit-exact.
* **Output.**  A plain uint8 epilogue (scale, bias, relu or relu6, the next layer's
  quantization: MobileNetV2's) runs on the sums as they are, ``tf_qconv_dequantize``'s float32
  operations lane by lane with the 16 channels' scales and biases as vectors, and 16 outputs' bytes
  are transposed (16 x 16 bytes) into one row of 16 positions per channel.  Any other epilogue
  (residuals, float32 output) gets the int32 sums transposed (16 x 16 dwords) into the
  ``[channel][position]`` block that ``tf_qconv_dequantize`` reads.

Per layer at batch 8 on two threads, alone, one process (uint8 out, relu6): 384@14 0.253 ->
0.154 ms with the sums in lanes -> 0.119 with the epilogue in them too, 576@14 0.331 -> 0.225 ->
0.175, 576@14/2 0.221 -> 0.100 -> 0.083, 960@7 0.199 -> 0.130 -> 0.099 (onnxruntime's, inside its
model: 0.13, 0.18, 0.065, 0.093).  Wider planes stay on the positions-in-lanes ``vpdpbusd`` form
(192@28: 0.257 there, 0.278 here).  Needs AVX-512 F/BW/VL, VBMI and VNNI; elsewhere ``qconv``
keeps its float loops.
"""
from __future__ import annotations


# What the C text's guard needs (target.features spelling, as /proc/cpuinfo names them).
FEATURES = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512vbmi", "avx512_vnni"})


def applies(geometry: tuple[int, ...], features) -> bool:
    """Whether a depthwise int8 conv of ``geometry`` ((N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw,
    OH, OW), pads top and left) runs here on a host with ``features``: ``qconv.depthwise_source``'s
    3x3 'same' kind (pads of 1, stride 1 keeping the size or 2 halving an even one) over planes of
    at most ``qconv.DW_STAGED_MAX_PIXELS`` pixels, as its C code decides at run time."""
    from .qconv import DW_STAGED_MAX_PIXELS
    _, _, h, w, _, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = geometry
    same = (kh, kw, dh, dw, ph, pw) == (3, 3, 1, 1, 1, 1) and sh == sw and (
        (sh == 1 and (oh, ow) == (h, w)) or (sh == 2 and h % 2 == 0 and w % 2 == 0 and (oh, ow) == (h // 2, w // 2)))
    return same and h * w <= DW_STAGED_MAX_PIXELS and FEATURES <= frozenset(features or ())


def source(name: str, signed: bool) -> str:
    """C text, guarded by the ISA it needs, defining ``{NAME}_LANES`` and ``static int
    NAME_lanes3x3(const uint8_t *xc, long HW, long H, long W, long s, long ph, long pw, long OH, long
    OW, long c0, long nc, uint8_t zp, const uint8_t *wc, long kp, const tf_qconv_epi *e, uint8_t
    *rows, int32_t *sums)``: a 3x3 depthwise conv (stride ``s`` 1 or 2, pads ``ph``/``pw`` before)
    of the ``nc <= 16`` channels from ``c0``, channel ``l``'s ``H x W`` plane at ``xc + l * HW``
    (uint8, or int8 when ``signed``) and its taps at ``wc + l * kp`` (``w + 128``).  Returns 1 when
    it applied the epilogue ``e`` (a plain uint8 one: channel ``c0 + l``'s outputs at ``e->q + (c0 +
    l) * e->ldo``), else 0, having written channel ``l``'s ``OH x OW`` int32 sums to ``sums + l * OH *
    OW``.  ``rows``: ``Hp * (Wp + 4) * 16`` bytes of scratch, ``Hp = (OH - 1) s + 3``, ``Wp = (OW -
    1) s + 3`` (the padded window's rows with four positions of slack for the 64-byte loads).
    Needs ``qconv``'s helpers (``tf_qconv_epi``, the vector epilogue, the byte transpose) before it."""
    flip = "0x80" if signed else "0x00"
    return f"""
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VBMI__) \\
    && defined(__AVX512VNNI__)
#define {name.upper()}_LANES 1
/* 16 vectors of 16 floats transposed in place: lane k of vector i becomes lane i of vector k. */
static inline void {name}_transpose16_ps(__m512 *r)
{{
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {{
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }}
  for (int i = 0; i < 16; i += 4) {{
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }}
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; i++) {{
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xDD);
    }}
  for (int i = 0; i < 8; i++) {{
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }}
}}

/* 3x3 in integers: the 16 channels' padded rows transposed to bytes [position][channel] (x ^ flip,
   padding the zero point ^ flip), then for each output and window row one 64-byte load of the four
   positions from the window's first column, a byte permute into lane l = [x(l, p), x(l, p + 1),
   x(l, p + 2), 0] and one vpdpbusd by the row's three weights: three of each per 16 outputs, where
   the float form takes nine multiply-adds.  Exact: sum w (x - zp) = sum w x' - zp' sum w, mod 2^32. */
static int {name}_lanes3x3(const uint8_t *xc, long HW, long H, long W, long s, long ph, long pw, long OH, long OW,
                           long c0, long nc, uint8_t zp, const uint8_t *wc, long kp, const tf_qconv_epi *e,
                           uint8_t *rows, int32_t *sums)
{{
  const uint8_t flip = {flip}, pz = (uint8_t)(zp ^ flip);
  const long Hp = (OH - 1) * s + 3, Wp = (OW - 1) * s + 3, pitch = (Wp + 4) * 16, P = OH * OW;
  memset(rows, pz, (size_t)(Hp * pitch));
  const __m128i flipv = _mm_set1_epi8((char)flip);
  for (long iy = 0; iy < H; iy++) {{
    const long py = iy + ph;
    if (py < 0 || py >= Hp) continue;
    for (long ix0 = 0; ix0 < W; ix0 += 16) {{
      const long n = W - ix0 < 16 ? W - ix0 : 16;
      const __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
      __m128i r[16];
      for (long l = 0; l < 16; l++)
        r[l] = l < nc ? _mm_xor_si128(_mm_maskz_loadu_epi8(m, (const void *)(xc + l * HW + iy * W + ix0)), flipv)
                      : _mm_set1_epi8((char)pz);
      tf_qconv_transpose16(r);
      for (long k = 0; k < n; k++) {{
        const long px = ix0 + k + pw;
        if (px >= 0 && px < Wp) _mm_storeu_si128((__m128i *)(rows + py * pitch + px * 16), r[k]);
      }}
    }}
  }}
  /* weights: lane l of wr[i] = the int8 taps (i, 0..2) of channel l and a 0; init: -zp' sum w */
  int8_t wb[3][64];
  int32_t init[16];
  for (long l = 0; l < 16; l++) {{
    int32_t sum = 0;
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) {{
        const int8_t v = l < nc && j < 3 ? (int8_t)((int32_t)wc[l * kp + 3 * i + j] - 128) : 0;
        wb[i][4 * l + j] = v;
        sum += v;
      }}
    init[l] = (int32_t)(0u - (uint32_t)pz * (uint32_t)sum);
  }}
  const __m512i w0 = _mm512_loadu_si512((const void *)wb[0]), w1 = _mm512_loadu_si512((const void *)wb[1]);
  const __m512i w2 = _mm512_loadu_si512((const void *)wb[2]), start = _mm512_loadu_si512((const void *)init);
  uint8_t ix[64];
  for (int l = 0; l < 16; l++)
    for (int j = 0; j < 4; j++) ix[4 * l + j] = (uint8_t)(16 * (j < 3 ? j : 0) + l);
  const __m512i idx = _mm512_loadu_si512((const void *)ix);
  const __mmask64 keep = 0x7777777777777777ULL;      /* byte 3 of every lane: the fourth tap, 0 */
  /* a plain uint8 epilogue (scale, bias, relu or relu6, the next layer's quantization; no residual)
     runs here on the channels-in-lanes sums, tf_qconv_dequantize's arithmetic lane by lane, and the
     bytes are transposed back; any other leaves the int32 sums to the caller's epilogue call */
  const int fuse = e && tf_qconv_plain_u8(e);
  const int relu = fuse && e->relu, clip = relu && e->hi < INFINITY;
  const __mmask16 live = (__mmask16)((1u << nc) - 1u);
  tf_qconv_epi16 x16;
  __m512 sv = _mm512_setzero_ps(), bv = _mm512_setzero_ps();
  __m512i ibv = _mm512_setzero_si512();
  if (fuse) {{
    x16 = tf_qconv_epi16_of(e);
    sv = _mm512_maskz_loadu_ps(live, e->scale + c0);
    if (e->bias) bv = _mm512_maskz_loadu_ps(live, e->bias + c0);
    if (e->ibias) ibv = _mm512_maskz_loadu_epi32(live, e->ibias + c0);
  }}
  const uint8_t *rowb = rows, *b = rows;
  long ow = 0;
  for (long p0 = 0; p0 < P; p0 += 16) {{
    const long n = P - p0 < 16 ? P - p0 : 16;
    const __mmask16 m = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
    __m512 acc[16];
    for (long k = 0; k < n; k++) {{
      __m512i a = _mm512_dpbusd_epi32(start, _mm512_maskz_permutexvar_epi8(keep, idx, _mm512_loadu_si512((const void *)b)), w0);
      a = _mm512_dpbusd_epi32(a, _mm512_maskz_permutexvar_epi8(keep, idx, _mm512_loadu_si512((const void *)(b + pitch))), w1);
      a = _mm512_dpbusd_epi32(a, _mm512_maskz_permutexvar_epi8(keep, idx, _mm512_loadu_si512((const void *)(b + 2 * pitch))), w2);
      acc[k] = _mm512_castsi512_ps(a);
      if (++ow == OW) {{
        ow = 0;
        rowb += s * pitch;
        b = rowb;
      }} else {{
        b += s * 16;
      }}
    }}
    if (fuse) {{
      __m128i q[16];
      for (long k = 0; k < 16; k++) {{
        if (k >= n) {{ q[k] = _mm_setzero_si128(); continue; }}
        const __m512i a = _mm512_add_epi32(_mm512_castps_si512(acc[k]), ibv);
        q[k] = tf_qconv_quantize16_u8(tf_qconv_epilogue_value(&x16, a, sv, bv, 0, 0, 0, live, 0, 0, 0, relu, clip), &x16.out);
      }}
      tf_qconv_transpose16(q);          /* q[l]: channel l's 16 outputs */
      for (long l = 0; l < nc; l++) _mm_mask_storeu_epi8(e->q + (c0 + l) * e->ldo + p0, m, q[l]);
      continue;
    }}
    for (long k = n; k < 16; k++) acc[k] = _mm512_setzero_ps();
    {name}_transpose16_ps(acc);            /* moves 32-bit lanes: the int32 sums unchanged */
    for (long l = 0; l < nc; l++) _mm512_mask_storeu_epi32(sums + l * P + p0, m, _mm512_castps_si512(acc[l]));
  }}
  return fuse;
}}
#endif
"""


__all__ = ["FEATURES", "applies", "source"]
