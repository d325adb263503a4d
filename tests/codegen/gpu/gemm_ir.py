"""Hand-written GPU loop.funcs for tests: a tiled shared-memory GEMM and a block tree reduction.

They are built op by op (``Builder``/``make_op``, as structured_to_loop.py does) rather than by a
GPU schedule, so that tests of the interpreter, the verifier and the backends do not depend on
the scheduler, and so that a test can drop one barrier to get a racy kernel on purpose.
"""
from __future__ import annotations

from typing import Sequence

from tensorforge.dialects.scalar import INDEX
from tensorforge.ir import verify
from tensorforge.ir.builder import Builder, make_op
from tensorforge.ir.core import Block, Operation, Region, Value
from tensorforge.ir.types import BufferType, DType, ScalarType

F32 = DType.f32


class LoopIR:
    """Sugar over a ``Builder`` for loop-level IR: ints given where an index value is expected
    become ``scalar.const`` ops."""

    def __init__(self, b: Builder):
        self.b = b

    def op(self, name: str, operands: Sequence[Value | int] = (), regions: Sequence[Region] = (),
           **attrs) -> Operation:
        return self.b.create(name, [self.value(v) for v in operands], attrs, regions=regions)

    def value(self, v: Value | int) -> Value:
        if isinstance(v, Value):
            return v
        return self.b.create("scalar.const", [], {"value": int(v), "type": INDEX}).results[0]

    def const(self, value, dtype: DType = F32) -> Value:
        return self.b.create("scalar.const", [], {"value": value, "type": ScalarType(dtype)}).results[0]

    def scalar(self, name: str, *operands: Value | int) -> Value:
        return self.op(f"scalar.{name}", operands).results[0]

    def add(self, a, b) -> Value:
        return self.scalar("add", a, b)

    def mul(self, a, b) -> Value:
        return self.scalar("mul", a, b)

    def for_(self, extent: int | str, kind: str = "serial", **attrs) -> tuple["LoopIR", Value]:
        """``for iv in range(lb, extent, step)`` (lb 0 and step 1 unless ``attrs`` say otherwise):
        the builder of its body and its iv."""
        block = Block([INDEX])
        self.op("loop.for", (), [Region([block])], **{"lb": 0, "ub": extent, "step": 1, "kind": kind, **attrs})
        return LoopIR(Builder.at_end(block)), block.args[0]

    def threads(self, ny: int, nx: int) -> tuple["LoopIR", Value, Value]:
        """``thread.y`` over ``ny`` around ``thread.x`` over ``nx``: the inner body and (ty, tx)."""
        outer, ty = self.for_(ny, "thread.y")
        inner, tx = outer.for_(nx, "thread.x")
        return inner, ty, tx

    def if_(self, cond: Value) -> "LoopIR":
        block = Block([])
        self.op("loop.if", (cond,), [Region([block])])
        return LoopIR(Builder.at_end(block))

    def alloc(self, shape: tuple, dtype: DType = F32, space: str | None = None, tag: str | None = None) -> Value:
        return self.op("loop.alloc", (), type=BufferType(shape, dtype), space=space, tag=tag).results[0]

    def load(self, buf: Value, *idx: Value | int, pad: float | None = None) -> Value:
        return self.op("loop.load", (buf, *idx), pad=pad).results[0]

    def store(self, value: Value, buf: Value, *idx: Value | int) -> None:
        self.op("loop.store", (value, buf, *idx))

    def barrier(self) -> None:
        self.op("loop.barrier")


def loop_func(name: str, inputs: Sequence[BufferType],
              outputs: Sequence[BufferType]) -> tuple[Operation, LoopIR, list[Value]]:
    """An empty ``loop.func`` (without its ``loop.return``: call ``finish``), its builder and arguments."""
    block = Block(list(inputs) + list(outputs))
    fn = make_op("loop.func", [], {"sym_name": name, "num_inputs": len(inputs)}, regions=[Region([block])])
    return fn, LoopIR(Builder.at_end(block)), list(block.args)


def finish(fn: Operation, ir: LoopIR) -> Operation:
    ir.op("loop.return")
    verify(fn)
    return fn


def tiled_gemm(m: int = 16, n: int = 16, k: int = 16, bm: int = 8, bn: int = 8, bk: int = 8,
               tm: int = 2, tn: int = 2, sync_loads: bool = True, sync_compute: bool = True,
               name: str = "gemm") -> Operation:
    """``C[m, n] = A[m, k] @ B[k, n]`` (f32) as a GPU kernel: a (m/bm, n/bn) grid of blocks of
    (bn/tn, bm/tm) threads; each thread accumulates a tm x tn piece of its block's bm x bn tile in
    per-thread registers while the block walks k in steps of bk, loading each A and B tile into
    shared memory cooperatively (thread ``tid`` loads the elements ``tid, tid + T, ...`` of the
    tile, T the threads per block).  ``sync_loads`` puts the barrier between the loads and the
    compute of a k-tile (read after write), ``sync_compute`` the one after the compute, before the
    next tile's loads overwrite the tiles (write after read)."""
    ny, nx = bm // tm, bn // tn
    threads = ny * nx
    assert m % bm == 0 and n % bn == 0 and k % bk == 0 and bm % tm == 0 and bn % tn == 0
    assert (bm * bk) % threads == 0 and (bk * bn) % threads == 0, "tiles must split evenly over the threads"
    fn, ir, (a, b, c) = loop_func(name, [BufferType((m, k), F32), BufferType((k, n), F32)], [BufferType((m, n), F32)])
    gy, by = ir.for_(m // bm, "block.y")
    g, bx = gy.for_(n // bn, "block.x")
    a_s = g.alloc((bm, bk), space="shared", tag="A_tile")
    b_s = g.alloc((bk, bn), space="shared", tag="B_tile")
    acc = g.alloc((tm, tn), space="local", tag="acc")
    _each_output(g, ny, nx, tm, tn, lambda t, i, j, ty, tx: t.store(t.const(0.0), acc, i, j))
    ktile, kt = g.for_(k // bk)
    t, ty, tx = ktile.threads(ny, nx)
    tid = t.add(t.mul(ty, nx), tx)
    _load_tile(t, tid, threads, a, a_s, bm, bk, row0=t.mul(by, bm), col0=t.mul(kt, bk))
    _load_tile(t, tid, threads, b, b_s, bk, bn, row0=t.mul(kt, bk), col0=t.mul(bx, bn))
    if sync_loads:
        ktile.barrier()
    t, ty, tx = ktile.threads(ny, nx)
    kk_loop, kk = t.for_(bk)
    i_loop, i = kk_loop.for_(tm)
    j_loop, j = i_loop.for_(tn)
    prod = j_loop.mul(j_loop.load(a_s, j_loop.add(j_loop.mul(ty, tm), i), kk),
                      j_loop.load(b_s, kk, j_loop.add(j_loop.mul(tx, tn), j)))
    j_loop.store(j_loop.add(j_loop.load(acc, i, j), prod), acc, i, j)
    if sync_compute:
        ktile.barrier()

    def write(t, i, j, ty, tx):
        row = t.add(t.mul(by, bm), t.add(t.mul(ty, tm), i))
        col = t.add(t.mul(bx, bn), t.add(t.mul(tx, tn), j))
        t.store(t.load(acc, i, j), c, row, col)
    _each_output(g, ny, nx, tm, tn, write)
    return finish(fn, ir)


def _each_output(g: LoopIR, ny: int, nx: int, tm: int, tn: int, body) -> None:
    """``body(builder, i, j, ty, tx)`` for each of the tm x tn outputs of each thread."""
    t, ty, tx = g.threads(ny, nx)
    i_loop, i = t.for_(tm)
    j_loop, j = i_loop.for_(tn)
    body(j_loop, i, j, ty, tx)


def _load_tile(t: LoopIR, tid: Value, threads: int, src: Value, dst: Value, rows: int, cols: int,
               row0: Value, col0: Value) -> None:
    """``dst[r, c] = src[row0 + r, col0 + c]`` over the tile, element ``e * threads + tid`` by this thread."""
    e_loop, e = t.for_(rows * cols // threads)
    flat = e_loop.add(e_loop.mul(e, threads), tid)
    r, col = e_loop.scalar("floordiv", flat, cols), e_loop.scalar("mod", flat, cols)
    e_loop.store(e_loop.load(src, e_loop.add(row0, r), e_loop.add(col0, col)), dst, r, col)


def tree_row_sum(rows: int, n: int, barriers: bool = True, name: str = "row_sum") -> Operation:
    """``out[r] = sum(x[r, :])`` with one block of ``n`` threads (a power of two) per row: the row
    goes to shared memory, then ``log2(n)`` halving steps add the upper half onto the lower
    (threads below the half work, the others idle), with a barrier after each step."""
    assert n & (n - 1) == 0, "n must be a power of two"
    fn, ir, (x, out) = loop_func(name, [BufferType((rows, n), F32)], [BufferType((rows,), F32)])
    g, r = ir.for_(rows, "block.x")
    s = g.alloc((n,), space="shared", tag="partial")
    t, tx = g.for_(n, "thread.x")
    t.store(t.load(x, r, tx), s, tx)
    stride = n // 2
    while stride >= 1:
        if barriers:
            g.barrier()
        t, tx = g.for_(stride, "thread.x")
        t.store(t.add(t.load(s, tx), t.load(s, t.add(tx, stride))), s, tx)
        stride //= 2
    if barriers:
        g.barrier()
    t, _ = g.for_(1, "thread.x")
    t.store(t.load(s, 0), out, r)
    return finish(fn, ir)
