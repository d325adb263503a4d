"""matmul, batch_matmul and gemm as reductions over K."""
from __future__ import annotations

from .registry import LoweringContext, broadcast_read, lowering


@lowering("graph.matmul", "graph.batch_matmul")
def lower_matmul(ctx: LoweringContext):
    """NumPy matmul: batch dims broadcast, 1-D operands promoted (and the promoted axis dropped)."""
    a, b = ctx.inputs
    out = ctx.out_shape()
    ra, rb = len(a.shape), len(b.shape)
    nb = len(out) - (ra > 1) - (rb > 1)          # broadcast batch rank of the result

    def batch_index(t, p):
        own = len(t.shape) - 2
        return [0 if (t.shape[j] == 1 and out[nb - own + j] != 1) else p[nb - own + j] for j in range(own)]

    def body(*axes):
        p, k = axes[:-1], axes[-1]
        x = a.read([k]) if ra == 1 else a.read(batch_index(a, p) + [p[nb], k])
        y = b.read([k]) if rb == 1 else b.read(batch_index(b, p) + [k, p[-1]])
        return x * y

    return [ctx.kb.compute(tuple(out) + (a.shape[-1],), "p" * len(out) + "r", ctx.out_dtype(), body,
                           combiner="add")]


@lowering("graph.gemm")
def lower_gemm(ctx: LoweringContext):
    a, b = ctx.inputs[:2]
    c = ctx.inputs[2] if len(ctx.inputs) > 2 else None
    at = ctx.attrs
    M, N = ctx.out_shape()
    K = a.shape[0] if at["trans_a"] else a.shape[1]
    dt = ctx.out_dtype()
    kb = ctx.kb

    def mm(i, j, k):
        x = a[k, i] if at["trans_a"] else a[i, k]
        y = b[j, k] if at["trans_b"] else b[k, j]
        return x * y

    acc = kb.compute((M, N, K), "ppr", dt, mm, combiner="add")
    if c is None and at["alpha"] == 1.0:
        return [acc]

    def epilogue(i, j):
        v = acc[i, j]
        if at["alpha"] != 1.0:
            v = v * kb.const(at["alpha"], dt)
        if c is not None:
            cv = broadcast_read(c, (i, j), (M, N))
            if at["beta"] != 1.0:
                cv = cv * kb.const(at["beta"], dt)
            v = v + cv
        return v

    return [kb.compute((M, N), "pp", dt, epilogue)]
