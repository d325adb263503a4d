"""The ways a convolution reaches the GEMM micro-kernels (``tensorize.py``): im2col per image,
im2col with the batch folded into N, the direct stride-1 kernel (``direct_conv.py``) and Winograd
F(2x2, 3x3) and F(4x4, 3x3) (``winograd.py``).

Each case is forced onto each algorithm through the tuning hook (``GemmParams.conv_algorithm``, as
a tuning record would) and compared with float64 torch within 1e-4 relative; the fused epilogue
(bias, ReLU, clip, residual add) must see the right rows and columns in every algorithm, which the
folded (epilogue per image segment) and direct (epilogue per output row segment) paths rearrange.
"""
import dataclasses

import numpy as np
import pytest

from tensorforge.codegen.c import direct_conv
from tensorforge.codegen.c.build import build_native
from tensorforge.codegen.c.microkernels import GemmParams
from tensorforge.codegen.target import Target
from tensorforge.tune.apply import Tuning

from tests.codegen.test_tensorize import _epilogue_kernel_module

torch = pytest.importorskip("torch")

# The default choices below were measured on AVX-512 (16 lanes, 32 vector registers) and are
# checked for its register shape on any host (without AVX-512 the generated C's vectors are generic
# and run all the same); with AVX2's 16 registers no transposed direct tile holds two vectors of
# channels, so the usual direct kernel stays (``Tensorizer._direct_transposed_ok``).
AVX512 = Target.host().replace(vector_width=16, vector_registers=32)
AVX2 = Target.host().replace(vector_width=8, vector_registers=16)

MARKERS = {"im2col": ", 1, 0);", "fold": "tf_fold_scatter, &fctx", "direct": "_unit(&shape",
           "direct_t": "_rows(&shape",
           "winograd": "the 16 products M_e", "winograd4": "the 36 products M_e", "transposed": "trans_c=True"}


def forced_algorithm(algorithm: str, mr: int = 6, nr: int | None = None) -> Tuning:
    """A tuning (as compile gets from a database) whose record for every kernel names ``algorithm``."""
    target = Target.host()
    params = GemmParams.for_target(target, threads=2, mr=mr, nr=nr or 4 * target.vector_width,
                                   pack_a=False, conv_algorithm=algorithm)
    return Tuning(lambda key: {"kind": "gemm", "params": dataclasses.asdict(params)}, target)


# (batch, channels, height, width, out channels, kernel, pads (top, left), dilation, stride)
CASES = [
    (3, 5, 9, 11, 7, (3, 3), (1, 1), 1, 1),      # odd sizes: edge rows, edge columns, several panels
    (2, 4, 7, 7, 13, (3, 3), (1, 1), 2, 1),      # dilation
    (2, 3, 6, 10, 4, (5, 3), (2, 1), 1, 1),      # non-square kernel
    (4, 6, 5, 5, 9, (3, 3), (0, 0), 1, 1),       # no padding
    (8, 64, 7, 7, 40, (3, 3), (1, 1), 1, 1),     # big enough for 2 threads; folded: few chunks, one threaded GEMM
    # strided (the direct kernel's polyphase split): odd and even sizes, a stem-like 7x7/2, the
    # 1x1/2 subsample, stride 3 with dilation, and an input larger than the windows reach
    (2, 5, 11, 9, 7, (3, 3), (1, 1), 1, 2),
    (2, 3, 20, 18, 10, (7, 7), (3, 3), 1, 2),
    (2, 32, 10, 10, 24, (1, 1), (0, 0), 1, 2),
    (2, 8, 13, 14, 16, (3, 2), (2, 1), 2, 3),
    (2, 8, 12, 12, 16, (3, 3), (0, 0), 1, 2),
]


def _case(n, c, h, w, o, k, pads, dil, stride, clip_last=False):
    kh, kw = k
    oh = (h + 2 * pads[0] - dil * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pads[1] - dil * (kw - 1) - 1) // stride + 1
    out = (n, o, oh, ow)

    def body(x, wt, b, oc, y, xx, ci, a, bb):
        return x.read([b, ci, y * stride + a * dil - pads[0], xx * stride + bb * dil - pads[1]], pad=0.0) * wt[oc, ci, a, bb]

    contraction = (out, out + (c, kh, kw), "pppprrr", body)
    m, wt, bias = _epilogue_kernel_module((n, c, h, w), (o, c, kh, kw), contraction, 1, 2.0, clip_last)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    res = rng.standard_normal(out, dtype=np.float32)
    conv = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(wt, dtype=torch.float64),
                                      padding=pads, dilation=dil, stride=stride).numpy()
    if clip_last:
        want = np.clip(conv + bias[None, :, None, None] + res, 0, 2.0)
    else:
        want = np.minimum(np.maximum(conv + bias[None, :, None, None], 0), 2.0) + res
    return m, (x, res), want, float(np.abs(conv).max())     # the convolution's own scale, before the clip


@pytest.mark.parametrize("algorithm", ["im2col", "fold", "direct", "direct_t", "winograd", "winograd4"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"_k{c[5][0]}{c[5][1]}_d{c[7]}_s{c[8]}")
def test_every_algorithm_matches_torch(algorithm, case):
    m, args, want, scale = _case(*case)
    if algorithm.startswith("winograd") and (case[5] != (3, 3) or case[7] != 1 or case[8] != 1):
        pytest.skip("Winograd F(m x m, 3x3) is for undilated stride-1 3x3 kernels")
    model, src = build_native(m, tuning=forced_algorithm(algorithm))
    assert MARKERS[algorithm] in src, f"{algorithm} was not used"
    got = model.run(list(args))[0]
    # F(4x4, 3x3)'s transform constants (up to 8) cost a few bits: its error is held to 2e-5 of the
    # convolution's own scale (measured 1e-5: 2.4e-4 on sums of 576 unit-normal products reaching 24),
    # every other algorithm to 1e-4 per element
    atol = 2e-5 * scale if algorithm == "winograd4" else 1e-4
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)



@pytest.mark.parametrize("algorithm", ["im2col", "direct", "direct_t"])
def test_epilogue_row_tails_keep_nan_and_inf(algorithm):
    """The fused epilogue runs a row segment's last ``len % 16`` columns as one partial vector
    (masked loads and stores): NaN and infinities in the residual it reads there must come out as
    they went in, and the columns past the segment must stay untouched (11-wide rows: every
    segment has a tail)."""
    m, (x, res), want, _ = _case(2, 5, 11, 11, 7, (3, 3), (1, 1), 1, 1)
    res = res.copy()
    res[0, :, :, 10] = np.nan
    res[1, 2, 3, :] = np.inf
    res[1, 4, :, 9] = -np.inf
    conv = want - _case(2, 5, 11, 11, 7, (3, 3), (1, 1), 1, 1)[1][1]     # the clipped convolution alone
    want = conv + res
    model, src = build_native(m, tuning=forced_algorithm(algorithm))
    assert MARKERS[algorithm] in src
    got = model.run([x, res])[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_small_register_tile_and_many_row_chunks():
    """mr 4 / nr 16 tiles: several row chunks per work unit and many column panels in the direct path."""
    m, args, want, _ = _case(1, 8, 12, 12, 30, (3, 3), (1, 1), 1, 1)
    model, src = build_native(m, tuning=forced_algorithm("direct", mr=4, nr=Target.host().vector_width))
    assert MARKERS["direct"] in src
    np.testing.assert_allclose(model.run(list(args))[0], want, rtol=1e-4, atol=1e-4)


def _plain_conv(n, c, hw, o, stride, k=3):
    from tensorforge.ir import DType, Module, tensor, verify
    rng = np.random.default_rng(0)
    w = rng.standard_normal((o, c, k, k), dtype=np.float32)
    m = Module()
    f = m.add_function("main", [tensor((n, c, hw, hw), DType.f32)])
    b = f.builder()
    f.set_return([b.create("graph.conv", [f.args[0], b.graph.constant(w)],
                           {"pads": (k // 2,) * 4, "strides": (stride, stride)}).results[0]])
    verify(m)
    return m


@pytest.mark.parametrize("n, hw, stride, k, expected", [
    (1, 28, 1, 3, "winograd4"),  # 3x3 stride 1 with 49 4x4 output tiles, none padded
    (1, 14, 1, 3, "winograd"),   # 16 4x4 tiles are too few, 49 2x2 tiles are enough
    (8, 7, 1, 3, "winograd"),    # 7x7 layers of a batch: 128 2x2 tiles (4x4 tiles would pad 31% more outputs)
    (1, 7, 1, 3, "direct"),      # one 7x7 image: 16 tiles are too few for Winograd
    (1, 28, 1, 5, "direct"),     # 5x5 stride 1, few garbage columns
    (8, 7, 1, 5, "fold"),        # 5x5 on 7x7 images of a batch: the padded grid wastes 40%, folding 2%
    (8, 14, 2, 3, "fold"),       # strided, 7x7 outputs per image
    # strided, one image: 49 positions pad 64-wide tiles, so the transposed direct kernel on the
    # phase planes (im2col into a transposed GEMM would copy the input 2.25x)
    (1, 14, 2, 3, "direct_t"),
    (1, 14, 2, 1, "im2col+transposed"),     # ... but a 1x1/2 layer keeps the transposed GEMM
    # strided, one image, 28x28 outputs: too many positions for one x_col; the direct kernel's
    # polyphase split copies the input once where im2col copies it 2.25x
    (1, 56, 2, 3, "direct"),
])
def test_default_choice(n, hw, stride, k, expected):
    _, src = build_native(_plain_conv(n, 16, hw, 32, stride, k), target=AVX512)
    chosen = expected.split("+")
    assert all(MARKERS[a] in src for a in chosen)
    assert not any(MARKERS[a] in src for a in MARKERS if a not in chosen)


def test_sixteen_registers_keep_a_strided_window_over_few_outputs_on_im2col():
    """One image's 3x3/2 layer with 7x7 outputs: with 16 registers the transposed direct kernel's
    only tile (14 x 8) is one vector of channels, so im2col into the transposed GEMM runs it."""
    _, src = build_native(_plain_conv(1, 16, 14, 32, 2), target=AVX2)
    assert MARKERS["im2col"] in src and MARKERS["transposed"] in src and MARKERS["direct_t"] not in src


def test_transposed_direct_for_one_image_of_a_small_map():
    """64 output channels of a 7x7 map: the padded grid (9 wide) wastes 23% of a 64-wide tile, 7 x 64
    transposed tiles none (``DIRECT_TRANSPOSED_MARGIN``); a batch of 8 takes Winograd instead.  With
    16 registers the one image keeps the usual direct kernel."""
    _, one = build_native(_plain_conv(1, 64, 7, 64, 1), target=AVX512)
    assert MARKERS["direct_t"] in one and MARKERS["direct"] not in one
    _, batch = build_native(_plain_conv(8, 64, 7, 64, 1), target=AVX512)
    assert MARKERS["direct_t"] not in batch and MARKERS["winograd"] in batch
    _, sixteen = build_native(_plain_conv(1, 64, 7, 64, 1), target=AVX2)
    assert MARKERS["direct"] in sixteen and MARKERS["direct_t"] not in sixteen


def test_transposed_direct_for_one_image_of_a_deep_strided_window():
    """A 3x3/2 layer over 64 channels at 56x56 (K 576, 28x28 outputs, too many for the transposed
    im2col GEMM) takes the transposed direct kernel for one image (``STRIDED_TRANSPOSED_MIN_DEPTH``),
    the usual one with 32 channels (K 288), for a batch and with 16 registers; the outputs match
    torch."""
    m = _plain_conv(1, 64, 56, 64, 2)
    w = next(op for op in m.main.body if op.name == "graph.constant").attributes["value"].array
    x = np.random.default_rng(2).standard_normal((1, 64, 56, 56), dtype=np.float32)
    want = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                      stride=2, padding=1).numpy()
    for target, algorithm in ((AVX512, "direct_t"), (AVX2, "direct")):
        model, one = build_native(m, target=target)
        assert MARKERS[algorithm] in one and all(MARKERS[a] not in one for a in ("direct", "direct_t") if a != algorithm)
        np.testing.assert_allclose(model.run([x])[0], want, rtol=1e-4, atol=1e-3)
    _, shallow = build_native(_plain_conv(1, 32, 56, 64, 2), target=AVX512)
    assert MARKERS["direct"] in shallow and MARKERS["direct_t"] not in shallow
    _, batch = build_native(_plain_conv(2, 64, 56, 64, 2), target=AVX512)
    assert MARKERS["direct_t"] not in batch


def test_winograd4_for_one_image_and_a_batch_alike():
    """F(4x4) wherever it has enough 4x4 tiles, whatever one image's transforms weigh against L2 or
    its weights: ResNet's 64->64 at 56x56 (3.6 MB of transforms per image) and 128->128 at 28x28
    (590 KB of weights) took F(2x2) and the transposed direct kernel for one image until measured
    in whole models (ResNet-18 at batch 1 1.22x with F(4x4))."""
    target = Target.host().replace(l2=1 << 20, cores=2)
    for n, c, hw in ((1, 64, 56), (8, 64, 56), (1, 128, 28), (2, 128, 28), (1, 16, 28)):
        _, src = build_native(_plain_conv(n, c, hw, c, 1), target=target)
        assert MARKERS["winograd4"] in src and MARKERS["direct_t"] not in src, (n, c, hw)


def test_pack_weights_layout():
    w = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)
    p = direct_conv.pack_weights(w, 5, 7, 3)
    assert p.shape == (2, 7, 3)
    assert np.array_equal(p[0], w[:3].T) and np.array_equal(p[1, :, :2], w[3:].T)
    assert not p[1, :, 2].any()                                   # rows past the end are zero


def test_direct_shape_geometry():
    s = direct_conv.DirectShape(64, 7, 7, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1)
    assert (s.padded_h, s.padded_w, s.grid_columns) == (9, 9, 61)
    assert s.panels(64) == 1 and abs(s.waste(64) - (1 - 49 / 64)) < 1e-12
    assert direct_conv.eligible((1, 1), (1, 1)) and direct_conv.eligible((2, 1), (1, 1))
    assert not direct_conv.eligible((1, 1), (-1, 0)) and not direct_conv.eligible((5, 1), (0, 0))
    assert s.phases == ((0, 0),) and s.tap_offsets() == [0, 1, 2, 9, 10, 11, 18, 19, 20]


def test_strided_direct_shape_geometry():
    """3x3/2 at 56x56 (pad 1): four 29x29 phase planes, taps shifted by the phase plane and by one
    row or column of it; a 1x1/2 layer keeps only phase (0, 0), the subsample."""
    s = direct_conv.DirectShape(64, 56, 56, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1)
    assert (s.padded_h, s.padded_w, s.grid_columns) == (29, 29, 27 * 29 + 28)
    assert s.phases == ((0, 0), (0, 1), (1, 0), (1, 1)) and s.plane == 4 * 29 * 29
    q = 29 * 29
    assert s.tap_offsets() == [0, q, 1, 2 * q, 3 * q, 2 * q + 1, 29, q + 29, 30]
    sub = direct_conv.DirectShape(64, 56, 56, 28, 28, 1, 1, 2, 2, 1, 1, 0, 0)
    assert sub.phases == ((0, 0),) and (sub.padded_h, sub.padded_w) == (28, 28) and sub.waste(28 * 28) == 0


def test_tiny_maps_of_a_batch_are_folded():
    """2x2 output maps: one image has too few columns for a register tile (the loop path), eight
    images folded into N have enough (``Tensorizer._worth_conv``)."""
    _, one = build_native(_plain_conv(1, 32, 2, 32, 1))
    assert not any(m in one for m in MARKERS.values())
    m = _plain_conv(8, 32, 2, 32, 1)
    w = next(op for op in m.main.body if op.name == "graph.constant").attributes["value"].array
    model, batch = build_native(m)
    assert MARKERS["fold"] in batch
    x = np.random.default_rng(1).standard_normal((8, 32, 2, 2), dtype=np.float32)
    want = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                      padding=1).numpy()
    np.testing.assert_allclose(model.run([x])[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mr", [7, 8, 14])
def test_transposed_direct_store_of_every_tile_shape(mr):
    """The transposed direct kernel's tiles go back to the layer's layout through ``tf_store_t``:
    16 channels at a time by permutes where a tile has at most 8 positions, element by element
    past that (mr 14) and for the last channels (72 = 4 x 16 + 8); 12-wide rows leave partial
    tiles of 5 (mr 7), 4 (mr 8) and 12 (mr 14) positions."""
    m, args, want, _ = _case(1, 6, 12, 12, 72, (3, 3), (1, 1), 1, 1)
    model, src = build_native(m, tuning=forced_algorithm("direct_t", mr=mr, nr=4 * Target.host().vector_width))
    assert MARKERS["direct_t"] in src
    np.testing.assert_allclose(model.run(list(args))[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("algorithm", ["im2col", "direct", "direct_t"])
def test_register_form_epilogue_keeps_nan_and_inf(algorithm):
    """A chain of the GEMM's register form (bias, residual, then a clip: ``TF_EPI_REGS``) on each
    convolution path that takes it: in the GEMM's accumulators (im2col), while a direct kernel's
    tile is copied out, on a transposed direct kernel's rows; NaN passes the clip, +-Inf clip to
    its bounds, on row tails too (11-wide rows)."""
    m, (x, res), _, _ = _case(2, 5, 11, 11, 7, (3, 3), (1, 1), 1, 1, clip_last=True)
    res = res.copy()
    res[0, :, :, 10] = np.nan
    res[1, 2, 3, :] = np.inf
    res[1, 4, :, 9] = -np.inf
    model, src = build_native(m, tuning=forced_algorithm(algorithm))
    assert MARKERS[algorithm] in src and "TF_EPI_REGS, &ectx" in src
    got = model.run([x, res])[0]
    assert np.isnan(got[0, :, :, 10]).all() and (got[1, 2, 3, :] == 2.0).all() and (got[1, 4, :, 9] == 0.0).all()
    # the same kernel with finite residuals against torch
    _, (x, res), want, _ = _case(2, 5, 11, 11, 7, (3, 3), (1, 1), 1, 1, clip_last=True)
    np.testing.assert_allclose(model.run([x, res])[0], want, rtol=1e-4, atol=1e-4)


def test_direct_kernel_pads_one_image_at_a_time_when_threads_own_images():
    """At a batch that gives every thread whole images, each thread pads one image's phase planes
    into its own buffer and runs that image's units at once (a stem's padded batch went to memory
    and back); the results are the same as the reference's, epilogue and residual included."""
    case = (4, 3, 96, 96, 16, (3, 3), (1, 1), 1, 2)
    m, args, want, _ = _case(*case)
    model, src = build_native(m, tuning=forced_algorithm("direct"))
    assert MARKERS["direct"] in src
    if Target.host().cores > 1:
        assert "for (long im = 0; im < 4; im++)" in src
    np.testing.assert_allclose(model.run(list(args))[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("algorithm", ["winograd", "winograd4"])
def test_winograd_runs_each_threads_own_images(algorithm):
    """At a batch that gives every thread whole images, each thread runs every step of its own
    images' chunks (transforms, the products, the epilogue) in its own buffers; the results are
    those of the reference, bias, clip and residual included."""
    case = (4, 16, 28, 28, 24, (3, 3), (1, 1), 1, 1)
    m, args, want, scale = _case(*case)
    model, src = build_native(m, tuning=forced_algorithm(algorithm))
    assert MARKERS[algorithm] in src
    if Target.host().cores > 1:
        assert "for (long img = 0; img < 4; img++)" in src
    atol = 2e-5 * scale if algorithm == "winograd4" else 1e-4
    np.testing.assert_allclose(model.run(list(args))[0], want, rtol=1e-4, atol=atol)


def test_direct_kernel_runs_a_column_free_epilogue_on_whole_tiles():
    """A fused chain that reads nothing per column (bias, then SiLU) runs once on each whole tile of
    the direct kernel (``TF_EPI_ROWS``), the padded grid's garbage columns included, where it ran
    on each output row segment; only real outputs are stored, and NaN and Inf take their IEEE
    course through the sigmoid (a 3x3/2 stem with 13 output columns: every tile straddles rows)."""
    from tensorforge.ir import Module, tensor
    from tensorforge.passes.pipeline import default_pipeline
    rng = np.random.default_rng(3)
    w = rng.standard_normal((10, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    m = Module()
    f = m.add_function("main", [tensor((2, 3, 26, 26))])
    g = f.builder().graph
    y = g.conv(f.args[0], g.constant(w), g.constant(b), strides=(2, 2), pads=(1, 1, 1, 1))
    f.set_return([g.mul(y, g.sigmoid(y))])
    default_pipeline(Target.host()).run(m)
    model, src = build_native(m, tuning=forced_algorithm("direct"))
    assert MARKERS["direct"] in src and "TF_EPI_ROWS, &erows" in src
    x = rng.standard_normal((2, 3, 26, 26)).astype(np.float32)
    x[1, 0, 10, 10], x[1, 2, 20, 4] = np.nan, np.inf
    conv = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                      torch.tensor(b, dtype=torch.float64), stride=2, padding=1)
    want = torch.nn.functional.silu(conv).numpy()
    got = model.run([x])[0]
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[1]).any()
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)
