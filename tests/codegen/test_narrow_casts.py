"""float -> 8/16-bit integer casts go through int32 in the C (``emit_loop._cast``): gcc 12 leaves a
loop with a direct float -> uint8 conversion scalar ("control flow in loop"), which made a QDQ
BERT's requantize-GELU-requantize kernel 10x slower.  The values are the direct conversion's for
every in-range input, and the quantize chain a QDQ model imports (round, clip, cast) agrees with
NumPy bit for bit, NaN and the infinities included."""
import numpy as np
import pytest

import tensorforge
from tensorforge.ir import Module, tensor
from tensorforge.ir.types import DType


@pytest.mark.parametrize("dtype", [DType.u8, DType.i8, DType.u16, DType.i16])
def test_quantize_chain_through_int32(dtype):
    lo, hi = dtype.int_range
    m = Module()
    f = m.add_function("main", [tensor((3, 1000), DType.f32)])
    b = f.builder().graph
    y = b.cast(b.clip(b.round(f.args[0]), min=float(lo), max=float(hi)), dtype=dtype)
    f.set_return([y])
    cm = tensorforge.compile(m)
    assert f"(({dtype.c_name})(int32_t)" in cm.source
    x = (np.random.default_rng(0).standard_normal((3, 1000)) * 2 * max(hi, 1)).astype(np.float32)
    x.reshape(-1)[:4] = [np.inf, -np.inf, 0.5, -0.5]
    want = np.clip(np.rint(x), lo, hi).astype(dtype.np)
    np.testing.assert_array_equal(np.asarray(cm(x)), want)
