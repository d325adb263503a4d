"""The bf16 Winograd F(2x2, 3x3) convolution (``codegen/c/bf16_winograd.py``) bit for bit against its
stated arithmetic, emulated in NumPy: the transformed weights as ``transform_weights`` makes them, the
float32 input transform in the kernel's order of operations, its values rounded to bf16, the 16
products as ``bf16gemm.reference`` chains, the float32 output transform and epilogue.  Shapes across
the kernel's edges: odd channels (a half-empty pair), output channels off the register tile, odd
output sizes (half-used tiles), asymmetric pads, tile rows longer than one vector of 16 tiles and
runs of tiles split between two panels, a batch of 2.  Then its error against float64 next to the
direct bf16 path's, and the compiled model's routing."""
from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest

from tensorforge.codegen.c import bf16_winograd, bf16conv, bf16gemm, compile_c
from tensorforge.codegen.c.winograd import TRANSFORMS
from tensorforge.codegen.target import Target
from tensorforge.dialects.graph.quant import Bf16Conv, bf16_conv_weights
from tensorforge.ir.lowbits import from_bf16_bits

HOST = Target.host()
# The bit-for-bit test builds for the host without AMX (the vector kernel's chains); the others
# run the host's own build, on AMX tiles where it has AMX-BF16 (bf16gemm_amx.py).
NO_AMX = HOST.replace(features=HOST.features - {"amx_tile", "amx_int8", "amx_bf16"})
ARGTYPES = ([ctypes.c_long] * 9 + [ctypes.c_void_p] * 2 + [ctypes.c_long] + [ctypes.c_void_p] * 2
            + [ctypes.c_int, ctypes.c_float, ctypes.c_void_p])
SHAPES = [  # (N, C, H, W, O, pads top, left, bottom, right)
    (1, 16, 14, 14, 24, (1, 1, 1, 1)),         # 49 tiles: 4 panels, the last one 1 tile
    (2, 5, 9, 11, 13, (1, 1, 1, 1)),           # odd C (pair of 1), O off the 8-row tile, odd sizes, batch 2
    (1, 8, 12, 40, 9, (0, 2, 1, 0)),           # asymmetric pads; 20 tiles a row: two vectors, runs over panels
    (1, 64, 7, 7, 16, (1, 1, 1, 1)),           # K of 32 pairs
]


@functools.lru_cache(maxsize=None)
def kernel(threads: int, target: Target = HOST):
    if bf16gemm.isa(HOST) != bf16gemm.AVX512_BF16:
        pytest.skip("host lacks AVX512_BF16")
    name = f"t_bf16conv_w{threads}t_{'host' if target is HOST else 'noamx'}"
    return compile_c(bf16conv.source(name, target, threads), target, name=name).function(f"{name}_winograd", ARGTYPES)


def emulate(x, wb, bias, residual, relu, hi, pads, out_hw):
    """The kernel's result: float32 in the kernel's order of operations, bf16 products as chains."""
    _, BT, AT = TRANSFORMS[2]
    n, c, h, w = x.shape
    o = wb.shape[0]
    oh, ow = out_hw
    th, tw = -(-oh // 2), -(-ow // 2)
    u = from_bf16_bits(bf16_winograd.transform_weights(wb, c)).reshape(16, o, -1)[:, :, :c]
    xp = np.zeros((n, c, 2 * th + 2, 2 * tw + 2), np.float32)
    rows, cols = min(h, 2 * th + 2 - pads[0]), min(w, 2 * tw + 2 - pads[1])
    xp[:, :, pads[0]:pads[0] + rows, pads[1]:pads[1] + cols] = x[:, :, :rows, :cols]

    def comb(coeffs, terms):            # winograd.combination's order: positive terms first, left to right
        parts = sorted(((float(k), t) for k, t in zip(coeffs, terms) if k != 0), key=lambda kt: kt[0] < 0)
        acc = None
        for k, t in parts:
            acc = (t if k > 0 else -t) if acc is None else (acc + t if k > 0 else acc - t)
        return acc

    out = np.empty((n, o, oh, ow), np.float32)
    for b in range(n):
        # patches [c, th, tw, 4, 4]; V[e] = (B^T d B)[i, j] down the rows first, then across
        d = np.stack([np.stack([xp[b, :, 2 * ty:2 * ty + 4, 2 * tx:2 * tx + 4] for tx in range(tw)], 1)
                      for ty in range(th)], 1)
        t = [comb(BT[i], [d[..., r, :] for r in range(4)]) for i in range(4)]
        v = np.stack([comb(BT[j], [t[i][..., q] for q in range(4)]) for i in range(4) for j in range(4)])
        m = np.stack([bf16gemm.reference(u[e], v[e].reshape(c, -1)) for e in range(16)]).reshape(16, o, th, tw)
        s = [[comb(AT[r], [m[4 * i + j] for i in range(4)]) for j in range(4)] for r in range(2)]
        y = np.empty((o, 2 * th, 2 * tw), np.float32)
        for r in range(2):
            for cc in range(2):
                y[:, r::2, cc::2] = comb(AT[cc], s[r])
        y = y[:, :oh, :ow] + bias.reshape(o, 1, 1)
        if residual is not None:
            y = y + residual[b]
        if relu:
            y = np.where(y < 0, np.float32(0), y)
            y = np.where(y > np.float32(hi), np.float32(hi), y)
        out[b] = y
    return out


def run(fn, x, wb, bias, residual, relu, hi, pads, o):
    n, c, h, w = x.shape
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    u = bf16_winograd.transform_weights(wb, c)
    y = np.full((n, o, oh, ow), -7.0, np.float32)
    fn(n, c, h, w, o, pads[0], pads[1], oh, ow, x.ctypes.data, u.ctypes.data, bf16_winograd.ustride(c),
       bias.ctypes.data, None if residual is None else residual.ctypes.data, relu, hi, y.ctypes.data)
    return y, (oh, ow)


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_is_the_stated_arithmetic_bit_for_bit(threads):
    fn = kernel(threads, NO_AMX)
    rng = np.random.default_rng(11 + threads)
    for n, c, h, w, o, pads in SHAPES:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wb = bf16_conv_weights((rng.standard_normal((o, c, 3, 3)) * 0.2).astype(np.float32))
        bias = rng.standard_normal(o).astype(np.float32)
        oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
        res = rng.standard_normal((n, o, oh, ow)).astype(np.float32)
        res.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
        for residual, relu, hi in ((None, 0, np.inf), (res, 1, np.inf), (res, 1, 6.0), (None, 0, 6.0)):
            y, out_hw = run(fn, x, wb, bias, residual, relu, hi, pads, o)
            want = emulate(x, wb, bias, residual, relu, hi, pads, out_hw)
            np.testing.assert_array_equal(y, want, err_msg=f"{(n, c, h, w, o, pads, relu, hi)}")


def conv64(x, w, bias, pads):
    """float64 3x3 stride-1 convolution, the exact reference."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((n, w.shape[0], oh, ow)) + bias.reshape(1, -1, 1, 1)
    for i in range(3):
        for j in range(3):
            y += np.einsum("oc,nchw->nohw", w[:, :, i, j].astype(np.float64), xp[:, :, i:i + oh, j:j + ow])
    return y


def test_error_is_of_the_direct_bf16_paths_order():
    """Against float64 over ResNet-like layers, the Winograd error stays within 3x that of rounding
    the direct path's operands to bf16 (the op's float64-summed reference; measured 1.2-1.8x)."""
    fn = kernel(2)
    rng = np.random.default_rng(3)
    for c, hw in ((64, 28), (128, 14)):
        x = np.maximum(rng.standard_normal((1, c, hw, hw)), 0).astype(np.float32)
        wt = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        bias = (rng.standard_normal(c) * 0.1).astype(np.float32)
        wb = bf16_conv_weights(wt)
        y, _ = run(fn, x, wb, bias, None, 0, np.inf, (1, 1, 1, 1), c)
        exact = conv64(x, wt, bias, (1, 1, 1, 1))
        direct = Bf16Conv().compute(x, wb, bias, None, kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1),
                                    dilations=(1, 1))
        scale = np.abs(exact).max()
        err_w = np.sqrt(np.mean((y - exact) ** 2)) / scale
        err_d = np.sqrt(np.mean((direct - exact) ** 2)) / scale
        assert 0 < err_w <= 3 * err_d and err_w < 2e-3, (c, hw, err_w, err_d)


def test_nan_reaches_the_direct_outputs_and_stays_in_their_tiles():
    """A NaN input reaches every output whose window holds it, and (the transforms mixing each
    4x4 patch, docs/numerics.md) no output outside the 2x2 tiles whose patch holds it."""
    fn = kernel(2)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 8, 14, 14)).astype(np.float32)
    x[0, 3, 6, 9] = np.nan          # padded (7, 10): patches of tiles ty 2..3, tx 4..5
    wb = bf16_conv_weights((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32))
    y, _ = run(fn, x, wb, np.zeros(8, np.float32), None, 0, np.inf, (1, 1, 1, 1), 8)
    nan = np.isnan(y[0])
    assert nan[:, 5:8, 8:11].all()
    outside = np.ones((14, 14), bool)
    outside[4:8, 8:12] = False
    assert not nan[:, outside].any()


def test_compiled_model_routes_3x3_layers_by_winograd(monkeypatch, one_test_without_amx):
    """``precision="bf16"``: a 3x3 stride-1 layer over 14x14 runs by Winograd (``explain`` says so),
    the strided one and the 7x7 one stay direct, ``TENSORFORGE_BF16_WINOGRAD=0`` turns it off; the
    outputs near float32.  On an AMX host for the host without AMX: with AMX-BF16 every layer takes
    the direct path (the next test)."""
    torch = pytest.importorskip("torch")
    import tensorforge
    from tensorforge.quantization import bf16
    from tensorforge.report.collect import collect
    if not bf16.supported():
        pytest.skip("this CPU has no avx512_bf16")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 3, padding=1, stride=2), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 16, 3, padding=1)).eval()
    x = torch.randn(1, 16, 14, 14)
    cm = tensorforge.compile(model, (x,), precision="bf16")
    calls = [line for line in cm.source.splitlines() if "tf_bf16conv_winograd(1, " in line]
    assert len(calls) == 1 and "tf_bf16conv_winograd(1, 16, 14, 14, 32," in calls[0], calls
    schedules = [c.schedule for c in collect(cm.module, "t").code]
    assert sum("bf16 Winograd F(2x2, 3x3)" in s for s in schedules) == 1, schedules
    assert sum("bf16 vdpbf16ps GEMM" in s for s in schedules) == 2, schedules
    with torch.no_grad():
        want = model(x).numpy()
    got = np.asarray(cm(x))
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
    monkeypatch.setenv("TENSORFORGE_BF16_WINOGRAD", "0")
    off = tensorforge.compile(model, (x,), precision="bf16")
    assert "tf_bf16conv_winograd(1, " not in off.source
    assert np.abs(np.asarray(off(x)) - want).max() <= 2e-2 * np.abs(want).max()


def test_amx_host_runs_every_bf16_conv_direct(monkeypatch):
    """Where the bf16 GEMMs run on AMX tiles the direct path is faster than the transforms: no layer
    takes Winograd, and ``explain`` names the tile instruction."""
    torch = pytest.importorskip("torch")
    import tensorforge
    from tensorforge.codegen.c import bf16gemm_amx
    from tensorforge.report.collect import collect
    if not bf16gemm_amx.available():
        pytest.skip("host lacks AMX-BF16")
    assert not bf16_winograd.fits((3, 3), (1, 1), (1, 1), 14, 14)
    monkeypatch.delenv(bf16_winograd.ENV, raising=False)
    assert bf16_winograd.fits((3, 3), (1, 1), (1, 1), 14, 14, NO_AMX)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 16, 14, 14)
    cm = tensorforge.compile(model, (x,), precision="bf16")
    assert "tf_bf16conv_winograd(1, " not in cm.source
    schedules = [c.schedule for c in collect(cm.module, "t").code]
    assert sum("bf16 AMX-tile (tdpbf16ps) GEMM" in s for s in schedules) == 1, schedules
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(np.asarray(cm(x)) - want).max() <= 2e-2 * np.abs(want).max()
