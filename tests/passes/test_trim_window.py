"""trim-window: conv/pool kernel taps that read only padding are cut out, exactly.

Every graph is compiled natively (``tensorforge.compile``, cpu target, default pipeline, which
runs trim-window) and compared with the reference interpreter on the *original* graph: NaN in
the same places, infinities equal, signed zeros kept, other values within float32 rounding."""
import numpy as np
import pytest

import tensorforge
from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.passes.graph.trim_window import trim_axis, trim_window
from tensorforge.passes.pipeline import default_pipeline

RNG = np.random.default_rng(0)


def _w(*shape):
    return RNG.normal(0, 0.5, shape).astype(np.float32)


def _module(shapes, body):
    """A module whose ``main`` takes tensors of ``shapes`` and returns ``body(g, *args)``."""
    m = Module()
    f = m.add_function("main", [tensor(s) for s in shapes])
    g = f.builder().graph
    f.set_return(list(body(g, *f.args)))
    verify(m)
    return m


def _ops(m, name):
    return [op for op in m.main.body if op.name == name]


def _returned(m):
    """The ops that make ``main``'s results, in the order they are returned."""
    (ret,) = _ops(m, "func.return")
    return [v.op for v in ret.operands]


def _compile_and_check(m, inputs=None, seed=1):
    """Compiles ``m`` for the cpu; its outputs against the interpreter on ``m`` as built."""
    rng = np.random.default_rng(seed)
    if inputs is None:
        inputs = [rng.normal(size=a.type.shape).astype(np.float32) for a in m.main.args]
    cm = tensorforge.compile(m, target="cpu")
    got = cm(*inputs)
    got = got if isinstance(got, (list, tuple)) else [got]
    want = interpret(m, *inputs)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
        fin = np.isfinite(w)
        np.testing.assert_allclose(g[fin], w[fin], rtol=1e-5, atol=1e-5)
        zero = fin & (w == 0)
        np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]))
    return cm, got, want


# ---- the per-axis rule ---------------------------------------------------------------------
def test_trim_axis_rule():
    # 3 taps, pad 1, 1x1 map: only the centre tap reads the input.
    assert trim_axis(1, 1, 3, 1, 1, 1, 1) == (1, 1, 0, 0)
    # stride 2 over 2: output 1, taps read -1, 0, 1: the first goes; the end pad is read by no
    # window any more, so the pads become (0, 0).
    assert trim_axis(2, 1, 3, 2, 1, 1, 1) == (1, 2, 0, 0)
    # 56x56, pad 1: every tap reads the input somewhere.
    assert trim_axis(56, 56, 3, 1, 1, 1, 1) is None
    # no padding, a symbolic size: nothing to do.
    assert trim_axis(1, 1, 1, 1, 1, 0, 0) is None and trim_axis("h", "h", 3, 1, 1, 1, 1) is None
    # 2 taps, dilation 2, pads (1, 0) over 2 (output 1): taps read -1 and 1; tap 0 reads only
    # padding, but dropping it would need a begin pad of 1 - 2 < 0, so the axis stays.
    assert trim_axis(2, 1, 2, 1, 2, 1, 0) is None
    # dilation 2, pad 2 over 1: taps read -2, 0, 2 -> the centre tap alone, pads 0.
    assert trim_axis(1, 1, 3, 1, 2, 2, 2) == (1, 1, 0, 0)
    # the begin side: length 3, kernel 5, pads (2, 2), stride 3 -> taps 2..4, the unread end pad goes.
    assert trim_axis(3, 1, 5, 3, 1, 2, 2) == (2, 4, 0, 0)
    # every tap reads only padding (stride jumps over the input): left alone.
    assert trim_axis(1, 2, 1, 2, 1, 1, 1) is None


# ---- conv ----------------------------------------------------------------------------------
def test_convs_on_tiny_maps_are_trimmed_and_stay_exact():
    w1, w2, b2 = _w(4, 8, 3, 3), _w(6, 8, 3, 3), _w(6)

    def body(g, x1, x2):
        yield g.conv(x1, g.constant(w1), pads=(1, 1, 1, 1))                                  # 1x1 map
        yield g.conv(x2, g.constant(w2), g.constant(b2), pads=(1, 1, 1, 1), strides=(2, 2))  # 2x2 -> 1x1

    m = _module([(2, 8, 1, 1), (2, 8, 2, 2)], body)
    cm, got, _ = _compile_and_check(m)
    convs = _returned(cm.module)
    assert [c.operands[1].type.shape for c in convs] == [(4, 8, 1, 1), (6, 8, 2, 2)]
    assert [tuple(c.attributes["pads"]) for c in convs] == [(0, 0, 0, 0), (0, 0, 0, 0)]
    # Independent of the interpreter: a 1x1 map through a pad-1 3x3 conv is the centre tap's matmul.
    x1 = np.random.default_rng(1).normal(size=(2, 8, 1, 1)).astype(np.float32)
    want = np.einsum("oc,nc->no", w1[:, :, 1, 1].astype(np.float64), x1[:, :, 0, 0])
    np.testing.assert_allclose(got[0][:, :, 0, 0], want, rtol=1e-5, atol=1e-5)


def test_grouped_depthwise_dilated_and_1d_convs():
    wd, wg, wdil, w1d, w1a = _w(8, 1, 3, 3), _w(8, 2, 3, 3), _w(4, 4, 3, 3), _w(4, 3, 3), _w(4, 3, 5)

    def body(g, x, xd, x1, x3):
        yield g.conv(x, g.constant(wd), pads=(1, 1, 1, 1), strides=(2, 2), groups=8)   # depthwise
        yield g.conv(x, g.constant(wg), pads=(1, 1, 1, 1), groups=4)                   # 2x2 map, stride 1
        yield g.conv(xd, g.constant(wdil), pads=(2, 2, 2, 2), dilations=(2, 2))        # dilated, 1x1 map
        yield g.conv(x1, g.constant(w1d), pads=(1, 1))                                 # 1-D, length 1
        yield g.conv(x3, g.constant(w1a), pads=(2, 2), strides=(3,))                   # 1-D, begin side

    m = _module([(1, 8, 2, 2), (1, 4, 1, 1), (2, 3, 1), (1, 3, 3)], body)
    cm, _, _ = _compile_and_check(m)
    convs = _returned(cm.module)
    shapes = [c.operands[1].type.shape for c in convs]
    pads = [tuple(c.attributes["pads"]) for c in convs]
    # The stride-1 grouped conv over 2x2 (output 2x2) reads the input with every tap: untouched.
    assert shapes == [(8, 1, 2, 2), (8, 2, 3, 3), (4, 4, 1, 1), (4, 3, 1), (4, 3, 3)]
    assert pads == [(0, 0, 0, 0), (1, 1, 1, 1), (0, 0, 0, 0), (0, 0), (0, 0)]
    assert [c.attributes.get("groups", 1) for c in convs] == [8, 4, 1, 1, 1]


def test_conv_with_inf_or_nan_in_a_dropped_tap_is_not_trimmed():
    w_inf = _w(4, 3, 3, 3)
    w_inf[1, 0, 0, 0] = np.inf                 # a corner tap: it only ever sees padding
    w_nan = _w(4, 3, 3, 3)
    w_nan[2, 2, 2, 1] = np.nan                 # bottom row, centre column: only the columns trim
    w_kept = _w(4, 3, 3, 3)
    w_kept[3, 1, 1, 1] = -np.inf               # the centre tap stays: trimming is still exact

    def body(g, x):
        for w in (w_inf, w_nan, w_kept):
            yield g.conv(x, g.constant(w), pads=(1, 1, 1, 1))

    m = _module([(1, 3, 1, 1)], body)
    x = np.random.default_rng(3).normal(size=(1, 3, 1, 1)).astype(np.float32)
    cm, got, want = _compile_and_check(m, [x])
    assert [c.operands[1].type.shape for c in _returned(cm.module)] == \
        [(4, 3, 3, 3), (4, 3, 3, 1), (4, 3, 1, 1)]
    assert np.isnan(got[0][0, 1]).all() and np.isnan(got[1][0, 2]).all()    # 0 * inf, 0 * NaN
    assert np.isfinite(got[0][0, [0, 2, 3]]).all()
    assert np.isinf(got[2][0, 3]).all() or np.isnan(got[2][0, 3]).all()


def test_non_constant_weight_and_large_map_are_left_alone():
    w = _w(8, 8, 3, 3)

    def body(g, x, wv, big):
        yield g.conv(x, wv, pads=(1, 1, 1, 1))
        yield g.conv(big, g.constant(w), pads=(1, 1, 1, 1))

    m = _module([(1, 8, 1, 1), (8, 8, 3, 3), (1, 8, 56, 56)], body)
    before = m.clone()
    stats = trim_window(m)
    assert not stats.changed
    assert [op.name for op in m.main.body] == [op.name for op in before.main.body]
    assert [c.operands[1].type.shape for c in _ops(m, "graph.conv")] == [(8, 8, 3, 3), (8, 8, 3, 3)]


def test_default_pipeline_trims_a_batchnorm_folded_conv():
    rng = np.random.default_rng(5)
    w = _w(4, 3, 3, 3)
    params = [rng.uniform(0.5, 1.5, 4), rng.normal(size=4), rng.normal(size=4), rng.uniform(0.5, 1.5, 4)]

    def body(g, x):
        y = g.conv(x, g.constant(w), pads=(1, 1, 1, 1))
        yield g.relu(g.batch_norm(y, *[g.constant(p.astype(np.float32)) for p in params]))

    names = [p.name for p in default_pipeline().passes]
    assert names.index("fold-inference") < names.index("trim-window") < names.index("reorder")
    m = _module([(1, 3, 1, 1)], body)
    cm, _, _ = _compile_and_check(m)
    (conv,) = _ops(cm.module, "graph.conv")
    assert conv.operands[1].type.shape == (4, 3, 1, 1) and len(conv.operands) == 3
    assert not _ops(cm.module, "graph.batch_norm")


# ---- pooling -------------------------------------------------------------------------------
def test_pools_on_tiny_maps_are_trimmed_and_stay_exact():
    def body(g, x2, x1):
        yield g.max_pool(x2, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2))     # 2x2 -> 1x1
        yield g.max_pool(x1, kernel=(3, 3), pads=(1, 1, 1, 1))                     # 1x1 -> 1x1
        yield g.avg_pool(x2, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2))     # count_include_pad off
        yield g.avg_pool(x2, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2), count_include_pad=True)
        yield g.max_pool(x2, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2), ceil_mode=True)     # 2x2 out
        yield g.max_pool(x1, kernel=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2), ceil_mode=True)     # 1x1 out

    m = _module([(2, 4, 2, 2), (2, 4, 1, 1)], body)
    rng = np.random.default_rng(7)
    x2 = rng.normal(size=(2, 4, 2, 2)).astype(np.float32)
    x2[0, 0, 0, 0] = np.nan
    x2[0, 1] = -np.inf
    x2[1, 2, 1, 1] = np.inf
    x1 = rng.normal(size=(2, 4, 1, 1)).astype(np.float32)
    x1[1, 3] = -np.inf
    cm, got, _ = _compile_and_check(m, [x2, x1])
    pools = _returned(cm.module)
    kernels = [tuple(p.attributes["kernel"]) for p in pools]
    pads = [tuple(p.attributes["pads"]) for p in pools]
    # count_include_pad counts the pads: untouched; ceil mode over 2x2 gives 2x2 windows whose
    # every tap reads the input somewhere: untouched.
    assert kernels == [(2, 2), (1, 1), (2, 2), (3, 3), (3, 3), (1, 1)]
    assert pads == [(0, 0, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (1, 1, 1, 1), (1, 1, 1, 1), (0, 0, 0, 0)]
    assert got[0][0, 0, 0, 0] != got[0][0, 0, 0, 0] and got[0][0, 1, 0, 0] == -np.inf
    np.testing.assert_allclose(got[0][1], x2[1].max(axis=(1, 2), keepdims=True))
    np.testing.assert_allclose(got[2][1], x2[1].mean(axis=(1, 2), keepdims=True), rtol=1e-6)
    assert [p.results[0].type.shape[2:] for p in pools[4:]] == [(2, 2), (1, 1)]
    np.testing.assert_array_equal(got[5], x1)
