"""graph dialect indexing ops (index.py): interpreter vs onnxruntime / torch, shape errors."""
import numpy as np
import pytest
import torch

from tensorforge.errors import IRError, ShapeError
from tensorforge.ir import DType, FusionKind, Module, lookup, tensor
from tests.dialects.test_graph_shape import RTOL, build_error, i64, onnx_run, run_graph


@pytest.fixture
def x345(rng):
    return rng.standard_normal((3, 4, 5)).astype(np.float32)


# ---- gather / gather_elements / embedding ---------------------------------------------------

@pytest.mark.parametrize("axis, indices", [
    (0, [[2, -1], [0, -3]]),
    (1, [3, -4, 0]),
    (-1, 4),                       # scalar index drops the axis
    (2, [[[-5, 1]]]),
])
def test_gather_matches_onnx(x345, axis, indices):
    ind = np.asarray(indices, dtype=np.int64)
    (y,) = run_graph([x345, ind], lambda g, x, i: g.gather(x, i, axis=axis))
    (ref,) = onnx_run("Gather", {"x": x345, "i": ind}, {"axis": axis})
    np.testing.assert_array_equal(y, ref)


def test_gather_symbolic_and_errors(x345):
    m = Module()
    f = m.add_function("main", [tensor(("N", 8)), tensor(("B", "L"), "i32")])
    g = f.builder().graph
    assert g.gather(*f.args, axis=1).type == tensor(("N", "B", "L"))
    with pytest.raises(ShapeError, match="indices must have an integer element type"):
        g.gather(f.args[0], f.args[0])
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        g.gather(*f.args, axis=2)
    with pytest.raises(IRError, match="index 3 is out of range for size 3"):
        run_graph([x345, i64(0, 3)], lambda g, x, i: g.gather(x, i))


@pytest.mark.parametrize("axis, ishape", [(0, (2, 4, 5)), (1, (3, 6, 2)), (-1, (1, 4, 7))])
def test_gather_elements_matches_onnx(rng, x345, axis, ishape):
    n = x345.shape[axis]
    ind = rng.integers(-n, n, ishape).astype(np.int64)
    (y,) = run_graph([x345, ind], lambda g, x, i: g.gather_elements(x, i, axis=axis))
    (ref,) = onnx_run("GatherElements", {"x": x345, "i": ind}, {"axis": axis})
    np.testing.assert_array_equal(y, ref)


def test_gather_elements_errors():
    build_error([tensor((3, 4)), tensor((3,), "i64")], lambda g, x, i: g.gather_elements(x, i),
                "indices have rank 1, x has rank 2")
    build_error([tensor((3, 4)), tensor((2, 5), "i64")], lambda g, x, i: g.gather_elements(x, i),
                "indices axis 1 has size 5, larger than x's 4")


def test_embedding_matches_torch(rng):
    table = rng.standard_normal((10, 6)).astype(np.float32)
    ids = rng.integers(0, 10, (2, 7)).astype(np.int32)
    (y,) = run_graph([table, ids], lambda g, t, i: g.embedding(t, i))
    ref = torch.nn.functional.embedding(torch.from_numpy(ids).long(), torch.from_numpy(table)).numpy()
    np.testing.assert_array_equal(y, ref)
    with pytest.raises(IRError, match="id -1 is out of range for a table of 10 rows"):
        run_graph([table, np.asarray([1, -1], np.int64)], lambda g, t, i: g.embedding(t, i))
    build_error([tensor((10,)), tensor((2,), "i64")], lambda g, t, i: g.embedding(t, i), r"must be \(V, D\)")


# ---- one_hot ------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_matches_onnx(axis):
    ind = np.asarray([[0, 3, -1], [-4, 5, 2]], dtype=np.int64)    # 5 and -5 would be out of range
    (y,) = run_graph([ind], lambda g, i: g.one_hot(i, depth=4, axis=axis, on_value=2.5, off_value=-1))
    (ref,) = onnx_run("OneHot", {"i": ind}, {"axis": axis},
                      constants={"depth": i64(4), "values": np.asarray([-1, 2.5], np.float32)})
    np.testing.assert_array_equal(y, ref)
    assert y.dtype == np.float32


def test_one_hot_dtype_and_errors():
    (y,) = run_graph([np.asarray([1, 0], np.int32)], lambda g, i: g.one_hot(i, depth=3, dtype="i64"))
    np.testing.assert_array_equal(y, [[0, 1, 0], [1, 0, 0]])
    assert y.dtype == np.int64
    build_error(tensor((2,), "i64"), lambda g, i: g.one_hot(i, depth=0), "depth = 0")
    build_error(tensor((2,), "f32"), lambda g, i: g.one_hot(i, depth=3), "integer element type")


# ---- topk ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis, k, largest", [(-1, 3, 1), (1, 2, 0), (0, 3, 1), (2, 0, 1), (-1, 6, 0)])
def test_topk_matches_onnx_with_ties(rng, axis, k, largest):
    x = rng.integers(0, 4, (3, 5, 6)).astype(np.float32)     # many ties
    vals, idx = run_graph([x], lambda g, v: g.topk(v, k=k, axis=axis, largest=bool(largest)))
    rv, ri = onnx_run("TopK", {"x": x}, {"axis": axis, "largest": largest, "sorted": 1},
                      constants={"k": i64(k)}, n_outputs=2)
    np.testing.assert_array_equal(vals, rv)
    np.testing.assert_array_equal(idx, ri)
    assert idx.dtype == np.int64


def test_topk_integer_ties_and_errors():
    x = np.asarray([[3, 5, 5, 1, 5]], dtype=np.int32)
    vals, idx = run_graph([x], lambda g, v: g.topk(v, k=4))
    assert vals.tolist() == [[5, 5, 5, 3]] and idx.tolist() == [[1, 2, 4, 0]]
    build_error(tensor((2, 5)), lambda g, v: g.topk(v, k=6), r"k = 6 is larger than axis 1 \(size 5\)")
    m = Module()
    f = m.add_function("main", [tensor((2, "L"))])
    vals_t, idx_t = f.builder().graph.topk(f.args[0], k=3)
    assert vals_t.type == tensor((2, 3)) and idx_t.type == tensor((2, 3), DType.i64)


# ---- resize -------------------------------------------------------------------------------------

COORD = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def _onnx_resize(x, sizes, **attrs):
    (ref,) = onnx_run("Resize", {"x": x}, attrs, constants={"roi": None, "scales": None, "sizes": i64(*sizes)})
    return ref


def _resize(x, sizes, **attrs):
    (y,) = run_graph([x], lambda g, v: g.resize(v, sizes=sizes, **attrs))
    return y


@pytest.mark.parametrize("nearest_mode", NEAREST)
@pytest.mark.parametrize("ctm", COORD)
def test_resize_nearest_matches_onnx(rng, ctm, nearest_mode):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    for sizes in [(8, 3), (13, 10)]:          # down, up and non-integer ratios on each axis
        attrs = dict(mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nearest_mode)
        np.testing.assert_array_equal(_resize(x, sizes, **attrs), _onnx_resize(x, sizes, **attrs))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("ctm", COORD)
def test_resize_linear_cubic_match_onnx(rng, mode, ctm):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    # onnxruntime sums the 16 cubic taps in f32 (we use f64): a few f32 ulps apart near zero.
    atol = 1e-6 if mode == "linear" else 1e-5
    for sizes in [(2, 3, 9, 4), (2, 3, 3, 13), (2, 3, 1, 6)]:
        attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
        np.testing.assert_allclose(_resize(x, sizes, **attrs), _onnx_resize(x, sizes, **attrs),
                                   rtol=RTOL, atol=atol)


def test_resize_cubic_coeff_and_nearest_any_rank(rng):
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    attrs = dict(mode="cubic", cubic_coeff_a=-0.5, coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(_resize(x, (1, 2, 7, 9), **attrs), _onnx_resize(x, (1, 2, 7, 9), **attrs),
                               rtol=RTOL, atol=1e-5)
    x3 = rng.integers(0, 100, (3, 4, 5)).astype(np.int32)
    attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    np.testing.assert_array_equal(_resize(x3, (6, 2, 5), **attrs), _onnx_resize(x3, (6, 2, 5), **attrs))


def test_resize_matches_torch_interpolate(rng):
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    t = torch.from_numpy(x)
    F = torch.nn.functional
    np.testing.assert_allclose(
        _resize(x, (1, 2, 10, 9), mode="linear", coordinate_transformation_mode="align_corners"),
        F.interpolate(t, size=(10, 9), mode="bilinear", align_corners=True).numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(
        _resize(x, (1, 2, 3, 4), mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
        F.interpolate(t, size=(3, 4), mode="bilinear", align_corners=False).numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_array_equal(
        _resize(x, (1, 2, 10, 12), coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        F.interpolate(t, size=(10, 12), mode="nearest").numpy())
    # Bicubic in f64 on both sides: tight tolerance (torch uses A = -0.75 and clamped taps too).
    x64, t64 = x.astype(np.float64), t.double()
    for align in (True, False):
        ctm = "align_corners" if align else "pytorch_half_pixel"
        np.testing.assert_allclose(
            _resize(x64, (1, 2, 9, 4), mode="cubic", coordinate_transformation_mode=ctm),
            F.interpolate(t64, size=(9, 4), mode="bicubic", align_corners=align).numpy(), rtol=1e-10, atol=1e-12)


def test_resize_taps_and_symbolic():
    m = Module()
    f = m.add_function("main", [tensor(("N", 3, 4, 4))])
    g = f.builder().graph
    y = g.resize(f.args[0], sizes=("N", 3, 8, 2), mode="cubic")
    assert y.type == tensor(("N", 3, 8, 2))
    taps = lookup("graph.resize").taps(y.op)
    assert taps[0] is None and taps[1] is None
    idx, w = taps[2]
    assert idx.shape == (8, 4) and w.shape == (8, 4) and idx.min() >= 0 and idx.max() <= 3
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
    (out,) = run_graph([x], lambda g, v: g.resize(v, sizes=("N", 3, 8, 2), mode="linear"),
                       types=[tensor(("N", 3, 4, 4))])
    np.testing.assert_allclose(out, _onnx_resize(x, (2, 3, 8, 2), mode="linear"), rtol=RTOL, atol=1e-6)


@pytest.mark.parametrize("shape, kw, match", [
    ((2, 4), dict(sizes=(4,)), "1 entries for rank 2"),
    ((2, 4), dict(sizes=(2, 8), mode="area"), "mode = 'area' is not one of"),
    ((2, 4), dict(sizes=(2, 8), coordinate_transformation_mode="tf_crop_and_resize"), "coordinate_transformation"),
    ((2, 4), dict(sizes=(2, 8), nearest_mode="round"), "nearest_mode = 'round'"),
    (("N", 4), dict(sizes=(2, 8)), r"sizes\[0\] = 2 but the axis has size 'N'"),
    ((0, 4), dict(sizes=(2, 8)), "axis 0 is empty"),
])
def test_resize_errors(shape, kw, match):
    build_error(tensor(shape), lambda g, x: g.resize(x, **kw), match)
    build_error(tensor((2, 4), "i64"), lambda g, x: g.resize(x, sizes=(2, 8), mode="linear"), "floating point")


def test_fusion_kinds_and_costs():
    kinds = {n: lookup(f"graph.{n}").fusion for n in
             ("gather", "gather_elements", "embedding", "resize", "one_hot", "topk")}
    assert kinds.pop("topk") is FusionKind.OPAQUE
    assert set(kinds.values()) == {FusionKind.INJECTIVE}
    # A gather reads only the rows it keeps: its bytes do not scale with the table.
    g = lookup("graph.gather")
    small = g.cost([tensor((10, 64)), tensor((4,), "i64")], [tensor((4, 64))], {"axis": 0})
    big = g.cost([tensor((100000, 64)), tensor((4,), "i64")], [tensor((4, 64))], {"axis": 0})
    assert small.bytes == big.bytes == 4 * 8 + 2 * 4 * 64 * 4
