"""Inline float32 ``exp``, ``erf`` and GELU in plain C that gcc vectorizes with the loop around them.

Why not the C library: with ``-ffast-math`` gcc vectorizes ``expf``/``erff`` through glibc's vector
math library (libmvec), but each vector is then a call, and a call clobbers every vector register:
the loop around it keeps its accumulators and constants in memory and cannot fuse with its
neighbours.  Measured on one core (AVX-512, gcc 12, glibc 2.36): libmvec ``erff`` 0.64 ns per
element, the rational below 0.33; softmax over 64x12x128x128 takes 5.9 ms of CPU time with libmvec
``expf`` and 4.2 ms with the inline one (a copy of the same bytes: 4.5 ms).  Whether libmvec has a variant at all
depends on the glibc of the machine that compiles; these functions vectorize wherever the loop
does.  float64 keeps the C library (its accuracy is the point of computing in double).

All are branch-free (clamps, ``rintf``, ``copysignf``, an integer shift: all single vector
instructions), accurate to a few float32 ulps (measured: erf 4e-7 absolute, exp 3e-7 relative,
GELU 2.4e-7 times max(1, |x|)), and exact at the limits a softmax or a GELU relies on:
``tf_expf(-inf) == 0`` (and denormals, not 0, from -87.3 down to -103.9), ``tf_erff`` is exactly +-1 beyond +-3.92 and never exceeds 1 in
magnitude, ``tf_geluf`` is exactly 0 and x there.  ``tf_geluf`` is the erf rational with the
GELU's scalings folded into the coefficients (8% less time for LayerNorm + GELU + residual).

Special values (docs/numerics.md): in the default IEEE build a NaN argument gives NaN and
``tf_expf`` overflows to +inf past FLT_MAX, as libm does.  Under ``-ffast-math``
(``compile(..., fast_math=True)``) ``tf_expf`` saturates at 3.4e38 instead: fast-math's reciprocal
(``rcp14`` and a Newton step) turns ``1 / inf`` into NaN, so ``sigmoid(-100)`` =
``1 / (1 + exp(100))`` would be NaN; with the saturation it is 2.9e-39.

The coefficients were fitted here in float64 (NumPy), minimising the maximum error with
Lawson-reweighted linearised least squares on 40 000 points (``fit_rational``/``fit_exp``
below reproduce them); ``tests/codegen/test_vector_math.py`` checks the compiled C against
``math.erf``/``math.exp`` on a dense grid including the tails.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Sequence

# erf(x) = x * P(x^2) / Q(x^2) for |x| <= ERF_CLAMP (erf(3.92) = 1 - 5e-8, which rounds to 1 in
# float32).  Max abs error of the fit 6e-8; evaluated in float32 with FMA, 4e-7.
ERF_CLAMP = 3.92
ERF_P = (1.128378987e+00, 2.003685683e-01, 5.063092336e-02, 3.727102419e-03, 1.430092088e-04,
         -1.972910241e-06, 2.009002920e-08)
ERF_Q = (1.0, 5.109027028e-01, 1.151829362e-01, 1.439478714e-02, 9.641700890e-04)

# exp(x) = 2^k * exp(r), k = rint(x / ln 2) in [-150, 127] (x is clamped to [EXP_LOW, EXP_HIGH], k capped at 127), r = x - k ln 2 in two steps
# (ln 2 split so that k * LN2_HI is exact); exp(r) = 1 + r + r^2 * E(r) for r in
# [-ln2/2, ln2] (the upper half only at k = 127).  Max relative error of the fit 1.6e-9.
LN2_HI = 0.693145751953125            # ln 2 to 15 significant bits: k * LN2_HI is exact
LN2_LO = 1.4286068202862268e-06       # ln 2 - LN2_HI
EXP_E = (4.999999404e-01, 1.666670144e-01, 4.166805744e-02, 8.326658048e-03, 1.384108560e-03,
         2.324173402e-04)
# Below EXP_LOW the result is 0 (exp(-104) is under half the smallest float32 denormal; r stays
# finite for x = -inf); down to it, results in the denormal range come out as denormals (softplus
# of -100 is exp(-100) = 3.7e-44, and log of that -99.98: flushed to 0 it was -inf, fuzzer seed
# 8181); above EXP_HIGH it is exp(EXP_HIGH), just under FLT_MAX.
EXP_LOW = -104.0
EXP_HIGH = 88.7228
# The sigmoid's exp(r) for r in [-ln2/2, ln2/2] only (its exponent is never positive, so k is
# never capped): one degree fewer for the same float32 accuracy, ``fit_exp(-h, h, 4)`` with
# h = ln2/2 * 1.0002.  Max relative error of the fit 3.5e-9.
SIGMOID_E = (4.999998808e-01, 1.666651815e-01, 4.166940600e-02, 8.368978277e-03, 1.375665772e-03)
# 1.5 * 2^23: x + ROUNDER rounds x to an integer held in the low mantissa bits (|x| < 2^22, the
# default rounding mode), so k and the bits of 2^k come from one add, not a round and a convert.
ROUNDER = 12582912.0


# GELU(x) = x * (1/2 + erf(x / sqrt 2) / 2): the erf rational with the argument's 1/sqrt(2) and the
# factor 1/2 folded into its coefficients (t = x^2 = 2 (x / sqrt 2)^2), three operations fewer.
_GELU_P = tuple(c * 0.5 / math.sqrt(2) / 2 ** k for k, c in enumerate(ERF_P))
_GELU_Q = tuple(c / 2 ** k for k, c in enumerate(ERF_Q))


def _lit(v: float) -> str:
    return f"{v:.9e}f"


def _horner(acc: str, coeffs: Sequence[float], t: str) -> str:
    """C statements ``float acc = c[n]; acc = fmaf(acc, t, c[n-1]); ... c[0]`` (lowest degree
    first).  The FMAs are written out: the loop kernels that inline these functions are compiled
    without contraction (IEEE builds, emit_loop.PRELUDE), and a polynomial is where a fused
    multiply-add is both faster and more accurate (one rounding a step, the same in every build)."""
    lines = [f"  float {acc} = {_lit(coeffs[-1])};"]
    lines += [f"  {acc} = fmaf({acc}, {t}, {_lit(c)});" for c in reversed(coeffs[:-1])]
    return "\n".join(lines)


# The part of exp that expm1 shares: x clamped, k, the reduced r and E(r) ...
_EXP_REDUCE = f"""  float x = TF_EXP_CLAMP_HIGH(tf_maxf(x0, {_lit(EXP_LOW)}));
  const float k = tf_minf(rintf(x * {_lit(1 / math.log(2))}), 127.0f);   /* >= -150 from the clamp of x */
  float r = fmaf(-k, {_lit(LN2_HI)}, x);
  r = fmaf(-k, {_lit(LN2_LO)}, r);
{_horner("e", EXP_E, "r")}"""
# ... and e * 2^k by ``tf_exp2_scale``.


def c_source() -> str:
    """The C definitions (``static inline``), included once at the top of every generated file."""
    return f"""#ifndef TF_MATH_INLINE
/* Forced: gcc's inliner gives up on these once a file has grown past its unit-growth budget (a
   whole model's kernels inlined into tf_run), and a helper called out of line runs one lane at a
   time inside the vector loops that call it (EfficientNet-B0 on Zen 3: tf_sigmoidf called per
   lane from the SiLU epilogues, 11% of the run, the model 1.4x slower than with it inlined). */
#define TF_MATH_INLINE static inline __attribute__((always_inline))
#endif
#ifdef __FAST_MATH__
#define TF_NAN_PASS(x, r) (r)
#define TF_EXP_OVERFLOW(x, r) (r)
#define TF_EXP_CLAMP_HIGH(x) tf_minf(x, {_lit(EXP_HIGH)})
#else
/* IEEE builds: a NaN argument gives NaN (the clamps would turn it into a number) and exp overflows
   to +inf beyond FLT_MAX as libm's does.  Compare-and-select: one blend per vector. */
#define TF_NAN_PASS(x, r) ((x) != (x) ? (x) : (r))
#define TF_EXP_OVERFLOW(x, r) ((x) > {_lit(EXP_HIGH)} ? INFINITY : (r))
/* no upper clamp: above EXP_HIGH k stops at 127 and the result, +inf or a huge number, is
   replaced by TF_EXP_OVERFLOW (one compare-and-select fewer per vector: 16% less time) */
#define TF_EXP_CLAMP_HIGH(x) (x)
#endif
/* Clamps as compare-and-select (one minps/maxps): libm's fminf/fmaxf treat NaN specially, which
   keeps gcc from vectorizing them outside fast-math; NaN is dealt with by TF_NAN_PASS instead. */
TF_MATH_INLINE float tf_minf(float a, float b) {{ return a < b ? a : b; }}
TF_MATH_INLINE float tf_maxf(float a, float b) {{ return a > b ? a : b; }}
/* e * 2^k rounded once, for e in [0.5, 2) and an integer-valued k in [-150, 127], without any
   arithmetic that produces or reads a denormal: Intel cores run such an instruction through a
   microcode assist (~100+ cycles a vector), and a softmax row of masked scores (-1e4, every exp
   a 0 from underflow) ran at a fifth of its speed.  Normal results (k >= -126): e * 2^k, 2^k built
   from its bits.  Below (k < -126): the denormal's bit pattern is the integer rint(e * 2^(k + 149))
   (< 2^23, or exactly 2^23 = FLT_MIN's bits when it rounds up), e * 2^(k + 149) a normal float;
   one fused multiply-add of 2^23 rounds it to that integer (to nearest even, once: the same bits
   as the product rounding into the denormals) in the low mantissa bits, and 2^23's bits are
   subtracted.  Each path runs on every lane with its exponent clamped into its own range, and a
   select picks. */
TF_MATH_INLINE float tf_exp2_scale(float e, float k) {{
  const int32_t ki = (int32_t)k;
  union {{ int32_t i; float f; }} sn = {{ .i = ((ki < -126 ? -125 : ki) + 127) << 23 }};
  union {{ int32_t i; float f; }} sd = {{ .i = ((ki < -126 ? ki : -127) + 149 + 127) << 23 }};
  union {{ float f; int32_t i; }} t = {{ .f = fmaf(e, sd.f, 8388608.0f) }};
  union {{ int32_t i; float f; }} den = {{ .i = t.i - 0x4B000000 }};
  return ki < -126 ? den.f : e * sn.f;
}}
TF_MATH_INLINE float tf_erff(float x) {{
  const float a = tf_minf(fabsf(x), {_lit(ERF_CLAMP)});
  const float t = a * a;
{_horner("p", ERF_P, "t")}
{_horner("q", ERF_Q, "t")}
  /* exactly 1 from the clamp on, whatever the rounding of the rational there */
  return TF_NAN_PASS(x, copysignf(a >= {_lit(ERF_CLAMP)} ? 1.0f : tf_minf(a * p / q, 1.0f), x));
}}
TF_MATH_INLINE float tf_geluf(float x) {{
  const float a = tf_minf(fabsf(x), {_lit(ERF_CLAMP * math.sqrt(2))});
  const float t = a * a;
{_horner("p", _GELU_P, "t")}
{_horner("q", _GELU_Q, "t")}
  return x * (0.5f + copysignf(a >= {_lit(ERF_CLAMP * math.sqrt(2))} ? 0.5f : tf_minf(a * p / q, 0.5f), x));
}}
TF_MATH_INLINE float tf_expf(float x0) {{
{_EXP_REDUCE}
  e = fmaf(e, r * r, r) + 1.0f;
  return TF_NAN_PASS(x0, TF_EXP_OVERFLOW(x0, tf_exp2_scale(e, k)));
}}
TF_MATH_INLINE float tf_expm1f(float x0) {{
  /* exp(x) - 1 without the cancellation near 0: where k = 0, r = x and the result is
     x + x^2 E(x), written x * (x E) + x so that -0.0 stays -0.0; elsewhere |x| > ln2 / 2
     and exp(x) - 1 loses at most a few ulps */
{_EXP_REDUCE}
  const float small = fmaf(x * e, x, x);
  e = fmaf(e, r * r, r) + 1.0f;
  return TF_NAN_PASS(x0, k == 0.0f ? small : TF_EXP_OVERFLOW(x0, tf_exp2_scale(e, k) - 1.0f));
}}
TF_MATH_INLINE float tf_sigmoidf(float x) {{
  /* e = exp(-|x|) in (0, 1], then 1 / (1 + e) for x >= 0 and e / (1 + e) below: the exponent is
     never positive, so nothing overflows and no NaN or overflow select is needed (a NaN x goes
     through every step: the clamp keeps it, as -|NaN| fails the compare).  2^k for k in
     [-150, 0] is 2^(k+64) (normal) times 2^-64, the last product rounding once into the denormals:
     sigmoid(-100) is 3.8e-44 as in torch, sigmoid(-inf) is 0.  Half the instructions of
     1 / (1 + tf_expf(-x)): EfficientNet's SiLU epilogues run it on every activation (44M of
     them at batch 8).  k comes from the ROUNDER add (kr's low bits are k) and the polynomial is
     SIGMOID_E's: 1.11x the speed of rintf, a conversion and EXP_E. */
  const float a = -fabsf(x);
  const float y = {_lit(EXP_LOW)} > a ? {_lit(EXP_LOW)} : a;
  const float kr = fmaf(y, {_lit(1 / math.log(2))}, {_lit(ROUNDER)});
  const float k = kr - {_lit(ROUNDER)};
  float r = fmaf(-k, {_lit(LN2_HI)}, y);
  r = fmaf(-k, {_lit(LN2_LO)}, r);
{_horner("e", SIGMOID_E, "r")}
  e = fmaf(e, r * r, r) + 1.0f;
  union {{ float f; int32_t i; }} kb = {{ .f = kr }};
  union {{ int32_t i; float f; }} s = {{ .i = (kb.i - 0x4B400000 + 191) << 23 }};
  e = (e * s.f) * 5.421010862e-20f;
  return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}}
"""


# C function for a scalar op on float32 (and float16, computed in float32); float64 keeps libm.
# "gelu" is the exact (erf) GELU; without an entry the emitter spells it with erf.
INLINE_FLOAT32 = {"exp": "tf_expf", "expm1": "tf_expm1f", "erf": "tf_erff", "gelu": "tf_geluf", "sigmoid": "tf_sigmoidf"}


@contextmanager
def libm_math() -> Iterator[None]:
    """Code generated inside the block calls the C library's ``expf``/``erff`` instead (benchmarks
    compare both in one run; the compile cache keys on the source, so both builds coexist)."""
    saved = dict(INLINE_FLOAT32)
    INLINE_FLOAT32.clear()
    try:
        yield
    finally:
        INLINE_FLOAT32.update(saved)


# ---- how the coefficients were obtained (not used at compile time) ---------------------------------
def fit_rational(f, x, p_deg: int, q_deg: int, iters: int = 200):
    """Coefficients (lowest degree first) of ``P``/``Q`` in ``t = x^2`` with ``Q(0) = 1`` that
    minimise the max of ``|x * P(t) / Q(t) - x * f(x)|`` (``f = erf(x) / x``): linearised least
    squares, reweighted by 1/Q of the previous iterate and by the error (Lawson)."""
    import numpy as np
    x = np.asarray(x, float)
    fx = f(x)
    s2 = float(x.max()) ** 2
    s = x * x / s2
    lawson, q_prev, best = np.ones_like(s), np.ones_like(s), (math.inf, None, None)
    for _ in range(iters):
        cols = [s ** k for k in range(p_deg + 1)] + [-fx * s ** k for k in range(1, q_deg + 1)]
        w = lawson * x / q_prev
        c, *_ = np.linalg.lstsq(np.stack(cols, 1) * w[:, None], fx * w, rcond=None)
        p, q = c[:p_deg + 1], np.concatenate([[1.0], c[p_deg + 1:]])
        q_prev = np.polyval(q[::-1], s)
        err = x * (np.polyval(p[::-1], s) / q_prev - fx)
        if np.abs(err).max() < best[0]:
            best = (float(np.abs(err).max()), p / s2 ** np.arange(p_deg + 1), q / s2 ** np.arange(q_deg + 1))
        lawson = np.maximum(lawson * np.abs(err) / np.sum(lawson * np.abs(err)), 1e-12)
    return best


def fit_exp(lo: float, hi: float, deg: int, iters: int = 150, points: int = 40001):
    """``E`` with ``exp(r) ~ 1 + r + r^2 E(r)`` on [lo, hi], minimising the max relative error."""
    import numpy as np
    r = np.linspace(lo, hi, points)
    r = r[np.abs(r) > 1e-6]
    g = (np.exp(r) - 1 - r) / (r * r)
    lawson, best = np.ones_like(r), (math.inf, None)
    for _ in range(iters):
        w = lawson * r * r
        c, *_ = np.linalg.lstsq(np.stack([r ** k for k in range(deg + 1)], 1) * w[:, None], g * w, rcond=None)
        err = r * r * (np.polyval(c[::-1], r) - g) / np.exp(r)
        if np.abs(err).max() < best[0]:
            best = (float(np.abs(err).max()), c)
        lawson = np.maximum(lawson * np.abs(err) / np.sum(lawson * np.abs(err)), 1e-14)
    return best


__all__ = ["INLINE_FLOAT32", "c_source", "fit_exp", "fit_rational", "libm_math"]
