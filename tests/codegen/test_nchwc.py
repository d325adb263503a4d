"""The blocked layout's native kernels (codegen/c/nchwc.py): a model compiled with the ``layout`` pass
runs NCHW[16]c convolutions, pools and conversions in C, and computes what the plain graph does.

Each case builds a plain graph, compiles it with ``default_pipeline_text(layout=True)`` and compares
with the interpreter on the same plain graph (float64-free: the reference's float32 sums, so the
tolerance is a few ulps of the sums' magnitude).  NaN and Inf in the input propagate as in the
reference; the source is checked to hold the blocked kernels, not the loop path.
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

import tensorforge
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.types import tensor
from tensorforge.passes.pipeline import default_pipeline_text

LAYOUT = default_pipeline_text(layout=True)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _conv_model(n, c, h, w, o, k, stride=1, pad=0, dilation=1, residual=False, act="relu", seed=0) -> ModuleOp:
    """x -> conv (k x k) -> [+ conv1x1(x) residual, same stride] -> act."""
    rng = _rng(seed)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((n, c, h, w))], arg_names=["x"])
    g = f.builder().graph
    wt = g.constant((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32))
    b = g.constant(rng.standard_normal(o).astype(np.float32))
    y = g.conv(f.args[0], wt, b, strides=(stride, stride), pads=(pad,) * 4, dilations=(dilation, dilation))
    if residual:
        oh = y.type.shape[2]
        # a 1x1 conv with the same output grid: stride s, cropped by a slice where the windows differ
        w1 = g.constant((rng.standard_normal((o, c, 1, 1)) / np.sqrt(c)).astype(np.float32))
        r = g.conv(f.args[0], w1, strides=(stride, stride))
        if r.type.shape[2] != oh:
            r = g.slice(r, g.constant(np.array([0, 0], np.int64)), g.constant(np.array([oh, y.type.shape[3]], np.int64)),
                        g.constant(np.array([2, 3], np.int64)))
        y = g.add(y, r)
    if act == "relu":
        y = g.relu(y)
    elif act == "relu6":
        y = g.clip(y, min=0.0, max=6.0)
    elif act == "silu":
        y = g.mul(y, g.sigmoid(y))
    f.set_return([y])
    return m


def _compare(model_fn, x, rtol=2e-5):
    native = tensorforge.compile(model_fn(), target="cpu", passes=LAYOUT)
    want = tensorforge.compile(model_fn(), target="interpreter", passes=False)(x)
    got = native(x)
    assert "tf_nchwc_" in native.source or "_pool_nchwc" in native.source
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max(initial=0.0)))
    np.testing.assert_allclose(got[~nan], want[~nan], rtol=0, atol=rtol * scale)
    return native


CONVS = [
    # n, c, h, w, o, k, stride, pad, dilation
    (1, 3, 32, 30, 64, 7, 2, 3, 1),        # an RGB stem: input block 3, G = 2 output blocks
    (1, 16, 9, 9, 32, 3, 1, 1, 1),         # small map: edge columns and rows clipped
    (2, 32, 15, 17, 48, 3, 2, 1, 1),       # batch, odd sizes, stride 2, 3 output blocks (tail group)
    (1, 64, 14, 14, 80, 1, 1, 0, 1),       # 1x1: 5 output blocks, a group of 4 and a tail of 1
    (1, 48, 13, 13, 32, 1, 2, 0, 1),       # 1x1 stride 2 (on a subsampled copy of x)
    (2, 40, 14, 14, 24, 1, 2, 0, 1),       # 1x1 stride 2, batch 2, an even map: the copy's image offsets
    (1, 16, 11, 12, 16, 3, 1, 2, 2),       # dilation 2 (the nested tap loop)
    (1, 32, 5, 5, 16, 5, 1, 4, 1),         # pads wider than a window's reach: some outputs see no input
    (1, 256, 7, 7, 64, 3, 1, 1, 1),        # deep K: weights in chunks of input blocks, sums kept in y
]


@pytest.mark.parametrize("case", CONVS, ids=[f"{c[1]}to{c[4]}_k{c[5]}s{c[6]}p{c[7]}d{c[8]}" for c in CONVS])
def test_blocked_conv_matches_the_plain_graph(case):
    n, c, h, w, o, k, s, p, d = case
    x = _rng(1).standard_normal((n, c, h, w)).astype(np.float32)
    _compare(lambda: _conv_model(n, c, h, w, o, k, s, p, d), x)


@pytest.mark.parametrize("act", ["relu", "relu6", "silu", ""])
def test_residual_and_activation_run_in_the_conv_epilogue(act):
    model = lambda: _conv_model(1, 32, 10, 10, 32, 3, 1, 1, residual=True, act=act)   # noqa: E731
    x = (_rng(2).standard_normal((1, 32, 10, 10)) * 4).astype(np.float32)
    native = _compare(model, x)
    # the add and the activation are in the conv's epilogue: no elementwise kernel is left
    run = native.source.split("void tf_run")[1]
    assert native.source.count("tf_nchwc_") >= 2 and "_add" not in run and "sigmoid" not in run


@pytest.mark.parametrize("k,stride", [(5, 1), (3, 2)])
def test_nan_and_inf_propagate_through_blocked_convs(k, stride):
    """The direct kernels (not Winograd, which mixes neighbouring inputs: docs/numerics.md)."""
    x = _rng(3).standard_normal((1, 16, 8, 8)).astype(np.float32)
    x[0, 3, 2, 5], x[0, 7, 6, 1], x[0, 0, 0, 0] = np.nan, np.inf, -np.inf
    _compare(lambda: _conv_model(1, 16, 8, 8, 32, k, stride, k // 2, act=""), x)


def test_a_strided_1x1_conv_runs_on_a_subsampled_copy_of_its_input(monkeypatch):
    """ResNet's downsampling conv (1x1 stride 2, residual, ReLU) copies the positions it reads into
    a compact buffer and runs the stride-1 kernel on it: the same sums bit for bit as reading them
    in place, NaN and Inf included."""
    from tensorforge.codegen.c import nchwc
    x = _rng(4).standard_normal((2, 24, 9, 10)).astype(np.float32)
    x[0, 3, 2, 4], x[1, 7, 6, 8], x[0, 0, 1, 1] = np.nan, np.inf, -np.inf      # read; [0, 0, 1, 1] is skipped
    model = lambda: _conv_model(2, 24, 9, 10, 40, 1, 2, residual=True)        # noqa: E731
    native = _compare(model, x)
    assert "_s(xs, w, bias, res, y);" in native.source
    monkeypatch.setattr(nchwc, "SUBSAMPLE_STRIDED", False)
    in_place = tensorforge.compile(model(), target="cpu", passes=LAYOUT)
    assert "_s(xs, w, bias, res, y);" not in in_place.source
    assert np.array_equal(native(x), in_place(x), equal_nan=True)


def test_only_unpadded_strided_1x1_convs_are_subsampled():
    """A bottom or right pad gives output positions that read no input (bias only): the copy would
    read past the input there, so such a conv reads in place; so do padded and 3x3 convs."""
    from tensorforge.codegen.c.nchwc import ConvGeometry, subsampled

    def geometry(h, oh, k=1, stride=2, pad=0):
        return ConvGeometry(1, 2, h, h, 8, 2, oh, oh, 8, k, k, stride, stride, pad, pad, 1, 1)
    assert subsampled(geometry(14, 7)) == geometry(7, 7, stride=1)
    assert subsampled(geometry(13, 7)) is not None          # a bottom pad of 1: row 12 is still inside
    assert subsampled(geometry(14, 8)) is None               # a bottom pad of 2: row 14 is past the input
    assert subsampled(geometry(14, 8, pad=1)) is None
    assert subsampled(geometry(14, 7, k=3, pad=1)) is None
    assert subsampled(geometry(14, 14, stride=1)) is None


def _pool_model(kind: str, shape, **attrs) -> ModuleOp:
    """x -> 1x1 conv (so the pool's input is blocked) -> pool."""
    n, c, h, w = shape
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(shape)], arg_names=["x"])
    g = f.builder().graph
    eye = g.constant(np.eye(c, dtype=np.float32).reshape(c, c, 1, 1))
    y = g.conv(f.args[0], eye)
    f.set_return([getattr(g, kind)(y, **attrs)])
    return m


POOLS = [
    ("max_pool", dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
    ("max_pool", dict(kernel=(2, 2), strides=(2, 2), ceil_mode=True)),
    ("avg_pool", dict(kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))),
    ("avg_pool", dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), count_include_pad=True)),
    ("avg_pool", dict(kernel=(2, 2), strides=(2, 2), ceil_mode=True, count_include_pad=True)),
    ("global_avg_pool", {}),
    ("global_max_pool", {}),
]


@pytest.mark.parametrize("kind,attrs", POOLS, ids=[f"{k}{i}" for i, (k, _) in enumerate(POOLS)])
def test_blocked_pools_match_the_plain_pools(kind, attrs):
    shape = (1, 32, 9, 11)
    x = _rng(4).standard_normal(shape).astype(np.float32)
    x[0, 1, 2, 3], x[0, 20, 8, 10], x[0, 5, 0, 0] = np.nan, np.inf, -np.inf
    native = _compare(lambda: _pool_model(kind, shape, **attrs), x, rtol=1e-6)
    assert f"{kind}_nchwc" in native.source


WINOGRAD = [
    # n, c, h, w, o: 3x3 stride 1 pad 1 layers that take F(4x4) or F(2x2)
    (1, 32, 28, 28, 48),     # F(4x4): 49 tiles; 3 output blocks (a group of 2 and a tail of 1, or one of 3)
    (1, 64, 14, 14, 64),     # F(2x2): 49 tiles
    (2, 16, 16, 20, 32),     # F(4x4) over two images
    (2, 64, 56, 56, 64),     # F(4x4) in several chunks of tile rows (a chunk fills L2), one across the images
]


@pytest.mark.parametrize("case", WINOGRAD, ids=[f"{c[1]}to{c[4]}_{c[2]}x{c[3]}_n{c[0]}" for c in WINOGRAD])
def test_blocked_winograd_matches_the_plain_graph(case):
    n, c, h, w, o = case
    from tensorforge.codegen.c import nchwc, nchwc_winograd
    g = nchwc.ConvGeometry(n, c // 16, h, w, 16, o // 16, h, w, 16, 3, 3, 1, 1, 1, 1, 1, 1)
    assert nchwc_winograd.tile_size(g) in (2, 4)
    x = _rng(5).standard_normal((n, c, h, w)).astype(np.float32)
    native = _compare(lambda: _conv_model(n, c, h, w, o, 3, 1, 1, residual=True), x, rtol=1e-5)
    assert "free(mm)" in native.source          # the Winograd kernel, not the direct one


def _dw_model(c, h, w, k, stride, pad, act="relu6", seed=0) -> ModuleOp:
    """1x1 conv (so the input is blocked) -> depthwise k x k conv -> act -> 1x1 conv."""
    rng = _rng(seed)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((1, c, h, w))], arg_names=["x"])
    g = f.builder().graph
    w1 = g.constant((rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32))
    wd = g.constant((rng.standard_normal((c, 1, k, k)) / k).astype(np.float32))
    bd = g.constant(rng.standard_normal(c).astype(np.float32))
    y = g.conv(g.conv(f.args[0], w1), wd, bd, strides=(stride, stride), pads=(pad,) * 4, groups=c)
    y = g.clip(y, min=0.0, max=6.0) if act == "relu6" else g.mul(y, g.sigmoid(y)) if act == "silu" else y
    f.set_return([g.conv(y, w1)])
    return m


DEPTHWISE = [(32, 17, 19, 3, 1, 1), (16, 16, 16, 3, 2, 1), (32, 9, 9, 5, 1, 2), (16, 12, 11, 5, 2, 2),
             (16, 8, 30, 7, 1, 3)]


@pytest.mark.parametrize("case", DEPTHWISE, ids=[f"{c[0]}ch_{c[1]}x{c[2]}_k{c[3]}s{c[4]}" for c in DEPTHWISE])
def test_blocked_depthwise_matches_the_plain_graph(case):
    c, h, w, k, s, p = case
    x = _rng(6).standard_normal((1, c, h, w)).astype(np.float32)
    x[0, 2, 3, 4] = np.nan
    native = _compare(lambda: _dw_model(c, h, w, k, s, p, act="silu" if k == 5 else "relu6"), x)
    assert "_d1e(" in native.source           # the depthwise kernel's edge tile: it runs blocked


def _padded_model(c_in, c_mid, hw) -> ModuleOp:
    """1x1 conv c_in -> c_mid (c_mid not a multiple of 16: the last block padded) -> relu6 -> + a
    second such branch (a residual add of padded tensors) -> 1x1 conv back to c_in (a padded input)."""
    rng = _rng(7)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((1, c_in, hw, hw))], arg_names=["x"])
    g = f.builder().graph

    def conv(x, o, i):
        w = g.constant((rng.standard_normal((o, i, 1, 1)) / np.sqrt(i)).astype(np.float32))
        return g.conv(x, w, g.constant(rng.standard_normal(o).astype(np.float32)))
    a = g.clip(conv(f.args[0], c_mid, c_in), min=0.0, max=6.0)
    b = g.add(conv(f.args[0], c_mid, c_in), a)
    f.set_return([g.relu(conv(b, c_in, c_mid))])
    return m


@pytest.mark.parametrize("c_mid", [24, 40, 8])
def test_padded_channel_blocks_match_the_plain_graph(c_mid):
    x = _rng(8).standard_normal((1, 32, 9, 9)).astype(np.float32)
    x[0, 5, 4, 4] = np.inf                 # Inf in the input: NaN must not leak through the padding lanes
    native = _compare(lambda: _padded_model(32, c_mid, 9), x)
    run = native.source.split("void tf_run")[1]
    # one conversion in and one out: the padded tensors stay blocked (8 channels too: one padded block)
    assert run.count("_layout_transform(") == 2


def test_a_weight_shared_by_winograd_layers_of_both_tile_sizes():
    """One weight constant read by a 3x3 layer at 28x28 (F(4x4)) and one at 14x14 (F(2x2)): each gets
    the weights transformed for its own tile size."""
    weight = (_rng(9).standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)

    def model():
        m = ModuleOp.create()
        f = m.add_function("main", [tensor((1, 32, 28, 28))], arg_names=["x"])
        g = f.builder().graph
        w = g.constant(weight)
        y = g.relu(g.conv(f.args[0], w, pads=(1, 1, 1, 1)))
        y = g.max_pool(y, kernel=(2, 2), strides=(2, 2))
        f.set_return([g.conv(y, w, pads=(1, 1, 1, 1))])
        return m
    x = _rng(10).standard_normal((1, 32, 28, 28)).astype(np.float32)
    _compare(model, x, rtol=1e-5)


def test_the_report_says_which_blocked_kernel_a_conv_runs():
    """``explain``/``--profile`` reports name the blocked algorithm and its cut for each conv."""
    from tensorforge.report.collect import collect

    def schedules(model: ModuleOp) -> list[str]:
        rep = collect(model, "m", profile_runs=1, check=False, warmup_runs=1, pipeline=LAYOUT)
        return [c.schedule for c in rep.code if "conv_nchwc" in c.name]
    assert any("Winograd F(4x4, 3x3)" in s for s in schedules(_conv_model(1, 32, 28, 28, 32, 3, 1, 1)))
    assert any("direct: tiles of" in s and "bands of" in s for s in schedules(_conv_model(1, 32, 28, 28, 32, 3, 2, 1)))


def test_the_tiles_share_the_work_evenly_between_threads():
    """A small map's work units are groups of output blocks: the untuned tile takes as many blocks
    as share evenly between the threads (``nchwc.balance``), not always the widest."""
    import dataclasses
    from tensorforge.codegen.c import nchwc
    from tensorforge.codegen.target import Target
    g = nchwc.ConvGeometry(1, 60, 7, 7, 16, 10, 7, 7, 16, 1, 1, 1, 1, 0, 0, 1, 1)     # 960 -> 160, 7x7
    assert nchwc.balance(g, 4, 7, 2) == pytest.approx(0.625) and nchwc.balance(g, 3, 7, 2) == pytest.approx(70 / 84)
    assert nchwc.balance(g, 4, 7, 1) == 1.0
    two = dataclasses.replace(Target.host(), cores=2, vector_width=16, vector_registers=32)
    # tiles of 3 and 2 blocks give each thread 5: every thread works the whole time
    assert nchwc.conv_plan(g, two).blocks == 3 and nchwc.conv_plan(g, two).groups == (3, 2, 3, 2)
    assert nchwc.balance(g, 3, 7, 2, (3, 2, 3, 2)) == 1.0
    assert nchwc.conv_plan(g, two, threads=1).blocks == 4
    assert nchwc.conv_plan(g, two, nchwc.BlockedParams("direct", blocks=4)).blocks == 4
    # a big map in bands of one row: 10 blocks in groups of 4 still give one thread 2.5 groups' rows
    # of the 3 (OpenMP's static schedule deals out contiguous runs); 8 blocks share evenly
    big = dataclasses.replace(g, h=56, w=56, oh=56, ow=56)
    assert nchwc.balance(big, 4, 1, 2) == pytest.approx(560 / 672) and nchwc.conv_plan(big, two).blocks == 2
    assert nchwc.conv_plan(dataclasses.replace(big, ob=8), two).blocks == 4
    assert nchwc.conv_plan(dataclasses.replace(big, ob=8), two).groups == ()


def test_uneven_groups_give_every_thread_an_even_share():
    from tensorforge.codegen.c import nchwc
    assert nchwc.even_groups(10, 4, 2) == (3, 2, 3, 2)
    assert nchwc.even_groups(20, 4, 2) == (4, 3, 3, 4, 3, 3)
    assert nchwc.even_groups(9, 3, 2) == (3, 2, 2, 2)          # shares 5 and 4
    assert nchwc.even_groups(8, 4, 3) == (3, 3, 2)                # shares 2, 3 and 3, one group each
    assert nchwc.even_groups(1, 4, 2) is None                  # a thread would get nothing
    for ob, blocks, threads in [(10, 4, 2), (20, 4, 2), (9, 3, 2), (13, 4, 4), (7, 2, 3)]:
        sizes = nchwc.even_groups(ob, blocks, threads)
        assert sum(sizes) == ob and max(sizes) <= blocks and len(sizes) % threads == 0


def test_flat_maps_tile_across_rows():
    """A 1x1 stride-1 conv's positions are one run: its tiles cross rows, as even as they go."""
    from tensorforge.codegen.c import nchwc
    g = nchwc.ConvGeometry(1, 60, 7, 7, 16, 10, 7, 7, 16, 1, 1, 1, 1, 0, 0, 1, 1)
    assert nchwc.flat_map(g)
    assert [t[3] for t in nchwc.map_tiles(g, 3, rows=9)] == [8, 8, 8, 8, 8, 9]
    assert nchwc.map_tiles(g, 3, rows=9)[1] == (1, 1, 1, 8)      # position 8: row 1, column 1
    padded = nchwc.ConvGeometry(1, 2, 7, 7, 16, 2, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1)
    assert not nchwc.flat_map(padded) and all(t[2] * t[3] <= 9 for t in nchwc.map_tiles(padded, 3, rows=9))


def _ten_output_blocks(vw: int) -> tuple[int, int]:
    """(input, output) channels of a 1x1 conv with 10 output blocks of ``vw`` lanes, which two
    threads share in uneven groups (``nchwc.even_groups``: 3, 2, 3, 2), with the same weights and
    multiply-adds whatever the lanes: 192 -> 160 with 16 lanes, 384 -> 80 with 8."""
    return 3072 // vw, 10 * vw


UNEVEN = [
    # hw, residual: 10 output blocks (``_ten_output_blocks``) on two threads
    (7, True),      # a small map: the whole map a unit, flat tiles across its rows
    (14, False),    # bands of rows (weights past ROW_MAJOR_MAX_WEIGHT_BYTES: group by group)
]


@pytest.mark.parametrize("case", UNEVEN, ids=[f"{c[0]}x{c[0]}" for c in UNEVEN])
def test_uneven_groups_of_output_blocks_match_the_plain_graph(case, monkeypatch):
    from tensorforge.codegen.c import nchwc
    from tensorforge.codegen.target import Target
    two = Target.host().replace(cores=2)
    monkeypatch.setattr(Target, "host", classmethod(lambda cls: two))
    hw, residual = case
    c, o = _ten_output_blocks(two.vector_width)
    x = _rng(4).standard_normal((1, c, hw, hw)).astype(np.float32)
    x[0, 5, 2, 3], x[0, 17, 6, 1], x[0, 0, 0, 0] = np.nan, np.inf, -np.inf
    native = _compare(lambda: _conv_model(1, c, hw, hw, o, 1, residual=residual, act="relu6"), x)
    vw = two.vector_width
    g = nchwc.ConvGeometry(1, c // vw, hw, hw, vw, o // vw, hw, hw, vw, 1, 1, 1, 1, 0, 0, 1, 1)
    assert nchwc.conv_plan(g, two).groups == (3, 2, 3, 2) and "group_width[" in native.source


def test_small_weight_pointwise_convs_deal_out_rows(monkeypatch):
    """A 1x1 conv with small weights hands each thread a run of output rows (all its output
    blocks), not its output blocks over all rows (``nchwc.rows_first``); same values, NaN and Inf
    included, with a residual and with a squeeze-excitation gate."""
    from tensorforge.codegen.c import nchwc
    from tensorforge.codegen.target import Target
    two = Target.host().replace(cores=2)
    monkeypatch.setattr(Target, "host", classmethod(lambda cls: two))
    vw = two.vector_width
    g = nchwc.ConvGeometry(1, 32 // vw, 28, 28, vw, 96 // vw, 28, 28, vw, 1, 1, 1, 1, 0, 0, 1, 1)
    assert nchwc.rows_first(g) and nchwc.conv_plan(g, two).row_major
    assert not nchwc.rows_first(nchwc.ConvGeometry(1, 6, 28, 28, 16, 36, 28, 28, 16, 1, 1, 1, 1, 0, 0, 1, 1))
    assert not nchwc.rows_first(nchwc.ConvGeometry(1, 2, 28, 28, 16, 2, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1))
    assert not nchwc.conv_plan(g, two, threads=1).row_major
    x = _rng(6).standard_normal((1, 32, 28, 28)).astype(np.float32)
    x[0, 5, 2, 3], x[0, 17, 27, 1], x[0, 0, 14, 0] = np.nan, np.inf, -np.inf
    native = _compare(lambda: _conv_model(1, 32, 28, 28, 96, 1, residual=True, act="relu6"), x)
    assert "const long og = u % " in native.source and ", band = u / " in native.source
    xg = _rng(7).standard_normal((1, 64, 28, 28)).astype(np.float32)
    xg[0, 3, 5, 7], xg[0, 40, 27, 27] = np.nan, np.inf
    gated = _compare(lambda: _se_model(1, 64, 28, 64, residual=True), xg)
    assert "_g(in0, in1, in2" in gated.source and "band = u / " in gated.source


def test_a_gate_runs_in_uneven_groups(monkeypatch):
    from tensorforge.codegen.target import Target
    two = Target.host().replace(cores=2)
    monkeypatch.setattr(Target, "host", classmethod(lambda cls: two))
    c, o = _ten_output_blocks(two.vector_width)
    x = _rng(5).standard_normal((1, c, 7, 7)).astype(np.float32)
    x[0, 3, 1, 1] = np.nan
    native = _compare(lambda: _se_model(1, c, 7, o), x)
    assert "_g(in0, in1, in2" in native.source and "group_width[" in native.source


def _se_model(n, c, hw, o, residual=False, seed=11) -> ModuleOp:
    """A squeeze-excitation block: depthwise 3x3 (SiLU), global mean, 1x1 c -> 8 (SiLU), 1x1 8 -> c,
    sigmoid, the gate times the depthwise output, then a 1x1 c -> o (+ x)."""
    rng = _rng(seed)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((n, c, hw, hw))], arg_names=["x"])
    g = f.builder().graph

    def const(*shape, fan_in):
        return g.constant((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))
    d = g.conv(f.args[0], const(c, 1, 3, 3, fan_in=9), const(c, fan_in=1), pads=(1,) * 4, groups=c)
    d = g.mul(d, g.sigmoid(d))
    s = g.conv(g.global_avg_pool(d), const(8, c, 1, 1, fan_in=c), const(8, fan_in=1))
    s = g.conv(g.mul(s, g.sigmoid(s)), const(c, 8, 1, 1, fan_in=8), const(c, fan_in=1))
    y = g.conv(g.mul(d, g.sigmoid(s)), const(o, c, 1, 1, fan_in=c), const(o, fan_in=1))
    f.set_return([g.add(y, f.args[0]) if residual else y])
    return m


SE = [(2, 32, 7, 48, False), (1, 32, 20, 32, True), (1, 320, 7, 64, False)]


@pytest.mark.parametrize("case", SE, ids=[f"n{c[0]}_{c[1]}to{c[3]}_{c[2]}x{c[2]}" for c in SE])
def test_a_squeeze_excitation_gate_runs_in_the_1x1_conv(case, monkeypatch):
    """The gate ``d * sigmoid(s)`` is not a kernel of its own: the 1x1 conv that reads it scales its
    weights by the sigmoids (``conv_nchwc {gate}``); values as the plain graph's, NaN and Inf too."""
    n, c, hw, o, residual = case
    x = _rng(12).standard_normal((n, c, hw, hw)).astype(np.float32)
    native = _compare(lambda: _se_model(n, c, hw, o, residual), x)
    assert "_g(in0, in1, in2" in native.source                 # the gated conv's call
    monkeypatch.setenv("TENSORFORGE_NCHWC_GATE", "0")
    apart = tensorforge.compile(_se_model(n, c, hw, o, residual), target="cpu", passes=LAYOUT)
    assert "_g(in0, in1, in2" not in apart.source
    np.testing.assert_allclose(native(x), apart(x), rtol=0, atol=2e-6 * float(np.abs(apart(x)).max()))
    x[0, 1, 2, 3] = np.inf                 # the mean of an Inf plane: its gate is 1, its outputs Inf or NaN
    x[-1, 2, 0, 0] = np.nan
    _compare(lambda: _se_model(n, c, hw, o, residual), x)


def test_a_gated_conv_cuts_a_tuned_chunk_to_its_scaled_weights_buffer(tmp_path):
    """The scaled weights of a unit's chunk live on the stack (``GATE_WEIGHT_FLOATS``): a tuned
    whole-K chunk of 4 output blocks (20480 floats: 320 input channels in 20 blocks of 16 lanes,
    640 in 80 of 8) is cut to half its input blocks, with the same bits."""
    from tensorforge.codegen.c.nchwc import GATE_WEIGHT_FLOATS
    from tensorforge.codegen.target import Target
    from tensorforge.tune.database import TuningDatabase
    from tensorforge.tune.measure import Result
    from tensorforge.tune.space import DEFAULT
    from tensorforge.tune.tasks import extract_tasks
    host = Target.host()
    vw = host.vector_width
    c, o, cb = 5120 // vw, 4 * vw, 5120 // vw ** 2
    task = next(t for t in extract_tasks(_se_model(1, c, 7, o), passes=LAYOUT)
                if t.kind == "blocked" and t.problem["conv"]["geometry"]["cb"] == cb
                and t.problem["conv"]["geometry"]["ob"] == 4)
    db = TuningDatabase(tmp_path / "g.sqlite")
    db.add_records([Result({"kind": "blocked", "params": {"algorithm": "direct", "blocks": 4, "chunk": cb}},
                           [1e-6] * 3).record(task, host.key()), Result(DEFAULT, [2e-6] * 3).record(task, host.key())])
    db.close()
    tuned = tensorforge.compile(_se_model(1, c, 7, o), passes=LAYOUT, db=str(tmp_path / "g.sqlite"))
    assert 4 * cb * vw * vw > GATE_WEIGHT_FLOATS and f"wsb[{4 * cb // 2 * vw * vw}]" in tuned.source
    x = _rng(13).standard_normal((1, c, 7, 7)).astype(np.float32)
    assert np.array_equal(tuned(x), tensorforge.compile(_se_model(1, c, 7, o), passes=LAYOUT, db=None)(x))


AVX2_STACK_FMA = r"vfmadd\w+\s+-?\d*\(%r[sb]p\)"


@pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="reads gcc's x86 assembly")
@pytest.mark.parametrize("layer", [(64, 256, 56, 1, 1, 0, True, "relu"), (64, 64, 56, 1, 1, 0, False, "relu"),
                                   (512, 512, 14, 3, 2, 1, False, "relu"), (512, 512, 14, 3, 2, 1, False, ""),
                                   (96, 576, 14, 1, 1, 0, False, "clip"), (1024, 2048, 14, 1, 2, 0, True, "relu")],
                         ids=["1x1_residual_relu", "1x1_relu", "3x3s2_relu", "3x3s2", "1x1_clip", "1x1s2_residual_relu"])
def test_avx2_register_tiles_keep_their_accumulators_in_registers(tmp_path, layer):
    """A blocked conv's register tile fills AVX2's 16 vector registers (12 accumulators, 3 weight
    vectors and the broadcast input, or 12 + 2 + 1): its epilogue's bias, zero and clamp bounds are
    loaded where it runs (``TF_OPAQUE``), since gcc kept them live across the tile's loop and
    spilled an accumulator or the weights instead (an FMA with a stack operand every step:
    ResNet-50's conv+ReLU layers 1.5-2x slower on Zen 3)."""
    from tensorforge.codegen.c import nchwc, vmath
    from tensorforge.codegen.target import Target
    avx2 = Target(march="haswell", arch="x86_64", cores=2)
    assert (avx2.vector_width, avx2.vector_registers) == (8, 16)
    c, o, size, k, stride, pad, residual, act = layer
    out = (size + 2 * pad - k) // stride + 1
    g = nchwc.ConvGeometry(1, c // 8, size, size, 8, o // 8, out, out, 8, k, k, stride, stride, pad, pad, 1, 1)
    src = tmp_path / "conv.c"
    src.write_text("#include <math.h>\n#include <stdlib.h>\n#include <string.h>\n#define TF_VW 8\n" + vmath.c_source()
                   + nchwc.conv_source("tf_conv", g, avx2, residual, act, 6.0 if act == "clip" else None, 2)
                   + "void entry(const float *x, const float *w, const float *b, const float *r, float *y) "
                     "{ tf_conv(x, w, b, r, y); }\n")
    flags = [f for f in avx2.cflags if f != "-shared"]
    asm = subprocess.run(["gcc", *flags, "-march=haswell", "-S", str(src), "-o", "-"], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert "vfmadd" in asm
    assert not re.findall(AVX2_STACK_FMA, asm)


def test_pointwise_convs_over_inputs_past_l2_deal_out_rows(monkeypatch):
    """A 1x1 conv whose image's input outgrows one core's L2 while its weights fit in half of it
    goes band by band too (ResNet-50's 256 -> 128 at 56x56: each thread would otherwise stream
    the whole input once per group of output blocks); the same values, NaN and Inf included."""
    from tensorforge.codegen.c import nchwc
    from tensorforge.codegen.target import Target
    two = Target.host().replace(cores=2, l2=512 << 10)
    monkeypatch.setattr(Target, "host", classmethod(lambda cls: two))
    vw = two.vector_width

    def geometry(c, hw, o):
        return nchwc.ConvGeometry(1, c // vw, hw, hw, vw, o // vw, hw, hw, vw, 1, 1, 1, 1, 0, 0, 1, 1)

    resnet = geometry(256, 56, 128)                     # 128 KB of weights, 3.1 MB of input
    assert nchwc.rows_first(resnet, two.l2) and nchwc.conv_plan(resnet, two).row_major
    assert not nchwc.rows_first(resnet)                 # L2 unknown: the weights alone decide
    assert nchwc.rows_first(geometry(512, 28, 128), two.l2)         # 256 KB of weights, 1.5 MB of input
    assert not nchwc.rows_first(geometry(512, 56, 256), two.l2)     # 512 KB of weights: past half of L2
    assert not nchwc.rows_first(geometry(256, 14, 128), two.l2)     # 196 KB of input: fits in L2
    x = _rng(8).standard_normal((1, 256, 24, 24)).astype(np.float32)    # 576 KB of input
    x[0, 7, 3, 3], x[0, 200, 23, 0], x[0, 0, 12, 9] = np.nan, np.inf, -np.inf
    assert nchwc.rows_first(geometry(256, 24, 128), two.l2)
    native = _compare(lambda: _conv_model(1, 256, 24, 24, 128, 1, act="relu"), x)
    assert "const long og = u % " in native.source and ", band = u / " in native.source
