"""Attribute values.

Attributes are plain immutable Python values: ``bool``, ``int``, ``float``, ``str``,
tuples of attributes, ``DType``, ``Type`` and ``Dense`` (tensor data).  Keeping them plain
makes op definitions and rewrite rules read like ordinary Python.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..errors import IRError
from .types import DType, TensorType, Type


class Dense:
    """Immutable tensor data (constants, weights).

    The array is made read-only so that sharing one ``Dense`` between ops (after CSE,
    cloning, folding) can never alias a mutation.  The content hash is computed on
    demand: it is needed only by CSE, the tuning database and large-constant naming.
    """

    __slots__ = ("array", "type", "_digest")

    def __init__(self, array, dtype: DType | None = None):
        arr = np.asarray(array)
        if dtype is None:
            dtype = DType.from_np(arr.dtype)
        if arr.dtype != dtype.np:
            arr = arr.astype(dtype.np)
        if arr.flags.writeable:
            arr = arr.copy() if arr.base is not None else arr
            arr.flags.writeable = False
        self.array = arr
        self.type = TensorType(arr.shape, dtype)
        self._digest = None

    @property
    def digest(self) -> str:
        if self._digest is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(str(self.type).encode())
            h.update(np.ascontiguousarray(self.array).tobytes())
            self._digest = h.hexdigest()
        return self._digest

    @property
    def is_splat(self) -> bool:
        a = self.array
        return a.size > 0 and bool((a == a.flat[0]).all()) if a.dtype.kind != "f" else (
            a.size > 0 and bool(np.array_equal(a, np.full_like(a, a.flat[0]), equal_nan=True)))

    def __eq__(self, other):
        if not isinstance(other, Dense) or other.type != self.type:
            return False
        if self is other:
            return True
        return self.digest == other.digest

    def __hash__(self):
        return hash(self.digest)

    def __repr__(self):
        return f"Dense({self.type})"


ATTR_SCALARS = (bool, int, float, str, DType, Type, Dense)


class DialectAttr:
    """An attribute in another dialect's syntax, ``#dialect.name<body>`` or ``#dialect<body>``,
    kept as its text.  The generic parser (``parse_generic``) reads foreign modules such as
    StableHLO; the frontend that imports them knows the dialect and parses ``body`` itself, so
    the IR core needs no per-dialect attribute grammar."""

    __slots__ = ("name", "body")

    def __init__(self, name: str, body: str):
        self.name, self.body = name, body

    def __eq__(self, other):
        return isinstance(other, DialectAttr) and (self.name, self.body) == (other.name, other.body)

    def __hash__(self):
        return hash((self.name, self.body))

    def __repr__(self):
        return f"#{self.name}<{self.body}>"


class SymbolRef(str):
    """A reference to a symbol (``@name``), e.g. the callee of ``func.call``."""

    __slots__ = ()

    def __repr__(self):
        return f"@{str(self)}"


def check_attr(value: Any, where: str = "attribute") -> Any:
    """Normalise ``value`` into an attribute (lists become tuples, NumPy scalars become Python)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        return Dense(value)
    if isinstance(value, (list, tuple)):
        return tuple(check_attr(v, where) for v in value)
    if isinstance(value, ATTR_SCALARS):
        return value
    raise IRError(f"{where}: {value!r} ({type(value).__name__}) is not a valid attribute value")


def attr_key(value: Any):
    """A hashable key with type distinctions kept (``1``, ``1.0`` and ``True`` differ)."""
    if isinstance(value, tuple):
        return ("t",) + tuple(attr_key(v) for v in value)
    return (type(value).__name__, value)
