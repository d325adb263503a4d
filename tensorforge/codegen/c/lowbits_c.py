"""C for casts to the storage-only types of ``ir/lowbits.py`` (float8, float4, 4-/2-bit ints).

Native code holds those values in their compute type (float, int8_t, uint8_t; see
``passes/lower/widen_bf16.py``), so a cast to one is a C function that returns the rounded value
in that type.  The routines work on the bits (no NaN/Inf compares that ``-ffast-math`` could
fold) and follow exactly the rules of ``ir/lowbits.py``, which the interpreter runs.
"""
from __future__ import annotations

from ...ir.lowbits import E8M0, E8M0_ROUND_MODES, FLOAT_FORMATS, INT_FORMATS
from ...ir.types import DType

C_SOURCE = r"""/* float8/float4 (ir/lowbits.py): round x to nearest even on the grid of a format with mbits
   mantissa bits and minimum normal exponent emin; past maxv (after rounding): flags & 1 saturate,
   else inf when flags & 2, else NaN.  flags & 4: no negative zero (FNUZ); flags & 8: no NaN
   (float4: NaN -> zero of the opposite sign, saturating). */
static inline float tf_bits_f64(uint64_t b) { double r; memcpy(&r, &b, 8); return (float)r; }
static inline float tf_fp_round(double x, int mbits, int emin, double maxv, int flags) {
  uint64_t u; memcpy(&u, &x, 8);
  const uint64_t sign = u >> 63, a = u & 0x7fffffffffffffffull;
  if (a > 0x7ff0000000000000ull)
    return (flags & 8) ? tf_bits_f64((sign ^ 1u) << 63) : tf_bits_f64(0x7ff8000000000000ull);
  double r;
  if (a == 0x7ff0000000000000ull) {
    if (flags & 9) r = maxv;
    else if (flags & 2) r = tf_bits_f64(0x7ff0000000000000ull);
    else return tf_bits_f64(0x7ff8000000000000ull);
  } else {
    const int be = (int)(a >> 52);
    const uint64_t m = (a & 0xfffffffffffffull) | (be ? (1ull << 52) : 0);
    const int e = (be ? be : 1) - 1023;
    const int qe = (e > emin ? e : emin) - mbits;
    const int shift = qe - ((be ? be : 1) - 1075);
    uint64_t q = 0;
    if (shift < 64) {
      const uint64_t rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
      q = m >> shift;
      if (rem > half || (rem == half && (q & 1u))) q++;
    }
    r = ldexp((double)q, qe);
    if (r > maxv) {
      if (flags & 9) r = maxv;
      else if (flags & 2) r = tf_bits_f64(0x7ff0000000000000ull);
      else return tf_bits_f64(0x7ff8000000000000ull);
    }
  }
  uint64_t rb; memcpy(&rb, &r, 8);
  if (!((flags & 4) && rb == 0)) rb |= sign << 63;
  memcpy(&r, &rb, 8);
  return (float)r;
}
/* float8 E8M0 (ir/lowbits.py round_e8m0): the exponent of x's f32 bits, rounded by mode
   (not past 2^127 when sat); NaN/inf and an overflow -> NaN.  The result
   2^(e-127) is built from its bits (2^-127 is an f32 subnormal). */
static inline float tf_e8m0_round(float x, int sat, int mode) {  /* mode: 0 up, 1 down, 2 nearest */
  uint32_t u; memcpy(&u, &x, 4);
  uint32_t e = (u >> 23) & 0xffu;
  if (e == 0xffu) return tf_bits_f64(0x7ff8000000000000ull);
  const int up = mode == 0 ? (u & 0x7fffffu) != 0
               : mode == 2 ? (u & 0x400000u) && ((u & 0x3fffffu) || e) : 0;
  if (up && !(sat && e == 0xfeu)) e++;
  if (e == 0xffu) return tf_bits_f64(0x7ff8000000000000ull);
  const uint32_t r = e ? e << 23 : 0x00400000u;
  float f; memcpy(&f, &r, 4);
  return f;
}
/* 4-/2-bit ints: a float truncates, out of range (NaN, Inf) -> 0; an integer wraps around. */
static inline int64_t tf_small_int_f(double x, int64_t lo, int64_t hi) {
  uint64_t u; memcpy(&u, &x, 8);
  if ((u & 0x7fffffffffffffffull) >= 0x7ff0000000000000ull) return 0;
  const double t = trunc(x);
  return (t >= (double)lo && t <= (double)hi) ? (int64_t)t : 0;
}
static inline int64_t tf_small_int_i(uint64_t x, int bits, int sgn) {
  const int64_t v = (int64_t)(x & ((1ull << bits) - 1));
  return (sgn && v >= (INT64_C(1) << (bits - 1))) ? v - (INT64_C(1) << bits) : v;
}
"""


def cast_expr(x: str, src: DType, dst: DType, saturate: bool | None, c_target: str,
              round_mode: str | None = None) -> str:
    """The C expression of a cast of ``x`` (of ``src``) to the storage-only ``dst``."""
    if dst is E8M0:
        mode = E8M0_ROUND_MODES.index(round_mode or "up")
        return f"tf_e8m0_round((float)({x}), {0 if saturate is False else 1}, {mode})"
    f = FLOAT_FORMATS.get(dst)
    if f is not None:
        flags = (1 if (saturate is not False or not f.has_nan) else 0) | (2 if f.has_inf else 0) \
            | (4 if f.fnuz else 0) | (0 if f.has_nan else 8)
        return f"tf_fp_round((double)({x}), {f.mbits}, {f.emin}, {f.max!r}, {flags})"
    bits = INT_FORMATS[dst]
    lo, hi = dst.int_range
    if src.is_float:
        return f"(({c_target})tf_small_int_f((double)({x}), {lo}, {hi}))"
    return f"(({c_target})tf_small_int_i((uint64_t)({x}), {bits}, {1 if lo < 0 else 0}))"


__all__ = ["C_SOURCE", "cast_expr"]
