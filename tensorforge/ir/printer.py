"""Text form of the IR: MLIR's *generic operation syntax*.

Generic syntax needs no per-op printing code (every op at every level prints the same way) and
the real ``mlir-opt --allow-unregistered-dialect`` parses it, which keeps the text honest.
Attributes use MLIR attribute syntax; constants larger than ``large_elements`` print as
``dense_resource`` handles whose data goes to a side table (or MLIR's file-level resource
trailer), so a ResNet-sized module prints as a few kilobytes of readable text.

Choices that keep ``parse(print(m))`` exact: floats print as their shortest round-tripping
decimal (IEEE bits in hex for inf/NaN), splats must be bit-identical, ``f32`` as an attribute
reads back as a ``DType`` (a ``ScalarType`` only where the op declares a ``type`` attribute),
and a function's argument/result name hints ride in ``tf.arg_names``/``tf.result_names``.
Other value names are not kept: values print as ``%0``, ``%1``... and ``%arg0``...

This module also owns the small encoding helpers the parser reads back (float literals,
string escapes, resource blobs, value scoping), so the two sides cannot drift apart.
"""
from __future__ import annotations

import math
import re
import struct
from typing import Any

import numpy as np

from ..errors import IRError
from . import lowbits
from .attributes import Dense
from .core import Block, Operation
from .types import DType, Type

LITERAL_MAX = 16            # constants up to this many elements print as literal lists, then hex
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*\Z")
_PLAIN_STR = re.compile(r"[ !#-\[\]-~]*\Z")       # printable ASCII without '"' and '\'
_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x09: "\\t"}
ARG_NAMES, RESULT_NAMES = "tf.arg_names", "tf.result_names"
_MLIR_ISOLATED = frozenset({"builtin.module", "func.func"})
_BITS = {DType.f16: (np.uint16, "%04X"), DType.bf16: (np.uint16, "%04X"),
         DType.f32: (np.uint32, "%08X"), DType.f64: (np.uint64, "%016X")}


# ---- shared encoding helpers (the parser imports these) ----------------------------------
def is_isolated(op_name: str) -> bool:
    """Ops whose regions start a fresh value namespace (numbering restarts at ``%0``).

    Only ops that MLIR itself knows to be isolated from above qualify: ``mlir-opt`` treats
    the regions of our (unregistered) ops as nested scopes, where reusing a name is an error.
    """
    return op_name in _MLIR_ISOLATED


def function_name_attrs(op: Operation) -> dict[str, tuple[str, ...]]:
    """A function's argument and result name hints as (discardable) attributes of its text.

    The runtime names a compiled model's inputs and outputs after these hints, so they must
    survive a trip through text; the parser turns the attributes back into hints.
    """
    if op.name != "func.func" or not op.regions or not op.regions[0].blocks:
        return {}
    block = op.regions[0].blocks[0]
    out = {}
    args = tuple(a.name_hint or "" for a in block.args)
    if any(args):
        out[ARG_NAMES] = args
    if block.last is not None and block.last.name == "func.return":
        results = tuple(v.name_hint or "" for v in block.last.operands)
        if any(results):
            out[RESULT_NAMES] = results
    return out


def fix_float_literal(text: str) -> str:
    """MLIR float literals need a '.' in the mantissa: ``1e-05`` -> ``1.0e-05``."""
    mant, e, exp = text.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + e + exp


def format_f64(x: float) -> str:
    """Shortest exact decimal for a finite double; the IEEE bit pattern in hex otherwise."""
    if math.isfinite(x):
        return fix_float_literal(repr(float(x)))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]


def f64_from_bits(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 array -> bfloat16 bit patterns (round to nearest even; NaN stays NaN)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), ((u >> 16) | 0x40).astype(np.uint16), rounded)


def float_from_bits(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """Bit patterns (as printed in hex) -> the NumPy array that holds ``dtype`` values."""
    if dtype is DType.bf16:
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if dtype in lowbits.BYTE_FLOATS:
        return lowbits.decode(bits, dtype)
    return bits.astype(_BITS[dtype][0]).view(dtype.np)


def raw_bytes(array: np.ndarray, dtype: DType) -> bytes:
    """Little-endian element bytes as MLIR stores them (bf16 as 2-byte patterns)."""
    if dtype is DType.bf16:
        return bf16_bits(array).astype("<u2").tobytes()
    if dtype.is_storage_only:      # float8/float4/int4/int2: one byte per element, its bit pattern
        return lowbits.encode(array, dtype).tobytes()
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def array_from_bytes(data: bytes | memoryview, dtype: DType, shape: tuple) -> np.ndarray:
    """Inverse of ``raw_bytes``: a read-only array of ``shape`` (a single element is a splat)."""
    if dtype is DType.bf16:
        arr = float_from_bits(np.frombuffer(data, dtype="<u2"), dtype)
    elif dtype.is_storage_only:
        arr = lowbits.decode(np.frombuffer(data, dtype=np.uint8), dtype)
    else:
        arr = np.frombuffer(data, dtype=dtype.np.newbyteorder("<"))
        if arr.dtype != dtype.np:
            arr = arr.astype(dtype.np)
        elif arr.ctypes.data % max(arr.itemsize, 1):
            arr = arr.copy()
    size = math.prod(shape)
    if arr.size == 1 and size != 1:
        arr = np.full(shape, arr[0], dtype=arr.dtype)
    arr = arr.reshape(shape)
    arr.flags.writeable = False
    return arr


def resource_blob_alignment(dtype: DType) -> int:
    return dtype.itemsize


def resource_name(dense: Dense) -> str:
    """Stable handle name: the same data always gets the same name, across runs and machines."""
    return "tf_" + dense.digest


def quote(s: str) -> str:
    """MLIR string literal: printable ASCII as is, everything else as ``\\XX`` UTF-8 bytes."""
    if _PLAIN_STR.match(s):
        return f'"{s}"'
    out = []
    for byte in s.encode("utf-8"):
        if byte in _ESCAPES:
            out.append(_ESCAPES[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append("\\%02X" % byte)
    return '"' + "".join(out) + '"'


# ---- the printer ------------------------------------------------------------------------
def print_module(op: Operation, resources: dict | None = None, inline_resources: bool = False,
                 large_elements: int = 64) -> str:
    """Prints ``op`` (normally a ``ModuleOp``) in MLIR generic syntax.

    Constants with more than ``large_elements`` elements print as ``dense_resource<NAME>``;
    their arrays are stored in ``resources`` (NAME -> array) when given, and with
    ``inline_resources`` the data is also written in MLIR's ``{-# dialect_resources #-}``
    trailer so the text is self-contained.  With neither, the data is left out (display only).
    """
    p = _Printer(resources, inline_resources, large_elements)
    p.op(op, 0, [0, 0])
    if inline_resources and p.used:
        p.trailer()
    return "".join(p.out)


class _Printer:
    __slots__ = ("out", "names", "types", "resources", "inline", "large", "used")

    def __init__(self, resources: dict | None, inline: bool, large_elements: int):
        self.out: list[str] = []
        self.names: dict[int, str] = {}
        self.types: dict[Type, str] = {}
        self.resources = resources
        self.inline = inline
        self.large = large_elements
        self.used: dict[str, Dense] = {}

    # -- ops, regions, blocks ------------------------------------------------------------
    def op(self, op: Operation, depth: int, scope: list[int]) -> None:
        """``scope`` is [next value number, next block-argument number] of the enclosing namespace."""
        out = self.out
        out.append("  " * depth)
        results = op.results
        if results:
            base = f"%{scope[0]}"
            scope[0] += 1
            if len(results) == 1:
                self.names[id(results[0])] = base
                out.append(base + " = ")
            else:
                for i, r in enumerate(results):
                    self.names[id(r)] = f"{base}#{i}"
                out.append(f"{base}:{len(results)} = ")
        names = self.names
        operands = ", ".join(names.get(id(v), "<<UNKNOWN SSA VALUE>>") for v in op.operands)
        out.append(f'"{op.name}"({operands})')
        if op.regions:
            inner = [0, 0] if is_isolated(op.name) else scope
            out.append(" (")
            for i, region in enumerate(op.regions):
                if i:
                    out.append(", ")
                out.append("{\n")
                many = len(region.blocks) > 1
                for k, block in enumerate(region.blocks):
                    self.block(block, k, many, depth, inner)
                out.append("  " * depth + "}")
            out.append(")")
        attrs = op.attributes
        if op.name == "func.func":
            attrs = {**function_name_attrs(op), **attrs}
        if attrs:
            out.append(" {" + ", ".join(self.attr_entry(k, v) for k, v in attrs.items()) + "}")
        out.append(" : (" + ", ".join(self.type(v.type) for v in op.operands) + ") -> ")
        if len(results) == 1:
            out.append(self.type(results[0].type))
        else:
            out.append("(" + ", ".join(self.type(r.type) for r in results) + ")")
        out.append("\n")

    def block(self, block: Block, index: int, many: bool, depth: int, scope: list[int]) -> None:
        if block.args or many or index or block.first is None:
            args = []
            for a in block.args:
                name = f"%arg{scope[1]}"
                scope[1] += 1
                self.names[id(a)] = name
                args.append(f"{name}: {self.type(a.type)}")
            label = f"^bb{index}" + (f"({', '.join(args)})" if args else "")
            self.out.append("  " * depth + label + ":\n")
        for op in block:
            self.op(op, depth + 1, scope)

    # -- types and attributes ------------------------------------------------------------
    def type(self, t: Type) -> str:
        s = self.types.get(t)
        if s is None:
            s = self.types[t] = str(t)
        return s

    def attr_entry(self, key: str, value: Any) -> str:
        return f"{key if IDENT_RE.match(key) else quote(key)} = {self.attr(value)}"

    def attr(self, v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return f"{v} : i64"
        if isinstance(v, float):
            return f"{format_f64(v)} : f64"
        if isinstance(v, str):
            return quote(v)
        if isinstance(v, tuple):
            if not v:
                return "array<i64>"
            if all(type(x) is int for x in v):
                return "array<i64: " + ", ".join(map(str, v)) + ">"
            if all(type(x) is float for x in v):
                return "array<f64: " + ", ".join(map(format_f64, v)) + ">"
            return "[" + ", ".join(self.attr(x) for x in v) + "]"
        if isinstance(v, DType):
            return v.value
        if isinstance(v, Type):
            return self.type(v)
        if isinstance(v, Dense):
            return self.dense(v)
        raise IRError(f"cannot print attribute value {v!r} ({type(v).__name__})")

    def dense(self, d: Dense) -> str:
        a, dtype = d.array, d.type.dtype
        ts = self.type(d.type)
        if a.size == 0:
            return f"dense<> : {ts}"
        if a.ndim == 0 or _is_splat(a):
            return f"dense<{_elements(a.reshape(-1)[:1], dtype)[0]}> : {ts}"
        if a.size > self.large:
            name = resource_name(d)
            if self.resources is not None:
                self.resources[name] = a
            self.used.setdefault(name, d)
            return f"dense_resource<{name}> : {ts}"
        if a.size <= LITERAL_MAX or dtype in (DType.bool, DType.bf16):
            return f"dense<{_nest(_elements(a.reshape(-1), dtype), a.shape)}> : {ts}"
        return f'dense<"0x{raw_bytes(a, dtype).hex().upper()}"> : {ts}'

    def trailer(self) -> None:
        # Hundreds of megabytes of hex for a real model: append the pieces, copy them only once.
        out = self.out
        out.append("\n{-#\n  dialect_resources: {\n    builtin: {\n")
        for i, (name, d) in enumerate(self.used.items()):
            align = struct.pack("<I", resource_blob_alignment(d.type.dtype)).hex()
            out.append((",\n" if i else "") + f'      {name}: "0x{align}')
            out.append(raw_bytes(d.array, d.type.dtype).hex())
            out.append('"')
        out.append("\n    }\n  }\n#-}\n")


def _is_splat(a: np.ndarray) -> bool:
    """All elements bit-identical (stricter than ``==``: keeps -0.0 and NaN payloads exact)."""
    flat = a.reshape(-1)
    if flat.size < 2:
        return False
    bits = flat.view(f"u{flat.itemsize}")
    return bool(bits[0] == bits[-1]) and bool((bits == bits[0]).all())


def _elements(flat: np.ndarray, dtype: DType) -> list[str]:
    """Element literals that parse back to exactly the same values (in MLIR and in our parser)."""
    if dtype is DType.bool:
        return ["true" if x else "false" for x in flat.tolist()]
    if not dtype.is_float:
        return [str(x) for x in flat.tolist()]
    if dtype is DType.f64:
        return [format_f64(x) for x in flat.tolist()]
    out = []
    finite = np.isfinite(flat)
    if dtype in lowbits.BYTE_FLOATS:
        bits, hexfmt = lowbits.encode(flat, dtype), "%02X"
    else:
        bits = bf16_bits(flat) if dtype is DType.bf16 else flat.view(_BITS[dtype][0])
        hexfmt = _BITS[dtype][1]
    for x, ok, b in zip(flat, finite.tolist(), bits.tolist()):
        if not ok:
            out.append("0x" + hexfmt % b)
            continue
        s = fix_float_literal(str(x))
        if flat.dtype.type(float(s)) != x:      # shortest form did not survive decimal->double->float
            s = format_f64(float(x))
        out.append(s)
    return out


def _nest(items: list[str], shape: tuple) -> str:
    """Flat element literals -> nested ``[[a, b], [c, d]]`` following ``shape``."""
    for d in reversed(shape):
        items = ["[" + ", ".join(items[i:i + d]) + "]" for i in range(0, len(items), d)]
    return items[0]


__all__ = ["print_module", "quote", "format_f64", "resource_name", "LITERAL_MAX"]
