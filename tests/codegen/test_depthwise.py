"""The depthwise convolution kernel (``codegen/c/depthwise.py``) against torch eager.

Layers are grouped into a few models (one compile each) of several depthwise convolutions on
their own inputs: 3x3, 5x5 and 7x7 kernels, stride 1 and 2, pads 0 to 3, dilation 2, odd and
small maps (7x7 to 112x112), batch 1 and 3 (and a runtime batch), with the epilogues MobileNet
and EfficientNet fuse (bias, ReLU6, ReLU, SiLU, residual add).  Inputs hold NaN and +-Inf: the NaN
and Inf positions of every output must be torch's exactly (a NaN reaches only the outputs whose
window holds it; padding taps are skipped, never multiplied), the finite values must agree
within 1e-4 relative.  Every layer must run on the new kernel (its marker in the model's C,
its description in the kernel's schedule text).
"""
import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import depthwise
from tensorforge.codegen.target import Target

torch = pytest.importorskip("torch")

MARKER = "depthwise direct kernel (depthwise.py)"

# (channels, height, width, kernel, stride, pad, dilation, epilogue)
STATIC = [
    (48, 7, 7, 3, 1, 1, 1, "relu6"),
    (40, 14, 14, 3, 2, 1, 1, "bias"),
    (32, 15, 15, 3, 2, 1, 1, "relu"),
    (24, 15, 15, 5, 1, 2, 1, "silu"),
    (24, 14, 14, 5, 2, 2, 1, "relu6"),
    (13, 14, 14, 7, 1, 3, 1, "bias"),
    (23, 15, 15, 7, 2, 3, 1, "relu6"),
    (26, 15, 15, 3, 1, 2, 2, "residual"),
    (16, 15, 13, 3, 1, 0, 1, "relu"),
    (60, 15, 13, 3, 2, 0, 1, "relu6"),
    (4, 112, 112, 3, 1, 1, 1, "residual"),
    (4, 112, 112, 3, 2, 1, 1, "relu6"),
    (24, 9, 40, 5, 2, 1, 2, "bias"),
    (200, 3, 3, 5, 2, 2, 1, "relu6"),
]
BATCH3 = [
    (32, 14, 14, 3, 1, 1, 1, "residual"),
    (20, 15, 15, 5, 2, 2, 1, "relu6"),
    (16, 7, 7, 7, 1, 3, 1, "silu"),
    (8, 56, 56, 3, 2, 1, 1, "bias"),
]


class Layers(torch.nn.Module):
    """Depthwise conv + epilogue on each input; returns every output."""

    def __init__(self, cases):
        super().__init__()
        self.cases = cases
        self.convs = torch.nn.ModuleList([torch.nn.Conv2d(c, c, k, stride=s, padding=p, dilation=d, groups=c,
                                                          bias=epi != "relu")
                                          for c, h, w, k, s, p, d, epi in cases])

    def forward(self, *xs):
        outs = []
        for (c, h, w, k, s, p, d, epi), conv, x in zip(self.cases, self.convs, xs):
            y = conv(x)
            if epi == "relu6":
                y = torch.nn.functional.relu6(y)
            elif epi == "relu":
                y = torch.relu(y)
            elif epi == "silu":
                y = torch.nn.functional.silu(y)
            elif epi == "residual":
                y = y + x
            outs.append(y)
        return tuple(outs)


def _inputs(cases, batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = []
    for c, h, w, *_ in cases:
        x = torch.randn(batch, c, h, w, generator=g)
        x[0, 0, 1, 2] = float("nan")                 # near the top-left border
        x[-1, -1, h - 1, w - 1] = float("inf")       # the last element
        x[0, c // 2, h // 2, w // 2] = -float("inf")  # interior
        x[-1, 1 % c, h // 2, 0] = float("nan")       # left edge
        xs.append(x)
    return xs


def _check(cases, refs, outs):
    for case, r, o in zip(cases, refs, outs):
        r = r.detach().numpy()
        o = o.detach().numpy() if hasattr(o, "detach") else np.asarray(o)
        assert o.shape == r.shape, case
        assert np.array_equal(np.isnan(o), np.isnan(r)), f"{case}: NaN positions differ"
        assert np.array_equal(np.isposinf(o), np.isposinf(r)), f"{case}: +Inf positions differ"
        assert np.array_equal(np.isneginf(o), np.isneginf(r)), f"{case}: -Inf positions differ"
        fin = np.isfinite(r)
        scale = max(1e-30, float(np.abs(r[fin]).max()))
        err = float(np.abs(o[fin] - r[fin]).max()) / scale
        assert err < 1e-4, f"{case}: max relative error {err:.2e}"


def _schedules(cm):
    return cm.native.layout.schedules


def test_depthwise_static_batch1():
    model = Layers(STATIC).eval()
    xs = _inputs(STATIC, 1)
    cm = tensorforge.compile(model, tuple(xs))
    assert cm.source.count(MARKER) == len(STATIC)
    described = [v for v in _schedules(cm).values() if "depthwise direct kernel" in v]
    assert len(described) == len(STATIC)
    # stride 2: input rows split into phase rows, or read in place (AVX-512: depthwise.direct)
    assert any(("read in place" if depthwise.direct((2, 2), Target.host().vector_width) else "phase rows") in v
               for v in described)
    # output rows of at most 16 columns (8 where the row kernel reads its rows in place, 32 for
    # 5x5 kernels and larger) whose staged group of 16 padded planes fits 96 KiB take the
    # channels-in-lanes kernel (depthwise.lanes_source), the others the row-vector kernel
    def lanes(c, h, w, k, s, p, d, _):
        oh, ow = ((n + 2 * p - d * (k - 1) - 1) // s + 1 for n in (h, w))
        staged = ((oh - 1) * s + (k - 1) * d + 1) * ((ow - 1) * s + (k - 1) * d + 1) * 16 * 4
        narrow = 8 if depthwise.direct((s, s), Target.host().vector_width) else 16
        return ow <= (32 if k >= 5 else narrow) and staged <= 96 << 10
    narrow = sum(1 for case in STATIC if lanes(*case))
    assert 0 < narrow < len(STATIC)
    assert sum("channels in the vector lanes" in v for v in described) == narrow
    with torch.no_grad():
        refs = model(*xs)
    _check(STATIC, refs, cm(*xs))
    _check(STATIC, refs, cm(*xs))       # again: scratch and chunk state do not leak between calls


def test_lanes_and_row_kernels_agree(monkeypatch):
    """``TENSORFORGE_DEPTHWISE=rows`` keeps narrow planes on the row-vector kernel: both kernels give
    the same values (to an ulp: the same taps in the same order), NaN and Inf at the same places."""
    cases = [c for c in STATIC if c[2] <= 15 and c[4] == 2]
    model = Layers(cases).eval()
    xs = _inputs(cases, 1, seed=3)
    lanes = tensorforge.compile(model, tuple(xs))
    monkeypatch.setenv(depthwise.ENV, "rows")
    rows = tensorforge.compile(model, tuple(xs))
    assert "channels in the vector lanes" in lanes.source and "channels in the vector lanes" not in rows.source
    for a, b in zip(lanes(*xs), rows(*xs)):
        a, b = np.asarray(a), np.asarray(b)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# wide enough for the row-vector kernel: stride 1 and 2, 3x3 to 7x7, dilation 2, no padding,
# widths that end a row mid-vector and start a vector's taps left of column 0
WIDE = [
    (8, 20, 37, 3, 2, 1, 1, "bias"),
    (8, 12, 50, 3, 1, 1, 1, "bias"),
    (6, 16, 70, 5, 2, 2, 1, "bias"),
    (16, 11, 67, 3, 2, 0, 1, "bias"),
    (4, 13, 72, 3, 2, 2, 2, "relu"),
    (4, 9, 81, 7, 2, 3, 1, "bias"),
    (3, 10, 40, 3, 1, 1, 2, "bias"),
    (4, 9, 33, 5, 1, 2, 1, "relu"),
]


def _tap_chain(case, conv, x):
    """What the row routine computes, emulated: per output ``((0 + t0) + t1) + ...``, one fused
    multiply-add per tap whose input lies inside the image, in (kh, kw) order (the product of two
    floats is exact in float64, the sum rounds once to float32), then the bias or ReLU."""
    c, h, w, k, s, p, d, epi = case
    x = x.numpy().astype(np.float64)
    weights = conv.weight.detach().numpy()[:, 0].astype(np.float64)
    oh, ow = ((n + 2 * p - d * (k - 1) - 1) // s + 1 for n in (h, w))
    acc = np.zeros((x.shape[0], c, oh, ow), np.float32)
    pad = np.zeros((x.shape[0], c, h + 2 * p, w + 2 * p))
    pad[:, :, p:p + h, p:p + w] = x
    rows, cols = np.arange(oh) * s - p, np.arange(ow) * s - p
    for kh in range(k):
        for kw in range(k):
            inside = (((rows + kh * d >= 0) & (rows + kh * d < h))[:, None]
                      & ((cols + kw * d >= 0) & (cols + kw * d < w))[None, :])
            taps = pad[:, :, p + kh * d + rows][:, :, :, p + kw * d + cols]
            summed = (acc + taps * weights[None, :, kh, kw, None, None]).astype(np.float32)
            acc = np.where(inside, summed, acc)
    if epi == "relu":
        return np.maximum(acc, np.float32(0))          # NaN stays NaN, as the kernel's (and torch's) ReLU
    return (acc + conv.bias.detach().numpy()[None, :, None, None]).astype(np.float32)


def test_rows_read_in_place_are_the_tap_chain(monkeypatch):
    """The row routine reading taps straight from the input rows (``depthwise.direct``: AVX-512,
    stride 1 or 2; border lanes loaded under masks, zero outside the image) computes each output
    as the chain of fused multiply-adds over its in-range taps, bit for bit (NaN and Inf
    included), as the staged routine meant to (gcc leaves a few of the staged 5x5 routine's taps
    as a multiply and an add: an ulp apart there)."""
    model = Layers(WIDE).eval()
    xs = _inputs(WIDE, 2, seed=5)
    direct = tensorforge.compile(model, tuple(xs))
    if not depthwise.direct((1, 2), Target.host().vector_width):
        pytest.skip("rows are read in place on AVX-512 only")
    monkeypatch.setenv(depthwise.ENV, "staged")
    staged = tensorforge.compile(model, tuple(xs))
    assert "input rows read in place" in direct.source and "input rows read in place" not in staged.source
    assert direct.source.count(MARKER) == staged.source.count(MARKER) == len(WIDE)
    with torch.no_grad():
        refs = model(*xs)
    outs = direct(*xs)
    _check(WIDE, refs, outs)
    for case, conv, x, a, b in zip(WIDE, model.convs, xs, outs, staged(*xs)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.array_equal(a, _tap_chain(case, conv, x), equal_nan=True), case
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_depthwise_batch3_and_runtime_batch():
    model = Layers(BATCH3).eval()
    xs = _inputs(BATCH3, 3, seed=1)
    with torch.no_grad():
        refs = model(*xs)
    cm = tensorforge.compile(model, tuple(xs))
    assert cm.source.count(MARKER) == len(BATCH3)
    _check(BATCH3, refs, cm(*xs))
    b = torch.export.Dim("b", min=1, max=8)
    dyn = tensorforge.compile(model, tuple(xs), dynamic_shapes=(tuple({0: b} for _ in BATCH3),))
    assert dyn.source.count(MARKER) == len(BATCH3)
    _check(BATCH3, refs, dyn(*xs))
    one = [x[:1].contiguous() for x in xs]
    with torch.no_grad():
        _check(BATCH3, model(*one), dyn(*one))


def test_depthwise_off_switch(monkeypatch):
    """``TENSORFORGE_DEPTHWISE=0`` gives the layer back to the generic path (what benchmarks compare)."""
    cases = [(16, 14, 14, 3, 2, 1, 1, "relu6")]
    model = Layers(cases).eval()
    xs = _inputs(cases, 1)
    monkeypatch.setenv(depthwise.ENV, "0")
    cm = tensorforge.compile(model, tuple(xs))
    assert MARKER not in cm.source
    with torch.no_grad():
        r = model(*xs)[0]
    o = cm(*xs)
    o = o[0] if isinstance(o, (tuple, list)) else o
    fin = np.isfinite(r.numpy())
    assert np.allclose(np.asarray(o)[fin], r.numpy()[fin], rtol=1e-4, atol=1e-5)


def test_shape_geometry():
    """Interior and per-tap column ranges agree with a brute-force check of every tap."""
    for h, w, oh, ow, k, s, d, p in [(15, 15, 8, 8, 3, 2, 1, 1), (9, 40, 2, 17, 5, 2, 2, 1), (7, 7, 7, 7, 7, 1, 1, 3),
                                     (3, 3, 2, 2, 5, 2, 1, 2), (112, 112, 112, 112, 3, 1, 1, 1)]:
        sh = depthwise.DepthwiseShape(h, w, oh, ow, k, k, s, s, d, d, p, p)
        ca, cb = sh.interior_columns()
        for col in range(ow):
            inside = [0 <= col * s + kw * d - p < w for kw in range(k)]
            assert (ca <= col < cb) == all(inside)
            for kw in range(k):
                lo, hi = sh.tap_columns(kw)
                assert (lo <= col < hi) == inside[kw]


def test_non_finite_weight_keeps_zero_padding_semantics_on_the_generic_path():
    """An Inf/NaN weight: ONNX (and torch's dense convolution) multiply the zero padding by it,
    0 * inf = NaN, so every output of that channel whose window covers that tap's padding is NaN.
    The depthwise kernel skips padded taps, so such a layer stays on the generic path
    (``plan_depthwise`` takes a padded layer only when its lowering skips padding exactly).  (torch's
    own grouped kernel skips padded taps too: there torch disagrees with its dense convolution,
    and tensorforge follows the explicit zero padding, as its interpreter does.)"""
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False).eval()
    with torch.no_grad():
        conv.weight[1, 0, 0, 0] = float("inf")
        conv.weight[2, 0, 2, 1] = float("nan")
    x = torch.randn(1, 8, 9, 9)
    cm = tensorforge.compile(conv, (x,))
    assert MARKER not in cm.source
    with torch.no_grad():
        ref = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (1, 1, 1, 1)), conv.weight, groups=8).numpy()
    got = np.asarray(cm(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-4, atol=1e-5)
    assert np.isnan(ref[0, 1, 0]).all() and np.isnan(ref[0, 2]).all()
