"""gather / scatter in their common forms, dynamic_slice and dynamic_update_slice.

StableHLO clamps gather and slice start indices into range (a slice never reads outside the
operand); ``graph.gather`` follows ONNX (negative indices wrap), so indices are clamped here
first.  Forms handled:

- ``gather`` that indexes consecutive dims with all of them collapsed and whole slices of the
  rest (``table[ids]``, ``jnp.take(x, ids, axis)``, ``x[i, j]`` with index arrays): the indexed
  dims are merged and one ``graph.gather`` picks along them, then the result is permuted into
  StableHLO's order (offset dims where ``offset_dims`` says, batch dims elsewhere);
- ``scatter`` into leading dims with trailing update windows (``x.at[ids].set/add/mul/max/min``):
  ``graph.scatter_nd``;
- ``dynamic_slice`` / ``dynamic_update_slice`` at run-time offsets: a ``graph.gather`` per sliced
  axis, and a ``graph.scatter_nd`` at computed indices.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Operation, Value
from ...ir.types import DType
from .attributes import enum_value, gather_dims, scatter_dims
from .context import ImportContext
from .importer import converts
from .reduce import combiner


def _clamp(ctx: ImportContext, idx: Value, hi: int) -> Value:
    """``min(max(idx, 0), hi)`` in the index's own integer type."""
    dt = idx.type.dtype
    rank = idx.type.rank
    lo_c = ctx.const(np.zeros((1,) * rank, dt.np), dt)
    hi_c = ctx.const(np.full((1,) * rank, hi, dt.np), dt)
    return ctx.g.min(ctx.g.max(idx, lo_c), hi_c)


def _as_i64(ctx: ImportContext, v: Value) -> Value:
    return ctx.cast(v, DType.i64)


@converts("stablehlo.gather")
def gather(ctx: ImportContext, op: Operation) -> None:
    d = gather_dims(op.attributes.get("dimension_numbers"))
    x_s, idx_s = op.operands
    shape = tuple(x_s.type.shape)
    sizes = tuple(int(s) for s in op.attributes.get("slice_sizes", ()))
    mapped = tuple(d.start_index_map)
    m = len(mapped)
    a = min(mapped) if mapped else 0
    simple = (not d.operand_batching_dims and m >= 1 and tuple(sorted(mapped)) == tuple(range(a, a + m))
              and mapped == tuple(sorted(mapped)) and tuple(sorted(d.collapsed_slice_dims)) == mapped
              and all(sizes[i] == 1 for i in mapped)
              and all(sizes[i] == shape[i] for i in range(len(shape)) if i not in mapped))
    if not simple:
        if _gather_elements(ctx, op, d, shape, sizes):
            return
        raise ctx.unsupported(f"form {op.attributes.get('dimension_numbers')!r} with slice_sizes {sizes} is not "
                              f"supported (whole slices along consecutive collapsed dims, or one element per "
                              f"index with every other dim batched as jnp.take_along_axis does)")
    idx = ctx.get(idx_s)
    irank = idx.type.rank
    ivd = d.index_vector_dim
    if ivd == irank:                                   # implicit trailing vector of length 1
        idx = ctx.reshape(idx, tuple(idx.type.shape) + (1,))
        irank += 1
    elif ivd != irank - 1:
        perm = [i for i in range(irank) if i != ivd] + [ivd]
        idx = ctx.transpose(idx, perm)
    batch_shape = tuple(idx.type.shape[:-1])
    idx = _as_i64(ctx, idx)
    linear = None
    for k, dim in enumerate(mapped):
        part = ctx.g.slice(idx, starts=(k,), ends=(k + 1,), axes=(irank - 1,), steps=(1,)) if m > 1 else idx
        part = _clamp(ctx, part, shape[dim] - 1)
        stride = math.prod(shape[dim + 1:a + m])
        if stride != 1:
            part = ctx.g.mul(part, ctx.const(np.full((1,) * irank, stride, np.int64)))
        linear = part if linear is None else ctx.g.add(linear, part)
    linear = ctx.reshape(linear, batch_shape)
    x = ctx.reshape(ctx.get(x_s), shape[:a] + (math.prod(shape[a:a + m]),) + shape[a + m:])
    y = ctx.g.gather(x, linear, axis=a)              # x dims < a, batch dims, x dims >= a + m
    nb = len(batch_shape)
    rest = [i for i in range(len(shape)) if i not in mapped]
    out_rank = op.results[0].type.rank
    perm, t = [], 0
    for j in range(out_rank):
        if j in d.offset_dims:
            od = rest[list(d.offset_dims).index(j)]
            perm.append(od if od < a else od - m + nb)
        else:
            perm.append(a + t)
            t += 1
    ctx.bind(op.results[0], ctx.transpose(y, perm))


def _gather_elements(ctx: ImportContext, op: Operation, d, shape, sizes) -> bool:
    """``jnp.take_along_axis``: one element per index along dim ``a``, every other operand dim a
    batching dim paired with an index dim; ``graph.gather_elements`` on the indices permuted into
    the operand's dim order, and the result permuted back into the indices' order."""
    rank = len(shape)
    if len(d.start_index_map) != 1 or tuple(d.collapsed_slice_dims) != tuple(d.start_index_map) or d.offset_dims \
            or any(n != 1 for n in sizes) or len(d.operand_batching_dims) != rank - 1:
        return False
    (a,) = d.start_index_map
    idx = ctx.get(op.operands[1])
    ivd = d.index_vector_dim
    if ivd < idx.type.rank:
        if idx.type.shape[ivd] != 1:
            return False
        idx = ctx.reshape(idx, tuple(n for i, n in enumerate(idx.type.shape) if i != ivd))
    if idx.type.rank != rank:
        return False
    batch = [i - (1 if ivd < i else 0) for i in d.start_indices_batching_dims]
    free = [i for i in range(rank) if i not in batch]
    perm = [0] * rank
    for o, i in zip(d.operand_batching_dims, batch):
        perm[o] = i
    perm[a] = free[0]
    picked = _clamp(ctx, _as_i64(ctx, ctx.transpose(idx, perm)), shape[a] - 1)
    y = ctx.b.create("graph.gather_elements", [ctx.get(op.operands[0]), picked], {"axis": a}).results[0]
    ctx.bind(op.results[0], ctx.transpose(y, [int(j) for j in np.argsort(perm)]))
    return True


_SCATTER_REDUCTIONS = ("add", "mul", "max", "min")       # combiners graph.scatter_nd applies


def _scatter_kind(region) -> str | None:
    """'none' when the region returns the update (``.set``), else the combiner's name."""
    block = region.blocks[0]
    ops = list(block)
    if len(ops) == 1 and ops[0].operands and ops[0].operands[0] is block.args[1]:
        return "none"
    kind = combiner(region)
    return kind if kind in _SCATTER_REDUCTIONS else None


@converts("stablehlo.scatter")
def scatter(ctx: ImportContext, op: Operation) -> None:
    if len(op.operands) != 3:
        raise ctx.unsupported("over several operands is not supported")
    d = scatter_dims(op.attributes.get("scatter_dimension_numbers"))
    x_s, idx_s, upd_s = op.operands
    rank = x_s.type.rank
    m = len(d.scatter_dims_to_operand_dims)
    idx_rank = idx_s.type.rank
    ivd = d.index_vector_dim
    n_batch = (idx_rank - 1) if ivd < idx_rank else idx_rank
    simple = (not d.input_batching_dims and tuple(d.scatter_dims_to_operand_dims) == tuple(range(m))
              and tuple(d.inserted_window_dims) == tuple(range(m))
              and tuple(d.update_window_dims) == tuple(range(n_batch, n_batch + rank - m))
              and ivd in (idx_rank - 1, idx_rank)
              and tuple(upd_s.type.shape[n_batch:]) == tuple(x_s.type.shape[m:]))
    kind = _scatter_kind(op.regions[0])
    if not simple or kind is None:
        raise ctx.unsupported(f"form {op.attributes.get('scatter_dimension_numbers')!r} is not supported "
                              f"(leading scattered dims with whole trailing windows, set/add/mul/max/min)")
    idx = ctx.get(idx_s)
    if ivd == idx_rank:
        idx = ctx.reshape(idx, tuple(idx.type.shape) + (1,))
    idx = _as_i64(ctx, idx)
    y = ctx.g.scatter_nd(ctx.get(x_s), idx, ctx.get(upd_s), reduction=kind)
    ctx.bind(op.results[0], y)


def _starts(ctx: ImportContext, op: Operation, first: int, sizes, shape) -> list[tuple[Value | None, int | None]]:
    """Per axis the clamped start: (None, constant) when known at compile time, else (value, None)."""
    out = []
    for k, s in enumerate(op.operands[first:]):
        hi = shape[k] - sizes[k]
        arr = ctx.constant_of(s)
        if arr is not None:
            out.append((None, int(min(max(int(np.asarray(arr).reshape(())), 0), hi))))
        else:
            out.append((_clamp(ctx, _as_i64(ctx, ctx.get(s)), hi), None))
    return out


@converts("stablehlo.dynamic_slice")
def dynamic_slice(ctx: ImportContext, op: Operation) -> None:
    x = ctx.get(op.operands[0])
    shape = tuple(x.type.shape)
    sizes = tuple(int(s) for s in op.attributes.get("slice_sizes", ()))
    for axis, (value, const) in enumerate(_starts(ctx, op, 1, sizes, shape)):
        if sizes[axis] == shape[axis]:
            continue
        if value is None:
            x = ctx.g.slice(x, starts=(const,), ends=(const + sizes[axis],), axes=(axis,), steps=(1,))
        else:
            rows = ctx.g.add(ctx.reshape(value, (1,)), ctx.const(np.arange(sizes[axis], dtype=np.int64)))
            x = ctx.g.gather(x, rows, axis=axis)
    ctx.bind(op.results[0], x)


@converts("stablehlo.dynamic_update_slice")
def dynamic_update_slice(ctx: ImportContext, op: Operation) -> None:
    """``graph.scatter_nd`` of the update at ``start + its own index`` along every axis."""
    x = ctx.get(op.operands[0])
    upd = ctx.get(op.operands[1])
    shape, ushape = tuple(x.type.shape), tuple(upd.type.shape)
    rank = len(shape)
    if ushape == shape:
        ctx.bind(op.results[0], upd)
        return
    coords = []
    for axis, (value, const) in enumerate(_starts(ctx, op, 2, ushape, shape)):
        line_shape = [1] * rank + [1]
        line_shape[axis] = ushape[axis]
        line = ctx.const(np.arange(ushape[axis], dtype=np.int64).reshape(line_shape))
        start = ctx.const(np.full([1] * (rank + 1), const, np.int64)) if value is None else \
            ctx.reshape(value, [1] * (rank + 1))
        coords.append(ctx.expand(ctx.g.add(line, start), ushape + (1,)))
    indices = coords[0] if rank == 1 else ctx.g.concat(coords, axis=rank)
    ctx.bind(op.results[0], ctx.g.scatter_nd(x, indices, upd, reduction="none"))


@converts("stablehlo.sort")
def sort(ctx: ImportContext, op: Operation) -> None:
    """``jnp.sort`` / ``jnp.argsort``: one operand, or the operand with an iota along the sorted
    dim (whose sorted copy is the permutation), ordered by a comparator ending in a ``LT`` (ascending)
    or ``GT`` (descending) compare of the first operand's pair: ``graph.topk`` over the whole dim,
    which keeps equal elements in their original order as a stable sort does.  NaNs are not
    ordered by a total order here (jax puts them last)."""
    block = op.regions[0].blocks[0]
    ret = block.last
    cmp = ret.operands[0].op if ret is not None and ret.operands else None
    direction = enum_value(cmp.attributes.get("comparison_direction"), "direction") \
        if cmp is not None and cmp.name == "stablehlo.compare" else None
    if direction not in ("LT", "GT") or len(op.operands) > 2:
        raise ctx.unsupported("is supported for one operand (or one with its iota) ordered by a less-than or "
                              "greater-than comparator")
    dim = int(op.attributes.get("dimension", -1))
    x = ctx.get(op.operands[0])
    rank = x.type.rank
    dim %= rank
    values, indices = ctx.g.topk(x, k=x.type.shape[dim], axis=dim, largest=direction == "GT", sorted=True)
    ctx.bind(op.results[0], values)
    if len(op.operands) == 2:
        if not _is_iota_along(ctx, op.operands[1], dim):
            raise ctx.unsupported("sorts a second operand that is not an iota along the sorted dimension")
        ctx.bind(op.results[1], ctx.cast(indices, op.results[1].type.dtype))


def _is_iota_along(ctx: ImportContext, v: Value, dim: int) -> bool:
    arr = ctx.constant_of(v)
    if arr is None:
        return False
    arr = np.asarray(arr)
    shape = [1] * arr.ndim
    shape[dim] = arr.shape[dim]
    return bool((arr == np.arange(arr.shape[dim]).reshape(shape)).all())
