"""Signal ops: DFT and STFT as matrix products with constant DFT matrices.

The transform length and axis are import-time constants (given as inputs they are bound by
value when ``tensorforge.compile`` specialises the model), so the cosine and sine matrices are
built here and the products computed in float64 (see ``_compute_type``).  A forward transform
multiplies the real and imaginary parts by ``cos`` and ``-sin``; an inverse one by ``cos`` and
``sin`` over ``n``; a one-sided inverse (irfft) weights the bins that stand for a conjugate
pair twice and ignores the imaginary part of the DC and Nyquist bins, as ``numpy.fft.irfft``
does.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from ...ir.types import DType
from .common import norm_axis
from .context import ImportContext, OnnxNode
from .registry import handles

_MAX_LENGTH = 8192


def _matrices(n_in: int, n: int, bins: int, inverse: bool, onesided_inverse: bool):
    """(real->real, imag->real, real->imag, imag->imag) matrices of shape (n_in, bins): row j is
    input sample (or bin) j, column k output bin (or sample) k."""
    j = np.arange(n_in)[:, None]
    k = np.arange(bins)[None, :]
    theta = 2.0 * np.pi * ((j * k) % n) / n
    cos, sin = np.cos(theta), np.sin(theta)
    if onesided_inverse:                 # rows are the one-sided bins, columns the n output samples
        weight = np.where((j == 0) | ((n % 2 == 0) & (j == n // 2)), 1.0, 2.0) / n
        return cos * weight, -sin * weight, None, None
    if inverse:
        return cos / n, -sin / n, sin / n, cos / n
    return cos, sin, -sin, cos


def _dft_last(ctx: ImportContext, node: OnnxNode, re: Value, im: Value | None, n: int, inverse: bool,
              onesided: bool, dtype: DType) -> tuple[Value, Value | None]:
    """The transform along the last axis of ``re`` (+ i ``im``): (real, imag) parts, imag None for irfft."""
    length = ctx.shape(re)[-1]
    if n < 1 or n > _MAX_LENGTH:
        raise node.unsupported(f"dft_length {n} (supported: 1..{_MAX_LENGTH})")
    onesided_inverse = inverse and onesided
    used = min(length, n // 2 + 1 if onesided_inverse else n)      # samples (or bins) that reach the output
    if used < length:
        last = ctx.rank(re) - 1
        re = ctx.op("slice", re, starts=(0,), ends=(used,), axes=(last,), steps=(1,))
        im = None if im is None else ctx.op("slice", im, starts=(0,), ends=(used,), axes=(last,), steps=(1,))
    bins = n if (inverse or not onesided) else n // 2 + 1
    rr, ir, ri, ii = _matrices(used, n, bins, inverse, onesided_inverse)

    def mm(x: Value, m: np.ndarray) -> Value:
        return ctx.op("matmul", x, ctx.const(m, dtype))
    real = mm(re, rr) if im is None else ctx.op("add", mm(re, rr), mm(im, ir))
    if onesided_inverse:
        return real, None
    imag = mm(re, ri) if im is None else ctx.op("add", mm(re, ri), mm(im, ii))
    return real, imag


def _split_complex(ctx: ImportContext, node: OnnxNode, x: Value) -> tuple[Value, Value | None]:
    """A (..., 1) real or (..., 2) complex tensor as its parts, the last axis removed."""
    last = ctx.rank(x) - 1
    c = ctx.shape(x)[last]
    if c not in (1, 2):
        raise node.unsupported(f"the last dimension must be 1 (real) or 2 (complex), got {c}")

    def part(i: int) -> Value:
        return ctx.op("squeeze", ctx.op("slice", x, starts=(i,), ends=(i + 1,), axes=(last,), steps=(1,)), axes=(last,))
    return part(0), part(1) if c == 2 else None


def _join(ctx: ImportContext, real: Value, imag: Value | None, dtype: DType) -> Value:
    last = ctx.rank(real)
    parts = [ctx.op("unsqueeze", ctx.cast(p, dtype), axes=(last,)) for p in (real, imag) if p is not None]
    return parts[0] if len(parts) == 1 else ctx.op("concat", parts, axis=last)


def _compute_type(dtype: DType) -> DType:
    """float64: the reference computes in double, and near-zero outputs (the imaginary part of an
    inverse transform of a Hermitian spectrum) are compared with an absolute tolerance of 1e-7."""
    return DType.f64


@handles("DFT")
def dft(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    rank = ctx.rank(x)
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if node.opset >= 20:
        av = node.input(2)
        axis = int(ctx.const_scalar(av, "axis")) if av is not None else -2
    else:
        axis = node.attr("axis", 1)
    axis = norm_axis(node, axis, rank)
    if axis == rank - 1:
        raise node.unsupported("the transform axis is the real/imaginary axis")
    shape = ctx.static_shape(x, "DFT")
    lv = node.input(1)
    if lv is not None:
        n = int(ctx.const_scalar(lv, "dft_length"))
    else:
        n = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    dtype = ctx.dtype(x)
    work = _compute_type(dtype)
    re, im = _split_complex(ctx, node, ctx.cast(x, work))
    perm = tuple(a for a in range(rank - 1) if a != axis) + (axis,)
    back = tuple(int(np.argsort(perm)[a]) for a in range(rank - 1))
    moved = perm != tuple(range(rank - 1))
    if moved:
        re = ctx.op("transpose", re, perm=perm)
        im = None if im is None else ctx.op("transpose", im, perm=perm)
    real, imag = _dft_last(ctx, node, re, im, n, inverse, onesided, work)
    if moved:
        real = ctx.op("transpose", real, perm=back)
        imag = None if imag is None else ctx.op("transpose", imag, perm=back)
    return _join(ctx, real, imag, dtype)


@handles("STFT")
def stft(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    step = int(ctx.const_scalar(node.required(1), "frame_step"))
    window, lv = node.input(2), node.input(3)
    onesided = bool(node.attr("onesided", 1))
    if ctx.rank(x) != 3:
        raise node.unsupported(f"the signal must be rank 3 (batch, length, 1|2), got {x.type}")
    batch, length, _ = ctx.static_shape(x, "STFT")
    if lv is not None:
        frame = int(ctx.const_scalar(lv, "frame_length"))
    else:
        frame = ctx.static_shape(window, "STFT")[0] if window is not None else length
    if step < 1 or frame < 1 or frame > length:
        raise node.unsupported(f"frame_step {step} and frame_length {frame} for a signal of length {length}")
    frames = 1 + (length - frame) // step
    dtype = ctx.dtype(x)
    work = _compute_type(dtype)
    index = np.arange(frames)[:, None] * step + np.arange(frame)[None, :]         # (frames, frame)
    framed = ctx.op("gather", ctx.cast(x, work), ctx.const(index, DType.i64), axis=1)   # (B, frames, frame, c)
    re, im = _split_complex(ctx, node, framed)
    if window is not None:
        w = ctx.cast(window, work)
        re = ctx.op("mul", re, w)
        im = None if im is None else ctx.op("mul", im, w)
    real, imag = _dft_last(ctx, node, re, im, frame, False, onesided, work)
    return _join(ctx, real, imag, dtype)


@handles("MelWeightMatrix")
def mel_weight_matrix(ctx: ImportContext, node: OnnxNode) -> Value:
    """A constant: the triangular mel filters of the ONNX definition, evaluated at import from the
    (constant or bound) inputs with the reference's arithmetic, in the inputs' own precision."""
    from .dtypes import to_dtype
    vals = [ctx.require_const(node.required(i), what) for i, what in
            enumerate(("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"))]
    num_mel_bins, dft_length, sample_rate, lower, upper = (np.asarray(v).reshape(()) [()] for v in vals)
    out_code = node.attr("output_datatype", 1)
    dtype = to_dtype(out_code)
    if dtype is None or not dtype.is_float:
        raise node.unsupported(f"output_datatype={out_code}")
    n_mel, n_dft = int(num_mel_bins), int(dft_length)
    if n_mel < 1 or n_dft < 1 or int(sample_rate) <= 0:
        raise node.invalid("num_mel_bins, dft_length and sample_rate must be positive")
    bins = np.arange(0, num_mel_bins + 2)
    low_mel = 2595 * np.log1p(lower / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper / 700) / np.log(10)
    step = (high_mel - low_mel) / bins.shape[0]
    freq = bins * step + low_mel
    freq = 700 * np.expm1(freq / 2595 * np.log(10))
    freq = (((dft_length + 1) * freq) // sample_rate).astype(int)
    table = np.zeros((n_dft // 2 + 1, n_mel))
    for i in range(n_mel):
        left, center, right = int(freq[i]), int(freq[i + 1]), int(freq[i + 2])
        if center == left:
            table[center, i] = 1
        else:
            for j in range(left, center + 1):
                table[j, i] = float(j - left) / float(center - left)
        if right > center:
            for j in range(center, right):
                table[j, i] = float(right - j) / float(right - center)
    return ctx.const(table.astype(dtype.np), dtype)
