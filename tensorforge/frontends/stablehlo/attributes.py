"""StableHLO's own attribute syntax (``#stablehlo.conv<...>``, ``#stablehlo.dot<...>``, ...).

The generic parser keeps these as ``DialectAttr(name, body text)``; the small grammars here read
the bodies the importer needs.  A body that does not read raises ``FrontendError``; the importer
adds the op's location.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...errors import FrontendError
from ...ir.attributes import DialectAttr

_FIELD_RE = re.compile(r"([A-Za-z_]+)\s*=\s*(\[[^\]]*\]|[-\w]+)")


def _ints(text: str) -> tuple[int, ...]:
    inner = text.strip()[1:-1].strip()
    return tuple(int(t) for t in inner.split(",")) if inner else ()


def int_list(op, key: str, count: int = 0, fill: int = 0) -> tuple[int, ...]:
    """An op's integer-list attribute (``array<i64: ...>``, a list, or a dense tensor, flattened);
    when the op does not carry it, ``fill`` ``count`` times (StableHLO's defaults)."""
    value = op.attributes.get(key)
    if value is None:
        return (fill,) * count
    if hasattr(value, "array"):
        value = value.array.reshape(-1).tolist()
    return tuple(int(v) for v in value)


def padding_pairs(op, rank: int) -> np.ndarray:
    """The ``padding`` attribute as (low, high) rows, one per dim; zeros when absent."""
    value = op.attributes.get("padding")
    return np.asarray(value.array).reshape(rank, 2) if value is not None else np.zeros((rank, 2), np.int64)


def fields(attr: DialectAttr) -> dict[str, object]:
    """``key = [1, 2], other = 3`` -> {'key': (1, 2), 'other': 3}; bare words stay strings."""
    out: dict[str, object] = {}
    for key, value in _FIELD_RE.findall(attr.body):
        if value.startswith("["):
            out[key] = _ints(value)
        else:
            out[key] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return out


def enum_value(attr, what: str) -> str:
    """``#stablehlo<comparison_direction GT>`` -> 'GT' (also accepts a plain string)."""
    if isinstance(attr, str):
        return attr
    if isinstance(attr, DialectAttr):
        words = attr.body.split()
        if words:
            return words[-1]
    raise FrontendError(f"cannot read {what} from {attr!r}")


@dataclass(frozen=True)
class DotDims:
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]


def dot_dims(attr) -> DotDims:
    f = fields(attr) if isinstance(attr, DialectAttr) else {}
    return DotDims(tuple(f.get("lhs_batching_dimensions", ())), tuple(f.get("rhs_batching_dimensions", ())),
                   tuple(f.get("lhs_contracting_dimensions", ())), tuple(f.get("rhs_contracting_dimensions", ())))


@dataclass(frozen=True)
class ConvDims:
    """Where batch/feature/spatial dims sit in the input, kernel and output (spatial in order)."""

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_in: int
    kernel_out: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]


def _layout(text: str, letters: str) -> tuple[int, int, tuple[int, ...]]:
    """``[b, 0, 1, f]`` with letters 'bf' -> (pos of b, pos of f, positions of spatial 0, 1, ...)."""
    items = [t.strip() for t in text.strip()[1:-1].split(",")]
    first, second = items.index(letters[0]), items.index(letters[1])
    spatial = sorted((int(t), k) for k, t in enumerate(items) if t.isdigit())
    if [s for s, _ in spatial] != list(range(len(spatial))) or len(spatial) + 2 != len(items):
        raise ValueError(text)
    return first, second, tuple(k for _, k in spatial)


def conv_dims(attr) -> ConvDims:
    """``#stablehlo.conv<[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]>`` (also the long ``raw`` form)."""
    body = attr.body if isinstance(attr, DialectAttr) else ""
    m = re.fullmatch(r"\s*(\[[^\]]*\])\s*x\s*(\[[^\]]*\])\s*->\s*(\[[^\]]*\])\s*", body)
    try:
        if m:
            ib, if_, isp = _layout(m.group(1), "bf")
            ki, ko, ksp = _layout(m.group(2), "io")
            ob, of, osp = _layout(m.group(3), "bf")
            return ConvDims(ib, if_, isp, ki, ko, ksp, ob, of, osp)
        f = fields(attr)
        return ConvDims(f["input_batch_dimension"], f["input_feature_dimension"], f["input_spatial_dimensions"],
                        f["kernel_input_feature_dimension"], f["kernel_output_feature_dimension"],
                        f["kernel_spatial_dimensions"], f["output_batch_dimension"],
                        f["output_feature_dimension"], f["output_spatial_dimensions"])
    except (KeyError, ValueError):
        raise FrontendError(f"cannot read convolution dimension numbers {attr!r}") from None


@dataclass(frozen=True)
class GatherDims:
    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...]
    start_indices_batching_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int


def gather_dims(attr) -> GatherDims:
    f = fields(attr)
    return GatherDims(f.get("offset_dims", ()), f.get("collapsed_slice_dims", ()), f.get("operand_batching_dims", ()),
                      f.get("start_indices_batching_dims", ()), f.get("start_index_map", ()),
                      int(f.get("index_vector_dim", 0)))


@dataclass(frozen=True)
class ScatterDims:
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    input_batching_dims: tuple[int, ...]
    scatter_indices_batching_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int


def scatter_dims(attr) -> ScatterDims:
    f = fields(attr)
    return ScatterDims(f.get("update_window_dims", ()), f.get("inserted_window_dims", ()),
                       f.get("input_batching_dims", ()), f.get("scatter_indices_batching_dims", ()),
                       f.get("scatter_dims_to_operand_dims", ()), int(f.get("index_vector_dim", 0)))
