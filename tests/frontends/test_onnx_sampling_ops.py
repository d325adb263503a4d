"""RoiAlign (``graph.roi_align``) and DeformConv (``graph.deform_conv``), both library kernels,
against ONNX's reference on the interpreter and natively."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.frontends.onnx_ref_util import check_against_reference, one_node_model

import tensorforge  # noqa: E402
from onnx import TensorProto as T, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(11)


def _rois(count: int, size: float) -> np.ndarray:
    """Random [x1, y1, x2, y2] boxes, some reaching outside the image and some degenerate."""
    a = RNG.uniform(-2.0, size + 2.0, (count, 2))
    b = a + RNG.uniform(-0.5, size * 0.8, (count, 2))
    return np.concatenate([a, b], axis=1).astype(np.float32)


@pytest.mark.parametrize("mode,coord,ratio", list(itertools.product(
    ["avg", "max"], ["half_pixel", "output_half_pixel"], [2, 0])))
def test_roi_align(mode, coord, ratio):
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = _rois(5, 16.0)
    bi = np.array([0, 1, 1, 0, 1], np.int64)
    feeds = {"x": x, "rois": rois, "batch_indices": bi}
    m = one_node_model("RoiAlign", feeds, 22, mode=mode, coordinate_transformation_mode=coord,
                       output_height=3, output_width=4, sampling_ratio=ratio, spatial_scale=0.625)
    check_against_reference(m, feeds, rtol=1e-4, atol=1e-5)


def test_roi_align_dynamic_roi_count():
    """The roi count is a dim_param: one compiled model runs 2 and 6 rois natively."""
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=2, output_width=2,
                            sampling_ratio=0, spatial_scale=1.0, mode="avg")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 8, 8]),
                                            helper.make_tensor_value_info("rois", T.FLOAT, ["R", 4]),
                                            helper.make_tensor_value_info("bi", T.INT64, ["R"])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    ref = ReferenceEvaluator(model)
    for target in ("interpreter", "cpu"):
        cm = tensorforge.compile(model, target=target)
        for r in (2, 6):
            rois, bi = _rois(r, 8.0), np.zeros(r, np.int64)
            want = ref.run(None, {"x": x, "rois": rois, "bi": bi})[0]
            got = np.asarray(cm(x, rois, bi))
            assert got.shape == want.shape == (r, 2, 2, 2), (target, got.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=target)


@pytest.mark.parametrize("case", ["basic", "strided", "groups_mask_bias", "batch"])
def test_deform_conv(case):
    n, c, h, w, oc, k = 1, 2, 5, 6, 3, (3, 3)
    attrs = {}
    group = og = 1
    if case == "strided":
        attrs = {"strides": [2, 1], "pads": [1, 2, 0, 1], "dilations": [1, 2]}
    elif case == "groups_mask_bias":
        c, oc, group, og = 4, 6, 2, 2
        attrs = {"group": group, "offset_group": og, "pads": [1, 1, 1, 1]}
    elif case == "batch":
        n, k = 2, (2, 3)
        attrs = {"pads": [0, 1, 1, 0], "offset_group": 2}
        og = 2
    s, p, d = attrs.get("strides", [1, 1]), attrs.get("pads", [0, 0, 0, 0]), attrs.get("dilations", [1, 1])
    oh = (h + p[0] + p[2] - ((k[0] - 1) * d[0] + 1)) // s[0] + 1
    ow = (w + p[1] + p[3] - ((k[1] - 1) * d[1] + 1)) // s[1] + 1
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((oc, c // group) + k).astype(np.float32)
    offset = (RNG.standard_normal((n, og * k[0] * k[1] * 2, oh, ow)) * 1.5).astype(np.float32)
    feeds = {"x": x, "w": wt, "offset": offset}
    if case == "groups_mask_bias":
        feeds["b"] = RNG.standard_normal(oc).astype(np.float32)
        feeds["mask"] = RNG.uniform(0, 1, (n, og * k[0] * k[1], oh, ow)).astype(np.float32)
    m = one_node_model("DeformConv", feeds, 22, kernel_shape=list(k), **attrs)
    check_against_reference(m, feeds, rtol=1e-4, atol=1e-5)


def test_deform_conv_zero_offset_is_conv():
    """With zero offsets and no mask DeformConv is Conv (a cross-check independent of the reference)."""
    x = RNG.standard_normal((1, 3, 6, 7)).astype(np.float32)
    wt = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    offset = np.zeros((1, 18, 6, 7), np.float32)
    dm = one_node_model("DeformConv", {"x": x, "w": wt, "offset": offset, "b": b}, 22, pads=[1, 1, 1, 1])
    cm = one_node_model("Conv", {"x": x, "w": wt, "b": b}, 22, pads=[1, 1, 1, 1])
    want = ReferenceEvaluator(cm).run(None, {"x": x, "w": wt, "b": b})[0]
    for target in ("interpreter", "cpu"):
        got = np.asarray(tensorforge.compile(dm, target=target)(x, wt, offset, b))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=target)
