"""Building blocks shared by graph op definitions: broadcasting, axis handling, base classes."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.opdef import (COMMUTATIVE, ELEMENTWISE, PURE, SAME_SHAPE, Attr, FusionKind, OpDef, expect)
from ...ir.symbolic import (as_expr, current_hint, dim_add, dim_ceildiv, dim_floordiv, dim_min, dim_mul, dim_prod,
                            dim_sub, dims_equal, evaluate, hint_nbytes, symbols_of)
from ...ir.types import Dim, DType, TensorType, Type


def tensor_types(types: Sequence[Type], opname: str) -> list[TensorType]:
    for i, t in enumerate(types):
        if not isinstance(t, TensorType):
            raise ShapeError(f"operand #{i} must be a tensor, got {t}")
    return list(types)  # type: ignore[return-value]


def broadcast_dims(a: Dim, b: Dim) -> Dim:
    """NumPy broadcasting of one dimension, with symbolic dims.

    Provably equal dims (``dims_equal``) give that dim and a 1 gives the other; a symbolic dim
    against a static size other than 1 gives the static size (the symbol must take that value
    at run time, which the entry checks).  Two different symbolic dims do not broadcast: which
    one wins would depend on a run-time value, and one compiled kernel cannot depend on that.
    """
    if a == b or dims_equal(a, b):
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, str) and isinstance(b, int):
        return b          # the symbol must equal b at run time
    if isinstance(b, str) and isinstance(a, int):
        return a
    if isinstance(a, str) and isinstance(b, str):
        raise ShapeError(f"dimensions '{a}' and '{b}' are different symbolic sizes and cannot broadcast "
                         f"(make them the same symbol, or one of them 1)")
    raise ShapeError(f"dimensions {a} and {b} cannot broadcast")


def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple:
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        pad = [1] * (rank - len(s)) + list(s)
        for i, d in enumerate(pad):
            try:
                out[i] = broadcast_dims(out[i], d)
            except ShapeError as e:
                why = f": {e}" if isinstance(out[i], str) and isinstance(d, str) else ""
                raise ShapeError(f"shapes {', '.join(str(tuple(x)) for x in shapes)} do not broadcast{why}") from None
    return tuple(out)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Negative axes count from the end, as in NumPy; out-of-range axes are shape errors."""
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    out = tuple(sorted(norm_axis(a, rank) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {tuple(axes)}")
    return out


def promote(a: DType, b: DType) -> DType:
    """Binary ops require equal element types (frontends insert casts), as in ONNX/StableHLO."""
    if a is not b:
        raise ShapeError(f"element types differ: {a} and {b} (insert a graph.cast)")
    return a


class UnaryElementwise(OpDef):
    """``out = f(x)`` element by element; same shape and element type as ``x``."""

    operands = ("x",)
    traits = frozenset({PURE, ELEMENTWISE, SAME_SHAPE})
    fusion = FusionKind.ELEMENTWISE
    flops = 1.0
    float_only = False

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        expect(not self.float_only or x.dtype.is_float, f"needs a floating-point operand, got {x.dtype}")
        return [x]


class BinaryElementwise(OpDef):
    """``out = f(lhs, rhs)`` with NumPy broadcasting; both operands share one element type."""

    operands = ("lhs", "rhs")
    traits = frozenset({PURE, ELEMENTWISE})
    fusion = FusionKind.ELEMENTWISE
    flops = 1.0
    result_dtype: DType | None = None   # set for comparisons (bool results)

    def infer(self, types, attrs):
        a, b = tensor_types(types, self.name)
        dtype = promote(a.dtype, b.dtype)
        return [TensorType(broadcast_shapes(a.shape, b.shape), self.result_dtype or dtype)]


class CommutativeBinary(BinaryElementwise):
    traits = frozenset({PURE, ELEMENTWISE, COMMUTATIVE})


def as_np_dtype(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return x.astype(like.dtype, copy=False)


__all__ = [
    "Attr", "BinaryElementwise", "CommutativeBinary", "DType", "FusionKind", "OpDef", "PURE",
    "ELEMENTWISE", "SAME_SHAPE", "COMMUTATIVE", "TensorType", "UnaryElementwise", "broadcast_dims",
    "broadcast_shapes", "expect", "norm_axis", "norm_axes", "promote", "tensor_types", "Any",
]


# ---- helpers for contractions, windowed ops (conv, pool) and cost -----------------------
# (appended for linalg/conv/pool/reduce/norm/attention; the names above stay as they were)

def match_dims(a: Dim, b: Dim, what: str) -> Dim:
    """Two dims that must be equal (a contraction, a channel count).  Provably equal dims
    match; a symbolic dim matches a static size (checked at run time) and gives the static
    size; two different static sizes, or two symbolic dims that are not provably equal, are a
    shape error (a compiled kernel has one extent per loop)."""
    if a == b or dims_equal(a, b):
        return a
    if isinstance(a, str) and isinstance(b, str):
        raise ShapeError(f"{what}: '{a}' and '{b}' are different symbolic sizes")
    if isinstance(b, str):
        return a
    if isinstance(a, str):
        return b
    raise ShapeError(f"{what}: {a} != {b}")


def expect_float(t: TensorType, what: str = "operand") -> None:
    expect(t.dtype.is_float, f"{what} must be floating point, got {t.dtype}")


def expect_numeric(t: TensorType, what: str = "operand") -> None:
    expect(t.dtype is not DType.bool, f"{what} must be numeric, got {t.dtype}")


def io_bytes(operand_types: Sequence[Type], result_types: Sequence[Type]) -> int:
    """Memory traffic if every operand is read once and every result written once."""
    return sum(hint_nbytes(t) for t in list(operand_types) + list(result_types) if isinstance(t, TensorType))


def num_elements(shape: Sequence[Dim]) -> int:
    """Element count for cost models: a symbolic dim counts as its hint (``hint_size``), so a
    dynamic batch costs what the representative batch does, not 1."""
    n = 1
    for d in shape:
        n *= d if isinstance(d, int) else hint_size(d)
    return n


def hint_size(d: Dim) -> int:
    """A representative value of ``d`` for heuristics: the hint of the symbol table that the
    running pass made current (``symbolic.hints_from``), else ``hint_of``'s default."""
    return current_hint(d)


def spatial_ints(attrs: dict[str, Any], key: str, count: int, fill: int, low: int) -> tuple[int, ...]:
    """An ``ints`` attribute with one value per spatial axis (or two for pads); an empty
    tuple means ``fill`` everywhere.  Values below ``low`` are rejected."""
    value = tuple(attrs.get(key, ()) or ())
    if not value:
        return (fill,) * count
    expect(len(value) == count, f"{key} has {len(value)} values, expected {count} "
                                f"(or none for the default {fill})")
    bad = [v for v in value if v < low]
    expect(not bad, f"{key} = {value}: every value must be >= {low}")
    return value


class Window:
    """Strides, dilations and pads of a sliding window over ``rank`` spatial axes."""

    __slots__ = ("kernel", "strides", "dilations", "pads_begin", "pads_end")

    def __init__(self, kernel: Sequence[int], attrs: dict[str, Any], dilations: bool = True):
        n = len(kernel)
        self.kernel = tuple(kernel)
        self.strides = spatial_ints(attrs, "strides", n, 1, 1)
        self.dilations = spatial_ints(attrs, "dilations", n, 1, 1) if dilations else (1,) * n
        pads = spatial_ints(attrs, "pads", 2 * n, 0, 0)
        self.pads_begin, self.pads_end = pads[:n], pads[n:]

    @property
    def extents(self) -> tuple[int, ...]:
        """Input span of one window: ``dilation * (kernel - 1) + 1`` per axis."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilations))

    def out_dim(self, i: int, size: Dim, ceil_mode: bool = False, empty_ok: bool = False) -> Dim:
        """Output size on spatial axis ``i``, the ONNX rule with ``span = size + pads - extent``:
        ``floor(span / stride) + 1``, or in ceil mode ``ceil(span / stride) + 1`` less a last
        window that would start in the end padding (a window may start in the input and run
        past the padded end, even when the extent exceeds the padded input).  A symbolic size
        gives the same rule as a floordiv expression (``"(H-1)//2+1"``); whether the window fits
        is then the entry's range check.  No window at all (a result <= 0) is an error, or with
        ``empty_ok`` 0 windows."""
        ext, s = self.extents[i], self.strides[i]
        pads = self.pads_begin[i] + self.pads_end[i]
        if isinstance(size, str):
            return self._symbolic_out_dim(i, size, ceil_mode)
        span = size + pads - ext
        if ceil_mode:
            # ceil(span / s) + 1, also for a negative span: with -s < span < 0 the one window
            # starts inside the input and runs past its end (ONNX, onnxruntime, onnx.reference
            # and PyTorch all give 1 there)
            out = -(-span // s) + 1
            if out > 0 and (out - 1) * s >= size + self.pads_begin[i]:
                out -= 1
        else:
            out = span // s + 1   # floor: 0 (empty) for -s < span < 0, as the spec formula gives
        if out <= 0 and empty_ok:
            return 0            # no window fits: an empty axis (as ONNX pooling gives)
        expect(out > 0, f"spatial axis {i}: window extent {ext} is larger than the padded input "
                        f"{size + pads} (input {size}, pads {self.pads_begin[i]}+{self.pads_end[i]})"
                        + (" and no ceil-mode window starts in it" if ceil_mode else ""))
        return out

    def _symbolic_out_dim(self, i: int, size: str, ceil_mode: bool) -> Dim:
        """``out_dim`` of a symbolic size.  Ceil mode keeps a window only when it starts before
        the end padding, i.e. at most ``ceil((size + pad_begin) / stride)`` windows: the
        minimum of that and the plain ceil count equals the static rule for every size."""
        ext, s = self.extents[i], self.strides[i]
        span = dim_sub(dim_add(size, self.pads_begin[i] + self.pads_end[i]), ext)
        if not ceil_mode:
            return dim_add(dim_floordiv(span, s), 1)
        return dim_min(dim_add(dim_ceildiv(span, s), 1), dim_ceildiv(dim_add(size, self.pads_begin[i]), s))


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """Precision for reference arithmetic: half floats are computed in f32 (NumPy has no fast
    f16 matmul and f16 sums lose too much); other types as they are."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def mean(x: np.ndarray, axis, keepdims: bool = False, dtype=None) -> np.ndarray:
    """``np.mean``, where a mean over no element is 0 / 0 = NaN without NumPy's "Mean of empty
    slice" warning (as the native reduction gives it, and torch.mean)."""
    if x.size:
        return np.mean(x, axis=axis, keepdims=keepdims, dtype=dtype)
    total = np.sum(x, axis=axis, keepdims=keepdims, dtype=dtype)
    with np.errstate(invalid="ignore"):
        return total / total.dtype.type(0)


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value=0) -> np.ndarray:
    """Pads the trailing ``len(begin)`` axes of ``x`` (N, C, *spatial) with ``value``."""
    if not any(begin) and not any(end):
        return x
    widths = [(0, 0)] * (x.ndim - len(begin)) + list(zip(begin, end))
    return np.pad(x, widths, mode="constant", constant_values=value)


def window_view(xp: np.ndarray, win: "Window", out: Sequence[int]) -> np.ndarray:
    """View of shape (N, C, *out, *kernel) over an already padded (N, C, *spatial) array:
    element [n, c, o..., k...] is ``xp[n, c, o*stride + k*dilation ...]``.  No copy."""
    from numpy.lib.stride_tricks import sliding_window_view
    d = len(win.kernel)
    view = sliding_window_view(xp, win.extents, axis=tuple(range(xp.ndim - d, xp.ndim)))
    take = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, win.strides))
    dil = tuple(slice(None, None, dl) for dl in win.dilations)
    return view[(slice(None),) * (xp.ndim - d) + take + dil]


# ---- helpers for data-movement and indexing ops (shape.py, index.py) -------------------
# (appended for shape/index; the names above stay as they were)

def expect_choice(value: str, choices: Sequence[str], attr: str) -> None:
    """A string attribute that must be one of a fixed set (modes)."""
    expect(value in choices, f"{attr} = {value!r} is not one of {', '.join(map(repr, choices))}")


def expect_int(t: TensorType, what: str = "operand") -> None:
    """Index operands (gather indices, ids) must be integers."""
    expect(t.dtype.is_int, f"{what} must have an integer element type, got {t.dtype}")


def dims_product(dims: Sequence[Dim], what: str = "") -> Dim:
    """Product of dims as one dim (``("b", "s", 64)`` -> ``"64*b*s"``; an int when static)."""
    return dim_prod(dims)


def counts_differ(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    """True when two shapes provably hold different element counts: their products differ by a
    nonzero constant, or are the same monomial with different coefficients.  Products over
    different symbols prove nothing (the sizes may agree at run time)."""
    ea, eb = as_expr(dim_prod(a)), as_expr(dim_prod(b))
    if ea == eb:
        return False
    diff = ea - eb
    if diff.is_const:
        return True
    if len(ea.terms) == 1 and len(eb.terms) == 1:
        (ma, _), (mb, _) = next(iter(ea.terms.items())), next(iter(eb.terms.items()))
        return ma == mb
    return False


def exact_quotient(total: Dim, part: Dim, what: str) -> Dim:
    """``total / part`` when ``part`` provably divides ``total`` for every value of the symbols
    (``dim_floordiv`` of polynomials); a ShapeError naming ``what`` otherwise."""
    try:
        q = dim_floordiv(total, part)
    except ShapeError as e:
        raise ShapeError(f"{what}: {e}") from None
    if not dims_equal(dim_mul(q, part), total):
        raise ShapeError(f"{what}: {part} does not divide {total}")
    return q


def resolve_dims(dims: Sequence[Dim], opname: str, total: int | None = None,
                 aligned: Sequence[int] | None = None) -> tuple[int, ...]:
    """Run-time sizes for dims that may be symbolic expressions (reference semantics only).

    A dim takes, in order: its value under the symbols the interpreter bound from the function
    inputs (``evaluate``); the size at the same position of ``aligned`` (a run-time shape,
    right-aligned with ``dims``, as for broadcasting); and, for a single dim still unknown (or
    a ``-1``), ``total`` divided by the product of the others (as ONNX resolves -1).
    """
    from ...ir.interpreter import symbol_sizes
    bound = symbol_sizes()
    out: list[int | None] = []
    shift = len(dims) - len(aligned) if aligned is not None else 0
    for i, d in enumerate(dims):
        if isinstance(d, int):
            out.append(None if d == -1 and total is not None else d)
        elif d in bound:
            out.append(bound[d])
        elif symbols_of_dim(d) <= bound.keys():
            out.append(evaluate(d, bound))
        elif aligned is not None and 0 <= i - shift < len(aligned):
            out.append(int(aligned[i - shift]))
        else:
            out.append(None)
    unknown = [i for i, v in enumerate(out) if v is None]
    if len(unknown) == 1 and total is not None:
        rest = num_elements([v for v in out if v is not None])
        if rest and total % rest == 0:
            out[unknown[0]] = total // rest
            unknown = []
    if unknown:
        names = ", ".join(repr(dims[i]) for i in unknown)
        raise ShapeError(f"'{opname}': cannot tell the run-time size of symbolic dim(s) {names} "
                         f"of {tuple(dims)}; run it through the interpreter with inputs that bind them")
    return tuple(out)  # type: ignore[arg-type]


def symbols_of_dim(d: Dim) -> set[str]:
    """The symbols ``d`` reads; a name that is not an expression (an ONNX ``dim_param`` such as
    ``"batch size"``) is its own symbol."""
    try:
        return symbols_of(d)
    except ShapeError:
        return {d} if isinstance(d, str) else set()


class FoldStaticOnly(OpDef):
    """Constant folding only when every result type is static: a folded array has one
    concrete shape, which cannot stand for a symbolic result (expand to ``("N", 4)``)."""

    def fold(self, op, constants):
        if not all(isinstance(r.type, TensorType) and r.type.is_static for r in op.results):
            return None
        return super().fold(op, constants)


# (appended for gemm's c, layer_norm's scale/bias and attention's mask)
def broadcasts_to(shape: Sequence[Dim], target: Sequence[Dim]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without changing it (unidirectional)."""
    if len(shape) > len(target):
        return False
    try:
        return broadcast_shapes(shape, target) == tuple(target)
    except ShapeError:
        return False
