"""GridSample (``graph.grid_sample``, a library kernel), AffineGrid (a matmul with a constant grid)
and Resize's tap-table path, against ONNX's reference on the interpreter and natively."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.frontends.onnx_ref_util import check_against_reference, one_node_model

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["nearest", "linear", "cubic"], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_2d(mode, padding, align):
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = RNG.uniform(-1.7, 1.7, (2, 4, 7, 2)).astype(np.float32)    # outside [-1, 1] too
    m = one_node_model("GridSample", {"x": x, "grid": grid}, 22, mode=mode, padding_mode=padding,
                       align_corners=align)
    check_against_reference(m, {"x": x, "grid": grid}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,padding", [("linear", "reflection"), ("nearest", "border"), ("linear", "zeros")])
def test_grid_sample_3d(mode, padding):
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = RNG.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)
    m = one_node_model("GridSample", {"x": x, "grid": grid}, 22, mode=mode, padding_mode=padding)
    check_against_reference(m, {"x": x, "grid": grid}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dims,align", [((2, 3, 5, 7), 0), ((1, 2, 3, 4, 5), 1)])
def test_affine_grid(dims, align):
    nsp = len(dims) - 2
    theta = RNG.standard_normal((dims[0], nsp, nsp + 1)).astype(np.float32)
    m = one_node_model("AffineGrid", {"theta": theta}, 20, constants={"size": np.array(dims, np.int64)},
                       align_corners=align)
    check_against_reference(m, {"theta": theta}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,coord,attrs", [
    ("linear", "half_pixel", {"antialias": 1}),
    ("cubic", "half_pixel", {"antialias": 1}),
    ("cubic", "half_pixel", {"exclude_outside": 1, "cubic_coeff_a": -0.5}),
    ("linear", "half_pixel_symmetric", {}),
    ("nearest", "asymmetric", {}),
    ("linear", "align_corners", {}),
])
def test_resize_with_scales_off_the_size_ratio(mode, coord, attrs):
    x = RNG.standard_normal((1, 2, 9, 7)).astype(np.float32)
    scales = np.array([1, 1, 0.43, 1.7], np.float32)
    m = one_node_model("Resize", {"x": x}, 19, constants={"roi": np.zeros(0, np.float32), "scales": scales},
                       mode=mode, coordinate_transformation_mode=coord, **attrs)
    check_against_reference(m, {"x": x}, rtol=1e-4, atol=1e-5)


def test_resize_tf_crop_and_resize_extrapolates():
    x = RNG.standard_normal((1, 1, 6, 6)).astype(np.float32)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4], np.float32)
    m = one_node_model("Resize", {"x": x}, 19, constants={"roi": roi, "scales": np.zeros(0, np.float32),
                                                            "sizes": np.array([1, 1, 5, 4], np.int64)},
                       mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=9.5)
    check_against_reference(m, {"x": x}, rtol=1e-4, atol=1e-5)
