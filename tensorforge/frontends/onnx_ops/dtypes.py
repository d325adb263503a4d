"""ONNX element types <-> graph ``DType`` and ONNX tensors -> NumPy.

Only element types the graph dialect can hold are mapped; anything else (strings,
complex, 8-/4-/2-bit floats and ints) is reported by name so the caller can say which
tensor or op needs it.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ...ir.types import DType

_ONNX_TO_DTYPE: dict[int, DType] = {
    TensorProto.FLOAT: DType.f32,
    TensorProto.DOUBLE: DType.f64,
    TensorProto.FLOAT16: DType.f16,
    TensorProto.BFLOAT16: DType.bf16,
    TensorProto.INT8: DType.i8,
    TensorProto.INT16: DType.i16,
    TensorProto.INT32: DType.i32,
    TensorProto.INT64: DType.i64,
    TensorProto.UINT8: DType.u8,
    TensorProto.BOOL: DType.bool,
}
# Unsigned types the IR core may or may not define; mapped when it does.
for _onnx_code, _name in ((TensorProto.UINT16, "u16"), (TensorProto.UINT32, "u32"),
                          (TensorProto.UINT64, "u64")):
    if hasattr(DType, _name):
        _ONNX_TO_DTYPE[_onnx_code] = getattr(DType, _name)

_DTYPE_TO_ONNX = {v: k for k, v in _ONNX_TO_DTYPE.items()}


def onnx_type_name(code: int) -> str:
    try:
        return TensorProto.DataType.Name(code)
    except ValueError:
        return f"<type {code}>"


def to_dtype(code: int) -> DType | None:
    """The graph element type of an ONNX element type code, or None when there is none."""
    return _ONNX_TO_DTYPE.get(code)


def to_onnx(dtype: DType) -> int:
    return _DTYPE_TO_ONNX[dtype]


def tensor_to_numpy(t: TensorProto, base_dir: str | None = None) -> np.ndarray:
    """An initializer or attribute tensor as an array in the dtype the graph holds it in."""
    arr = numpy_helper.to_array(t, base_dir or "")
    if t.data_type == TensorProto.BFLOAT16:
        arr = np.asarray(arr).astype(np.float32)
    return np.asarray(arr)


def from_numpy_for_onnx(arr: np.ndarray, code: int) -> np.ndarray:
    """Converts an array the graph produced back to the NumPy type ONNX uses for ``code``."""
    if code == TensorProto.BFLOAT16:
        return np.asarray(arr, dtype=np.float32).astype(onnx.helper.tensor_dtype_to_np_dtype(code))
    want = onnx.helper.tensor_dtype_to_np_dtype(code)
    return arr if arr.dtype == want else arr.astype(want)
