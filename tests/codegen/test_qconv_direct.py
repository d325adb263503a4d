"""The direct int8 convolution (``codegen/c/qconv_direct.py``, stride 1 on channel-quad interleaved
planes) against the exact reference of ``graph.qconv``, bit for bit.

Shapes cross the kernel's edges: channels not a multiple of the quad (padded channels), output
channels not a multiple of the 8-row tile, output rows shorter and longer than the 48-position
tile (a tile over several rows, a row over several tiles), grids whose last tile runs past the
plane (the slack), dilation, asymmetric and over-wide padding, 5x5 windows, batches, int8 and
uint8 activations with zero points, float input quantized in the kernel, and every output form
(int32 sums, float32, uint8, with residuals).  The same layers compiled without the direct path
(``TENSORFORGE_QCONV_DIRECT=0``) give the same bytes.  On an AMX host the direct kernel is not
used (the AMX GEMM path is faster), so these tests build with the host's AMX features turned off.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from tensorforge.codegen.c import compile_c, qconv, qconv_direct, qgemm

from .test_qconv import ARGTYPES, _epilogue_case, residual_case, run
from .test_qgemm import TARGETS, runnable

# (N, C, H, W, O, kh, kw, pads (top, left, bottom, right), dilations); stride 1, OH * OW >= O
SHAPES = [
    (1, 5, 9, 9, 13, 3, 3, (1, 1, 1, 1), (1, 1)),          # C, O off the quad and the tile
    (2, 8, 12, 20, 16, 3, 3, (1, 1, 1, 1), (1, 1)),        # batch 2, rows of 22 in 48-wide tiles
    (1, 16, 4, 60, 24, 3, 3, (1, 1, 1, 1), (1, 1)),        # rows longer than a tile
    (1, 7, 10, 10, 9, 3, 3, (2, 2, 2, 2), (2, 2)),         # dilation 2
    (1, 12, 11, 11, 40, 5, 5, (2, 2, 2, 2), (1, 1)),       # 5x5
    (1, 4, 6, 7, 5, 2, 3, (0, 1, 1, 0), (1, 1)),           # asymmetric window and pads
    (1, 3, 5, 5, 6, 3, 3, (3, 3, 3, 3), (1, 1)),           # pads wider than the window's reach
    (1, 64, 14, 14, 64, 3, 3, (1, 1, 1, 1), (1, 1)),       # a ResNet layer's shape, smaller map
    (1, 9, 3, 1, 2, 3, 1, (1, 0, 1, 0), (1, 1)),           # one-column image
]


# The direct kernel is for hosts whose int8 GEMM has no AMX tiles (``qconv_direct.enabled``): on an
# AMX host these tests build for the same host with its AMX features turned off.
pytestmark = pytest.mark.usefixtures("host_without_amx")


def _path() -> str:
    path = "avx512_vnni"
    runnable(path)
    if qgemm.isa(TARGETS[path]) != path:
        pytest.skip("host lacks AVX512-VNNI")
    return path


@functools.lru_cache(maxsize=None)
def kernel(signed: bool, threads: int, direct: bool):
    target = TARGETS[_path()]
    name = f"t_qconv_direct_{int(direct)}_{'s8' if signed else 'u8'}_{threads}t"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(qconv_direct.ENV, "1" if direct else "0")
        text = qconv.source(name, target, signed, threads)
    assert (f"{name}_direct_fits" in text) == direct
    return compile_c(text, target, name=name).function(name, ARGTYPES)


def _cases(rng, signed: bool):
    lo, hi = (-128, 128) if signed else (0, 256)
    for n, c, h, wd, o, kh, kw, pads, dil in SHAPES:
        x = rng.integers(lo, hi, (n, c, h, wd)).astype(np.int8 if signed else np.uint8)
        w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
        yield (n, c, h, wd, o, kh, kw, pads, dil), x, w, int(rng.integers(lo, hi))


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_int32_sums_are_exact(signed, threads):
    fn = kernel(signed, threads, True)
    for shape, x, w, zp in _cases(np.random.default_rng(5 + threads + 2 * signed), signed):
        y, ref = run(fn, x, w, zp, (1, 1), shape[7], shape[8])
        assert y.dtype == np.int32
        assert qconv_direct.fits(shape[4], shape[5], shape[6], 1, 1, *ref.shape[2:]), shape   # the direct path ran
        np.testing.assert_array_equal(y, ref, err_msg=f"{shape} zp={zp}")


def test_extreme_values():
    """Every byte at its extreme (the largest products and column terms) over 576-deep sums."""
    fn = kernel(False, 2, True)
    x = np.full((1, 64, 7, 7), 255, np.uint8)
    w = np.full((16, 64, 3, 3), -128, np.int8)
    for zp in (0, 255):
        y, ref = run(fn, x, w, zp, (1, 1), (1, 1, 1, 1), (1, 1))
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("output", [(0.0, 0), (3.0, 17)], ids=["f32", "u8"])
@pytest.mark.parametrize("residual", [None, "f32", "u8"])
def test_epilogues_are_exact(output, residual):
    """scale, bias, relu6, a float residual with NaN and infinities or a uint8 one rounded through
    uint8 first (a QDQ block's tail), then float32 or the next layer's uint8."""
    fn = kernel(False, 2, True)
    rng = np.random.default_rng(31)
    for n, c, h, wd, o, kh, kw, pads, dil in SHAPES[:5]:
        x, w, scale, bias, shape = _epilogue_case(rng, n, c, h, wd, o, kh, kw, (1, 1), pads, dil)
        r, extra = residual_case(rng, residual, shape)
        y, ref = run(fn, x, w, 9, (1, 1), pads, dil, (scale, bias, r), True, output=output, clip_max=6.0, **extra)
        np.testing.assert_array_equal(y, ref, err_msg=str((n, c, h, wd, o, kh, kw)))


def test_float_input_quantized_in_the_kernel():
    fn = kernel(False, 2, True)
    rng = np.random.default_rng(37)
    for n, c, h, wd, o, kh, kw, pads, dil in SHAPES[:4]:
        x = (rng.standard_normal((n, c, h, wd)) * 40).astype(np.float32)
        x.flat[:6] = [0.5, 1.5, 2.5, -0.5, 1e6, -1e6]
        w = rng.integers(-128, 128, (o, c, kh, kw)).astype(np.int8)
        y, ref = run(fn, x, w, 100, (1, 1), pads, dil, input_scale=0.5)
        np.testing.assert_array_equal(y, ref)


def test_same_bytes_as_the_gemm_path():
    """The layers the direct kernel takes, compiled with it switched off: identical uint8 outputs."""
    on, off = kernel(False, 2, True), kernel(False, 2, False)
    rng = np.random.default_rng(43)
    for n, c, h, wd, o, kh, kw, pads, dil in SHAPES:
        x, w, scale, bias, _ = _epilogue_case(rng, n, c, h, wd, o, kh, kw, (1, 1), pads, dil)
        a, _ = run(on, x, w, 3, (1, 1), pads, dil, (scale, bias, None), True, output=(2.0, 11))
        b, _ = run(off, x, w, 3, (1, 1), pads, dil, (scale, bias, None), True, output=(2.0, 11))
        np.testing.assert_array_equal(a, b)


def test_which_layers_take_it():
    """Stride 1, a window of more than one tap, at least as many output positions as channels."""
    fits = qconv_direct.fits
    assert fits(64, 3, 3, 1, 1, 56, 56)             # ResNet's 64@56 3x3
    assert not fits(256, 3, 3, 1, 1, 14, 14)        # 196 positions for 256 channels: the GEMM path
    assert not fits(64, 3, 3, 2, 2, 28, 28)         # strided
    assert not fits(64, 1, 1, 1, 1, 56, 56)         # 1x1: its packing is the input itself


def test_compile_time_arrangement_matches_the_kernels():
    """``arrange_weights`` lays the weights out as the C function does per call: the arranged entry
    and the plain one give the same bytes (a 14x14 layer with more channels than positions)."""
    import ctypes

    from tensorforge.dialects.graph.quant import qconv_weights

    _path()
    target = TARGETS["avx512_vnni"]
    name = "t_qconv_direct_arranged"
    lib = compile_c(qconv.source(name, target, False, 2), target, name=name)
    arranged = lib.function(f"{name}_arranged", [ctypes.c_long] * 13 + ARGTYPES[15:])
    rng = np.random.default_rng(47)
    for c, size, o, k in [(13, 14, 40, 3), (32, 16, 90, 3), (6, 12, 5, 5)]:
        assert qconv_direct.arranged_fits(k, k, 1, 1, 1, size, size)
        x, w, scale, bias, _ = _epilogue_case(rng, 1, c, size, size, o, k, k, (1, 1), (k // 2,) * 4, (1, 1))
        _, ref = run(kernel(False, 2, False), x, w, 5, (1, 1), (k // 2,) * 4, (1, 1), (scale, bias, None), True,
                     output=(2.0, 11))
        shifted, sums = qconv_weights(w)
        words = qconv_direct.arrange_weights(shifted, c, k * k)
        y = np.zeros_like(ref)
        arranged(1, c, size, size, o, k, k, k // 2, k // 2, 1, 1, size, size, x.ctypes.data, 0.0, words.ctypes.data,
                 sums.ctypes.data, 5, scale.ctypes.data, bias.ctypes.data, None, None, 1, float("inf"), 0.0, 0, 1.0, -0.0,
                 0.0, -0.0, 2.0, 11, y.ctypes.data)
        np.testing.assert_array_equal(y, ref)


def test_which_layers_arrange_their_weights():
    assert qconv_direct.arranged_fits(3, 3, 1, 1, 1, 14, 14)          # 82% of a 16-wide grid's tiles are outputs
    assert not qconv_direct.arranged_fits(3, 3, 1, 1, 1, 7, 7)        # 51%: the GEMM path
    assert not qconv_direct.arranged_fits(3, 3, 2, 2, 1, 28, 28)      # strided


def test_a_quantized_model_runs_its_3x3_layers_on_arranged_weights():
    """``tensorforge.quantize`` then ``compile``: the 3x3 stride-1 convs call the arranged entry,
    their weights replaced in the blob by the arranged copy, and the outputs equal those of the
    same model built without the direct kernel."""
    torch = pytest.importorskip("torch")
    import tensorforge

    _path()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(16, 24, 3, 1, 1), torch.nn.ReLU(), torch.nn.Conv2d(24, 40, 3, 1, 1),
                            torch.nn.ReLU(), torch.nn.Conv2d(40, 8, 1)).eval()
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 16, 14, 14)).astype(np.float32) for _ in range(3)]
    x = torch.from_numpy(samples[0])
    q = tensorforge.quantize(m, samples, (x,), keep_first_last=False)
    cm = tensorforge.compile(q, (x,), threads=2)
    assert cm.source.count("_arranged(") >= 2
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(qconv_direct.ENV, "0")
        plain = tensorforge.compile(q, (x,), threads=2)
    assert "_arranged(" not in plain.source
    for s in samples:
        np.testing.assert_array_equal(np.asarray(cm(s)), np.asarray(plain(s)))
    from tensorforge.report.collect import collect       # what explain says of each kernel
    schedules = [c.schedule for c in collect(cm.module, "t").code]
    assert sum("int8 direct convolution" in s and "arranged at compile time" in s for s in schedules) == 2
    assert any("int8 1x1 with a short K" in s for s in schedules)           # the 1x1 (40 channels)


def test_explain_says_when_the_weights_are_arranged_per_call():
    """A 7x7 map: 51% of the tiles' grid are outputs, too few for compile-time arrangement, but the C
    entry's own rule (49 positions for 24 channels) still takes the direct kernel."""
    torch = pytest.importorskip("torch")
    import tensorforge
    from tensorforge.report.collect import collect

    _path()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(16, 24, 3, 1, 1), torch.nn.ReLU()).eval()
    rng = np.random.default_rng(1)
    samples = [rng.standard_normal((1, 16, 7, 7)).astype(np.float32) for _ in range(3)]
    q = tensorforge.quantize(m, samples, (torch.from_numpy(samples[0]),), keep_first_last=False)
    cm = tensorforge.compile(q, (torch.from_numpy(samples[0]),), threads=2)
    schedules = [c.schedule for c in collect(cm.module, "t").code]
    assert any("int8 direct convolution" in s and "arranged per call" in s for s in schedules), schedules
    assert not any("arranged at compile time" in s for s in schedules)
