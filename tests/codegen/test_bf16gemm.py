"""The bf16 GEMM generator (``codegen/c/bf16gemm.py``) against its exact NumPy emulation.

Every comparison is bit-exact (NaN positions compared as NaN: payloads are not in the contract).
Three implementations of the one accumulation order meet here: the AVX512_BF16 kernel
(``vdpbf16ps``, the host's own path where it has the instruction), the plain C fallback (forced
by a target without AVX512_BF16) and ``bf16gemm.reference`` in NumPy.  The contract itself is
checked against the hardware instruction by itself (``vdpbf16ps`` and ``vcvtne2ps2bf16`` on
crafted operands) and the NumPy step against exact rational arithmetic.  Shapes cross every edge:
odd K (the padded pair), M = 1 and M past the row tile (the wide leftover tiles), N past the panel
and the tile, K blocks and row blocks (a tiny tiling), strided A and C, threads; values cross
ties of the bf16 rounding, NaN, +-inf, denormals, overflow and results near FLT_MIN.
"""
from __future__ import annotations

import ctypes
import functools
from fractions import Fraction

import numpy as np
import pytest

from tensorforge.codegen import Target
from tensorforge.codegen.c import bf16gemm, bf16gemm_amx, compile_c

from .guarded_rows import GuardedRows

HOST = Target.host()
# The vector kernel's bits are the contract; on an AMX host it is built for the host without AMX
# (parts of more than a few rows would run on tiles, held to an error bound: the tests at the end).
NO_AMX = HOST.replace(features=HOST.features - {"amx_tile", "amx_int8", "amx_bf16"})
TARGETS = {"avx512_bf16": NO_AMX, "scalar": HOST.replace(features=frozenset({"avx2", "fma"}))}
# The generated text depends only on the features a target lists, not on the host generating it
SOURCE_TARGETS = {"avx512_bf16": HOST.replace(features=frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16"})),
                  "scalar": TARGETS["scalar"]}
HAS_AMX = bf16gemm_amx.available(HOST)
# K blocks of 16 k (so C continues the chain across blocks), row blocks of one tile, leftover
# tiles at most 4 vectors wide.
TINY = bf16gemm.Tiling(mr=3, nrv=2, unroll=2, kc=16, a_block=64, max_vecs=4)
ARGTYPES = [ctypes.c_long] * 3 + [ctypes.c_void_p, ctypes.c_long] + [ctypes.c_void_p] * 3 + [ctypes.c_long]
HAS_BF16 = bf16gemm.isa(HOST) == "avx512_bf16"
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="host lacks AVX512_BF16")


def runnable(path: str) -> None:
    if path == "avx512_bf16" and not HAS_BF16:
        pytest.skip("host lacks AVX512_BF16")
    if path == "amx" and not HAS_AMX:
        pytest.skip("host lacks AMX-BF16")


@functools.lru_cache(maxsize=None)
def kernel(path: str, threads: int = 1, nr: int = 16, tiling: bf16gemm.Tiling | None = None):
    """The compiled kernel as a ctypes function (path "amx": the host's own, on AMX tiles)."""
    runnable(path)
    target = HOST if path == "amx" else TARGETS[path]
    assert bf16gemm.isa(target) == path or (path == "amx" and bf16gemm_amx.available(target))
    name = f"t_bf16gemm_{path}_{threads}t_nr{nr}{'_tiny' if tiling else ''}"
    lib = compile_c(bf16gemm.source(name, target, threads=threads, nr=nr, tiling=tiling), target, name=name)
    return lib.function(name, ARGTYPES)


def f32(bits) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32)


def values(rng, shape) -> np.ndarray:
    """float32 values of mixed scale, a third of them exactly halfway between two bf16 (ties to
    even, odd and even mantissas both) or one f32 ulp either side of halfway."""
    x = (rng.standard_normal(shape) * rng.choice([1.0, 1e-3, 30.0], shape)).astype(np.float32)
    base = bf16gemm.to_bf16_bits(x).astype(np.uint32) << 16
    offset = rng.choice(np.array([0x8000, 0x8000, 0x7FFF, 0x8001], np.uint32), shape)
    return np.where(rng.random(shape) < 0.35, f32(base + offset), x).astype(np.float32)


def gemm(fn, a, b, bias=None, nr: int = 16, c_pad: int = 3, sentinel: float = -7.0) -> np.ndarray:
    """C = a @ b + bias by the kernel; C is a view into rows ``c_pad`` wider, whose extra columns
    must keep ``sentinel``."""
    M, K = a.shape
    N = b.shape[1]
    packed = bf16gemm.pack_b(b, nr)
    full = np.full((M, N + c_pad), sentinel, np.float32)
    keep = None if bias is None else np.ascontiguousarray(bias, np.float32)
    bias_ptr = None if keep is None else keep.ctypes.data
    fn(M, N, K, a.ctypes.data, a.strides[0] // 4, packed.ctypes.data, bias_ptr, full.ctypes.data, N + c_pad)
    assert (full[:, N:] == sentinel).all(), "the kernel wrote outside C"
    return full[:, :N]


def assert_same_bits(actual, expected) -> None:
    """Equal bit patterns (so -0.0 != +0.0), except that any NaN equals any NaN."""
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    assert actual.shape == expected.shape
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan)
    bad = (actual.view(np.uint32) != expected.view(np.uint32)) & ~nan
    assert not bad.any(), (f"{bad.sum()} of {bad.size} differ, first at {np.argwhere(bad)[0]}: "
                           f"{actual[bad][:4]} != {expected[bad][:4]}")


def check(fn, a, b, bias=None, **kw) -> np.ndarray:
    out = gemm(fn, a, b, bias, **kw)
    assert_same_bits(out, bf16gemm.reference(a, b, bias))
    return out


PATHS = list(TARGETS)
# (M, N, K): odd K (1, 3, 5, 63, 257), M = 1, M past the row tile (8), N past the panel and the
# tile, leftover rows whose wide tiles cross N.
SHAPES = [(1, 1, 1), (1, 17, 3), (9, 33, 5), (13, 1, 63), (8, 16, 130), (21, 40, 64), (1, 70, 257),
          (17, 33, 257), (2, 200, 31), (11, 130, 2)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_matches_reference_with_and_without_bias(path, threads, M, N, K, rng):
    fn = kernel(path, threads)
    a, b = values(rng, (M, K)), values(rng, (K, N))
    check(fn, a, b)
    check(fn, a, b, bias=values(rng, (N,)))


@pytest.mark.parametrize("path", PATHS)
def test_large_shapes_threads_split_rows_and_columns(path, rng):
    """Big enough for the parallel region (N = 20: rows split, not columns)."""
    for M, N, K in [(150, 100, 301), (203, 20, 1001)]:
        a, b = values(rng, (M, K)), values(rng, (K, N))
        check(kernel(path, 2), a, b, bias=values(rng, (N,)))


@needs_bf16
def test_vector_and_scalar_paths_agree_on_a_big_shape(rng):
    """Beyond what the NumPy emulation does quickly: the two C paths, 2 threads each, K blocks."""
    M, N, K = 96, 136, 4099
    a, b = values(rng, (M, K)), values(rng, (K, N))
    bias = values(rng, (N,))
    vector = gemm(kernel("avx512_bf16", 2), a, b, bias)
    assert_same_bits(vector, gemm(kernel("scalar", 2), a, b, bias))
    assert_same_bits(vector[:3], bf16gemm.reference(a[:3], b, bias))


@needs_bf16
@pytest.mark.parametrize("threads", [1, 2])
def test_tiny_blocks_cross_k_and_row_blocks(threads, rng):
    fn = kernel("avx512_bf16", threads, 16, TINY)
    for M, N, K in [(1, 5, 1), (7, 33, 17), (10, 90, 63), (31, 20, 130), (64, 64, 67), (2, 150, 33)]:
        a, b = values(rng, (M, K)), values(rng, (K, N))
        check(fn, a, b, bias=values(rng, (N,)))
        check(fn, a, b)


@pytest.mark.parametrize("path,nr", [("avx512_bf16", 48), ("scalar", 5)])
def test_other_panel_widths(path, nr, rng):
    fn = kernel(path, 2, nr)
    for M, N, K in [(9, 1, 7), (17, nr + 1, 130), (3, 3 * nr - 1, 64)]:
        a, b = values(rng, (M, K)), values(rng, (K, N))
        check(fn, a, b, bias=values(rng, (N,)), nr=nr)


def special_operands(rng, M: int, N: int, K: int):
    """NaN, +-inf, denormals, +-0 and huge values sprinkled into A, B and bias."""
    a, b, bias = values(rng, (M, K)), values(rng, (K, N)), values(rng, (N,))
    specials = np.array([np.nan, np.inf, -np.inf, 1e-39, -1e-39, 1e-45, -0.0, 0.0, 3e38, -3e38,
                         f32(0x7F800001), f32(0xFFBFFFFF), f32(0x7F7FFFFF), f32(0x00800000), f32(0x807FFFFF)],
                        np.float32)
    for x, share in ((a, 0.02), (b, 0.01), (bias, 0.2)):
        hit = rng.random(x.shape) < share
        x[hit] = rng.choice(specials, hit.sum())
    return a, b, bias


@pytest.mark.parametrize("path", PATHS)
def test_special_values_propagate_like_the_hardware(path, rng):
    """NaN and inf in A (whole rows of NaN or inf), inf in B, inf - inf, inf * 0, overflow to inf,
    denormal A, B and bias read as zero."""
    fn = kernel(path, 2)
    for M, N, K in [(9, 33, 5), (17, 40, 63), (1, 70, 257)]:
        a, b, bias = special_operands(rng, M, N, K)
        check(fn, a, b, bias)
        check(fn, a, b)
    # Hand-made: NaN in A row 0 -> row 0 NaN; +inf in row 1 times positive B -> +inf; -inf and
    # +inf in row 2 -> NaN; 3e38 * 2 overflows; a denormal bias is flushed by the first step.
    a = np.ones((4, 3), np.float32)
    a[0, 1], a[1, 2], a[2, 0], a[2, 2], a[3, 0] = np.nan, np.inf, -np.inf, np.inf, 3e38
    b = np.full((3, 17), 2.0, np.float32)
    bias = np.full(17, 1e-39, np.float32)
    out = check(fn, a, b, bias)
    assert np.isnan(out[0]).all() and np.isnan(out[2]).all() and (out[1] == np.inf).all() and (out[3] == np.inf).all()
    out = check(fn, np.zeros((2, 1), np.float32), np.zeros((1, 17), np.float32), bias)
    assert (out.view(np.uint32) == 0).all(), "a denormal bias is read as +0 (and 0 * 0 added)"


@pytest.mark.parametrize("path", PATHS)
def test_denormals_flushed_and_tiny_results_near_flt_min(path, rng):
    """Denormal inputs read as zero; products and sums at the bottom of the f32 range, where FTZ
    (tininess after rounding) decides, bias around +-FLT_MIN."""
    fn = kernel(path, 1)
    M, N, K = 13, 37, 9
    for scale in (2.0 ** -63, 2.0 ** -66, 2.0 ** -70):
        a = (rng.standard_normal((M, K)) * scale).astype(np.float32)
        b = (rng.standard_normal((K, N)) * 2.0 ** -63).astype(np.float32)
        bias = (rng.choice([-1, 1], N) * (1 + rng.integers(-4, 5, N) * 2.0 ** -23) * 2.0 ** -126).astype(np.float32)
        out = check(fn, a, b, bias)
        assert not (np.abs(out[out != 0]) < 2.0 ** -126).any(), "denormal result"
        check(fn, a, b)
    # Denormal f32 in A and B round to a zero of their sign: the result is the bias.
    a = np.full((3, 4), 1e-39, np.float32)
    b = np.full((4, 5), -1e-40, np.float32)
    b[0, 0] = 1.0
    np.testing.assert_array_equal(check(fn, a, b, np.arange(5, dtype=np.float32)), np.broadcast_to(np.arange(5), (3, 5)))


@pytest.mark.parametrize("path", PATHS)
def test_ftz_decides_tininess_after_rounding(path):
    """bias +-FLT_MIN minus a product of 2^-150 .. 2^-152: tiny (flushed to a zero of its sign)
    exactly when the sum rounded to 24 bits with an unbounded exponent is below FLT_MIN; the tie
    2^-126 - 2^-151 rounds up to FLT_MIN.  (The scalar path's rare FTZ branch decides these.)"""
    m = 2.0 ** -126
    a = np.array([[-1.5 * 2.0 ** -76, 0], [-(2.0 ** -76), 0], [-(2.0 ** -75), 0]], np.float32)
    b = np.array([[2.0 ** -75, 2.0 ** -76, -(2.0 ** -75), -(2.0 ** -76)], [0, 0, 0, 0]], np.float32)
    bias = np.array([m, m, -m, -m], np.float32)
    expected = np.array([[0.0, m, -0.0, -m], [m, m, -m, -m], [0.0, m, -0.0, -m]], np.float32)
    assert_same_bits(bf16gemm.reference(a, b, bias), expected)
    assert_same_bits(check(kernel(path, 1), a, b, bias), expected)


@pytest.mark.parametrize("path", PATHS)
def test_signed_zeros(path):
    """-0 bias plus -0 products stays -0 (even K); odd K's padded step adds +0 * +0: +0."""
    fn = kernel(path, 1)
    bias = np.full(3, -0.0, np.float32)
    a = np.full((2, 2), -0.0, np.float32)
    b = np.ones((2, 3), np.float32)
    assert (check(fn, a, b, bias).view(np.uint32) == 0x80000000).all()
    assert (check(fn, a[:, :1], b[:1], bias).view(np.uint32) == 0).all()


@pytest.mark.parametrize("path", PATHS)
def test_strided_a_and_c(path, rng):
    """A as a column slice of a wider matrix (lda > K); C rows wider than N keep their padding."""
    wide = values(rng, (19, 80))
    a = wide[:, 5:5 + 61]
    b = values(rng, (61, 37))
    check(kernel(path, 2), a, b, values(rng, (37,)), c_pad=11)


@pytest.mark.parametrize("path", PATHS)
def test_rows_never_read_past_their_end(path, rng):
    """The last row of A ends at a page that cannot be read: the conversion of the last 32 k
    (and the pad of odd K) must not load past it."""
    fn = kernel(path, 1)
    for M, N, K in [(1, 17, 5), (9, 33, 131), (3, 16, 1), (2, 40, 32)]:
        with GuardedRows(M, K, np.float32) as a:
            a[:] = values(rng, (M, K))
            check(fn, a, values(rng, (K, N)))


@pytest.mark.parametrize("path", PATHS)
def test_empty_k_gives_bias_and_empty_m_n_do_nothing(path, rng):
    fn = kernel(path, 1)
    bias = values(rng, (20,))
    bias[3] = 1e-39                      # no step reads it: stored as is
    out = gemm(fn, np.zeros((4, 0), np.float32), np.zeros((0, 20), np.float32), bias)
    assert_same_bits(out, np.broadcast_to(bias, (4, 20)))
    out = gemm(fn, np.zeros((4, 0), np.float32), np.zeros((0, 20), np.float32))
    assert (out.view(np.uint32) == 0).all()
    c = np.full((2, 3), 5, np.float32)
    fn(0, 3, 4, 0, 4, 0, 0, c.ctypes.data, 3)
    fn(2, 0, 4, 0, 4, 0, 0, c.ctypes.data, 3)
    assert (c == 5).all()


# -- the contract against the hardware instructions and exact arithmetic -----------------------

HW_PROBE = """\
#include <immintrin.h>
#include <stdint.h>
void t_vdpbf16ps(const float *acc, const uint16_t *a, const uint16_t *b, float *out, long n)
{
  for (long i = 0; i < n; i++)
    _mm512_storeu_ps(out + 16 * i, _mm512_dpbf16_ps(_mm512_loadu_ps(acc + 16 * i),
                     (__m512bh)_mm512_loadu_si512(a + 32 * i), (__m512bh)_mm512_loadu_si512(b + 32 * i)));
}
void t_cvtne2ps(const float *x, uint16_t *out, long n)
{
  for (long i = 0; i < n; i += 32)
    _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i)));
}
"""


@functools.lru_cache(maxsize=None)
def hw_probe():
    lib = compile_c(HW_PROBE, HOST, name="t_bf16_probe")
    return (lib.function("t_vdpbf16ps", [ctypes.c_void_p] * 4 + [ctypes.c_long]),
            lib.function("t_cvtne2ps", [ctypes.c_void_p] * 2 + [ctypes.c_long]))


def random_bf16(rng, n: int, exponents: tuple[int, int]) -> np.ndarray:
    e = rng.integers(*exponents, n).astype(np.uint32)
    return ((rng.integers(0, 2, n).astype(np.uint32) << 15) | (e << 7) | rng.integers(0, 128, n)).astype(np.uint16)


def bf16_pairs_emulated(acc, a, b) -> np.ndarray:
    """vdpbf16ps per the contract: per lane, the odd element's fma, then the even element's."""
    a, b = bf16gemm.from_bf16_bits(a), bf16gemm.from_bf16_bits(b)
    t = bf16gemm.fma_step(acc, a[1::2], b[1::2])
    return bf16gemm.fma_step(t, a[0::2], b[0::2])


@needs_bf16
def test_vdpbf16ps_is_two_fused_steps_odd_first(rng):
    """The instruction on operands that tell the candidate orders apart (products near the
    accumulator's ulp), on every class of value (denormal accumulator and bf16, NaN, inf), and on
    results near FLT_MIN where the FTZ rule decides (tiny after rounding, not before)."""
    dp, _ = hw_probe()
    n = 16 * 2000
    acc = (rng.standard_normal(n) * rng.choice([1.0, 1e3, 1e-3], n)).astype(np.float32)
    a, b = random_bf16(rng, 2 * n, (110, 140)), random_bf16(rng, 2 * n, (110, 140))
    # A quarter of the lanes around FLT_MIN: accumulator +-2^-126 (1 + small), products 2^-126 .. 2^-160.
    low = rng.random(n) < 0.25
    acc[low] = (rng.choice([-1, 1], low.sum()) * (1 + rng.integers(-3, 4, low.sum()) * 2.0 ** -23) * 2.0 ** -126)
    lowp = np.repeat(low, 2)
    a[lowp], b[lowp] = random_bf16(rng, lowp.sum(), (40, 50)), random_bf16(rng, lowp.sum(), (40, 60))
    # Special values scattered everywhere.
    specials = np.array([0x7FC0, 0x7F81, 0xFF80, 0x7F80, 0x0001, 0x8045, 0x0000, 0x8000, 0x0080, 0x7F7F], np.uint16)
    for x in (a, b):
        hit = rng.random(x.shape) < 0.02
        x[hit] = rng.choice(specials, hit.sum())
    hit = rng.random(n) < 0.02
    acc[hit] = rng.choice(np.array([np.nan, np.inf, -np.inf, 1e-39, -1e-39, -0.0, 3.4e38], np.float32), hit.sum())
    # The cases worked out by hand: 2^-126 - 1.5 * 2^-151 is flushed (tiny after rounding to 24
    # bits), 2^-126 - 2^-152 is not (tininess before rounding would flush it); a denormal
    # accumulator is read as 0; a negative tiny result flushes to -0.
    hand = [(2.0 ** -126, 0, 0, 0x99C0, 0x1A00), (2.0 ** -126, 0, 0, 0x9980, 0x1980),
            (1e-39, 0x2000, 0x2000, 0, 0), (0.0, 0x9C80, 0x1C80, 0, 0)]
    for i, (c, a0, b0, a1, b1) in enumerate(hand):
        acc[16 * i], a[32 * i], b[32 * i], a[32 * i + 1], b[32 * i + 1] = c, a0, b0, a1, b1
    out = np.empty_like(acc)
    dp(acc.ctypes.data, a.ctypes.data, b.ctypes.data, out.ctypes.data, n // 16)
    assert_same_bits(out, bf16_pairs_emulated(acc, a, b))
    np.testing.assert_array_equal(out[[0, 16, 32, 48]].view(np.uint32), [0, 0x00800000, 0x00800000, 0x80000000])


@needs_bf16
def test_to_bf16_bits_matches_vcvtne2ps2bf16(rng):
    """Every class of f32 bit pattern: normals, ties, denormals, NaN (signalling and quiet), inf."""
    _, cvt = hw_probe()
    bits = rng.integers(0, 2 ** 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    bits[::3] = (bits[::3] & 0xFFFF0000) | rng.choice(np.array([0x8000, 0x7FFF, 0x8001, 0], np.uint32), bits[::3].size)
    bits[1::7] &= 0x807FFFFF                              # denormals and zeros
    bits[2::7] |= 0x7F800000                              # inf and NaN
    x = f32(bits)
    out = np.empty(x.size, np.uint16)
    cvt(x.ctypes.data, out.ctypes.data, x.size)
    np.testing.assert_array_equal(bf16gemm.to_bf16_bits(x), out)


def exact_step(acc: float, a: float, b: float) -> float:
    """The contract's step in rational arithmetic (finite operands)."""
    def daz(x):
        return Fraction(0) if abs(x) < 2.0 ** -126 else Fraction(x)

    exact = daz(acc) + daz(a) * daz(b)
    if exact == 0:
        both_zero = daz(acc) == 0 and daz(a) * daz(b) == 0
        negative = both_zero and np.signbit(acc) and (np.signbit(a) != np.signbit(b))
        return -0.0 if negative else 0.0
    mag = abs(exact)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    while Fraction(2) ** e > mag:
        e -= 1
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    ulp = Fraction(2) ** (e - 23)                           # 24 bits, unbounded exponent
    q, rem = divmod(mag / ulp, 1)
    q += 1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and q % 2) else 0
    rounded = q * ulp
    if rounded < Fraction(2) ** -126:
        return -0.0 if exact < 0 else 0.0
    if rounded >= Fraction(2) ** 128:
        return -np.inf if exact < 0 else np.inf
    return float(-rounded if exact < 0 else rounded)


def test_fma_step_is_correctly_rounded(rng):
    """The NumPy step (float64 TwoSum + round to odd + FTZ) against rational arithmetic, on sums
    whose parts are far apart (double rounding would show), cancelling, tiny and overflowing."""
    n = 3000
    acc = (rng.standard_normal(n) * 2.0 ** rng.integers(-130, 128, n)).astype(np.float32)
    a = bf16gemm.from_bf16_bits(random_bf16(rng, n, (1, 255)))
    b = bf16gemm.from_bf16_bits(random_bf16(rng, n, (1, 255)))
    near = rng.random(n) < 0.5                               # product within 2^-40 .. 2^10 of acc
    shift = rng.integers(-40, 10, near.sum()).astype(np.float32)
    with np.errstate(all="ignore"):
        b[near] = bf16gemm.from_bf16_bits(bf16gemm.to_bf16_bits(-acc[near] / a[near] * np.float32(2.0) ** shift))
    a[:50] = bf16gemm.from_bf16_bits(bf16gemm.to_bf16_bits(-acc[:50] / 3))
    b[:50] = 3                                               # (nearly) cancelling
    ok = np.isfinite(acc) & np.isfinite(a) & np.isfinite(b)
    got = bf16gemm.fma_step(acc, a, b)
    for i in np.flatnonzero(ok):
        expected = np.float32(exact_step(float(acc[i]), float(a[i]), float(b[i])))
        assert got[i].view(np.uint32) == expected.view(np.uint32), (acc[i], a[i], b[i], got[i], expected)


# -- the NumPy side and the generated text ----------------------------------------------------

def test_bf16_conversions():
    x = f32([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x00012345, 0x80012345,
             0x7F800001, 0xFFA00001, 0x7F800000, 0x80000000, 0x00800000, 0x7FFFFFFF])
    np.testing.assert_array_equal(bf16gemm.to_bf16_bits(x),
                                  [0x3F80, 0x3F82, 0x3F81, 0x3F80, 0x7F80, 0xFF80, 0x0000, 0x8000,
                                   0x7FC0, 0xFFE0, 0x7F80, 0x8000, 0x0080, 0x7FFF])
    assert bf16gemm.to_bf16_bits(np.float32(1.5)).dtype == np.uint16
    u = np.arange(0, 1 << 16, 7, dtype=np.uint16)
    back = bf16gemm.from_bf16_bits(u)
    assert back.dtype == np.float32
    finite = np.isfinite(back) & (np.abs(back) >= 2.0 ** -126) | (back == 0)
    np.testing.assert_array_equal(bf16gemm.to_bf16_bits(back)[finite], u[finite])


@pytest.mark.parametrize("K,N,nr", [(1, 1, 16), (5, 17, 16), (130, 33, 32), (8, 9, 4), (0, 3, 16)])
def test_pack_b_layout(K, N, nr, rng):
    b = values(rng, (K, N))
    packed = bf16gemm.pack_b(b, nr)
    assert packed.dtype == np.uint16 and packed.flags.c_contiguous
    assert packed.size == bf16gemm.packed_size(K, N, nr)
    assert packed.shape == (-(-N // nr), -(-K // 2), nr, 2)
    bits = bf16gemm.to_bf16_bits(b)
    flat = packed.reshape(-1)
    pairs = -(-K // 2)
    for k in range(2 * pairs):
        for n in range(-(-N // nr) * nr):
            expected = bits[k, n] if k < K and n < N else 0
            assert flat[((n // nr * pairs + k // 2) * nr + n % nr) * 2 + k % 2] == expected


def test_isa_and_tiling():
    assert bf16gemm.isa(HOST.replace(features=frozenset({"avx512f", "avx512bw", "avx512_bf16"}))) == "avx512_bf16"
    assert bf16gemm.isa(HOST.replace(features=frozenset({"avx512f", "avx512_bf16"}))) == "scalar"
    assert bf16gemm.isa(TARGETS["scalar"]) == "scalar"
    tiling = bf16gemm.Tiling.for_target(HOST)
    assert (tiling.mr, tiling.nrv) == (8, 2) and [tiling.vecs(r) for r in range(1, 9)] == [8, 8, 5, 4, 3, 2, 2, 2]
    with pytest.raises(ValueError):
        bf16gemm.Tiling(kc=31)
    with pytest.raises(ValueError, match="nr"):
        bf16gemm.pack_b(np.zeros((2, 2), np.float32), 0)


def test_source_text_contract():
    """One-line signature, intrinsics and the ISA guard only on the AVX512_BF16 path, nr the
    vector path cannot load rejected."""
    for path, target in SOURCE_TARGETS.items():
        text = bf16gemm.source("my_bf16gemm", target, threads=2)
        assert ("void my_bf16gemm(long M, long N, long K, const float *A, long lda, const uint16_t *Bp, "
                "const float *bias, float *C, long ldc)\n{") in text
        assert ("_mm512_dpbf16_ps" in text) == (path != "scalar")
        assert ("#error" in text and "__AVX512BF16__" in text) == (path != "scalar")
    with pytest.raises(ValueError, match="multiple of 16"):
        bf16gemm.source("k", SOURCE_TARGETS["avx512_bf16"], nr=8)


@needs_bf16
def test_kernels_share_one_translation_unit(rng):
    """Helpers are guarded: two kernels of one configuration and a scalar one compile together."""
    vector = TARGETS["avx512_bf16"]
    texts = [bf16gemm.source("t_bf16_tu_a", vector, tiling=TINY), bf16gemm.source("t_bf16_tu_b", vector, 2, tiling=TINY),
             bf16gemm.source("t_bf16_tu_c", TARGETS["scalar"])]
    lib = compile_c("\n".join(texts), vector, name="t_bf16_tu")
    a, b = values(rng, (10, 21)), values(rng, (21, 19))
    for name in ("t_bf16_tu_a", "t_bf16_tu_b", "t_bf16_tu_c"):
        check(lib.function(name, ARGTYPES), a, b, values(rng, (19,)))


# -- the AMX-tile path (tdpbf16ps): an error bound, not bits ---------------------------------------

needs_amx = pytest.mark.skipif(not HAS_AMX, reason="host lacks AMX-BF16")


def exact(a, b, bias=None) -> tuple[np.ndarray, np.ndarray]:
    """The exact sum of the bf16-rounded products (float64: each product is exact, and the sums of
    these tests are far from float64's limits) and the sum of their magnitudes."""
    ab = bf16gemm.from_bf16_bits(bf16gemm.to_bf16_bits(a)).astype(np.float64)
    bb = bf16gemm.from_bf16_bits(bf16gemm.to_bf16_bits(b)).astype(np.float64)
    base = np.zeros(b.shape[1]) if bias is None else np.asarray(bias, np.float64)
    with np.errstate(all="ignore"):
        return base + ab @ bb, np.abs(base) + np.abs(ab) @ np.abs(bb)


def check_bound(fn, a, b, bias=None, **kw) -> np.ndarray:
    """C within the float32 error of a K-term sum of the exact products: |C - S| <= (K + 2) 2^-24
    sum |terms|; non-finite outputs exactly where the float64 sum has them (as NaN or the same
    infinity)."""
    out = gemm(fn, a, b, bias, **kw)
    want, mag = exact(a, b, bias)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(out[np.isinf(want)], want[np.isinf(want)])
    err = np.abs(out[finite] - want[finite])
    bound = (a.shape[1] + 2) * 2.0 ** -24 * mag[finite] + 2.0 ** -126
    assert (err <= bound).all(), f"{(err > bound).sum()} outputs out of bound, worst {np.max(err / bound):.2f}x"
    return out


@needs_amx
@pytest.mark.parametrize("threads", [1, 2])
def test_amx_within_float32_error_of_the_exact_sum(threads, rng):
    """Rows past one tile and past a block of 32 (a short last block copied), columns inside a
    panel, across panels and past the 32-column block (edge blocks through the buffer), K odd, a
    partial last K block (its B rows from a zero-padded copy), several K blocks, with and without
    bias; the first row block of each part is whole, so both the in-place and copied A run."""
    fn = kernel("amx", threads)
    assert "_amx_sweep" in bf16gemm.source("t", HOST, threads)
    for M, N, K in [(9, 1, 1), (16, 17, 3), (32, 32, 32), (33, 40, 33), (70, 100, 257), (64, 96, 1000),
                    (45, 33, 64), (100, 130, 31)]:
        a, b = values(rng, (M, K)), values(rng, (K, N))
        check_bound(fn, a, b, values(rng, (N,)))
        check_bound(fn, a, b)


@needs_amx
def test_amx_parts_of_few_rows_are_the_vector_kernels_bits(rng):
    """At most VECTOR_ROWS rows (a batch-1 GEMV) run on the vector sweep: the contract's bits."""
    M = bf16gemm_amx.VECTOR_ROWS
    a, b, bias = values(rng, (M, 200)), values(rng, (200, 70)), values(rng, (70,))
    check(kernel("amx", 1), a, b, bias)
    check(kernel("amx", 1), a[:1], b, bias)


@needs_amx
def test_amx_special_values_and_strides(rng):
    """NaN and inf rows, inf in B, inf - inf and overflow give the float64 sum's NaN / inf; A as a
    column slice (lda > K), C rows wider than N keep their padding; a large shape on 2 threads."""
    fn = kernel("amx", 2)
    a, b, bias = special_operands(rng, 40, 50, 70)
    a[np.abs(a) < 2.0 ** -126] = 0.0          # denormals: read as zero (float64 would not)
    b[np.abs(b) < 2.0 ** -126] = 0.0
    bias[np.abs(bias) < 2.0 ** -126] = 0.0
    a[np.isfinite(a) & (np.abs(a) > 1e38)] = 2.0     # a finite product's overflow is float32's, not float64's
    b[np.isfinite(b) & (np.abs(b) > 1e38)] = 3.0
    bias[np.isfinite(bias) & (np.abs(bias) > 1e38)] = 1.0
    out = check_bound(fn, a, b, bias)
    assert np.isnan(out).any() and np.isinf(out).any()
    wide = values(rng, (50, 300))
    check_bound(fn, wide[:, 7:7 + 259], values(rng, (259, 45)), values(rng, (45,)), c_pad=5)
    check_bound(fn, values(rng, (300, 2000)), values(rng, (2000, 130)), values(rng, (130,)))


@needs_amx
def test_amx_refused_runs_the_vector_kernel(rng):
    """Where the OS does not grant the tile state (built with ``-DTF_AMX_REFUSED`` to act so), the
    host's build runs the vector sweeps: the contract's bits on parts of any size."""
    name = "t_bf16gemm_amx_refused"
    fn = compile_c(bf16gemm.source(name, HOST, threads=2), HOST, name=name,
                   extra_flags=("-DTF_AMX_REFUSED",)).function(name, ARGTYPES)
    for M, N, K in [(33, 40, 33), (70, 100, 257)]:
        a, b = values(rng, (M, K)), values(rng, (K, N))
        check(fn, a, b, values(rng, (N,)))


@needs_amx
def test_amx_rounds_a_once_in_passes(monkeypatch, rng):
    """The AMX entry rounds A to bf16 once into a buffer of at most ``AMX_A_BYTES`` and sweeps it:
    with a small buffer, several passes of rows (the last one short), each C row from its own."""
    monkeypatch.setattr(bf16gemm, "AMX_A_BYTES", 64 * 1024)
    name = "t_bf16gemm_amx_passes"
    fn = compile_c(bf16gemm.source(name, HOST, threads=2), HOST, name=name).function(name, ARGTYPES)
    M, N, K = 150, 70, 300            # 160 pairs a row: passes of 96 rows
    a, b = values(rng, (M, K)), values(rng, (K, N))
    check_bound(fn, a, b, values(rng, (N,)))
    check_bound(fn, a[:, :40], b[:40])
