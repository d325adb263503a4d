"""ONNX element types <-> graph ``DType`` and ONNX tensors -> NumPy.

Only element types the graph dialect can hold are mapped; anything else (strings, complex,
FLOAT8E8M0) is reported by name so the caller can say which tensor or op needs it.  The float8,
float4 and 4-/2-bit int types are storage-only graph types (``ir/lowbits.py``): ONNX gives them
as ml_dtypes arrays, the graph holds them in their compute type (f32, int8, uint8).
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ...errors import FrontendError
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
    TensorProto.UINT16: DType.u16,
    TensorProto.UINT32: DType.u32,
    TensorProto.UINT64: DType.u64,
    TensorProto.BOOL: DType.bool,
    TensorProto.FLOAT8E4M3FN: DType.f8e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: DType.f8e4m3fnuz,
    TensorProto.FLOAT8E5M2: DType.f8e5m2,
    TensorProto.FLOAT8E5M2FNUZ: DType.f8e5m2fnuz,
    TensorProto.FLOAT4E2M1: DType.f4e2m1,
    TensorProto.FLOAT8E8M0: DType.f8e8m0,
    TensorProto.INT4: DType.i4,
    TensorProto.UINT4: DType.u4,
    TensorProto.INT2: DType.i2,
    TensorProto.UINT2: DType.u2,
}

_DTYPE_TO_ONNX = {v: k for k, v in _ONNX_TO_DTYPE.items()}
# ml_dtypes' names of the storage-only types (as ONNX's NumPy arrays spell them)
_ML_DTYPES = {onnx.helper.tensor_dtype_to_np_dtype(k).name: v for k, v in _ONNX_TO_DTYPE.items()
              if v.is_storage_only}


def onnx_type_name(code: int) -> str:
    try:
        return TensorProto.DataType.Name(code)
    except (ValueError, TypeError):
        return f"<type {code!r}>"


def to_dtype(code: int) -> DType | None:
    """The graph element type of an ONNX element type code, or None when there is none."""
    return _ONNX_TO_DTYPE.get(code) if isinstance(code, int) else None


def to_onnx(dtype: DType) -> int:
    return _DTYPE_TO_ONNX[dtype]


# Bits per element of the ONNX types packed below one byte (raw_data holds ceil(n * bits / 8) bytes).
_PACKED_BITS = {getattr(TensorProto, n): b for n, b in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2),
                                                         ("UINT2", 2)) if hasattr(TensorProto, n)}
# Typed fields whose entries are one element each (the packed and complex types are left to onnx).
_ONE_PER_ENTRY = {"float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"}


def check_tensor(t: TensorProto, what: str | None = None) -> None:
    """Checks an initializer or attribute tensor before its data is read: data stored in the proto
    (not an unloaded external file), non-negative dims, and as many bytes or entries as the dims
    say.  A corrupt tensor raises a ``FrontendError`` that names it (``what``)."""
    what = what or f"tensor '{t.name}'"
    if t.data_location == TensorProto.EXTERNAL:
        loc = next((e.value for e in t.external_data if e.key == "location"), None)
        where = "an external file (no location given)" if loc is None else f"the external file {loc!r}"
        raise FrontendError(f"{what} keeps its data in {where}, which was not loaded: import "
                            f"the model from its .onnx path (external data is read from the folder the model is "
                            f"in), or load it with onnx.load(path) and pass the ModelProto")
    if t.data_location != TensorProto.DEFAULT:
        raise FrontendError(f"{what} has an unknown data_location {t.data_location}: the model is corrupt")
    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        raise FrontendError(f"{what} has a negative dimension in its dims {dims}: the model is corrupt")
    count = math.prod(dims)
    code = t.data_type
    if t.HasField("raw_data"):
        if code == TensorProto.STRING:
            raise FrontendError(f"{what} is a string tensor with raw_data: the model is corrupt")
        bits = _PACKED_BITS.get(code)
        if bits is not None:
            want = (count * bits + 7) // 8
        else:
            try:
                want = count * onnx.helper.tensor_dtype_to_np_dtype(code).itemsize
            except Exception:       # an element type onnx does not know: the caller reports the type
                return
        if len(t.raw_data) != want:
            raise FrontendError(f"{what} has {len(t.raw_data)} bytes of raw_data, but its dims {dims} and element "
                                f"type {onnx_type_name(code)} need {want}: the model is corrupt (truncated file?)")
        return
    try:
        field = onnx.helper.tensor_dtype_to_field(code)
    except Exception:
        return
    if field in _ONE_PER_ENTRY and code not in _PACKED_BITS and code not in (TensorProto.COMPLEX64,
                                                                              TensorProto.COMPLEX128):
        have = len(getattr(t, field))
        if have != count:
            raise FrontendError(f"{what} has {have} values in {field}, but its dims {dims} need {count}: the model "
                                f"is corrupt")


def tensor_to_numpy(t: TensorProto, base_dir: str | None = None, what: str | None = None) -> np.ndarray:
    """An initializer or attribute tensor as an array in the dtype the graph holds it in; a tensor
    whose data is missing or inconsistent raises a ``FrontendError`` naming it (``what``)."""
    what = what or f"tensor '{t.name}'"
    check_tensor(t, what)
    try:
        arr = numpy_helper.to_array(t, base_dir or "")
    except Exception as e:  # what onnx refuses after the checks above
        raise FrontendError(f"{what} cannot be read ({type(e).__name__}: {e}): the model is corrupt") from e
    dtype = to_dtype(t.data_type)
    if dtype is not None and dtype.is_storage_only:
        arr = np.asarray(arr).astype(dtype.np)     # ml_dtypes -> the held type (exact)
    return np.asarray(arr)


def held_array(a: np.ndarray) -> np.ndarray:
    """An input array in the type the graph holds it in: ml_dtypes arrays (bfloat16, float8,
    float4, int4, int2...) widened exactly to their compute type; others as they are."""
    dtype = _ML_DTYPES.get(a.dtype.name)
    return a.astype(dtype.np) if dtype is not None else a


def from_numpy_for_onnx(arr: np.ndarray, code: int) -> np.ndarray:
    """Converts an array the graph produced back to the NumPy type ONNX uses for ``code``."""
    if code == TensorProto.BFLOAT16:
        return np.asarray(arr, dtype=np.float32).astype(onnx.helper.tensor_dtype_to_np_dtype(code))
    want = onnx.helper.tensor_dtype_to_np_dtype(code)
    return arr if arr.dtype == want else arr.astype(want)
