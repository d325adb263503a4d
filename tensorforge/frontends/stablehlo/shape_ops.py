"""Data movement: broadcast_in_dim, reshape, transpose, concatenate, slice, pad, iota, reverse."""
from __future__ import annotations

import numpy as np

from ...ir.core import Operation
from .attributes import int_list
from .context import ImportContext
from .importer import converts

_INT64_MAX = 2 ** 63 - 1


@converts("stablehlo.broadcast_in_dim")
def broadcast_in_dim(ctx: ImportContext, op: Operation) -> None:
    """Kept small (see ``ImportContext``): the operand, its dims ordered as in the result, at the
    result's rank with size-1 dims where it broadcasts."""
    dims = int_list(op, "broadcast_dimensions")
    out = op.results[0].type
    src = op.operands[0]
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    arr = ctx.constant_of(src)
    if arr is not None:             # a constant: fold (it is usually one number)
        arr = np.asarray(arr)
        arr = arr.reshape(-1)[:1].reshape((1,) * arr.ndim) if arr.size and (arr == arr.flat[0]).all() else arr
        value = None
    else:
        value = ctx.get_broadcastable(src)
    src_shape = arr.shape if arr is not None else tuple(value.type.shape)
    shape = [1] * out.rank
    for i in order:
        shape[dims[i]] = src_shape[i]
    if arr is not None:
        small = ctx.const(np.transpose(arr, order).reshape(shape), out.dtype)
    else:
        small = ctx.reshape(ctx.transpose(value, order), shape)
    if tuple(shape) == tuple(out.shape):
        ctx.bind(op.results[0], small)
    else:
        ctx.bind_lazy(op.results[0], small)


@converts("stablehlo.reshape")
def reshape(ctx: ImportContext, op: Operation) -> None:
    ctx.bind(op.results[0], ctx.reshape(ctx.get(op.operands[0]), op.results[0].type.shape))


@converts("stablehlo.transpose")
def transpose(ctx: ImportContext, op: Operation) -> None:
    ctx.bind(op.results[0], ctx.transpose(ctx.get(op.operands[0]), int_list(op, "permutation")))


@converts("stablehlo.concatenate")
def concatenate(ctx: ImportContext, op: Operation) -> None:
    axis = int(op.attributes.get("dimension", 0))
    parts = [ctx.get(v) for v in op.operands if v.type.shape[axis] != 0]
    ctx.bind(op.results[0], parts[0] if len(parts) == 1 else ctx.g.concat(parts, axis=axis))


@converts("stablehlo.slice")
def slice_(ctx: ImportContext, op: Operation) -> None:
    starts, limits = int_list(op, "start_indices"), int_list(op, "limit_indices")
    steps = int_list(op, "strides") or (1,) * len(starts)
    x = ctx.get(op.operands[0])
    if tuple(op.results[0].type.shape) == tuple(x.type.shape):
        ctx.bind(op.results[0], x)
        return
    ctx.bind(op.results[0], ctx.g.slice(x, starts=starts, ends=limits, axes=tuple(range(len(starts))), steps=steps))


@converts("stablehlo.reverse")
def reverse(ctx: ImportContext, op: Operation) -> None:
    dims = int_list(op, "dimensions")
    x = ctx.get(op.operands[0])
    if not dims:
        ctx.bind(op.results[0], x)
        return
    starts = tuple(x.type.shape[d] - 1 for d in dims)
    ctx.bind(op.results[0], ctx.g.slice(x, starts=starts, ends=(-_INT64_MAX,) * len(dims), axes=dims,
                                        steps=(-1,) * len(dims)))


@converts("stablehlo.pad")
def pad(ctx: ImportContext, op: Operation) -> None:
    low, high = int_list(op, "edge_padding_low"), int_list(op, "edge_padding_high")
    interior = int_list(op, "interior_padding")
    value = ctx.constant_of(op.operands[1])
    if value is None:
        raise ctx.unsupported("with a padding value that is not a constant is not supported")
    fill = float(np.asarray(value).reshape(-1)[0])
    x = ctx.get(op.operands[0])
    if any(interior):
        x = dilate(ctx, x, [i + 1 for i in interior], fill)
    if not any(low) and not any(high):
        ctx.bind(op.results[0], x)
        return
    ctx.bind(op.results[0], ctx.g.pad(x, pads=low + high, mode="constant", value=fill))


def dilate(ctx: ImportContext, x, factors, fill: float = 0.0):
    """``factors[d] - 1`` copies of ``fill`` between neighbours along every dim d (interior
    padding, and a convolution's lhs_dilation): each dim gets a trailing axis padded to the factor,
    the axes are merged, and the padding after the last element is cut off."""
    shape = tuple(x.type.shape)
    if all(f == 1 for f in factors):
        return x
    split = []
    for n in shape:
        split += [n, 1]
    y = ctx.reshape(x, split)
    pads = [0] * (2 * len(split))
    for d, f in enumerate(factors):
        pads[len(split) + 2 * d + 1] = f - 1
    y = ctx.g.pad(y, pads=tuple(pads), mode="constant", value=fill)
    y = ctx.reshape(y, [n * f for n, f in zip(shape, factors)])
    ends = tuple(max(0, (n - 1) * f + 1) for n, f in zip(shape, factors))
    return ctx.g.slice(y, starts=(0,) * len(shape), ends=ends, axes=tuple(range(len(shape))), steps=(1,) * len(shape))


@converts("stablehlo.iota")
def iota(ctx: ImportContext, op: Operation) -> None:
    out = op.results[0].type
    d = int(op.attributes.get("iota_dimension", 0))
    n = out.shape[d]
    line = ctx.const(np.arange(n).astype(out.dtype.np), out.dtype)
    shape = [1] * out.rank
    shape[d] = n
    small = ctx.reshape(line, shape)
    if tuple(shape) == tuple(out.shape):
        ctx.bind(op.results[0], small)
    else:
        ctx.bind_lazy(op.results[0], small)


@converts("stablehlo.get_dimension_size")
def dimension_size(ctx: ImportContext, op: Operation) -> None:
    d = int(op.attributes.get("dimension", 0))
    ctx.bind(op.results[0], ctx.const(np.array(op.operands[0].type.shape[d], dtype=op.results[0].type.dtype.np)))
