"""Structural equality, first difference and hashing."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tensorforge.ir import Dense, DType, Module, make_op, tensor
from tensorforge.ir.structure import attr_equal, structural_diff, structural_hash, structurally_equal


def build(alpha=0.5, weight_scale=1.0, swap=False, extra=False, shape=(4, 8), loc=None, hint=None):
    """The same little network every time it is called with the same arguments."""
    m = Module()
    f = m.add_function("main", [tensor(shape), tensor(shape)], arg_names=[hint, hint] if hint else None)
    b = f.builder()
    b.loc = loc
    g = b.graph
    w = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * weight_scale
    x, y = (f.args[1], f.args[0]) if swap else (f.args[0], f.args[1])
    s = g.sub(x, y)
    t = g.mul(s, g.constant(w))
    u = g.leaky_relu(t, alpha=alpha)
    if extra:
        u = g.relu(u)
    f.set_return([u])
    return m


def test_independently_built_modules_are_equal_and_hash_equal():
    a, b = build(), build()
    assert a is not b and structurally_equal(a, b)
    assert structural_diff(a, b) is None
    assert structural_hash(a) == structural_hash(b)
    assert len(structural_hash(a)) == 32 and int(structural_hash(a), 16) >= 0


def test_locations_and_name_hints_do_not_count():
    a, b = build(), build(loc="x.mlir:1:1", hint="input")
    assert structurally_equal(a, b) and structural_hash(a) == structural_hash(b)


def test_clone_is_equal():
    a = build()
    c = a.clone()
    assert structurally_equal(a, c) and structural_hash(a) == structural_hash(c)


@pytest.mark.parametrize("kwargs,fragment", [
    ({"alpha": 0.25}, "attribute 'alpha': 0.5 vs 0.25"),
    ({"weight_scale": 2.0}, "attribute 'value'"),
    ({"swap": True}, "operand #0: wired differently (block argument #0 vs block argument #1)"),
    ({"extra": True}, "func.func' @main > region #0 block #0: 5 ops vs 6"),
    ({"shape": (4, 9)}, "attribute 'function_type': (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>) vs "
                        "(tensor<4x9xf32>, "),
])
def test_each_difference_is_found_named_and_hashed(kwargs, fragment):
    a, b = build(), build(**kwargs)
    diff = structural_diff(a, b)
    assert diff is not None and fragment in diff, diff
    assert "\n" not in diff
    assert not structurally_equal(a, b)
    assert structural_hash(a) != structural_hash(b)


def test_diff_names_the_op_and_its_location():
    a, b = build(loc="a.mlir:3:5"), build(alpha=0.3, loc="a.mlir:3:5")
    diff = structural_diff(a, b)
    assert diff.startswith("'builtin.module' > region #0 block #0 > op #0 'func.func' @main > region #0 block #0 "
                           "> op #3 'graph.leaky_relu' (a.mlir:3:5): attribute 'alpha'"), diff


def test_float_attributes_compare_bit_for_bit():
    assert attr_equal(math.nan, float("nan"))
    assert not attr_equal(0.0, -0.0)
    assert not attr_equal(1, 1.0) and not attr_equal(True, 1) and not attr_equal((1,), (1.0,))
    assert attr_equal((1, "N", (2.5,)), (1, "N", (2.5,)))
    assert a_hash(alpha=-0.0) != a_hash(alpha=0.0)
    nan2 = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    assert "nan (bits 7ff8000000000000) vs nan (bits 7ff8000000000001)" in structural_diff(
        build(alpha=math.nan), build(alpha=nan2))
    assert a_hash(alpha=math.nan) == a_hash(alpha=math.nan)


def a_hash(**kw):
    return structural_hash(build(**kw))


def test_constants_compare_by_content_not_identity():
    nan = np.array([np.nan, 1.0], np.float32)
    assert attr_equal(Dense(nan), Dense(nan.copy()))
    assert not attr_equal(Dense(np.zeros(2, np.float32)), Dense(np.zeros(2, np.float64)))
    assert not attr_equal(Dense(np.zeros(2, np.float32)), Dense(np.full(2, -0.0, np.float32)))
    assert not attr_equal(Dense(np.zeros((2, 1), np.float32)), Dense(np.zeros((1, 2), np.float32)))
    assert attr_equal(Dense(np.ones(3, np.float32), DType.bf16), Dense(np.ones(3, np.float32), DType.bf16))
    assert not attr_equal(Dense(np.ones(3, np.float32), DType.bf16), Dense(np.ones(3, np.float32)))


def test_free_values_match_one_to_one_by_first_use():
    """Ops compared on their own: operands defined outside are parameters (alpha-equivalence)."""
    m = Module()
    f = m.add_function("main", [tensor((3,))] * 3)
    x, y, z = f.args
    add_xy = make_op("graph.add", [x, y])
    add_yz = make_op("graph.add", [y, z])
    add_xx = make_op("graph.add", [x, x])
    add_yy = make_op("graph.add", [y, y])
    assert structurally_equal(add_xy, add_yz) and structural_hash(add_xy) == structural_hash(add_yz)
    assert structurally_equal(add_xx, add_yy)
    assert "wired differently" in structural_diff(add_xy, add_xx)
    assert structural_hash(add_xy) != structural_hash(add_xx)
    other = make_op("graph.add", [f.args[0], make_op("graph.neg", [x]).result])
    assert structurally_equal(add_xy, other)        # both operands are free, of equal types
    wide = Module().add_function("w", [tensor((4,))] * 2)
    assert "free value type tensor<3xf32> vs tensor<4xf32>" in structural_diff(
        add_xy, make_op("graph.add", list(wide.args)))


def test_commutative_operands_are_not_canonicalised():
    def fn(swap):
        m = Module()
        f = m.add_function("main", [tensor((3,))] * 2)
        x, y = f.args
        f.set_return([f.builder().graph.add(*((y, x) if swap else (x, y)))])
        return m
    assert not structurally_equal(fn(False), fn(True))
    assert structural_hash(fn(False)) != structural_hash(fn(True))


def test_hash_is_stable_across_runs():
    """The hash keys the tuning database: this value must never change by accident."""
    m = Module()
    f = m.add_function("main", [tensor(("N", 8)), tensor((1, 8), "f16")])
    g = f.builder().graph
    f.set_return([g.relu(g.add(f.args[0], g.cast(f.args[1], dtype="f32")))])
    assert structural_hash(m) == "367e7a25a8ab2c35da6c7f5a7682e166"
