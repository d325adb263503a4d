"""Software prefetch of the next row in row kernels whose input does not fit in a core's L2.

A row kernel (layer norm, softmax, RMS norm: a composite nest, see ``rules.py``) reads each row
several times: a first pass streams it from memory into L1 while summing, the later passes find
it there and do the arithmetic (LayerNorm + exact GELU + residual: ~14 cycles of GELU a vector).
The hardware prefetchers follow the stream only a few lines ahead, so the next row's first pass
starts cold, after this row's arithmetic, and memory idles while the core computes and the other
way round.  ``Schedule.prefetch`` cuts the last pass into chunks and starts each with a prefetch
of the same chunk of the next row, so the next row arrives while this one computes.

Measured on Zen 3 (2 cores, AVX2; x + GELU(LayerNorm(x)) over 64x512x768 float32, 100 MB each
way, the kernel in a C harness, three runs): 22.9-25.6 ms without, 19.2-21.9 ms with chunks of
96 elements (8 a row), 20.5-23.3 ms with the whole next row prefetched before the last pass,
21.9-25.4 ms with it prefetched before the first.  On the same kernel over 2x512x768 (3 MB, in L3)
the hint neither helped nor cost (0.54 vs 0.53 ms).
"""
from __future__ import annotations

from .analysis import FOR, LOAD, body, buffer_of, extent, is_symbolic_loop, tag, walk_ops
from .primitives import Schedule
from .rules import Context, attempt

# A row's last pass is cut into about this many chunks, each prefetching its part of the next row
# (8 of 96 elements beat 4 of 192 and the whole row at once, see above).
CHUNKS_PER_ROW = 8
# Rows shorter than this many bytes are left alone: a chunk must hold whole cache lines, and the
# hint's own loop costs more than it hides on a few lines.
MIN_ROW_BYTES = 1024
LINE_BYTES = 64


def prefetch_rows(s: Schedule, ctx: Context) -> None:
    """Adds ``Schedule.prefetch`` to the last sub-nest of every row loop that reads an argument
    buffer larger than one core's L2 again after an earlier sub-nest read it."""
    n_in = s.fn.attributes["num_inputs"]
    args = list(body(s.fn).args[:n_in])
    for row in list(walk_ops(s.fn, FOR)):
        children = [op for op in body(row) if op.name == FOR]
        if len(children) < 2:
            continue
        last = children[-1]
        if last.attributes.get("reduction") or is_symbolic_loop(last):
            continue                # (an outer loop there: the primitive refuses it)
        earlier = {id(buffer_of(ld)) for c in children[:-1] for ld in walk_ops(c, LOAD)}
        for k, buf in enumerate(args):
            if id(buf) not in earlier or not buf.type.is_static or buf.type.nbytes <= ctx.l2:
                continue
            if not any(buffer_of(ld) is buf for ld in walk_ops(last, LOAD)):
                continue
            chunk = _chunk(extent(last), buf.type.dtype.itemsize)
            if chunk and attempt(s.prefetch, f"in{k}", tag(last), chunk):
                break


def _chunk(n: int, itemsize: int) -> int | None:
    """Iterations a chunk: whole cache lines, dividing ``n``, nearest to ``n / CHUNKS_PER_ROW``."""
    if n * itemsize < MIN_ROW_BYTES or LINE_BYTES % itemsize:
        return None
    per_line = LINE_BYTES // itemsize
    sizes = [c for c in range(per_line, n // 2 + 1, per_line) if n % c == 0]
    if not sizes:
        return None
    want = n / CHUNKS_PER_ROW
    return min(sizes, key=lambda c: (abs(c - want), c))
