"""The storage-only element types: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float4 (E2M1) and the
4-/2-bit integers.  One place states each format; the reference semantics of a cast to it
(``graph.cast``), the printer's bit patterns and the C emitter's conversion routine read it here.

Values of these types are held in their ``DType.compute_type`` (f32 for the float formats, i8/u8
for the small ints; see ``DType.is_storage_only``), always exactly on the format's grid, so a
cast *from* them is exact and only a cast *to* them rounds:

- float8/float4: round to nearest even on the format's grid (subnormals included); values past
  the largest finite one (after rounding) and infinities saturate to +-max when ``saturate`` (the
  ONNX default; float4 always saturates), otherwise become inf (E5M2) or NaN (the formats without
  inf).  NaN stays NaN (float4 has none: NaN becomes a zero of the opposite sign, as ml_dtypes
  and the ONNX reference do); the FNUZ formats have no negative zero.
- float8 E8M0 (``E8M0``: unsigned powers of two 2^-127..2^127, 0xFF is NaN, no zero, no inf): the
  ONNX rule on the f32 bits of x (inputs of other types are first rounded to f32): the sign is
  dropped, the biased exponent is kept and rounded up when the mantissa is not zero (round_mode
  'up', the ONNX default), except past 2^127 when ``saturate``; NaN and inf become NaN, and so does
  a round-up past 2^127 without ``saturate``.  0 (and every f32 below 2^-126) becomes 2^-127 or
  2^-126.
- 4-/2-bit ints: a float truncates toward zero and gives 0 when out of range (NaN included); an
  integer wraps around modulo 2^bits (ml_dtypes, which the ONNX reference uses).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .types import DType


@dataclass(frozen=True)
class FloatFormat:
    ebits: int
    mbits: int
    bias: int
    max: float
    has_inf: bool          # E5M2: the all-ones exponent holds inf/NaN as in IEEE
    fnuz: bool             # one NaN (0x80), no negative zero, no inf
    has_nan: bool = True   # float4 E2M1 has neither inf nor NaN

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def nbits(self) -> int:
        return 1 + self.ebits + self.mbits


FLOAT_FORMATS: dict[DType, FloatFormat] = {
    DType.f8e4m3fn: FloatFormat(4, 3, 7, 448.0, False, False),
    DType.f8e4m3fnuz: FloatFormat(4, 3, 8, 240.0, False, True),
    DType.f8e5m2: FloatFormat(5, 2, 15, 57344.0, True, False),
    DType.f8e5m2fnuz: FloatFormat(5, 2, 16, 57344.0, False, True),
    DType.f4e2m1: FloatFormat(2, 1, 1, 6.0, False, False, has_nan=False),
}
E8M0 = DType.f8e8m0
# the float formats whose values are bit patterns of one byte (the printer's hex, dense data)
BYTE_FLOATS = frozenset(FLOAT_FORMATS) | {E8M0}
INT_FORMATS: dict[DType, int] = {DType.i4: 4, DType.u4: 4, DType.i2: 2, DType.u2: 2}   # bits


def round_float(x: np.ndarray, dtype: DType, saturate: bool = True) -> np.ndarray:
    """``x`` (any float or int array) rounded onto the grid of the float format ``dtype``, as f32."""
    f = FLOAT_FORMATS[dtype]
    with np.errstate(all="ignore"):
        x64 = np.asarray(x).astype(np.float64)
        ax = np.abs(x64)
        _, e = np.frexp(ax)
        e = np.maximum(e.astype(np.int64) - 1, f.emin)
        q = np.ldexp(1.0, e - f.mbits)
        r = np.rint(ax / q) * q                      # exact: q is a power of two
        r = np.where(np.isinf(ax), np.inf, r)
        over = r > f.max
        if saturate or not f.has_nan:
            big = f.max
        else:
            big = np.inf if f.has_inf else np.nan
        r = np.where(over, big, r)
        neg = np.signbit(x64)
        r = np.where(neg, -r, r)
        if f.fnuz:
            r = np.where(r == 0, 0.0, r)
        nan = np.isnan(x64)
        if f.has_nan:
            r = np.where(nan, np.nan, r)
        else:
            r = np.where(nan, np.where(neg, 0.0, -0.0), r)
    return r.astype(np.float32)


E8M0_ROUND_MODES = ("up", "down", "nearest")


def round_e8m0(x: np.ndarray, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` rounded onto the E8M0 grid, as f32: ``2^(e - 127)`` or NaN.  ``round_mode`` 'up'
    rounds up any nonzero mantissa, 'down' keeps the exponent, 'nearest' rounds up when the
    mantissa's top bit is set and (the next bit, any lower bit, or a nonzero exponent) is,
    as the ONNX reference (``onnx.numpy_helper.to_float8e8m0``) does."""
    bits = np.ascontiguousarray(np.asarray(x).astype(np.float32)).view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int64)
    special = e == 0xFF
    if round_mode == "up":
        up = (bits & 0x7FFFFF) != 0
    elif round_mode == "down":
        up = np.zeros(bits.shape, bool)
    elif round_mode == "nearest":
        up = ((bits & 0x400000) != 0) & (((bits & 0x200000) != 0) | ((bits & 0x1FFFFF) != 0) | (e > 0))
    else:
        raise ValueError(f"E8M0 round_mode must be one of {E8M0_ROUND_MODES}, got {round_mode!r}")
    up &= ~special
    if saturate:
        up &= e != 0xFE
    e = e + up
    with np.errstate(all="ignore"):
        out = np.ldexp(np.float64(1.0), e - 127)
    return np.where(e == 0xFF, np.nan, out).astype(np.float32)


def to_small_int(x: np.ndarray, dtype: DType) -> np.ndarray:
    """``x`` converted to the 4-/2-bit integer ``dtype`` (held as int8/uint8)."""
    lo, hi = dtype.int_range
    x = np.asarray(x)
    if x.dtype.kind == "f":
        with np.errstate(all="ignore"):
            t = np.trunc(x.astype(np.float64))
            ok = (t >= lo) & (t <= hi)
            out = np.where(ok, t, 0).astype(np.int64)
    else:
        bits = INT_FORMATS[dtype]
        out = x.astype(np.int64) & ((1 << bits) - 1)
        if lo < 0:
            out = np.where(out > hi, out - (1 << bits), out)
    return out.astype(dtype.np)


def convert(x: np.ndarray, dtype: DType, saturate: bool = True, round_mode: str | None = None) -> np.ndarray:
    """A cast to the storage-only ``dtype`` (not bf16) as the held array (``round_mode``: E8M0)."""
    if dtype in FLOAT_FORMATS:
        return round_float(x, dtype, saturate)
    if dtype is E8M0:
        return round_e8m0(x, saturate, round_mode or "up")
    return to_small_int(x, dtype)


# ---- bit patterns (the printer's hex and dense_resource data) ------------------------------------
def _decode_table(dtype: DType) -> np.ndarray:
    if dtype is E8M0:
        with np.errstate(all="ignore"):
            vals = np.ldexp(np.float64(1.0), np.arange(256) - 127)
        return np.where(np.arange(256) == 0xFF, np.nan, vals).astype(np.float32)
    f = FLOAT_FORMATS[dtype]
    vals = []
    for b in range(1 << f.nbits):
        s, e, m = b >> (f.nbits - 1), (b >> f.mbits) & ((1 << f.ebits) - 1), b & ((1 << f.mbits) - 1)
        top = e == (1 << f.ebits) - 1
        if f.fnuz and b == 1 << (f.nbits - 1):
            v = np.nan
        elif f.has_inf and top:
            v = np.inf if m == 0 else np.nan
        elif not f.has_inf and not f.fnuz and f.has_nan and top and m == (1 << f.mbits) - 1:
            v = np.nan
        elif e == 0:
            v = m * 2.0 ** (f.emin - f.mbits)
        else:
            v = (1 + m / 2 ** f.mbits) * 2.0 ** (e - f.bias)
        vals.append(-v if s else v)
    return np.array(vals, dtype=np.float32)


_TABLES: dict[DType, np.ndarray] = {}


def _table(dtype: DType) -> np.ndarray:
    t = _TABLES.get(dtype)
    if t is None:
        t = _TABLES[dtype] = _decode_table(dtype)
    return t


def decode(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """Bit patterns -> held values (f32 for the float formats; sign-extended ints)."""
    bits = np.asarray(bits).astype(np.int64)
    if dtype in BYTE_FLOATS:
        return _table(dtype)[bits & 0xFF]
    n = INT_FORMATS[dtype]
    v = bits & ((1 << n) - 1)
    if dtype.int_range[0] < 0:
        v = np.where(v >= 1 << (n - 1), v - (1 << n), v)
    return v.astype(dtype.np)


def encode(held: np.ndarray, dtype: DType) -> np.ndarray:
    """Held values (on the grid) -> bit patterns as uint8."""
    held = np.asarray(held)
    if dtype not in BYTE_FLOATS:
        return (held.astype(np.int64) & ((1 << INT_FORMATS[dtype]) - 1)).astype(np.uint8)
    table = _table(dtype)
    keys = table.view(np.uint32)
    order = np.argsort(keys, kind="stable")
    v = np.ascontiguousarray(held, dtype=np.float32)
    if dtype in FLOAT_FORMATS and FLOAT_FORMATS[dtype].fnuz:
        v = np.where(v == 0, np.float32(0), v)
    look = v.view(np.uint32)
    pos = np.clip(np.searchsorted(keys[order], look), 0, len(order) - 1)
    out = order[pos].astype(np.uint8)
    nan_bits = int(np.flatnonzero(np.isnan(table))[0]) if np.isnan(table).any() else 0
    return np.where(np.isnan(v), np.uint8(nan_bits), out).astype(np.uint8)


__all__ = ["BYTE_FLOATS", "from_bf16_bits", "to_bf16_bits", "E8M0", "E8M0_ROUND_MODES", "FLOAT_FORMATS", "INT_FORMATS", "FloatFormat", "convert", "decode", "encode", "round_float",
           "round_e8m0", "to_small_int"]


# ---- bf16 as the AVX512_BF16 instructions see it ---------------------------------------------
def to_bf16_bits(x) -> np.ndarray:
    """float32 values as uint16 bf16 bits, exactly as ``vcvtne2ps2bf16`` rounds them: to nearest
    even, NaN truncated and quieted, f32 denormals to a zero of their sign, overflow to inf."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    exponent = u & 0x7F800000
    nan = (exponent == 0x7F800000) & ((u & 0x007FFFFF) != 0)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = np.where(nan, (u >> 16) | 0x40, np.where(exponent == 0, (u >> 16) & 0x8000, rounded))
    return out.astype(np.uint16)


def from_bf16_bits(u) -> np.ndarray:
    """uint16 bf16 bits as float32 (exact; denormal bits stay denormal floats)."""
    return (np.asarray(u, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
