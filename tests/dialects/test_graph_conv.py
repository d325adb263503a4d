"""graph.conv / conv_transpose: interpreter vs torch.nn.functional and onnxruntime, shape rules, cost."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensorforge.errors import IRError, ShapeError
from tensorforge.ir import tensor

from .nn_harness import assert_close, cost, ort_run, rand, result_type, run, set_attr_and_verify

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _t(a):
    return torch.from_numpy(a)


@pytest.mark.parametrize("x_shape,w_shape,stride,pad,dil,groups,bias", [
    ((2, 3, 9, 10), (4, 3, 3, 3), 1, 1, 1, 1, True),            # "same" 3x3
    ((1, 3, 17, 15), (8, 3, 7, 7), 2, 3, 1, 1, True),           # ResNet-like stem
    ((2, 8, 9, 11), (6, 4, 3, 2), 2, 1, 2, 2, False),           # groups, dilation, stride
    ((1, 6, 8, 8), (6, 1, 3, 3), 1, 1, 1, 6, True),             # depthwise
    ((1, 4, 8, 7), (12, 1, 3, 3), 2, 1, 1, 4, True),            # depthwise, channel multiplier 3
    ((2, 16, 5, 5), (8, 16, 1, 1), 1, 0, 1, 1, True),           # pointwise
    ((2, 4, 12), (6, 2, 3), 2, 1, 2, 2, True),                  # 1-d
    ((1, 4, 5, 6, 7), (6, 2, 3, 2, 3), 1, 1, 1, 2, True),       # 3-d
])
def test_conv_matches_torch(rng, x_shape, w_shape, stride, pad, dil, groups, bias):
    x, w = rand(rng, *x_shape), rand(rng, *w_shape)
    b = rand(rng, w_shape[0]) if bias else None
    d = len(x_shape) - 2
    y = run("conv", *([x, w] + ([b] if bias else [])), strides=(stride,) * d, pads=(pad,) * (2 * d),
            dilations=(dil,) * d, groups=groups)
    expected = _CONV[d](_t(x), _t(w), None if b is None else _t(b), stride=stride, padding=pad, dilation=dil,
                        groups=groups)
    assert_close(y, expected.numpy())


def test_conv_default_attributes_mean_unit_stride_no_pad(rng):
    x, w = rand(rng, 1, 2, 6, 6), rand(rng, 3, 2, 3, 3)
    assert_close(run("conv", x, w), F.conv2d(_t(x), _t(w)).numpy())


def test_conv_asymmetric_pads_match_explicit_padding(rng):
    x, w = rand(rng, 2, 3, 7, 8), rand(rng, 4, 3, 3, 2)
    pads = (0, 2, 1, 1)    # (top, left, bottom, right)
    y = run("conv", x, w, strides=(2, 1), pads=pads)
    padded = F.pad(_t(x), (pads[1], pads[3], pads[0], pads[2]))     # torch order: last axis first
    assert_close(y, F.conv2d(padded, _t(w), stride=(2, 1)).numpy())


def test_conv_matches_onnxruntime(rng):
    x, w, b = rand(rng, 1, 4, 10, 9), rand(rng, 6, 2, 3, 3), rand(rng, 6)
    attrs = dict(strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2), group=2)
    expected = ort_run("Conv", {"x": x, "w": w, "b": b}, **attrs)
    y = run("conv", x, w, b, strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2), groups=2)
    assert_close(y, expected)


def test_conv_realistic_stem(rng):
    """The ResNet-50 stem at full resolution (this path must be fast: im2col + GEMM)."""
    x, w = rand(rng, 1, 3, 224, 224), rand(rng, 64, 3, 7, 7) * 0.1
    y = run("conv", x, w, strides=(2, 2), pads=(3, 3, 3, 3))
    assert y.shape == (1, 64, 112, 112)
    assert_close(y, F.conv2d(_t(x), _t(w), stride=2, padding=3).numpy(), rtol=1e-4, atol=1e-4)


def test_conv_symbolic_dims():
    # batch symbolic; a spatial symbol survives a size-preserving window
    assert result_type("conv", tensor(("N", 3, "H", "W")), tensor((8, 3, 3, 3)), pads=(1, 1, 1, 1)) == \
        tensor(("N", 8, "H", "W"))
    # a strided window gives the ONNX output rule as a floordiv expression
    assert result_type("conv", tensor((1, 3, "H", 8)), tensor((8, 3, 3, 3)), strides=(2, 2)) == \
        tensor((1, 8, "(H-3)//2+1", 3))
    assert result_type("conv_transpose", tensor(("N", 8, "H", 7)), tensor((8, 4, 4, 4)), strides=(2, 2),
                       pads=(1, 1, 1, 1)) == tensor(("N", 4, "2*H", 14))


@pytest.mark.parametrize("x,w,attrs,needle", [
    ((1, 4, 8, 8), (8, 3, 3, 3), {}, "channel dim 1: x has 4 channels"),
    ((1, 6, 8, 8), (8, 3, 3, 3), {"groups": 4}, "not divisible by groups = 4"),
    ((1, 6, 8, 8), (9, 3, 3, 3), {"groups": 2}, "output channels .* not divisible"),
    ((1, 3, 8, 8), (8, 3, 3, 3), {"pads": (1, 1)}, "pads has 2 values, expected 4"),
    ((1, 3, 8, 8), (8, 3, 3, 3), {"strides": (1, 0)}, "strides = \\(1, 0\\): every value must be >= 1"),
    ((1, 3, 8, 8), (8, 3, 3, 3), {"dilations": (2, 2, 2)}, "dilations has 3 values, expected 2"),
    ((1, 3, 4, 8), (8, 3, 3, 3), {"dilations": (2, 1)}, "spatial axis 0: window extent 5"),
    ((1, 3, 8), (8, 3, 3, 3), {}, "w must have rank 3"),
    ((1, 3), (8, 3), {}, "1-3 spatial dims"),
    ((1, 3, 8, 8), (8, 3, 3, 3), {"groups": 0}, "groups must be >= 1"),
])
def test_conv_shape_errors_name_the_op(x, w, attrs, needle):
    with pytest.raises(ShapeError, match=needle) as e:
        result_type("conv", tensor(x), tensor(w), **attrs)
    assert "graph.conv" in str(e.value)


def test_conv_bias_must_match_output_channels():
    with pytest.raises(ShapeError, match="one value per output channel"):
        result_type("conv", tensor((1, 3, 8, 8)), tensor((8, 3, 3, 3)), tensor((3,)))


def test_verifier_catches_a_broken_attribute():
    with pytest.raises(IRError, match="graph.conv.*pads has 3 values"):
        set_attr_and_verify("conv", [tensor((1, 3, 8, 8)), tensor((8, 3, 3, 3))], "pads", (1, 1, 1))


def test_conv_cost_counts_real_flops():
    # 2 * N * O * outHW * C/groups * kHW, plus one add per output for the bias
    c = cost("conv", tensor((2, 64, 56, 56)), tensor((128, 64, 3, 3)), tensor((128,)), pads=(1, 1, 1, 1))
    out = 2 * 128 * 56 * 56
    assert c.flops == 2 * out * 64 * 9 + out
    assert c.bytes == (2 * 64 * 56 * 56 + 128 * 64 * 9 + 128 + out) * 4
    dw = cost("conv", tensor((1, 32, 16, 16)), tensor((32, 1, 3, 3)), groups=32, strides=(2, 2), pads=(1, 1, 1, 1))
    assert dw.flops == 2 * 32 * 8 * 8 * 1 * 9
    ct = cost("conv_transpose", tensor((1, 16, 8, 8)), tensor((16, 4, 2, 2)), groups=2, strides=(2, 2))
    assert ct.flops == 2 * 16 * 8 * 8 * 4 * 4     # every input pixel x (O/groups * kHW)


# ---- conv_transpose -------------------------------------------------------------------------

def _torch_conv_transpose(x, w, b, strides, pads, dilations, output_padding, groups):
    """torch with zero padding, then the ONNX crop of (begin, end) pads: an independent reference."""
    d = x.ndim - 2
    full = _CONV_T[d](_t(x), _t(w), None if b is None else _t(b), stride=strides, padding=0,
                      output_padding=output_padding, dilation=dilations, groups=groups).numpy()
    crop = tuple(slice(pads[i], full.shape[2 + i] - pads[d + i]) for i in range(d))
    return full[(Ellipsis,) + crop]


@pytest.mark.parametrize("x_shape,w_shape,strides,pads,dil,outpad,groups", [
    ((2, 4, 5, 6), (4, 3, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 5, 6), (4, 3, 3, 2), (3, 2), (1, 2, 0, 1), (2, 1), (2, 1), 2),
    ((1, 6, 7), (6, 1, 4), (2,), (1, 1), (1,), (1,), 6),
    ((1, 4, 3, 4, 5), (4, 2, 2, 3, 2), (1, 2, 2), (0, 1, 0, 1, 0, 1), (1, 1, 2), (0, 1, 1), 2),
    ((1, 2, 4, 4), (2, 5, 4, 4), (2, 2), (1, 1, 1, 1), (1, 1), (0, 0), 1),     # typical 2x upsampler
])
def test_conv_transpose_matches_torch(rng, x_shape, w_shape, strides, pads, dil, outpad, groups):
    x, w = rand(rng, *x_shape), rand(rng, *w_shape)
    b = rand(rng, w_shape[1] * groups)
    y = run("conv_transpose", x, w, b, strides=strides, pads=pads, dilations=dil, output_padding=outpad,
            groups=groups)
    assert_close(y, _torch_conv_transpose(x, w, b, strides, pads, dil, outpad, groups))


def test_conv_transpose_matches_onnxruntime(rng):
    x, w, b = rand(rng, 1, 4, 5, 4), rand(rng, 4, 3, 3, 3), rand(rng, 6)
    attrs = dict(strides=(2, 3), pads=(1, 0, 2, 1), output_padding=(1, 2), group=2)
    expected = ort_run("ConvTranspose", {"x": x, "w": w, "b": b}, **attrs)
    y = run("conv_transpose", x, w, b, strides=(2, 3), pads=(1, 0, 2, 1), output_padding=(1, 2), groups=2)
    assert_close(y, expected)


def test_conv_transpose_shapes():
    assert result_type("conv_transpose", tensor(("N", 8, 7, 7)), tensor((8, 4, 4, 4)), strides=(2, 2),
                       pads=(1, 1, 1, 1)) == tensor(("N", 4, 14, 14))
    assert result_type("conv_transpose", tensor((1, 8, 7, 7)), tensor((8, 4, 3, 3)), groups=2) == \
        tensor((1, 8, 9, 9))


@pytest.mark.parametrize("x,w,attrs,needle", [
    ((1, 4, 5, 5), (3, 2, 3, 3), {}, "channel dim 1 of x must equal dim 0 of w"),
    ((1, 6, 5, 5), (6, 2, 3, 3), {"groups": 4}, "not divisible by groups = 4"),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"output_padding": (2, 0), "strides": (2, 2)}, "output_padding\\[0\\] = 2"),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"output_padding": (0,)}, "output_padding has 1 values"),
    ((1, 4, 1, 1), (4, 2, 2, 2), {"pads": (1, 1, 1, 1)}, "output size 0 is not positive"),
])
def test_conv_transpose_shape_errors(x, w, attrs, needle):
    with pytest.raises(ShapeError, match=needle) as e:
        result_type("conv_transpose", tensor(x), tensor(w), **attrs)
    assert "graph.conv_transpose" in str(e.value)


def test_half_precision_conv_accumulates_in_f32(rng):
    x, w = rand(rng, 1, 16, 6, 6, dtype=np.float16), rand(rng, 8, 16, 3, 3, dtype=np.float16)
    y = run("conv", x, w, pads=(1, 1, 1, 1))
    assert y.dtype == np.float16
    expected = F.conv2d(_t(x.astype(np.float32)), _t(w.astype(np.float32)), padding=1).numpy()
    assert_close(y.astype(np.float32), expected.astype(np.float16).astype(np.float32), rtol=1e-3, atol=1e-3)
