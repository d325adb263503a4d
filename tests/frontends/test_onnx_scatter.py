"""ScatterND / ScatterElements / Scatter (``graph.scatter_nd``, a library kernel) and TensorScatter
(gather_elements + select), against ONNX's reference on the interpreter and natively."""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontends.onnx_ref_util import TARGETS, check_against_reference, one_node_model

import tensorforge

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "min", "max"])
def test_scatter_nd_slices_with_duplicates(reduction):
    data = RNG.standard_normal((5, 4, 3)).astype(np.float32)
    # rows address (i, j) slices of 3; duplicates apply in order (none: only unique rows)
    idx = np.array([[0, 1], [4, 3], [-1, 0], [2, 2]] + ([] if reduction == "none" else [[0, 1], [-5, 1]]))
    upd = RNG.standard_normal(idx.shape[:-1] + (3,)).astype(np.float32)
    m = one_node_model("ScatterND", {"data": data, "indices": idx, "updates": upd}, 18, reduction=reduction)
    check_against_reference(m, {"data": data, "indices": idx, "updates": upd})


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_int32_indices(reduction, axis):
    data = RNG.integers(-50, 50, (4, 5, 6)).astype(np.int64)
    shape = [3, 4, 5]
    idx = RNG.integers(-data.shape[axis], data.shape[axis], shape).astype(np.int32)
    if reduction == "none":       # unique targets along the axis so that the order does not matter
        idx = np.moveaxis(np.argsort(RNG.random(np.moveaxis(np.zeros(data.shape), axis, -1).shape), -1), -1, axis)
        idx = idx[:3, :4, :5].astype(np.int32)
    upd = RNG.integers(-50, 50, idx.shape).astype(np.int64)
    m = one_node_model("ScatterElements", {"data": data, "indices": idx, "updates": upd}, 18,
                       axis=axis, reduction=reduction)
    check_against_reference(m, {"data": data, "indices": idx, "updates": upd}, exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_max_min_propagate_nan(target):
    """min/max reductions are NumPy's minimum/maximum: a NaN on either side gives NaN."""
    data = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    idx = np.array([[0], [1], [2], [2]])
    upd = np.array([np.nan, 5.0, 2.0, 7.0], np.float32)
    for red, want in (("max", [np.nan, np.nan, 7.0, 4.0]), ("min", [np.nan, np.nan, 2.0, 4.0])):
        m = one_node_model("ScatterND", {"data": data, "indices": idx, "updates": upd}, 18, reduction=red)
        got = tensorforge.compile(m, target=target)(data, idx, upd)
        np.testing.assert_array_equal(np.asarray(got), np.array(want, np.float32))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_kv_cache(mode):
    past = RNG.standard_normal((2, 3, 8, 4)).astype(np.float32)
    upd = RNG.standard_normal((2, 3, 3, 4)).astype(np.float32)
    w = np.array([1, 6 if mode == "circular" else 5], np.int64)
    m = one_node_model("TensorScatter", {"past": past, "update": upd, "w": w}, 24, mode=mode)
    check_against_reference(m, {"past": past, "update": upd, "w": w}, exact=True)
