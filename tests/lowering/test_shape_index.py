"""Data-movement and indexing lowerings through every level: graph interpreter (reference) vs
structured interpreter vs compiled C.

Each native compile costs a gcc run, so the cases of one test go into one module
(``check_ops``): every case is one op on its own inputs, and the one compiled model returns
all results at once.  Each op is still lowered and checked at the structured level on its own.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest

import tensorforge
from tensorforge.dialects.graph.index import resize_taps, COORDINATE_MODES, NEAREST_MODES
from tensorforge.dialects.structured.interpret import run_kernel
from tensorforge.errors import UnsupportedOpError
from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.ir.types import DType
from tensorforge.passes.lower.to_structured import lower_op_to_kernel
from tensorforge.passes.lower.to_structured.index import TOPK_MAX_AXIS
from tests.lowering.harness import check_op, one_op_module

R = np.random.default_rng(0)
BIG = 2 ** 63 - 1


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def ints(lo, hi, *shape, dtype=np.int64):
    return R.integers(lo, hi, shape).astype(dtype)


Case = tuple  # (op name, [inputs], {attrs})


def check_ops(cases: Sequence[Case], native: bool = True, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Every case as one op of a single module: the structured kernel of each op must match the
    reference interpreter exactly (data movement) or within tolerance (resize); so must the
    native model, compiled once for all cases."""
    m = Module()
    inputs = [x for _, xs, _ in cases for x in xs]
    f = m.add_function("main", [tensor(x.shape, DType.from_np(x.dtype)) for x in inputs])
    b = f.builder()
    args = iter(f.args)
    ops = [b.create(name, [next(args) for _ in xs], attrs) for name, xs, attrs in cases]
    f.set_return([r for op in ops for r in op.results])
    verify(m)
    ref = interpret(m, *inputs)
    pos = 0
    for op, (name, xs, attrs) in zip(ops, cases):
        kernel = lower_op_to_kernel(op)
        verify(kernel)
        for r, g in zip(ref[pos:], run_kernel(kernel, list(xs))):
            assert g.shape == r.shape and g.dtype == r.dtype, f"{name} {attrs}: {g.shape} {g.dtype}"
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=f"{name} {attrs}: structured")
        pos += len(op.results)
    if native:
        outs = tensorforge.compile(m)(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        assert len(outs) == len(ref)
        labels = [(name, attrs) for op, (name, _, attrs) in zip(ops, cases) for _ in op.results]
        for r, g, (name, attrs) in zip(ref, outs, labels):
            assert g.shape == r.shape, f"{name} {attrs}: native shape {g.shape} vs {r.shape}"
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=f"{name} {attrs}: native C")


def test_reshape_family():
    x = f32(2, 3, 4, 5)
    check_ops([
        ("graph.reshape", [x], {"shape": (6, 20)}),               # merges
        ("graph.reshape", [f32(6, 20)], {"shape": (2, 3, 4, 5)}),  # splits
        ("graph.reshape", [f32(2, 3, 4)], {"shape": (4, 3, 2)}),   # one group across everything
        ("graph.reshape", [f32(1, 6, 1, 4)], {"shape": (3, 2, 4, 1)}),  # unit dims
        ("graph.reshape", [f32(4, 6, 5)], {"shape": (2, 2, 30)}),  # split then merge
        ("graph.flatten", [x], {"axis": 2}),
        ("graph.flatten", [x], {"axis": 0}),
        ("graph.flatten", [x], {"axis": -1}),
        ("graph.squeeze", [f32(3, 1, 4, 1)], {"axes": (1, -1)}),
        ("graph.unsqueeze", [f32(3, 4)], {"axes": (0, -1)}),
        ("graph.expand", [f32(3, 1)], {"shape": (2, 3, 4)}),
        ("graph.expand", [f32(2, 1, 5)], {"shape": (3, 1)}),     # bidirectional
        ("graph.transpose", [x], {"perm": (2, 0, 3, 1)}),
        ("graph.transpose", [f32(3, 4)], {"perm": (-1, 0)}),
        ("graph.tile", [f32(2, 1, 3)], {"repeats": (2, 4, 1)}),
        ("graph.reshape", [ints(-5, 5, 4, 6)], {"shape": (3, 8)}),  # integer data
    ])


def _op_names(kernel) -> list[str]:
    return [o.name for o in kernel.walk()]


def test_reshape_index_maps_stay_small():
    """Dims that carry over map straight through and unit dims cost nothing; a merge costs a
    multiply-add, a split a floordiv and a mod."""
    _, op, _ = one_op_module("graph.reshape", [f32(2, 1, 3, 4)], shape=(2, 3, 1, 4, 1))
    names = _op_names(lower_op_to_kernel(op))
    assert not {"scalar.floordiv", "scalar.mod", "scalar.mul"} & set(names)
    _, op, _ = one_op_module("graph.reshape", [f32(6, 5, 7)], shape=(2, 3, 35))
    names = _op_names(lower_op_to_kernel(op))
    # (2, 3) -> 6 is one multiply-add, 35 -> (5, 7) one floordiv and one mod
    assert (names.count("scalar.mul"), names.count("scalar.floordiv"), names.count("scalar.mod")) == (1, 1, 1)


def test_concat_split():
    a, b, c = f32(2, 3, 4), f32(2, 1, 4), f32(2, 5, 4)
    check_ops([
        ("graph.concat", [a, b, c], {"axis": 1}),                  # 3 inputs on a middle axis
        ("graph.concat", [f32(1, 3), f32(4, 3)], {"axis": -2}),
        ("graph.concat", [ints(0, 9, 3, 2), ints(0, 9, 3, 0), ints(0, 9, 3, 3)], {"axis": 1}),  # empty piece
        ("graph.concat", [f32(5)], {"axis": 0}),
        ("graph.split", [f32(3, 9, 2)], {"axis": 1, "sizes": (2, 3, 4)}),
        ("graph.split", [f32(6, 2)], {"axis": -2, "sizes": (1, 5)}),
    ])


def test_slice():
    x = f32(5, 6, 7)
    cases = [
        dict(starts=(1,), ends=(4,), axes=(1,), steps=()),
        dict(starts=(-3, 0), ends=(BIG, -1), axes=(0, 2), steps=(1, 2)),         # negatives, INT64_MAX
        dict(starts=(-1,), ends=(-BIG,), axes=(1,), steps=(-1,)),                # full reversal
        dict(starts=(10, 5), ends=(-10, 0), axes=(2, 0), steps=(-3, -2)),        # clamped, negative steps
        dict(starts=(-100,), ends=(100,), axes=(-1,), steps=(3,)),               # clamped both ends
        dict(starts=(0, 1, 2), ends=(5, 6, 7), axes=(), steps=()),               # default axes
    ]
    check_ops([("graph.slice", [x], c) for c in cases])


def test_pad_modes():
    x = f32(3, 4, 5)
    check_ops([
        ("graph.pad", [x], {"pads": (1, 0, 2, 2, 0, 1), "value": 1.5}),
        ("graph.pad", [x], {"pads": (-1, 2, 0, 1, -2, -3)}),                    # crops mixed with pads
        ("graph.pad", [x], {"pads": (2, 3, 4, 2, 3, 4), "mode": "reflect"}),
        ("graph.pad", [x], {"pads": (0, 1, -1, 0, 2, 1), "mode": "reflect"}),   # reflect a cropped window
        ("graph.pad", [x], {"pads": (3, 0, 1, 1, 5, 0), "mode": "edge"}),
        ("graph.pad", [x], {"pads": (-1, 1, 2, 0, -1, 0), "mode": "edge"}),
        ("graph.pad", [ints(-9, 9, 3, 3, dtype=np.int32)], {"pads": (1, 1, 1, 1), "value": 7.0}),
        ("graph.pad", [f32(2, 3)], {"pads": (0, -3, 0, 2), "value": -2.0}),     # cropped to an empty window
    ])


def test_gather_family_and_one_hot():
    x = f32(5, 4, 3)
    check_ops([
        ("graph.gather", [x, ints(-5, 5, 2, 3)], {"axis": 0}),                  # negative indices
        ("graph.gather", [x, ints(-4, 4, 6, dtype=np.int32)], {"axis": 1}),
        ("graph.gather", [x, np.array(-1, dtype=np.int64)], {"axis": -1}),       # scalar index
        ("graph.gather_elements", [f32(4, 5), ints(-5, 5, 3, 6)], {"axis": 1}),  # smaller on axis 0
        ("graph.gather_elements", [f32(4, 5, 2), ints(-4, 4, 4, 5, 2)], {"axis": 0}),
        ("graph.embedding", [f32(10, 6), ints(0, 10, 2, 7)], {}),
        # negatives count from the end; out of range gives an all-off row
        ("graph.one_hot", [np.array([0, 3, -1, -4, 5, 9, -6], dtype=np.int64)], {"depth": 5}),
        ("graph.one_hot", [ints(-3, 3, 2, 3, dtype=np.int32)], {"depth": 3, "axis": 0, "on_value": 2.0,
                                                                 "off_value": -1.0, "dtype": "i32"}),
        ("graph.one_hot", [ints(0, 4, 2, 3)], {"depth": 4, "axis": 1, "dtype": "f64"}),
    ])


def test_rank0_and_empty_results():
    check_ops([
        ("graph.gather", [f32(5), np.array(-2, dtype=np.int64)], {"axis": 0}),            # rank-0 result
        ("graph.reshape", [f32(1, 1)], {"shape": ()}),
        ("graph.pad", [f32(3, 4)], {"pads": (-1, 0, 0, -2)}),                              # crops only
        ("graph.slice", [f32(4, 3)], {"starts": (3,), "ends": (1,), "axes": (0,), "steps": (1,)}),  # empty
        ("graph.split", [f32(3, 4)], {"axis": 1, "sizes": (1, 0, 3)}),                     # an empty piece
        ("graph.topk", [f32(2, 5)], {"k": 0}),
    ])


def test_native_indices_are_clamped():
    """An index out of range (an error in the reference) reads a valid element natively."""
    m, _, ins = one_op_module("graph.gather", [f32(4, 3), np.array([0, 7, -9], dtype=np.int64)], axis=0)
    out = tensorforge.compile(m)(*ins)
    np.testing.assert_array_equal(out, ins[0][[0, 3, 0]])


def _resize(x, sizes, mode, **kw):
    return ("graph.resize", [x], dict(sizes=sizes, mode=mode, **kw))


def test_resize_modes():
    x = f32(1, 2, 5, 7)
    cases = [_resize(x, (1, 2, 10, 14), "nearest", nearest_mode=nm) for nm in NEAREST_MODES]
    cases += [
        _resize(x, (1, 2, 3, 4), "nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        _resize(x, (1, 2, 8, 7), "nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"),
        _resize(x, (1, 2, 9, 11), "linear"),
        _resize(x, (1, 2, 3, 4), "linear"),
        _resize(x, (1, 2, 9, 3), "linear", coordinate_transformation_mode="align_corners"),
        _resize(x, (1, 2, 1, 13), "linear", coordinate_transformation_mode="pytorch_half_pixel"),
        _resize(x, (1, 2, 10, 14), "linear", coordinate_transformation_mode="asymmetric"),
        _resize(x, (1, 2, 12, 5), "cubic"),
        _resize(x, (1, 2, 4, 15), "cubic", coordinate_transformation_mode="align_corners", cubic_coeff_a=-0.5),
        _resize(f32(3, 1, 4), (6, 3, 4), "linear"),                        # a unit axis enlarged
        _resize(ints(0, 100, 4, 6, dtype=np.int32), (7, 3), "nearest"),
        _resize(R.standard_normal((6, 5)), (11, 4), "cubic"),              # f64 data
        # the reference's f32 coordinate rounds some ties unlike the exact one: corrected indices
        _resize(f32(10, 3), (6, 3), "nearest", nearest_mode="floor"),
        _resize(f32(3, 14), (3, 4), "nearest", coordinate_transformation_mode="asymmetric",
                nearest_mode="round_prefer_ceil"),
        _resize(f32(2, 2520), (2, 180), "nearest", nearest_mode="round_prefer_ceil"),
    ]
    check_ops(cases, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cm", COORDINATE_MODES)
def test_resize_nearest_index_sweep(cm):
    """The integer nearest index (with its tie corrections) equals the reference table for
    every size pair and rounding mode (structured level: no compile)."""
    for d in (10, 23):
        x = np.arange(d, dtype=np.float32)
        for nm in NEAREST_MODES:
            for s in range(1, 2 * d + 2):
                if s == d:
                    continue
                _, op, _ = one_op_module("graph.resize", [x], sizes=(s,), nearest_mode=nm,
                                         coordinate_transformation_mode=cm)
                (got,) = run_kernel(lower_op_to_kernel(op), [x])
                want = resize_taps(d, s, "nearest", cm, nm)[0][:, 0]
                np.testing.assert_array_equal(got, x[want], err_msg=f"{cm} {nm} {d} -> {s}")


def test_topk():
    x = f32(3, 9)
    ties = np.array([[1, 3, 3, 2, 3, 1, 0]], dtype=np.float32).repeat(2, 0)
    check_ops([
        ("graph.topk", [x], {"k": 4}),
        ("graph.topk", [x], {"k": 2, "axis": 0, "largest": False}),
        ("graph.topk", [ties], {"k": 5}),                                  # equal values: lower index first
        ("graph.topk", [ties], {"k": 7, "largest": False, "sorted": False}),
        ("graph.topk", [ints(0, 5, 4, 6)], {"k": 3, "axis": 1}),
    ])


def test_topk_long_axis_is_unsupported():
    _, op, _ = one_op_module("graph.topk", [f32(TOPK_MAX_AXIS + 1)], k=3)
    with pytest.raises(UnsupportedOpError, match="topk"):
        lower_op_to_kernel(op)


def test_check_op_harness_path():
    """The shared harness path (one module per op) also works for these ops."""
    check_op("graph.transpose", [f32(2, 3, 4)], perm=(1, 2, 0))
    check_op("graph.gather", [f32(6, 2), ints(-6, 6, 4)], axis=0)
