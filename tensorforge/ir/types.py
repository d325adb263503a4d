"""Types shared by every IR level: element types, tensor types and buffer types.

A dimension is an ``int`` (static) or a ``str`` (a named symbolic dimension such as a
dynamic batch).  Two symbolic dims with the same name are the same size.
"""
from __future__ import annotations

import enum
from typing import Iterable, Sequence, Union

import numpy as np

from ..errors import IRError

Dim = Union[int, str]


class DType(enum.Enum):
    """Element types; the value is the MLIR spelling."""

    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"
    f64 = "f64"
    i8 = "i8"
    i16 = "i16"
    i32 = "i32"
    i64 = "i64"
    u8 = "ui8"
    u16 = "ui16"
    u32 = "ui32"
    u64 = "ui64"
    bool = "i1"
    # Storage-only types (ONNX low-precision formats): values are held, and computed on, in
    # ``compute_type`` (``np``); only ``graph.cast`` to them rounds (see ``is_storage_only``).
    f8e4m3fn = "f8E4M3FN"
    f8e4m3fnuz = "f8E4M3FNUZ"
    f8e5m2 = "f8E5M2"
    f8e5m2fnuz = "f8E5M2FNUZ"
    f4e2m1 = "f4E2M1FN"
    f8e8m0 = "f8E8M0FNU"     # unsigned powers of two 2^-127..2^127 and NaN (ONNX FLOAT8E8M0, MX scales)
    i4 = "i4"
    u4 = "ui4"
    i2 = "i2"
    u2 = "ui2"

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return not self.is_float and self is not DType.bool

    @property
    def is_unsigned(self) -> bool:
        return self in _UNSIGNED

    @property
    def is_storage_only(self) -> bool:
        """bf16, the float8/float4 formats and the 4-/2-bit ints: no arithmetic of their own.

        Their values are held in ``np`` (the NumPy type of ``compute_type``), every op but a cast
        to them computes in ``compute_type``, and a cast to them rounds (float8/float4: to nearest
        even, saturating or not; 4-/2-bit ints: truncation of floats, out of range -> 0, and
        wraparound of ints, as ONNX/ml_dtypes).  Native code widens them to ``compute_type``
        before lowering; the model boundary converts the ml_dtypes arrays ONNX uses.
        """
        return self in _COMPUTE_TYPE

    @property
    def compute_type(self) -> "DType":
        """The type that holds and computes values of a storage-only type (itself otherwise)."""
        return _COMPUTE_TYPE.get(self, self)

    @property
    def int_range(self) -> tuple[int, int]:
        """(min, max) of an integer or bool type."""
        return _INT_RANGES[self]

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def np(self) -> np.dtype:
        """The NumPy dtype that holds values of this type (bf16 is held as f32)."""
        return _TO_NP[self]

    @property
    def c_name(self) -> str:
        return _C_NAMES[self]

    @staticmethod
    def from_np(dtype) -> "DType":
        dtype = np.dtype(dtype)
        try:
            return _FROM_NP[dtype]
        except KeyError:
            raise IRError(f"unsupported NumPy dtype {dtype}; use one of "
                          f"{sorted(str(d) for d in _FROM_NP)}") from None

    @staticmethod
    def parse(text: str) -> "DType":
        try:
            return _BY_TEXT[text]
        except KeyError:
            raise IRError(f"unknown element type '{text}'") from None

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"DType.{self.name}"


_FLOAT8 = (DType.f8e4m3fn, DType.f8e4m3fnuz, DType.f8e5m2, DType.f8e5m2fnuz, DType.f4e2m1, DType.f8e8m0)
_FLOATS = {DType.f16, DType.bf16, DType.f32, DType.f64, *_FLOAT8}
_UNSIGNED = {DType.u8, DType.u16, DType.u32, DType.u64, DType.u4, DType.u2}
_COMPUTE_TYPE = {DType.bf16: DType.f32, **{d: DType.f32 for d in _FLOAT8},
                 DType.i4: DType.i8, DType.i2: DType.i8, DType.u4: DType.u8, DType.u2: DType.u8}
# Storage size; the sub-byte types take one byte per element (unpacked, as ml_dtypes holds them).
_ITEMSIZE = {DType.f16: 2, DType.bf16: 2, DType.f32: 4, DType.f64: 8, DType.i8: 1, DType.i16: 2,
             DType.i32: 4, DType.i64: 8, DType.u8: 1, DType.u16: 2, DType.u32: 4, DType.u64: 8,
             DType.bool: 1, **{d: 1 for d in _FLOAT8}, DType.i4: 1, DType.u4: 1, DType.i2: 1, DType.u2: 1}
_TO_NP = {DType.f16: np.dtype(np.float16), DType.f32: np.dtype(np.float32), DType.f64: np.dtype(np.float64),
          DType.i8: np.dtype(np.int8), DType.i16: np.dtype(np.int16), DType.i32: np.dtype(np.int32),
          DType.i64: np.dtype(np.int64), DType.u8: np.dtype(np.uint8), DType.u16: np.dtype(np.uint16),
          DType.u32: np.dtype(np.uint32), DType.u64: np.dtype(np.uint64), DType.bool: np.dtype(np.bool_)}
_FROM_NP = dict((v, k) for k, v in _TO_NP.items())
_TO_NP.update({d: _TO_NP[c] for d, c in _COMPUTE_TYPE.items()})
_INT_RANGES = {DType.bool: (0, 1), DType.i4: (-8, 7), DType.u4: (0, 15), DType.i2: (-2, 1), DType.u2: (0, 3),
               **{d: (int(np.iinfo(_TO_NP[d]).min), int(np.iinfo(_TO_NP[d]).max))
                  for d in (DType.i8, DType.i16, DType.i32, DType.i64, DType.u8, DType.u16, DType.u32, DType.u64)}}
_C_NAMES = {DType.f16: "_Float16", DType.bf16: "uint16_t", DType.f32: "float", DType.f64: "double",
            DType.i8: "int8_t", DType.i16: "int16_t", DType.i32: "int32_t", DType.i64: "int64_t",
            DType.u8: "uint8_t", DType.u16: "uint16_t", DType.u32: "uint32_t", DType.u64: "uint64_t",
            DType.bool: "bool", **{d: "uint8_t" for d in _FLOAT8}, DType.i4: "int8_t", DType.i2: "int8_t",
            DType.u4: "uint8_t", DType.u2: "uint8_t"}
_BY_TEXT = {d.value: d for d in DType}
_BY_TEXT.update({d.name: d for d in DType})


class Type:
    """Base of IR types.  Types are immutable, hashable and compare by value."""

    __slots__ = ()


class ScalarType(Type):
    """A single element (loop level scalars, index values)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: DType):
        object.__setattr__(self, "dtype", dtype)

    def __eq__(self, other):
        return isinstance(other, ScalarType) and other.dtype is self.dtype

    def __hash__(self):
        return hash(("scalar", self.dtype))

    def __str__(self):
        return str(self.dtype)

    __repr__ = __str__


class IndexType(Type):
    """MLIR's ``index``: loop induction variables and sizes."""

    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, IndexType)

    def __hash__(self):
        return hash("index")

    def __str__(self):
        return "index"

    __repr__ = __str__


def _canonical_dim(d: str) -> Dim:
    """A symbolic dim in the canonical form of ``ir/symbolic.py`` (so equal sizes compare equal);
    a name that is not an expression (an ONNX ``dim_param`` such as ``"batch size"``) stays as it is."""
    from .symbolic import canonical
    try:
        return canonical(d)
    except Exception:
        return d


def _check_shape(shape: Iterable[Dim]) -> tuple:
    dims = []
    for d in shape:
        if isinstance(d, (bool, np.bool_)):
            raise IRError(f"bad dimension {d!r}: dims are non-negative ints or symbol names")
        if isinstance(d, (int, np.integer)):
            if d < 0:
                raise IRError(f"negative dimension {d} in shape {tuple(shape)}")
            dims.append(int(d))
        elif isinstance(d, str) and d:
            dims.append(_canonical_dim(d))
        else:
            raise IRError(f"bad dimension {d!r}: dims are non-negative ints or symbol names")
    return tuple(dims)


class _ShapedType(Type):
    __slots__ = ("shape", "dtype", "_hash")
    _kind = ""

    def __init__(self, shape: Sequence[Dim], dtype: DType):
        if not isinstance(dtype, DType):
            raise IRError(f"element type must be a DType, got {dtype!r}")
        object.__setattr__(self, "shape", _check_shape(shape))
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "_hash", hash((self._kind, self.shape, dtype)))

    def __setattr__(self, name, value):
        raise AttributeError("types are immutable")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def num_elements(self) -> int:
        """Element count; symbolic dims count as 1 (callers that care check ``is_static``)."""
        n = 1
        for d in self.shape:
            if isinstance(d, int):
                n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.dtype.itemsize

    def __eq__(self, other):
        return (type(other) is type(self) and other._hash == self._hash
                and other.shape == self.shape and other.dtype is self.dtype)

    def __hash__(self):
        return self._hash

    def _body(self) -> str:
        dims = "".join(("?" if isinstance(d, str) else str(d)) + "x" for d in self.shape)
        text = f"{dims}{self.dtype.value}"
        syms = [d for d in self.shape if isinstance(d, str)]
        if syms:
            # Symbol names ride in the encoding attribute so the text stays valid MLIR.
            text += ', "' + ",".join(syms) + '"'
        return text

    def __repr__(self):
        return str(self)


class TensorType(_ShapedType):
    """A value-semantics tensor (graph and structured levels)."""

    __slots__ = ()
    _kind = "tensor"

    def with_shape(self, shape: Sequence[Dim]) -> "TensorType":
        return TensorType(shape, self.dtype)

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(self.shape, dtype)

    def __str__(self):
        return f"tensor<{self._body()}>"


class BufferType(_ShapedType):
    """A memory buffer at loop level (MLIR ``memref``); row-major unless a layout says otherwise."""

    __slots__ = ()
    _kind = "memref"

    def __str__(self):
        return f"memref<{self._body()}>"


def tensor(shape: Sequence[Dim], dtype: DType | str = DType.f32) -> TensorType:
    """Shorthand: ``tensor((1, 3, 224, 224))`` or ``tensor(("N", 768), "f16")``."""
    if isinstance(dtype, str):
        dtype = DType.parse(dtype)
    return TensorType(shape, dtype)


f16, bf16, f32, f64 = DType.f16, DType.bf16, DType.f32, DType.f64
i8, i32, i64, boolean = DType.i8, DType.i32, DType.i64, DType.bool
