"""The bf16 convolution (``codegen/c/bf16conv.py``) bit for bit against ``bf16gemm.reference`` on
the im2col matrices (the kernel's stated chain of ``vdpbf16ps`` steps), then the float32 bias,
residual and relu: shapes across the packing's edges (odd K, pixels not a multiple of 16, one
pixel, the direct 1x1), strides, pads, dilation, batches; and the op's float64 reference close."""
from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest

from tensorforge.codegen.c import bf16conv, bf16gemm, bf16gemm_amx, compile_c
from tensorforge.codegen.target import Target
from tensorforge.dialects.graph.base import Window
from tensorforge.dialects.graph.conv import pad_spatial
from tensorforge.dialects.graph.quant import Bf16Conv, bf16_conv_weights

HOST = Target.host()
# The vector kernel's bits are the contract: on an AMX host it is built for the host without AMX;
# the host's own build (AMX tiles, bf16gemm_amx.py) is held to the float64 reference's tolerance.
NO_AMX = HOST.replace(features=HOST.features - {"amx_tile", "amx_int8", "amx_bf16"})
ARGTYPES = ([ctypes.c_long] * 15 + [ctypes.c_void_p] * 2 + [ctypes.c_long] + [ctypes.c_void_p] * 2
            + [ctypes.c_int, ctypes.c_float, ctypes.c_void_p])
SHAPES = [  # (N, C, H, W, O, kh, kw, strides, pads, dilations)
    (1, 3, 9, 9, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),          # K = 27 (odd)
    (2, 16, 7, 9, 33, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),        # direct 1x1, batch 2, 63 pixels
    (1, 8, 11, 10, 17, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1)),       # stride 2
    (1, 5, 9, 9, 9, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2)),          # dilation 2
    (1, 4, 1, 1, 3, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),          # one pixel
    (1, 64, 14, 14, 40, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),      # two K blocks of the sweep? K = 576
]


@functools.lru_cache(maxsize=None)
def kernel(threads: int, target: Target = NO_AMX):
    if bf16gemm.isa(HOST) != bf16gemm.AVX512_BF16:
        pytest.skip("host lacks AVX512_BF16")
    name = f"t_bf16conv_{threads}t_{'amx' if bf16gemm_amx.available(target) else 'vec'}"
    return compile_c(bf16conv.source(name, target, threads), target, name=name).function(name, ARGTYPES)


def im2col(x, kh, kw, strides, pads, dil):
    """(K x P per image, OH, OW) with zero padding, k = (c, i, j)."""
    win = Window((kh, kw), {"strides": strides, "pads": pads, "dilations": dil})
    n, c, h, w = x.shape
    oh, ow = (int(win.out_dim(i, s)) for i, s in enumerate((h, w)))
    xp = pad_spatial(x, win.pads_begin, win.pads_end, 0.0)
    cols = np.zeros((n, c, kh, kw, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            r, s = i * dil[0], j * dil[1]
            cols[:, :, i, j] = xp[:, :, r:r + (oh - 1) * strides[0] + 1:strides[0], s:s + (ow - 1) * strides[1] + 1:strides[1]]
    return cols.reshape(n, c * kh * kw, oh * ow), oh, ow


def cases(rng, shapes=SHAPES):
    """Per shape: the operands, the im2col and the epilogue variants (no residual; a residual with
    NaN and infinities, relu; the same clipped at 6)."""
    for n, c, h, w, o, kh, kw, strides, pads, dil in shapes:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = (rng.standard_normal((o, c, kh, kw)) * 0.2).astype(np.float32)
        bias = rng.standard_normal(o).astype(np.float32)
        cols, oh, ow = im2col(x, kh, kw, strides, pads, dil)
        res = rng.standard_normal((n, o, oh, ow)).astype(np.float32)
        res.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
        wb = bf16_conv_weights(wt)
        for residual, relu, hi in ((None, 0, np.inf), (res, 1, np.inf), (res, 1, 6.0)):
            yield (n, c, h, w, o, kh, kw, strides, pads, dil), x, wt, wb, bias, cols, residual, relu, hi


def run(fn, shape, x, wb, bias, residual, relu, hi) -> np.ndarray:
    n, c, h, w, o, kh, kw, strides, pads, dil = shape
    win = Window((kh, kw), {"strides": strides, "pads": pads, "dilations": dil})
    oh, ow = (int(win.out_dim(i, s)) for i, s in enumerate((h, w)))
    y = np.full((n, o, oh, ow), -7.0, np.float32)
    fn(n, c, h, w, o, kh, kw, *strides, pads[0], pads[1], *dil, oh, ow, x.ctypes.data, wb.ctypes.data,
       wb.shape[1] // 2, bias.ctypes.data, None if residual is None else residual.ctypes.data, relu, hi,
       y.ctypes.data)
    return y


def op_reference(shape, x, wb, bias, residual, relu, hi) -> np.ndarray:
    """The op's float64-summed reference (bf16 operands, one rounding)."""
    kh, kw, strides, pads, dil = shape[5:]
    return Bf16Conv().compute(x, wb, bias, residual, kernel=(kh, kw), strides=strides, pads=pads,
                              dilations=dil, relu=bool(relu), clip_max=None if hi == np.inf else hi)


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_is_the_stated_chain_bit_for_bit(threads):
    fn = kernel(threads)
    for shape, x, wt, wb, bias, cols, residual, relu, hi in cases(np.random.default_rng(5 + threads)):
        n, o = shape[0], shape[4]
        y = run(fn, shape, x, wb, bias, residual, relu, hi)
        for b in range(n):
            want = bf16gemm.reference(wt.reshape(o, -1), cols[b]) + bias.reshape(o, 1)
            if residual is not None:
                want = want + residual[b].reshape(o, -1)
            if relu:
                want = np.where(want < 0, np.float32(0), want)
                want = np.where(want > np.float32(hi), np.float32(hi), want)
            np.testing.assert_array_equal(y[b].reshape(o, -1), want, err_msg=str(shape))
        # and the op's float64-summed reference within bf16 rounding of the inputs
        ref = op_reference(shape, x, wb, bias, residual, relu, hi)
        finite = np.isfinite(ref)
        np.testing.assert_allclose(y[finite], ref[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_amx_build_within_float32_error_of_the_float64_sum(threads):
    """The host's own build (AMX tiles where it has AMX-BF16: a different summation order) on the
    same cases plus output channels past one 32-row block: within float32 rounding of the op's
    float64 reference, the residual's NaN and infinities where they belong."""
    fn = kernel(threads, HOST)
    more = SHAPES + [(1, 32, 10, 10, 70, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
                     (2, 48, 8, 8, 40, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1))]
    for shape, x, wt, wb, bias, cols, residual, relu, hi in cases(np.random.default_rng(9 + threads), more):
        y = run(fn, shape, x, wb, bias, residual, relu, hi)
        ref = op_reference(shape, x, wb, bias, residual, relu, hi)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=str(shape))
        finite = np.isfinite(ref)
        np.testing.assert_array_equal(y[~finite], ref[~finite])
        np.testing.assert_allclose(y[finite], ref[finite], rtol=2e-6, atol=2e-6 * np.abs(ref[finite]).max(),
                                   err_msg=str(shape))
