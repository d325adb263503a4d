"""The int8 convolution computed transposed (``codegen/c/qconv_transposed.py``: output positions
as the GEMM's rows, the weights packed at compile time as its vector operand) against the exact
reference of ``graph.qconv``, bit for bit.

Shapes cross its edges: channels off the 4-byte quad (K padding), output channels off the 16-lane
panel and the 32-column tile, positions off the 8-row tile, 1x1 convs read in place, strided 1x1
(subsampled), padded and strided windows (im2col), batches, int8 and uint8 activations with zero
points, float input quantized in the kernel, and every epilogue form a model gives it (float32,
uint8, residuals float with NaN and infinities or uint8 rounded through uint8 first).  A
quantized model routes its 7x7 layers here and equals the interpreter.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from tensorforge.codegen.c import compile_c, qconv, qconv_transposed, qgemm

from .test_qconv import ARGTYPES, _epilogue_case, residual_case, run
from .test_qgemm import TARGETS, runnable

# (N, C, H, W, O, kh, kw, strides, pads (top, left, bottom, right), dilations)
SHAPES = [
    (1, 64, 7, 7, 64, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),        # a 7x7 1x1, read in place
    (2, 37, 7, 7, 33, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),        # K off the quad, O off the panel, batch 2
    (1, 48, 14, 14, 80, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1)),      # strided 1x1: subsampled
    (1, 24, 14, 14, 72, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1)),      # 3x3 stride 2: im2col
    (1, 16, 7, 7, 130, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),       # 3x3 at 7x7, O = 8 panels + 2
    (1, 8, 5, 3, 17, 2, 3, (1, 2), (0, 1, 1, 0), (2, 1)),         # asymmetric, dilated
    (1, 300, 1, 1, 40, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),       # one position
    (3, 20, 7, 7, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),        # batch 3 folded: 2 + 1 images per thread
    (5, 16, 14, 14, 48, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1)),      # batch 5 folded, subsampled
]


@functools.lru_cache(maxsize=None)
def kernel(signed: bool, threads: int, path: str = "avx512_vnni"):
    """``path``: the GEMM under the transposed layout, "avx512_vnni" or "amx" (AMX tiles)."""
    runnable(path)
    target = TARGETS[path]
    if qgemm.isa(target) != "avx512_vnni":
        pytest.skip("host lacks AVX512-VNNI")
    name = f"t_qconv_t_{path}_{'s8' if signed else 'u8'}_{threads}t"
    return compile_c(qconv.source(name, target, signed, threads), target, name=name).function(f"{name}_transposed",
                                                                                             ARGTYPES)


def _packed(w: np.ndarray):
    """``run``'s ``arrange`` for weights ``w`` (O, C, kh, kw): the transposed kernel's packing."""
    return lambda shifted: qconv_transposed.pack_weights(shifted, w.shape[1], w.shape[2] * w.shape[3])


def _case(rng, shape, signed: bool):
    n, c, h, wd, o, kh, kw = shape[:7]
    lo, hi = (-128, 128) if signed else (0, 256)
    x = rng.integers(lo, hi, (n, c, h, wd)).astype(np.int8 if signed else np.uint8)
    w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
    return x, w, int(rng.integers(lo, hi))


@pytest.mark.parametrize("path", ["amx", "avx512_vnni"])
@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_float_outputs_are_exact(signed, threads, path):
    """Scale and bias to float32 (the kernel's least form: it always has an epilogue)."""
    fn = kernel(signed, threads, path)
    rng = np.random.default_rng(11 + threads + 2 * signed)
    for shape in SHAPES:
        x, w, zp = _case(rng, shape, signed)
        scale = (rng.random(shape[4]) * 1e-3).astype(np.float32)
        bias = rng.standard_normal(shape[4]).astype(np.float32)
        y, ref = run(fn, x, w, zp, shape[7], shape[8], shape[9], (scale, bias, None), arrange=_packed(w))
        np.testing.assert_array_equal(y, ref, err_msg=f"{shape} zp={zp}")


@pytest.mark.parametrize("output", [(0.0, 0), (3.0, 17)], ids=["f32", "u8"])
@pytest.mark.parametrize("residual", [None, "f32", "u8"])
def test_epilogues_are_exact(output, residual):
    """relu6, a float residual with NaN and infinities or a uint8 one rounded through uint8 first (a
    QDQ block's tail), then float32 or the next layer's uint8."""
    fn = kernel(False, 2)
    rng = np.random.default_rng(29)
    for n, c, h, wd, o, kh, kw, strides, pads, dil in SHAPES:
        x, w, scale, bias, shape = _epilogue_case(rng, n, c, h, wd, o, kh, kw, strides, pads, dil)
        r, extra = residual_case(rng, residual, shape)
        y, ref = run(fn, x, w, 9, strides, pads, dil, (scale, bias, r), True, output=output, clip_max=6.0,
                     arrange=_packed(w), **extra)
        np.testing.assert_array_equal(y, ref, err_msg=str((n, c, h, wd, o, kh, kw)))


def test_extreme_values_and_float_input():
    """Every byte at its extreme over 4608-deep sums; and float input quantized in the kernel."""
    fn = kernel(False, 2)
    x = np.full((1, 512, 7, 7), 255, np.uint8)
    w = np.full((64, 512, 3, 3), -128, np.int8)
    ones = (np.ones(64, np.float32), np.zeros(64, np.float32), None)
    for zp in (0, 255):
        y, ref = run(fn, x, w, zp, (1, 1), (1, 1, 1, 1), (1, 1), ones, arrange=_packed(w))
        np.testing.assert_array_equal(y, ref)
    rng = np.random.default_rng(41)
    w = rng.integers(-128, 128, (96, 40, 1, 1)).astype(np.int8)
    for batch in (1, 3):                  # one image; a batch folded, each thread quantizing its own
        xf = (rng.standard_normal((batch, 40, 7, 7)) * 40).astype(np.float32)
        xf.flat[:6] = [0.5, 1.5, 2.5, -0.5, 1e6, -1e6]
        y, ref = run(fn, xf, w, 100, (1, 1), (0, 0, 0, 0), (1, 1),
                     (rng.random(96).astype(np.float32), np.zeros(96, np.float32)), input_scale=0.5, arrange=_packed(w))
        np.testing.assert_array_equal(y, ref)


def test_which_layers_take_it():
    fits = qconv_transposed.fits
    assert fits(1, 2048, 7, 7) and fits(1, 64, 7, 7) and fits(1, 512, 1, 1)
    assert not fits(1, 32, 7, 7)          # fewer channels than a few 16-lane panels
    assert not fits(1, 256, 14, 14)       # more positions: the usual orientation measured faster
    assert fits(8, 2048, 7, 7)            # a batch: each thread its images as one GEMM
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(qconv_transposed.ENV, "0")
        assert not fits(1, 2048, 7, 7)


def test_a_quantized_model_runs_its_7x7_layers_transposed():
    """A conv net quantized by tensorforge.quantize: its 7x7 layers call the transposed kernel
    (weights packed at compile time), and the outputs equal the interpreter on the int8 graph."""
    pytest.importorskip("onnx")
    from onnx import helper

    import tensorforge
    from tests.quantization.test_quantize_conv import float_model
    from tensorforge.ir.interpreter import run_function

    kernel(False, 2)                       # skips without AVX512-VNNI
    rng = np.random.default_rng(7)
    inits = {"w0": rng.standard_normal((64, 16, 3, 3)) * 0.2, "b0": rng.standard_normal(64) * 0.1,
             "w1": rng.standard_normal((96, 64, 1, 1)) * 0.2, "b1": rng.standard_normal(96) * 0.1,
             "w2": rng.standard_normal((64, 96, 1, 1)) * 0.2}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r0"], ["y"])]
    model = float_model("net", nodes, inits, [1, 16, 14, 14], {"y": [1, 64, 7, 7]})
    samples = [rng.standard_normal((1, 16, 14, 14)).astype(np.float32) for _ in range(4)]
    q = tensorforge.quantize(model, samples, keep_first_last=False)
    cm = tensorforge.compile(q, threads=2)
    calls = [line for line in cm.source.splitlines() if "_transposed(1, " in line]
    assert len(calls) == 3, calls                      # the three 7x7 layers' kernels call it
    from tensorforge.report.collect import collect
    schedules = [c.schedule for c in collect(cm.module, "t").code]
    assert sum("GEMM transposed" in s for s in schedules) == 3, schedules   # what explain says
    for s in range(3):
        x = np.random.default_rng(100 + s).standard_normal((1, 16, 14, 14)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(cm(x)), run_function(q.main, [x])[0])
