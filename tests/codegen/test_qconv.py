"""The int8 convolution generator (``codegen/c/qconv.py``) against the exact int64 reference of
``graph.qconv`` (``dialects/graph/quant.py``).

Every comparison is bit-exact, on the three code paths of ``qgemm`` (512-bit VNNI, 256-bit AVX-VNNI,
the plain C loop) and one and two threads.  Shapes cross the edges of the packing: K = C*kh*kw not
a multiple of 4, output pixels not a multiple of the 16-pixel panel (and a single pixel), the 1x1
stride-1 conv that packs straight from the input, strides, asymmetric pads, dilation, batches,
uint8 and int8 activations with non-zero zero points, padding wider than the kernel reach, output rows
shorter than a panel (a panel's pixels on several rows of the stride-1 packer).  The float32
epilogue (scale, bias, residual, relu) is bit-exact too: the same float32 operations in the same
order as the reference.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest

from tensorforge.codegen.c import compile_c, qconv, qgemm
from tensorforge.dialects.graph.quant import QConv, qconv_weights

from .test_qgemm import HOST, TARGETS, runnable

EPILOGUE_ARGTYPES = ([ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_float] + [ctypes.c_float, ctypes.c_int32]
                     + [ctypes.c_float] * 4 + [ctypes.c_float, ctypes.c_int32, ctypes.c_void_p])
ARGTYPES = ([ctypes.c_long] * 15 + [ctypes.c_void_p, ctypes.c_float] + [ctypes.c_void_p] * 2 + [ctypes.c_int32]
            + EPILOGUE_ARGTYPES)

# (N, C, H, W, O, kh, kw, strides, pads (top, left, bottom, right), dilations)
SHAPES = [
    (1, 3, 8, 8, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),          # K = 27
    (2, 16, 7, 9, 33, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),        # 1x1 direct, P = 63, batch 2
    (1, 5, 11, 10, 17, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1)),       # stride 2
    (1, 7, 9, 9, 20, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2)),         # dilation 2
    (1, 3, 20, 20, 8, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1)),        # a ResNet stem
    (1, 64, 14, 14, 64, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),      # P = 196
    (1, 6, 5, 5, 4, 2, 3, (1, 2), (0, 1, 1, 0), (1, 1)),          # asymmetric everything
    (1, 9, 1, 1, 3, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),          # one pixel, mostly padding
    (1, 4, 6, 6, 7, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1)),          # 1x1 stride 2 (not direct)
    (1, 2, 4, 4, 3, 3, 3, (1, 1), (4, 4, 4, 4), (1, 1)),          # pads beyond the kernel's reach
    (1, 16, 3, 5, 9, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),         # 5-pixel rows: 4 runs per panel
    (1, 5, 14, 14, 7, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),        # 1x1, K = 5: packed four panels at a time
    (1, 6, 20, 20, 9, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1)),        # ... subsampled (P = 100)
]


def epilogue_pointers(epilogue) -> list:
    """The kernels' scale, float bias, int32 bias and residual pointers for an epilogue tuple
    (scale, bias, residual), shorter or empty: an int32 bias goes to the sums (``acc_bias``)."""
    scale, bias, residual = (tuple(epilogue) + (None, None, None))[:3]
    integer = bias is not None and bias.dtype == np.int32
    return [None if a is None else a.ctypes.data
            for a in (scale, None if integer else bias, bias if integer else None, residual)]


@functools.lru_cache(maxsize=None)
def kernel(path: str, signed: bool, threads: int):
    runnable(path)
    target = TARGETS[path]
    assert qgemm.isa(target) == ("avx512_vnni" if path == "amx" else path)
    name = f"t_qconv_{path}_{'s8' if signed else 'u8'}_{threads}t"
    return compile_c(qconv.source(name, target, signed, threads), target, name=name).function(name, ARGTYPES)


def run(fn, x, w, zp, strides, pads, dilations, epilogue=None, relu=False, input_scale=0.0, output=(0.0, 0),
        clip_max=None, mid=(0.0, 0, 1.0, -0.0), residual8=(0.0, -0.0), arrange=None):
    """(kernel's output, reference); ``epilogue``: (scale, bias, residual or None) for float32 out;
    ``input_scale``: ``x`` is float32, quantized in the kernel; ``output``: (scale, zero point) of
    a uint8 result; ``mid``: (requant scale, zero point, dequant scale, offset) of the uint8 round
    trip before the residual; ``residual8``: (scale, offset) of a uint8 residual; ``arrange``: the
    compile-time layout the kernel reads its weights in (a function of ``qconv_weights``' rows)."""
    shifted, sums = qconv_weights(w)
    reference_weights = shifted
    if arrange is not None:
        shifted = arrange(shifted)
    attrs = dict(kernel=w.shape[2:], strides=strides, pads=pads, dilations=dilations, input_scale=input_scale,
                 output_scale=output[0], output_zero_point=output[1], clip_max=clip_max, requant_scale=mid[0],
                 requant_zero_point=mid[1], dequant_scale=mid[2], dequant_offset=mid[3],
                 residual_scale=residual8[0], residual_offset=residual8[1])
    ref = QConv().compute(x, reference_weights, sums, np.int32(zp), *(epilogue or ()), **attrs, relu=relu)
    y = np.full(ref.shape, 7 if ref.dtype == np.uint8 else -7, ref.dtype)
    n, c, h, wd = x.shape
    ptrs = epilogue_pointers(epilogue or ())
    fn(n, c, h, wd, w.shape[0], *w.shape[2:], *strides, pads[0], pads[1], *dilations, *ref.shape[2:],
       x.ctypes.data, input_scale, shifted.ctypes.data, sums.ctypes.data, zp, *ptrs, int(relu),
       float("inf") if clip_max is None else clip_max, *mid, *residual8, *output, y.ctypes.data)
    return y, ref


def test_reference_is_the_integer_convolution():
    """The op's reference against a direct loop: padding holds the zero point (adds nothing)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 2, 5, 4)).astype(np.uint8)
    w = rng.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8)
    zp = 131
    shifted, sums = qconv_weights(w)
    assert shifted.shape == (3, 20) and not shifted[:, 18:].any()       # K = 18 padded to 20 with 0
    y = QConv().compute(x, shifted, sums, np.int32(zp), kernel=(3, 3), pads=(1, 1, 1, 1))
    xp = np.pad(x.astype(np.int64) - zp, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for o in range(3):
        for i in range(5):
            for j in range(4):
                assert y[0, o, i, j] == (xp[0, :, i:i + 3, j:j + 3] * w[o].astype(np.int64)).sum()


@pytest.mark.parametrize("path", ["amx", "avx512_vnni", "avx_vnni", "scalar"])
@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_is_bit_exact(path, signed, threads):
    fn = kernel(path, signed, threads)
    rng = np.random.default_rng(17 + threads + 2 * signed)
    for n, c, h, wd, o, kh, kw, strides, pads, dil in SHAPES:
        lo, hi = (-128, 128) if signed else (0, 256)
        x = rng.integers(lo, hi, (n, c, h, wd)).astype(np.int8 if signed else np.uint8)
        w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
        zp = int(rng.integers(lo, hi))
        y, ref = run(fn, x, w, zp, strides, pads, dil)
        np.testing.assert_array_equal(y, ref, err_msg=f"{(n, c, h, wd, o, kh, kw, strides, pads, dil)} zp={zp}")


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
def test_extreme_values_wrap_like_int32(signed):
    """All-extreme activations and weights: the largest sums, still exact (K = 576 < 2^16)."""
    fn = kernel("avx512_vnni" if qgemm.isa(TARGETS["avx512_vnni"]) == "avx512_vnni" else "scalar", signed, 1)
    x = np.full((1, 64, 6, 6), -128 if signed else 255, np.int8 if signed else np.uint8)
    w = np.full((16, 64, 3, 3), -128, np.int8)
    y, ref = run(fn, x, w, 127 if signed else 0, (1, 1), (1, 1, 1, 1), (1, 1))
    np.testing.assert_array_equal(y, ref)


def _epilogue_case(rng, n, c, h, wd, o, kh, kw, strides, pads, dil):
    """uint8 x, int8 w, per-channel scale and bias, and the output shape of one epilogue case."""
    x = rng.integers(0, 256, (n, c, h, wd)).astype(np.uint8)
    w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
    scale = (rng.random(o) * 1e-3).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    shape = QConv().compute(x, *qconv_weights(w), np.int32(0), kernel=(kh, kw), strides=strides, pads=pads,
                            dilations=dil).shape
    return x, w, scale, bias, shape


def residual_case(rng, kind: str | None, shape) -> tuple:
    """(residual, run's extra arguments) of a block tail: None; "f32", float with NaN and both
    infinities; "u8", uint8 with the conv's value rounded through uint8 first (a QDQ block's tail)."""
    if kind == "f32":
        r = rng.standard_normal(shape).astype(np.float32)
        r.reshape(-1)[[0, 5, 9]] = [np.nan, np.inf, -np.inf]
        return r, {}
    if kind == "u8":
        return (rng.integers(0, 256, shape).astype(np.uint8),
                dict(mid=(1 / 0.05, 12, 0.05, -12 * 0.05), residual8=(0.03, -3.0)))
    return None, {}


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("relu", [False, True, 6.0], ids=["none", "relu", "relu6"])
@pytest.mark.parametrize("output", [(0.0, 0), (3.0, 17)], ids=["f32", "u8"])
@pytest.mark.parametrize("int_bias", [False, True], ids=["f32-bias", "i32-bias"])
def test_float_epilogue_is_bit_exact(residual, relu, output, int_bias):
    """The epilogue against graph.qconv's reference; an int32 bias is added to the sums first."""
    path = "avx512_vnni" if qgemm.isa(TARGETS["avx512_vnni"]) == "avx512_vnni" else "scalar"
    fn = kernel(path, False, 2)
    rng = np.random.default_rng(23)
    for n, c, h, wd, o, kh, kw, strides, pads, dil in SHAPES[:3]:
        x, w, scale, bias, shape = _epilogue_case(rng, n, c, h, wd, o, kh, kw, strides, pads, dil)
        if int_bias:
            bias = rng.integers(-30000, 30000, o).astype(np.int32)
        r = rng.standard_normal(shape).astype(np.float32) if residual else None
        if r is not None:              # non-finite values pass relu, the clip and the quantize as in the graph
            r.reshape(-1)[[0, 3, 7]] = [np.nan, np.inf, -np.inf]
        y, ref = run(fn, x, w, 5, strides, pads, dil, (scale, bias, r), bool(relu), output=output,
                     clip_max=relu if relu not in (False, True) else None)
        assert y.dtype == (np.uint8 if output[0] else np.float32)
        np.testing.assert_array_equal(y, ref)
        if relu and not output[0]:
            assert (y[~np.isnan(y)] >= 0).all()
        if output[0]:
            assert len(np.unique(y)) > 10                      # the requantized values are spread


@pytest.mark.parametrize("vector", ["amx", "avx512_vnni", False], ids=["amx", "avx512", "plain-c"])
@pytest.mark.parametrize("output", [(0.0, 0), (0.7, 3)], ids=["f32", "u8"])
@pytest.mark.parametrize("relu", [True, False], ids=["relu", "no-relu"])
def test_qdq_residual_block_epilogue_is_bit_exact(vector, output, relu):
    """A QDQ ResNet block's tail in the epilogue: the conv's float result rounded through uint8 and
    dequantized, a uint8 residual dequantized and added, relu (none: MobileNetV2's blocks), the
    next layer's quantize; the AVX-512 epilogue (after the AMX GEMM or the VNNI one) and the plain C one (compiled without AVX-512)
    against the reference."""
    target = TARGETS[vector or "avx512_vnni"]
    if vector:
        runnable(vector)
    if vector and qgemm.isa(target) != "avx512_vnni":
        pytest.skip("host lacks AVX512-VNNI")
    name = f"t_qconv_block_{vector or 'c'}"
    flags = () if vector else ("-mno-avx512f",)
    if not vector:
        target = TARGETS["scalar"]
    fn = compile_c(qconv.source(name, target, False, 2), target, name=name, extra_flags=flags).function(name, ARGTYPES)
    rng = np.random.default_rng(41)
    for n, c, h, wd, o, kh, kw, strides, pads, dil in SHAPES[:3] + SHAPES[5:6]:
        x, w, scale, bias, shape = _epilogue_case(rng, n, c, h, wd, o, kh, kw, strides, pads, dil)
        r = rng.integers(0, 256, shape).astype(np.uint8)
        y, ref = run(fn, x, w, 7, strides, pads, dil, (scale, bias, r), relu, output=output,
                     mid=(1 / 0.05, 12, 0.05, -12 * 0.05), residual8=(0.03, -0.03 * 100))
        np.testing.assert_array_equal(y, ref)
        assert len(np.unique(y)) > 10


# 1x1 stride-1 convs the register-sum kernel takes (``tf_qconv_short_k``: padded K <= 160): the
# last group of 64 pixels holding 1, 2, 3 and 4 vectors, a K not a multiple of 4, output channels
# not a multiple of the 4-row tile, images small enough that the channels are split among the
# tasks, K 96 and 150.
SHORT_K = [(1, 16, 1, 70, 33, 16), (1, 24, 5, 7, 18, 16), (2, 7, 7, 7, 9, 1), (1, 32, 4, 30, 96, 5),
           (1, 16, 28, 28, 14, 2), (1, 96, 24, 24, 24, 0), (1, 150, 32, 17, 7, 3)]


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("epilogue", ["u8-relu", "u8-int-bias", "f32-residual", "u8-block", "f32-input"])
def test_short_k_pointwise_is_bit_exact(signed, threads, epilogue):
    """The register-sum kernel with each epilogue variant it instantiates (uint8 with relu, the int32
    bias of QDQ models, float32 with a float residual, a QDQ block's tail), and with float32 input
    quantized in the kernel first, against the reference."""
    if signed and epilogue == "f32-input":
        pytest.skip("float input is quantized to uint8 only")
    path = "avx512_vnni" if qgemm.isa(TARGETS["avx512_vnni"]) == "avx512_vnni" else "scalar"
    fn = kernel(path, signed, threads)
    rng = np.random.default_rng(53 + threads + 2 * signed)
    lo, hi = (-128, 128) if signed else (0, 256)
    for n, c, h, wd, o, zp in SHORT_K:
        x = rng.integers(lo, hi, (n, c, h, wd)).astype(np.int8 if signed else np.uint8)
        w = rng.integers(-128, 128, (o, c, 1, 1)).astype(np.int8)
        zp = zp - 64 if signed else zp
        scale = (rng.random(o) * 1e-3).astype(np.float32)
        bias = rng.standard_normal(o).astype(np.float32)
        if epilogue == "u8-int-bias":
            bias = rng.integers(-30000, 30000, o).astype(np.int32)
        r = rng.standard_normal((n, o, h, wd)).astype(np.float32) if epilogue == "f32-residual" else None
        kw = {}
        if epilogue == "u8-block":
            r = rng.integers(0, 256, (n, o, h, wd)).astype(np.uint8)
            kw = dict(mid=(1 / 0.05, 12, 0.05, -12 * 0.05), residual8=(0.03, -0.03 * 100))
        output = (0.0, 0) if epilogue == "f32-residual" else (3.0, 17)
        if epilogue == "f32-input":
            x, kw = (rng.standard_normal((n, c, h, wd)) * 40).astype(np.float32), dict(input_scale=0.5)
        y, ref = run(fn, x, w, zp, (1, 1), (0, 0, 0, 0), (1, 1), (scale, bias, r), epilogue == "u8-relu",
                     output=output, **kw)
        np.testing.assert_array_equal(y, ref, err_msg=f"{(n, c, h, wd, o)}")
        assert len(np.unique(y)) > 10


def test_compiles_and_runs_without_openmp():
    """The kernels built without -fopenmp (a target whose flags lack it): every OpenMP call has a
    serial branch (a stray expression there once broke this build only)."""
    path = "avx512_vnni" if qgemm.isa(TARGETS["avx512_vnni"]) == "avx512_vnni" else "scalar"
    target = TARGETS[path]
    target = target.replace(cflags=tuple(f for f in target.cflags if f != "-fopenmp"))
    name = "t_qconv_no_openmp"
    fn = compile_c(qconv.source(name, target, False, 1), target, name=name).function(name, ARGTYPES)
    rng = np.random.default_rng(59)
    for n, c, h, wd, o, zp in SHORT_K[:2]:
        x = rng.integers(0, 256, (n, c, h, wd)).astype(np.uint8)
        w = rng.integers(-128, 128, (o, c, 1, 1)).astype(np.int8)
        scale = (rng.random(o) * 1e-3).astype(np.float32)
        y, ref = run(fn, x, w, zp, (1, 1), (0, 0, 0, 0), (1, 1), (scale, rng.standard_normal(o).astype(np.float32), None),
                     True, output=(3.0, 17))
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("path", ["avx512_vnni", "scalar"])
def test_float_input_quantized_in_the_kernel(path):
    """``input_scale``: float32 activations (with values past both ends of the uint8 range, and
    exact halves that round to even) quantized per image inside the kernel, as ``quantize_u8``."""
    fn = kernel(path, False, 2)
    rng = np.random.default_rng(29)
    for n, c, h, wd, o, kh, kw, strides, pads, dil in SHAPES[:4]:
        x = (rng.standard_normal((n, c, h, wd)) * 40).astype(np.float32)
        x.flat[:8] = [0.5, 1.5, 2.5, -0.5, 1e6, -1e6, 127.5, 3.0]
        w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
        y, ref = run(fn, x, w, 100, strides, pads, dil, input_scale=0.5)
        np.testing.assert_array_equal(y, ref)


DW_ARGTYPES = ([ctypes.c_long] * 14 + [ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p,
                                      ctypes.c_int32] + EPILOGUE_ARGTYPES)


@functools.lru_cache(maxsize=None)
def depthwise_kernel(signed: bool, threads: int, vbmi: bool = True):
    """``vbmi`` False compiles without AVX512-VBMI: the wide 3x3 layers take the float loops instead
    of the byte-permute vpdpbusd form (``qconv.DW_VNNI_MIN_WIDTH``; it needs VBMI and VNNI, hosts
    without them get the float loops)."""
    if vbmi and "avx512vbmi" not in HOST.features:   # -march=native: the host's ISA
        return depthwise_kernel(signed, threads, False)     # the same code on a host without VBMI: build once
    name = f"t_qdwconv_{'s8' if signed else 'u8'}_{threads}t{'' if vbmi else '_novbmi'}"
    text = qconv.depthwise_source(name, signed, threads)
    flags = () if vbmi else ("-mno-avx512vbmi",)
    return compile_c(text, TARGETS["scalar"], name=name, extra_flags=flags).function(name, DW_ARGTYPES)


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("epilogue", ["i32", "relu6", "u8", "u8-relu", "u8-relu6", "u8-int-bias", "f32-input"])
@pytest.mark.parametrize("vbmi", [True, False], ids=["vbmi", "float"])
def test_depthwise_is_bit_exact(signed, threads, epilogue, vbmi):
    """Depthwise qconv (one 3x3 / 5x5 / 7x7 filter per channel; stride 1 and 2 on the flat padded-width
    runs, odd widths and asymmetric pads, dilation on the row loop; small 3x3 planes 16 channels at a
    time, with VBMI in the lanes by vpdpbusd, a group of fewer than 16 last): the integer sums, the float
    epilogue, the requantized uint8 result and float32 input quantized in the kernel, against the reference."""
    if signed and epilogue == "f32-input":
        pytest.skip("float input is quantized to uint8 only")
    fn = depthwise_kernel(signed, threads, vbmi)
    rng = np.random.default_rng(31 + threads)
    for n, c, h, wd, k, strides, pads, dil in [(1, 8, 9, 10, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
                                              (2, 5, 12, 7, 3, (2, 2), (1, 0, 1, 1), (1, 1)),
                                              (1, 3, 11, 11, 5, (1, 1), (2, 2, 2, 2), (1, 1)),
                                              (1, 4, 9, 9, 3, (1, 1), (2, 2, 2, 2), (2, 2)),
                                              (1, 6, 7, 7, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
                                              (2, 40, 7, 7, 3, (1, 1), (1, 1, 1, 1), (1, 1)),  # staged: 16 channels a task
                                              (1, 40, 14, 14, 3, (2, 2), (1, 1, 1, 1), (1, 1)),  # ... stride 2
                                              (1, 19, 14, 14, 3, (1, 1), (1, 1, 1, 1), (1, 1)),  # ... 16 + 3 channels
                                              (1, 5, 14, 13, 5, (2, 2), (2, 2, 2, 2), (1, 1)),
                                              (2, 6, 9, 11, 5, (2, 2), (2, 1, 2, 2), (1, 1)),    # 5x5/2 phase planes
                                              (1, 4, 15, 12, 7, (1, 1), (3, 3, 3, 3), (1, 1)),   # 7x7: a tap row a pass
                                              (1, 3, 13, 16, 7, (2, 2), (3, 2, 3, 3), (1, 1)),
                                              (1, 3, 8, 9, 3, (2, 2), (0, 0, 1, 1), (1, 1)),
                                              (2, 7, 12, 10, 3, (2, 2), (1, 1, 1, 1), (1, 1)),   # same3x3 stride 2
                                              (1, 3, 6, 36, 3, (2, 2), (1, 1, 1, 1), (1, 1)),    # ... rows of 18: kept rows only
                                              (1, 2, 5, 37, 3, (1, 1), (1, 1, 1, 1), (1, 1)),    # 3x3/1, rows of 37
                                              (1, 2, 3, 100, 3, (1, 1), (1, 1, 1, 1), (1, 1)),   # wide: the vpdpbusd form
                                              (1, 3, 4, 98, 3, (2, 2), (1, 1, 1, 1), (1, 1)),    # ... stride 2
                                              (1, 4, 2, 2, 3, (2, 2), (1, 1, 1, 1), (1, 1)),
                                              (1, 4, 1, 1, 3, (1, 1), (1, 1, 1, 1), (1, 1))]:
        lo, hi = (-128, 128) if signed else (0, 256)
        x = rng.integers(lo, hi, (n, c, h, wd)).astype(np.int8 if signed else np.uint8)
        in_scale = 0.0
        if epilogue == "f32-input":
            x, in_scale = (rng.standard_normal((n, c, h, wd)) * 50).astype(np.float32), 0.5
        w = rng.integers(-128, 128, (c, 1, k, k)).astype(np.int8)
        zp = int(rng.integers(lo, hi))
        shifted, sums = qconv_weights(w)
        attrs = dict(kernel=(k, k), strides=strides, pads=pads, dilations=dil, groups=c, input_scale=in_scale,
                     relu=epilogue.endswith(("relu", "relu6")), clip_max=6.0 if epilogue.endswith("relu6") else None,
                     output_scale=0.05 if epilogue.startswith("u8") else 0.0,
                     output_zero_point=9 if epilogue.startswith("u8") else 0)
        ep = () if epilogue == "i32" else ((rng.random(c) * 1e-3).astype(np.float32), rng.standard_normal(c).astype(np.float32))
        if epilogue == "u8-int-bias":
            ep = (ep[0], rng.integers(-3000, 3000, c).astype(np.int32))
        ref = QConv().compute(x, shifted, sums, np.int32(zp), *ep, **attrs)
        y = np.zeros(ref.shape, ref.dtype)
        oh, ow = ref.shape[2:]
        ptrs = epilogue_pointers(ep)
        fn(n, c, h, wd, k, k, *strides, pads[0], pads[1], *dil, oh, ow, x.ctypes.data, in_scale, shifted.ctypes.data,
           shifted.shape[1], sums.ctypes.data, zp, *ptrs, int(attrs["relu"]), attrs["clip_max"] or float("inf"),
           0.0, 0, 1.0, -0.0, 0.0, -0.0, attrs["output_scale"], attrs["output_zero_point"], y.ctypes.data)
        np.testing.assert_array_equal(y, ref, err_msg=f"{(n, c, h, wd, k, strides, pads, dil)}")


def test_portable_c_without_ssse3_is_bit_exact():
    """The packers' plain C branch (no SSSE3: no vector unpacks, the im2col path for every conv),
    compiled with SSSE3 and above switched off, against the same reference."""
    target = TARGETS["scalar"]
    name = "t_qconv_portable_u8"
    fn = compile_c(qconv.source(name, target, False, 1), target, name=name,
                   extra_flags=("-mno-ssse3",)).function(name, ARGTYPES)
    rng = np.random.default_rng(37)
    for n, c, h, wd, o, kh, kw, strides, pads, dil in SHAPES[:6]:
        x = rng.integers(0, 256, (n, c, h, wd)).astype(np.uint8)
        w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
        y, ref = run(fn, x, w, int(rng.integers(0, 256)), strides, pads, dil)
        np.testing.assert_array_equal(y, ref)


def test_explain_names_the_depthwise_form():
    """A quantized model's 3x3 depthwise layers: over planes of at most 196 pixels they run 16
    channels in the vector lanes where the host has VBMI and VNNI (qdepthwise_lanes.applies), over
    wider ones per-channel loops, and explain says which; the outputs stay near the float model's."""
    torch = pytest.importorskip("torch")
    import tensorforge
    from tensorforge.codegen.c import qdepthwise_lanes
    from tensorforge.codegen.target import Target
    from tensorforge.report.collect import collect

    torch.manual_seed(0)
    dw = lambda stride: torch.nn.Conv2d(16, 16, 3, stride, 1, groups=16)
    m = torch.nn.Sequential(dw(1), torch.nn.ReLU6(), dw(2), torch.nn.ReLU6(),     # 16x16, 16 -> 8: 256 pixels
                            dw(1), torch.nn.ReLU6(), dw(2), torch.nn.ReLU6()).eval()  # 8x8, 8 -> 4: 64
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 16, 16, 16)).astype(np.float32) for _ in range(3)]
    x = torch.from_numpy(samples[0])
    cm = tensorforge.compile(tensorforge.quantize(m, samples, (x,), keep_first_last=False), (x,), threads=2)
    depthwise = [c.schedule for c in collect(cm.module, "t").code if "int8 depthwise" in c.schedule]
    assert len(depthwise) == 4
    lanes = sum("vector lanes" in s for s in depthwise)
    assert sum("per-channel flat loops" in s for s in depthwise) == 4 - lanes
    assert lanes == (2 if qdepthwise_lanes.FEATURES <= Target.host().features else 0)
    with torch.no_grad():
        ref = m(x).numpy().ravel()
    got = np.asarray(cm(samples[0])).ravel()
    assert np.dot(got, ref) / (np.linalg.norm(got) * np.linalg.norm(ref)) > 0.99
