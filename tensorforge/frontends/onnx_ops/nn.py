"""Convolution, pooling, normalization and dropout.

``auto_pad`` is resolved into explicit pads here (graph ops only take explicit pads).  Ops with
no graph op (LRN, LpPool, LpNormalization, MeanVarianceNormalization, RMSNormalization,
training-mode BatchNormalization) are the exact composition of graph ops that ONNX defines.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from ...dialects.graph.base import Window
from ...ir.types import DType
from .common import is_static, norm_axis, prod, spatial_auto_pads
from .context import ImportContext, OnnxNode
from .registry import handles


def _window_attrs(ctx: ImportContext, node: OnnxNode, x: Value, kernel: tuple[int, ...],
                  dilations_ok: bool = True) -> tuple[tuple, tuple, tuple]:
    """(strides, pads, dilations) with defaults filled and auto_pad resolved."""
    n = len(kernel)
    strides = tuple(node.attr("strides", (1,) * n))
    dilations = tuple(node.attr("dilations", (1,) * n)) if dilations_ok else (1,) * n
    pads = node.attr("pads", None)
    auto = spatial_auto_pads(node, node.attr("auto_pad", "NOTSET"), ctx.shape(x)[2:], kernel, strides, dilations)
    if auto is not None:
        pads = auto
    pads = tuple(pads) if pads is not None else (0,) * (2 * n)
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        raise node.unsupported(f"strides/dilations/pads do not match {n} spatial dims")
    return strides, pads, dilations


@handles("Conv")
def conv(ctx: ImportContext, node: OnnxNode) -> Value:
    x, w, b = node.required(0), node.required(1), node.input(2)
    kernel = tuple(node.attr("kernel_shape", ctx.shape(w)[2:]))
    strides, pads, dilations = _window_attrs(ctx, node, x, kernel)
    return ctx.op("conv", x, w, b, strides=strides, pads=pads, dilations=dilations,
                  groups=node.attr("group", 1))


@handles("ConvTranspose")
def conv_transpose(ctx: ImportContext, node: OnnxNode) -> Value:
    x, w, b = node.required(0), node.required(1), node.input(2)
    kernel = tuple(node.attr("kernel_shape", ctx.shape(w)[2:]))
    n = len(kernel)
    in_sizes = ctx.shape(x)[2:]
    strides = tuple(node.attr("strides", (1,) * n))
    dilations = tuple(node.attr("dilations", (1,) * n))
    out_pad = list(node.attr("output_padding", (0,) * n))
    auto_pad = node.attr("auto_pad", "NOTSET")
    out_shape = node.attr("output_shape", None)
    pads = node.attr("pads", None)
    if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if not is_static(in_sizes):
            raise node.unsupported("output_shape/auto_pad need static spatial dimensions")
        if out_shape is None:
            out_shape = tuple(s * st for s, st in zip(in_sizes, strides))
        out_shape = tuple(out_shape)[-n:]
        begins, ends = [], []
        for i in range(n):
            total = strides[i] * (in_sizes[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - out_shape[i]
            if total < 0:  # the requested output is larger: grow it at the end
                out_pad[i] -= total
                total = 0
            small, big = total // 2, total - total // 2
            upper = auto_pad == "SAME_UPPER"
            begins.append(small if upper else big)
            ends.append(big if upper else small)
        pads = tuple(begins + ends)
    elif auto_pad == "VALID" or pads is None:
        pads = (0,) * (2 * n)
    return ctx.op("conv_transpose", x, w, b, strides=strides, pads=tuple(pads), dilations=dilations,
                  output_padding=tuple(out_pad), groups=node.attr("group", 1))


def _empty_pool(ctx: ImportContext, x: Value, kernel, strides, pads, dilations, ceil_mode: bool,
                dtype: DType | None = None) -> Value | None:
    """An empty constant when no window fits the (static) padded input on some axis: ONNX
    pooling then gives a size-0 axis (onnxruntime runs it), not an error; None otherwise."""
    shape = ctx.shape(x)
    if not all(isinstance(d, int) for d in shape):
        return None
    n = len(kernel)
    win = Window(kernel, {"strides": strides, "pads": pads, "dilations": dilations})
    out = [win.out_dim(i, shape[2 + i], ceil_mode, empty_ok=True) for i in range(n)]
    if all(out):
        return None
    dt = dtype or ctx.dtype(x)
    return ctx.const(np.zeros(tuple(shape[:2]) + tuple(out), dt.np), dt)


@handles("MaxPool")
def max_pool(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    kernel = tuple(node.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(ctx, node, x, kernel)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    storage_order = node.attr("storage_order", 0)  # only affects Indices
    empty = _empty_pool(ctx, x, kernel, strides, pads, dilations, ceil_mode)
    if empty is not None:
        if not node.wants(1):
            return empty
        return [empty, _empty_pool(ctx, x, kernel, strides, pads, dilations, ceil_mode, DType.i64)]
    y = ctx.op("max_pool", x, kernel=kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode)
    if not node.wants(1):
        return y
    return [y, _max_pool_indices(ctx, node, x, kernel, strides, pads, dilations, ceil_mode, storage_order)]


def _max_pool_indices(ctx: ImportContext, node: OnnxNode, x: Value, kernel, strides, pads, dilations,
                      ceil_mode: bool, storage_order: int) -> Value:
    """MaxPool's Indices: the flat position in x (row-major over N, C and the spatial axes, or
    column-major over the spatial axes with ``storage_order=1``) of the first maximum of each
    window, in window order, as the ONNX reference picks it.  Each window's in-bounds taps are
    gathered from x flattened over its spatial axes (static tap tables; a padding tap reads an
    appended lowest value and sits after every in-bounds tap, so it never wins a tie), an argmax
    picks the tap and a second static table maps the tap to its position."""
    shape = ctx.static_shape(x, "MaxPool's Indices output")
    n_, c_, sizes = shape[0], shape[1], shape[2:]
    n = len(kernel)
    if storage_order not in (0, 1):
        raise node.unsupported(f"storage_order={storage_order}")
    win = Window(kernel, {"strides": strides, "pads": pads, "dilations": dilations})
    out = [int(win.out_dim(i, sizes[i], ceil_mode)) for i in range(n)]
    plane = prod(sizes)
    # taps[o, k]: the spatial position (row-major) of tap k of output o, or -1 outside the input
    grids = np.meshgrid(*[np.arange(o) for o in out], *[np.arange(k) for k in kernel], indexing="ij")
    coords = [grids[i] * strides[i] - pads[i] + grids[n + i] * dilations[i] for i in range(n)]
    inside = np.ones(coords[0].shape, bool)
    for i in range(n):
        inside &= (coords[i] >= 0) & (coords[i] < sizes[i])
    ktaps = prod(kernel)
    row = np.zeros(coords[0].shape, np.int64)
    col = np.zeros(coords[0].shape, np.int64)
    for i in range(n):
        row = row * sizes[i] + coords[i]
    for i in reversed(range(n)):
        col = col * sizes[i] + coords[i]
    row = row.reshape(-1, ktaps)
    col = col.reshape(-1, ktaps)
    inside = inside.reshape(-1, ktaps)
    order = np.argsort(~inside, axis=1, kind="stable")          # in-bounds taps first, in window order
    inside = np.take_along_axis(inside, order, 1)
    row = np.where(inside, np.take_along_axis(row, order, 1), plane)
    col = np.where(inside, np.take_along_axis(col, order, 1), -1)
    dtype = ctx.dtype(x)
    low = -np.inf if dtype.is_float else np.iinfo(dtype.np).min
    flat = ctx.op("reshape", x, shape=(n_, c_, plane))
    flat = ctx.op("concat", flat, ctx.const(np.full((n_, c_, 1), low, dtype.np)), axis=2)
    windows = ctx.op("gather", flat, ctx.const(row), axis=2)                  # (N, C, O, K)
    k = ctx.op("argmax", windows, axis=3, keepdims=False)                     # (N, C, O)
    pos = (col if storage_order else np.where(inside, row, -1)).reshape(-1)
    lin = ctx.op("add", k, ctx.const(np.arange(row.shape[0], dtype=np.int64) * ktaps))
    spatial = ctx.op("gather", ctx.const(pos), lin, axis=0)
    base = (np.arange(n_ * c_, dtype=np.int64) * plane).reshape(n_, c_, 1)
    idx = ctx.op("add", spatial, ctx.const(base))
    return ctx.op("reshape", idx, shape=(n_, c_) + tuple(out))


def _window_sum(ctx: ImportContext, node: OnnxNode, x: Value, kernel, strides, pads, dilations) -> Value:
    """Sum over each pooling window, written as a depthwise convolution with a kernel of ones."""
    shape = ctx.static_shape(x, "a dilated pooling window")
    c = shape[1]
    ones = ctx.const(np.ones((c, 1) + tuple(kernel)), ctx.dtype(x))
    return ctx.op("conv", x, ones, strides=strides, pads=pads, dilations=dilations, groups=c)


@handles("AveragePool")
def avg_pool(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    kernel = tuple(node.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(ctx, node, x, kernel, dilations_ok=node.opset >= 19)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    include = bool(node.attr("count_include_pad", 0))
    empty = _empty_pool(ctx, x, kernel, strides, pads, dilations, ceil_mode)
    if empty is not None:
        return empty
    if any(d != 1 for d in dilations):
        n = len(kernel)
        shape = ctx.static_shape(x, "a dilated pooling window")[2:]
        win = Window(kernel, {"strides": strides, "pads": pads, "dilations": dilations})
        out = [int(win.out_dim(i, shape[i], ceil_mode)) for i in range(n)]
        # ceil mode: the last windows overhang the end padding; more zero padding makes the sums,
        # and the overhang counts in no average (count_include_pad counts the explicit pads only)
        over = [max(0, (o - 1) * st + win.extents[i] - (sz + pads[i] + pads[n + i]))
                for i, (o, st, sz) in enumerate(zip(out, strides, shape))]
        wide = tuple(pads[:n]) + tuple(p + e for p, e in zip(pads[n:], over))
        total = _window_sum(ctx, node, x, kernel, strides, wide, dilations)
        # the divisor is known at compile time (the window geometry alone decides it), and is
        # separable per spatial dim: never derive it from x (x * 0 is NaN where x is +-inf)
        counts = np.ones((), np.float64)
        for i in range(n):
            taps = (np.arange(out[i])[:, None] * strides[i] + np.arange(kernel[i])[None, :] * dilations[i]
                    - pads[i])
            hi = shape[i] + pads[n + i] if include else shape[i]
            lo = -pads[i] if include else 0
            counts = np.multiply.outer(counts, ((taps >= lo) & (taps < hi)).sum(axis=1))
        return ctx.op("div", total, ctx.const(counts.astype(ctx.dtype(x).np)))
    return ctx.op("avg_pool", x, kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode,
                  count_include_pad=include)


@handles("LpPool")
def lp_pool(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    kernel = tuple(node.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(ctx, node, x, kernel)
    if node.attr("ceil_mode", 0):
        raise node.unsupported("ceil_mode=1")
    p = node.attr("p", 2)
    powered = ctx.op("mul", x, x) if p == 2 else ctx.op("pow", ctx.op("abs", x), ctx.scalar(p, x))
    total = _window_sum(ctx, node, powered, kernel, strides, pads, dilations)
    return ctx.op("sqrt", total) if p == 2 else ctx.op("pow", total, ctx.scalar(1.0 / p, x))


@handles("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: ImportContext, node: OnnxNode) -> Value:
    return ctx.op("global_avg_pool" if node.op_type == "GlobalAveragePool" else "global_max_pool", node.required(0))


@handles("GlobalLpPool")
def global_lp_pool(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    p = node.attr("p", 2)
    axes = tuple(range(2, ctx.rank(x)))
    powered = ctx.op("mul", x, x) if p == 2 else ctx.op("pow", ctx.op("abs", x), ctx.scalar(p, x))
    total = ctx.op("reduce_sum", powered, axes=axes, keepdims=True)
    return ctx.op("sqrt", total) if p == 2 else ctx.op("pow", total, ctx.scalar(1.0 / p, x))


# ---- normalization ------------------------------------------------------------------------------
def _channel_view(ctx: ImportContext, v: Value, rank: int) -> Value:
    """A (C,) vector reshaped to broadcast against an (N, C, ...) tensor."""
    return ctx.op("reshape", v, shape=(ctx.shape(v)[0],) + (1,) * (rank - 2))


@handles("BatchNormalization")
def batch_norm(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, scale, bias, mean, var = (node.required(i) for i in range(5))
    eps = node.attr("epsilon", 1e-5)
    node.ignore("consumed_inputs", "is_test")
    if node.opset < 9 and node.attr("spatial", 1) != 1:
        raise node.unsupported("spatial=0 (per-activation statistics)")
    training = node.attr("training_mode", 0) if node.opset >= 14 else 0
    momentum = node.attr("momentum", 0.9)
    if not training:
        if any(node.wants(i) for i in range(1, len(node.outputs))):
            raise node.unsupported("running statistics outputs outside training mode")
        return [ctx.op("batch_norm", x, scale, bias, mean, var, epsilon=eps)]
    rank = ctx.rank(x)
    axes = (0,) + tuple(range(2, rank))
    batch_mean = ctx.op("reduce_mean", x, axes=axes, keepdims=False)
    centered = ctx.op("sub", x, _channel_view(ctx, batch_mean, rank))
    batch_var = ctx.op("reduce_mean", ctx.op("mul", centered, centered), axes=axes, keepdims=False)
    y = ctx.op("batch_norm", x, scale, bias, batch_mean, batch_var, epsilon=eps)
    m, one_m = ctx.scalar(momentum, x), ctx.scalar(1 - momentum, x)
    run_mean = ctx.op("add", ctx.op("mul", mean, m), ctx.op("mul", batch_mean, one_m))
    run_var = ctx.op("add", ctx.op("mul", var, m), ctx.op("mul", batch_var, one_m))
    return [y, run_mean, run_var]


@handles("InstanceNormalization")
def instance_norm(ctx: ImportContext, node: OnnxNode) -> Value:
    return ctx.op("instance_norm", node.required(0), node.required(1), node.required(2),
                  epsilon=node.attr("epsilon", 1e-5))


@handles("LayerNormalization")
def layer_norm(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    x, scale, bias = node.required(0), node.required(1), node.input(2)
    rank = ctx.rank(x)
    axis = norm_axis(node, node.attr("axis", -1), rank)
    eps = node.attr("epsilon", 1e-5)
    node.ignore("stash_type")  # graph ops compute in at least the input precision
    if not (node.wants(1) or node.wants(2)):
        return [ctx.op("layer_norm", x, scale, bias, axis=axis, epsilon=eps)]
    axes = tuple(range(axis, rank))
    mean = ctx.op("reduce_mean", x, axes=axes, keepdims=True)
    centered = ctx.op("sub", x, mean)
    var = ctx.op("reduce_mean", ctx.op("mul", centered, centered), axes=axes, keepdims=True)
    inv_std = ctx.op("reciprocal", ctx.op("sqrt", ctx.op("add", var, ctx.scalar(eps, x))))
    y = ctx.op("mul", ctx.op("mul", centered, inv_std), scale)
    if bias is not None:
        y = ctx.op("add", y, bias)
    return [y, mean, inv_std]


@handles("GroupNormalization")
def group_norm(ctx: ImportContext, node: OnnxNode) -> Value:
    x, scale, bias = node.required(0), node.required(1), node.required(2)
    groups = node.attr("num_groups")
    eps = node.attr("epsilon", 1e-5)
    node.ignore("stash_type")
    channels = ctx.shape(x)[1]
    if node.opset < 21 and channels != groups:  # scale and bias were per group before opset 21
        per = channels // groups

        def per_channel(v: Value) -> Value:
            v = ctx.op("expand", ctx.op("reshape", v, shape=(groups, 1)), shape=(groups, per))
            return ctx.op("reshape", v, shape=(channels,))
        scale, bias = per_channel(scale), per_channel(bias)
    return ctx.op("group_norm", x, scale, bias, num_groups=groups, epsilon=eps)


@handles("RMSNormalization")
def rms_norm(ctx: ImportContext, node: OnnxNode) -> Value:
    x, scale = node.required(0), node.required(1)
    rank = ctx.rank(x)
    axis = norm_axis(node, node.attr("axis", -1), rank)
    eps = node.attr("epsilon", 1e-5)
    node.ignore("stash_type")
    ms = ctx.op("reduce_mean", ctx.op("mul", x, x), axes=tuple(range(axis, rank)), keepdims=True)
    inv = ctx.op("reciprocal", ctx.op("sqrt", ctx.op("add", ms, ctx.scalar(eps, x))))
    return ctx.op("mul", ctx.op("mul", x, inv), scale)


@handles("MeanVarianceNormalization")
def mvn(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    axes = tuple(sorted(a % ctx.rank(x) for a in node.attr("axes", (0, 2, 3))))
    mean = ctx.op("reduce_mean", x, axes=axes, keepdims=True)
    mean_sq = ctx.op("reduce_mean", ctx.op("mul", x, x), axes=axes, keepdims=True)
    std = ctx.op("sqrt", ctx.op("sub", mean_sq, ctx.op("mul", mean, mean)))
    return ctx.op("div", ctx.op("sub", x, mean), ctx.op("add", std, ctx.scalar(1e-9, x)))


@handles("LpNormalization")
def lp_normalization(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    axis = norm_axis(node, node.attr("axis", -1), ctx.rank(x))
    p = node.attr("p", 2)
    if p == 1:
        norm = ctx.op("reduce_sum", ctx.op("abs", x), axes=(axis,), keepdims=True)
    elif p == 2:
        norm = ctx.op("sqrt", ctx.op("reduce_sum", ctx.op("mul", x, x), axes=(axis,), keepdims=True))
    else:
        raise node.unsupported(f"p={p} (only 1 and 2 are defined)")
    zero = ctx.scalar(0, x)
    return ctx.op("select", ctx.op("eq", norm, zero), zero, ctx.op("div", x, norm))  # 0/0 is 0


@handles("LRN")
def lrn(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    size = node.attr("size")
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    rank = ctx.rank(x)
    channels = ctx.shape(x)[1]
    if not isinstance(channels, int):
        raise node.unsupported("LRN needs a static channel count")
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = ctx.op("mul", x, x)
    pads = [0] * (2 * rank)
    pads[1], pads[1 + rank] = lo, hi
    padded = ctx.op("pad", sq, pads=tuple(pads), mode="constant", value=0.0)
    total = None
    for k in range(size):
        part = ctx.op("slice", padded, starts=(k,), ends=(k + channels,), axes=(1,), steps=(1,))
        total = part if total is None else ctx.op("add", total, part)
    denom = ctx.op("add", ctx.scalar(bias, x), ctx.op("mul", total, ctx.scalar(alpha / size, x)))
    return ctx.op("div", x, ctx.op("pow", denom, ctx.scalar(beta, x)))


@handles("Dropout")
def dropout(ctx: ImportContext, node: OnnxNode) -> list[Value]:
    """Inference dropout is the identity; the mask is all true."""
    x = node.required(0)
    node.ignore("seed", "is_test", "consumed_inputs")
    if node.opset < 12:
        ratio = node.attr("ratio", 0.5)
        training = False
    else:
        ratio = ctx.const_scalar(node.input(1), "ratio") if node.input(1) is not None else 0.5
        training = bool(ctx.const_scalar(node.input(2), "training_mode")) if node.input(2) is not None else False
    if training and ratio != 0:
        raise node.unsupported("training-mode dropout with a non-zero ratio is random")
    outs = [ctx.op("identity", x)]
    if node.wants(1):
        mask_type = DType.bool if node.opset >= 10 else ctx.dtype(x)
        shape = ctx.static_shape(x, "the dropout mask")
        outs.append(ctx.const(np.ones(shape, dtype=mask_type.np), mask_type))
    return outs


@handles("Col2Im")
def col2im(ctx: ImportContext, node: OnnxNode) -> Value:
    """Col2Im as a grouped ConvTranspose: column ``c * prod(block) + k`` goes to image channel ``c`` at
    kernel offset ``k`` (a one-hot kernel), so overlapping blocks sum as ConvTranspose sums them."""
    x = node.required(0)
    image = ctx.const_ints(node.required(1), "image_shape")
    block = ctx.const_ints(node.required(2), "block_shape")
    n = len(block)
    dilations = tuple(node.attr("dilations", (1,) * n))
    pads = tuple(node.attr("pads", (0,) * (2 * n)))
    strides = tuple(node.attr("strides", (1,) * n))
    if ctx.rank(x) != 3 or len(image) != n or len(dilations) != n or len(strides) != n or len(pads) != 2 * n:
        raise node.unsupported(f"input {x.type} with image_shape {image}, block_shape {block}")
    batch, cols, length = ctx.static_shape(x, "Col2Im")
    kprod = int(np.prod(block))
    if kprod < 1 or cols % kprod:
        raise node.unsupported(f"{cols} columns are not a multiple of the block size {kprod}")
    channels = cols // kprod
    grid, out_pad = [], []
    for size, k, d, s, pb, pe in zip(image, block, dilations, strides, pads[:n], pads[n:]):
        span = size + pb + pe - d * (k - 1) - 1
        grid.append(span // s + 1)
        out_pad.append(span % s)
    if int(np.prod(grid)) != length:
        raise node.unsupported(f"{length} blocks, but image_shape {image} holds {int(np.prod(grid))}")
    w = np.zeros((cols, 1, *block), dtype=ctx.dtype(x).np)
    for c in range(channels):
        for k in range(kprod):
            w[(c * kprod + k, 0, *np.unravel_index(k, block))] = 1
    blocks = ctx.op("reshape", x, shape=(batch, cols, *grid))
    return ctx.op("conv_transpose", blocks, ctx.const(w, ctx.dtype(x)), strides=strides, pads=pads,
                  dilations=dilations, output_padding=tuple(out_pad), groups=channels)


@handles("MaxUnpool")
def max_unpool(ctx: ImportContext, node: OnnxNode) -> Value:
    """Scatters each value of X to the flat position its index names in a zero tensor of the
    inferred shape ``(in - 1) * stride - pads + kernel``; an ``output_shape`` input pads that
    with zeros at the end of each axis (as the ONNX reference does)."""
    x, idx = node.required(0), node.required(1)
    shape = ctx.static_shape(x, "MaxUnpool")
    kernel = tuple(node.attr("kernel_shape"))
    n = len(kernel)
    strides = tuple(node.attr("strides", (1,) * n))
    pads = tuple(node.attr("pads", (0,) * (2 * n)))
    if len(shape) != n + 2 or len(strides) != n or len(pads) != 2 * n:
        raise node.unsupported(f"kernel/strides/pads do not match {len(shape) - 2} spatial dims")
    inferred = shape[:2] + tuple((shape[2 + i] - 1) * strides[i] - (pads[i] + pads[n + i]) + kernel[i]
                                 for i in range(n))
    total = prod(inferred)
    dtype = ctx.dtype(x)
    count = prod(shape)
    lin = ctx.op("reshape", idx, shape=(count, 1))
    if ctx.dtype(lin) is not DType.i64:
        lin = ctx.op("cast", lin, dtype=DType.i64)
    y = ctx.op("scatter_nd", ctx.const(np.zeros((total,), dtype.np)), lin,
               ctx.op("reshape", x, shape=(count,)))
    y = ctx.op("reshape", y, shape=inferred)
    shape_in = node.input(2)
    if shape_in is None:
        return y
    want = tuple(int(d) for d in ctx.const_ints(shape_in, "output_shape"))
    if len(want) != len(inferred) or any(w < d for w, d in zip(want, inferred)):
        raise node.unsupported(f"output_shape {list(want)} smaller than the unpooled shape {list(inferred)}")
    if want == inferred:
        return y
    grow = tuple(0 for _ in want) + tuple(w - d for w, d in zip(want, inferred))
    return ctx.op("pad", y, pads=grow, mode="constant", value=0.0)
