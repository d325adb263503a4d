"""The hand-written 2-D max pool (codegen/c/library_kernels.py): equal to the reference on every
window shape, stride, padding and ceil mode, NaN/Inf/-0.0 included; other pools keep the loop."""
from __future__ import annotations

import numpy as np
import pytest

import tensorforge
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.types import DType, tensor


def _model(shape, dtype=DType.f32, **attrs) -> ModuleOp:
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(shape, dtype)], arg_names=["x"])
    g = f.builder().graph
    f.set_return([g.max_pool(f.args[0], **attrs)])
    return m


def _with_specials(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7], flat[3::11], flat[5::13], flat[1::17] = np.nan, -np.inf, -0.0, np.inf
    return x


def _assert_same(got, want):
    assert got.shape == want.shape
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert (np.signbit(got) == np.signbit(want))[~nan].all()     # -0.0 where the reference has it


CASES = [
    ((1, 64, 112, 112), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),    # ResNet's stem pool
    ((2, 3, 7, 9), dict(kernel=(3, 2), strides=(1, 2), pads=(2, 1, 0, 1))),          # uneven pads
    ((1, 2, 5, 5), dict(kernel=(5, 5), strides=(3, 3), pads=(4, 4, 4, 4))),          # pads wider than the input
    ((1, 2, 6, 7), dict(kernel=(2, 2), strides=(2, 2), ceil_mode=True)),              # ceil mode overhang
    ((1, 3, 8, 8), dict(kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))),
    ((1, 1, 1, 1), dict(kernel=(1, 1))),
    ((2, 5, 4, 31), dict(kernel=(1, 7), strides=(1, 3), pads=(0, 3, 0, 3))),
    ((1, 3, 9, 20), dict(kernel=(2, 2), strides=(3, 4), pads=(1, 1, 1, 1))),         # stride past the window
    ((1, 2, 11, 13), dict(kernel=(3, 3), strides=(3, 3), pads=(1, 1, 1, 1), ceil_mode=True)),
    ((1, 2, 10, 10), dict(kernel=(4, 4), strides=(2, 2), pads=(1, 2, 2, 1))),         # even window, phases of 2
]


@pytest.mark.parametrize("shape,attrs", CASES)
def test_native_max_pool_equals_the_reference(shape, attrs):
    x = _with_specials(shape, sum(shape))
    native = tensorforge.compile(_model(shape, **attrs), target="cpu")
    assert "TF_POOL_MAX" in native.source                 # the hand-written kernel, not the loop
    _assert_same(native(x), tensorforge.compile(_model(shape, **attrs), target="interpreter")(x))


@pytest.mark.parametrize("threads", [2, 3])
def test_one_image_splits_into_bands_of_rows(threads):
    """One image on several threads: each takes a band of output rows of every plane (uneven
    bands, halo rows computed by both neighbours), with the same results as the reference."""
    shape, attrs = (1, 16, 67, 61), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    x = _with_specials(shape, 5)
    native = tensorforge.compile(_model(shape, **attrs), target="cpu", threads=threads)
    assert "bands * 16" in native.source
    _assert_same(native(x), tensorforge.compile(_model(shape, **attrs), target="interpreter")(x))


@pytest.mark.parametrize("shape,dtype,attrs", [
    ((1, 2, 9, 9), DType.f32, dict(kernel=(3, 3), dilations=(2, 2))),      # dilated
    ((1, 2, 9, 9), DType.f64, dict(kernel=(3, 3), strides=(2, 2))),        # not float32
    ((1, 2, 9), DType.f32, dict(kernel=(3,), strides=(2,))),               # 1-D
])
def test_other_max_pools_keep_the_loop_kernel(shape, dtype, attrs):
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype.np)
    native = tensorforge.compile(_model(shape, dtype, **attrs), target="cpu")
    assert "TF_POOL_MAX" not in native.source
    _assert_same(native(x), tensorforge.compile(_model(shape, dtype, **attrs), target="interpreter")(x))


def test_nothing_fuses_into_the_native_pool():
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((1, 4, 8, 8))], arg_names=["x"])
    g = f.builder().graph
    f.set_return([g.relu(g.max_pool(g.relu(f.args[0]), kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)))])
    x = _with_specials((1, 4, 8, 8), 3)
    native = tensorforge.compile(m, target="cpu")
    assert "TF_POOL_MAX" in native.source
    _assert_same(native(x), tensorforge.compile(m, target="interpreter")(x))


@pytest.mark.parametrize("dtype", [DType.u8, DType.i8])
@pytest.mark.parametrize("shape,attrs", [CASES[0], CASES[1], CASES[3]])
def test_native_max_pool_of_8_bit_values(shape, attrs, dtype):
    """A quantized model's pool: the padding is the type's lowest value, which every tap beats."""
    lo, hi = (0, 256) if dtype is DType.u8 else (-128, 128)
    x = np.random.default_rng(2).integers(lo, hi, size=shape).astype(dtype.np)
    native = tensorforge.compile(_model(shape, dtype, **attrs), target="cpu")
    assert "TF_POOL_MAX" in native.source
    np.testing.assert_array_equal(native(x), tensorforge.compile(_model(shape, dtype, **attrs), target="interpreter")(x))
