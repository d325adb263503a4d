"""Blocked layouts: the NCHW[x]c ops match their plain references, and the layout pass turns a
small residual CNN into blocked convs with conversions only at its edges, same numerics."""
import numpy as np
import pytest

from tensorforge.codegen.target import Target
from tensorforge.dialects.graph.layout import pack_act, pack_weight, unpack_act, unpack_weight
from tensorforge.ir import Module, interpret, lookup, tensor, verify
from tensorforge.ir.parser import parse_module
from tensorforge.ir.pass_manager import PassManager
from tensorforge.ir.printer import print_module
from tensorforge.passes.pipeline import default_pipeline


@pytest.mark.parametrize("shape,block", [((2, 8, 3), 4), ((1, 16, 5, 4), 8), ((1, 6, 2, 3, 2), 3)])
def test_activation_packing_round_trips_and_puts_channels_innermost(shape, block):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    y = pack_act(x, block)
    assert y.shape == (shape[0], shape[1] // block) + shape[2:] + (block,)
    np.testing.assert_array_equal(unpack_act(y), x)
    idx = (0, 1) + (0,) * (len(shape) - 2)
    np.testing.assert_array_equal(y[idx + (block - 1,)], x[(0, 2 * block - 1) + idx[2:]])


def test_weight_packing_round_trips():
    w = np.random.default_rng(1).normal(size=(12, 8, 3, 3)).astype(np.float32)
    p = pack_weight(w, 4, 6)
    assert p.shape == (2, 2, 3, 3, 4, 6)
    assert p[1, 0, 2, 1, 3, 5] == w[1 * 6 + 5, 0 * 4 + 3, 2, 1]
    np.testing.assert_array_equal(unpack_weight(p), w)


def test_blocked_conv_and_pools_compute_what_the_plain_ops_do():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 8, 7, 6)).astype(np.float32)
    w = rng.normal(size=(12, 8, 3, 3)).astype(np.float32)
    b = rng.normal(size=12).astype(np.float32)
    attrs = {"strides": (2, 1), "pads": (1, 0, 1, 2), "dilations": (1, 2)}
    want = lookup("graph.conv").compute(x, w, b, groups=1, **attrs)
    got = lookup("graph.conv_nchwc").compute(pack_act(x, 4), pack_weight(w, 4, 6), b, **attrs)
    np.testing.assert_allclose(unpack_act(got), want, rtol=1e-5, atol=1e-5)
    pool = {"kernel": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 1), "ceil_mode": True}
    for name, kw in (("graph.max_pool", dict(pool, dilations=())), ("graph.avg_pool", pool),
                     ("graph.global_avg_pool", {}), ("graph.global_max_pool", {})):
        want = lookup(name).compute(x, **kw)
        got = lookup(name + "_nchwc").compute(pack_act(x, 4), **kw)
        np.testing.assert_allclose(unpack_act(got), want, rtol=1e-6, err_msg=name)


def _residual_cnn() -> Module:
    """conv-relu-conv + shortcut, relu, max pool, global pool, flatten, gemm: random weights."""
    rng = np.random.default_rng(3)
    m = Module()
    f = m.add_function("main", [tensor((1, 3, 8, 8))])
    g = f.builder().graph

    def conv(x, cin, cout, k):
        w = g.constant(rng.normal(0, np.sqrt(2 / (cin * k * k)), (cout, cin, k, k)).astype(np.float32))
        b = g.constant(rng.normal(0, 0.1, cout).astype(np.float32))
        return g.conv(x, w, b, pads=(k // 2,) * 4)
    stem = g.relu(conv(f.args[0], 3, 16, 3))
    branch = conv(g.relu(conv(stem, 16, 16, 3)), 16, 16, 1)
    y = g.relu(g.add(branch, stem))
    y = g.global_avg_pool(g.max_pool(y, kernel=(2, 2), strides=(2, 2)))
    y = g.reshape(y, shape=(1, 16))
    f.set_return([g.gemm(y, g.constant(rng.normal(0, 0.3, (16, 10)).astype(np.float32)))])
    verify(m)
    return m


def test_layout_pass_blocks_a_residual_cnn_with_conversions_only_at_its_edges():
    m = _residual_cnn()
    before = m.clone()
    PassManager.parse("layout{block=8},cse,dce", verify_each=True).run(m)
    names = [op.name for op in m.main.body]
    assert "graph.conv" not in names and names.count("graph.conv_nchwc") == 3
    transforms = [op for op in m.main.body if op.name == "graph.layout_transform"]
    assert [(t.attributes["src"], t.attributes["dst"]) for t in transforms] == \
        [("NCHW", "NCHW3c"), ("NCHW8c", "NCHW")]                  # the RGB input, before the reshape
    assert {"graph.max_pool_nchwc", "graph.global_avg_pool_nchwc"} <= set(names)
    x = np.random.default_rng(4).normal(size=(1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(interpret(m, x)[0], interpret(before, x)[0], rtol=1e-5, atol=1e-5)
    text = print_module(m, inline_resources=True)
    assert print_module(parse_module(text), inline_resources=True) == text


def test_layout_is_auto_by_default_and_uses_the_host_vector_width():
    width = Target.host().vector_width
    assert f"layout{{block={width} auto=true}}" in default_pipeline().pipeline
    assert "layout" not in default_pipeline(layout=False).pipeline
    assert f"layout{{block={width}}}" in default_pipeline(layout=True).pipeline
    assert "layout{block=8}" in default_pipeline(Target.host().replace(vector_width=8), layout=True).pipeline


def test_a_weight_shared_by_two_convs_is_packed_once_at_compile_time():
    m = Module()
    f = m.add_function("main", [tensor((1, 8, 4, 4))])
    g = f.builder().graph
    w = g.constant(np.random.default_rng(5).normal(size=(8, 8, 1, 1)).astype(np.float32))
    f.set_return([g.conv(g.relu(g.conv(f.args[0], w)), w)])
    before = m.clone()
    PassManager.parse("layout{block=8},cse,dce", verify_each=True).run(m)
    names = [op.name for op in m.main.body]
    assert names.count("graph.constant") == 1 and names.count("graph.layout_transform") == 2   # in and out
    x = np.random.default_rng(6).normal(size=(1, 8, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(interpret(m, x)[0], interpret(before, x)[0], rtol=1e-5, atol=1e-5)
