"""Matrix products: MatMul, Gemm and Einsum (as transposes, reshapes and batch matmuls)."""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from .common import prod
from .context import ImportContext, OnnxNode
from .registry import handles


@handles("MatMul")
def matmul(ctx: ImportContext, node: OnnxNode) -> Value:
    return ctx.op("matmul", node.required(0), node.required(1))


@handles("Gemm")
def gemm(ctx: ImportContext, node: OnnxNode) -> Value:
    node.attr("broadcast", 1)
    a, b, c = node.required(0), node.required(1), node.input(2)
    return ctx.op("gemm", a, b, c, alpha=node.attr("alpha", 1.0), beta=node.attr("beta", 1.0),
                  trans_a=bool(node.attr("transA", 0)), trans_b=bool(node.attr("transB", 0)))


def _einsum_terms(node: OnnxNode, equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Labels of each operand and of the output, with '...' spelled out as fresh labels."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.unsupported(f"equation '{equation}' has {len(terms)} operands, the node {len(ranks)}")
    used = set(c for c in eq if c.isalpha())
    fresh = [c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba" if c not in used]
    widths = [r - len(t.replace("...", "")) if "..." in t else 0 for t, r in zip(terms, ranks)]
    ell = fresh[:max(widths, default=0)]
    out_terms = []
    for t, r, w in zip(terms, ranks, widths):
        labels = list(t.replace("...", "\0"))
        if "\0" in labels:
            i = labels.index("\0")
            labels[i:i + 1] = ell[len(ell) - w:] if w else []
        if len(labels) != r or not all(c.isalpha() for c in labels):
            raise node.unsupported(f"equation term '{t}' does not fit an operand of rank {r}")
        out_terms.append(labels)
    if arrow:
        out = list(rhs.replace("...", "\0"))
        if "\0" in out:
            i = out.index("\0")
            out[i:i + 1] = ell
    else:  # implicit output: broadcast dims, then labels used once, alphabetically
        counts: dict[str, int] = {}
        for labels in out_terms:
            for c in labels:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, n in counts.items() if n == 1 and c not in ell)
    return out_terms, out


def _einsum_diagonal(ctx: ImportContext, node: OnnxNode, x: Value, labels: list[str]) -> tuple[Value, list[str]]:
    """Takes the diagonal over every label repeated within one operand."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i = labels.index(c)
        j = labels.index(c, i + 1)
        shape = ctx.shape(x)
        if shape[i] != shape[j] or not isinstance(shape[i], int):
            raise node.unsupported(f"diagonal over label '{c}' needs equal static sizes")
        rest = [k for k in range(len(labels)) if k not in (i, j)]
        x = ctx.op("transpose", x, perm=tuple(rest + [i, j]))
        n = shape[i]
        x = ctx.op("reshape", x, shape=tuple(shape[k] for k in rest) + (n * n,))
        x = ctx.op("gather", x, ctx.const(np.arange(n, dtype=np.int64) * (n + 1)), axis=len(rest))
        labels = [labels[k] for k in rest] + [c]
    return x, labels


def _einsum_sum_out(ctx: ImportContext, x: Value, labels: list[str], keep: set[str]) -> tuple[Value, list[str]]:
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    return ctx.op("reduce_sum", x, axes=axes, keepdims=False), [c for c in labels if c in keep]


def _einsum_pair(ctx: ImportContext, node: OnnxNode, a: Value, la: list[str], b: Value, lb: list[str],
                 keep: set[str]) -> tuple[Value, list[str]]:
    """Contracts two operands with one batched matmul."""
    sa = dict(zip(la, ctx.static_shape(a, "Einsum")))
    sb = dict(zip(lb, ctx.static_shape(b, "Einsum")))
    shared = [c for c in la if c in lb]
    for c in shared:
        if sa[c] != sb[c]:
            raise node.unsupported(f"label '{c}' has sizes {sa[c]} and {sb[c]} (broadcasting is not supported)")
    batch = [c for c in shared if c in keep]
    contracted = [c for c in shared if c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]

    def arrange(x, labels, groups, sizes):
        x = ctx.op("transpose", x, perm=tuple(labels.index(c) for g in groups for c in g))
        return ctx.op("reshape", x, shape=tuple(prod(sizes[c] for c in g) for g in groups))
    am = arrange(a, la, (batch, left, contracted), sa)
    bm = arrange(b, lb, (batch, contracted, right), sb)
    y = ctx.op("matmul", am, bm)
    labels = batch + left + right
    sizes = {**sa, **sb}
    return ctx.op("reshape", y, shape=tuple(sizes[c] for c in labels)), labels


@handles("Einsum")
def einsum(ctx: ImportContext, node: OnnxNode) -> Value:
    xs = [x for x in node.inputs if x is not None]
    terms, out = _einsum_terms(node, node.attr("equation"), [ctx.rank(x) for x in xs])
    if len(set(out)) != len(out) or any(all(c not in t for t in terms) for c in out):
        raise node.unsupported(f"output labels {''.join(out)} are repeated or unknown")
    operands = [_einsum_diagonal(ctx, node, x, t) for x, t in zip(xs, terms)]

    def needed(rest) -> set[str]:
        return set(out).union(*[set(lbl) for _, lbl in rest])
    x, labels = _einsum_sum_out(ctx, *operands[0], needed(operands[1:]))
    for i in range(1, len(operands)):
        y, ly = _einsum_sum_out(ctx, *operands[i], needed(operands[i + 1:]) | set(labels))
        x, labels = _einsum_pair(ctx, node, x, labels, y, ly, needed(operands[i + 1:]))
    x, labels = _einsum_sum_out(ctx, x, labels, set(out))
    if labels == out:
        return ctx.op("identity", x) if x in xs else x
    return ctx.op("transpose", x, perm=tuple(labels.index(c) for c in out))


_DET_MAX = 4  # cofactor expansion grows as n!: beyond this a Det needs an LU kernel


@handles("Det")
def det(ctx: ImportContext, node: OnnxNode) -> Value:
    """Determinant of the trailing square matrices, by cofactor expansion along the first row
    (closed form; exact arithmetic of the same products the 2x2/3x3 formulas use) for static
    sizes up to 4."""
    x = node.required(0)
    shape = ctx.static_shape(x, "Det")
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise node.invalid(f"Det needs square trailing matrices, got shape {list(shape)}")
    m, batch, r = shape[-1], tuple(shape[:-2]), len(shape)
    if m > _DET_MAX or m == 0:
        raise node.unsupported(f"Det of {m}x{m} matrices (sizes 1..{_DET_MAX} are supported)")
    entries: dict[tuple[int, int], Value] = {}

    def entry(i: int, j: int) -> Value:
        if (i, j) not in entries:
            s = ctx.op("slice", x, starts=(i, j), ends=(i + 1, j + 1), axes=(r - 2, r - 1), steps=(1, 1))
            entries[i, j] = ctx.op("reshape", s, shape=batch)
        return entries[i, j]

    def minor(rows: tuple[int, ...], cols: tuple[int, ...]) -> Value:
        if len(rows) == 1:
            return entry(rows[0], cols[0])
        acc = None
        for k, c in enumerate(cols):
            term = ctx.op("mul", entry(rows[0], c), minor(rows[1:], cols[:k] + cols[k + 1:]))
            acc = term if acc is None else ctx.op("sub" if k % 2 else "add", acc, term)
        return acc

    return minor(tuple(range(m)), tuple(range(m)))
