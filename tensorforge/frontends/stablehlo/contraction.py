"""dot_general / dot and convolution, with any dimension numbers, onto graph.matmul and graph.conv.

The graph ops have fixed layouts (matmul: ``(..., M, K) x (K, N)`` or batched; conv: NCHW input,
OIHW weights), so operands are transposed into them and the result out of them; transposes of
constant weights fold at compile time and the others are usually absorbed by the layout passes.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.core import Operation
from .attributes import conv_dims, dot_dims, int_list, padding_pairs
from .context import ImportContext
from .importer import converts
from .shape_ops import dilate


@converts("stablehlo.dot_general", "stablehlo.dot")
def dot_general(ctx: ImportContext, op: Operation) -> None:
    lhs, rhs = ctx.get(op.operands[0]), ctx.get(op.operands[1])
    ls, rs = tuple(lhs.type.shape), tuple(rhs.type.shape)
    if op.name == "stablehlo.dot":
        lb, rb, lc, rc = (), (), (len(ls) - 1,), (0,)
    else:
        d = dot_dims(op.attributes.get("dot_dimension_numbers"))
        lb, rb, lc, rc = d.lhs_batch, d.rhs_batch, d.lhs_contract, d.rhs_contract
    lf = [i for i in range(len(ls)) if i not in lb and i not in lc]
    rf = [i for i in range(len(rs)) if i not in rb and i not in rc]
    batch = [ls[i] for i in lb]
    f1, f2 = [ls[i] for i in lf], [rs[i] for i in rf]
    k = math.prod(ls[i] for i in lc)
    a = ctx.transpose(lhs, list(lb) + lf + list(lc))
    b = ctx.transpose(rhs, list(rb) + list(rc) + rf)
    if not batch:      # (..., K) x (K, N): a Linear layer's form, which the GEMM path expects
        a = ctx.reshape(a, (*f1, k))
        b = ctx.reshape(b, (k,) if not f2 else (k, math.prod(f2)))
    else:
        a = ctx.reshape(a, (*batch, math.prod(f1), k))
        b = ctx.reshape(b, (*batch, k, math.prod(f2)))
    y = ctx.g.matmul(a, b)
    y = ctx.reshape(y, (*batch, *f1, *f2))
    ctx.bind(op.results[0], ctx.cast(y, op.results[0].type.dtype))


@converts("stablehlo.convolution")
def convolution(ctx: ImportContext, op: Operation) -> None:
    d = conv_dims(op.attributes.get("dimension_numbers"))
    n = len(d.input_spatial)
    a = op.attributes
    if any(int_list(op, "window_reversal", n, 0)):
        raise ctx.unsupported("with window_reversal is not supported")
    if int(a.get("batch_group_count", 1)) != 1:
        raise ctx.unsupported("with batch_group_count > 1 is not supported")
    pad_pairs = padding_pairs(op, n)
    x = ctx.transpose(ctx.get(op.operands[0]), (d.input_batch, d.input_feature, *d.input_spatial))
    lhs_dilation = int_list(op, "lhs_dilation", n, 1)
    if any(v != 1 for v in lhs_dilation) or (pad_pairs < 0).any():
        # a transposed convolution (jax.lax.conv_transpose): zeros between the input's pixels, the
        # padding (or cropping) applied explicitly, then an ordinary convolution
        x = dilate(ctx, x, (1, 1) + lhs_dilation)
        x = ctx.g.pad(x, pads=(0, 0, *pad_pairs[:, 0].tolist(), 0, 0, *pad_pairs[:, 1].tolist()), mode="constant",
                      value=0.0)
        pad_pairs = np.zeros((n, 2), np.int64)
    w = ctx.transpose(ctx.get(op.operands[1]), (d.kernel_out, d.kernel_in, *d.kernel_spatial))
    y = ctx.g.conv(x, w, strides=int_list(op, "window_strides", n, 1),
                   pads=tuple(int(p) for p in pad_pairs[:, 0]) + tuple(int(p) for p in pad_pairs[:, 1]),
                   dilations=int_list(op, "rhs_dilation", n, 1), groups=int(a.get("feature_group_count", 1)))
    perm = [0] * (n + 2)
    perm[d.output_batch], perm[d.output_feature] = 0, 1
    for k, pos in enumerate(d.output_spatial):
        perm[pos] = 2 + k
    ctx.bind(op.results[0], ctx.cast(ctx.transpose(y, perm), op.results[0].type.dtype))
