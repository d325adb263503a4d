"""Rejects GPU loop.funcs that no device could run correctly, before any compiler sees them.

A GPU compiler accepts a kernel that launches more threads than a block may hold, declares more
shared memory than the device has, or puts a barrier where only some threads reach it; the
failure then shows up as a launch error or a hang at run time, far from its cause.  This module
checks the rules of docs/gpu.md on the loop IR, and names the kernel and what to change.

``launch_shape`` and ``shared_bytes`` are the two numbers a backend needs per launch; they live
here so that the verifier and the backend agree on them.
"""
from __future__ import annotations

from typing import NoReturn

from ...dialects.loop.ops import GPU_BLOCK_KINDS, GPU_KINDS, GPU_THREAD_KINDS, loop_extent
from ...errors import CompileError
from ...ir.core import Operation, Value
from ...schedule.analysis import affine, ancestors, body, iv, iv_deps
from ..target import GpuTarget

AXES = "xyz"
VECTOR_WIDTHS = (2, 4, 8, 16)


# ---- names and small queries ------------------------------------------------------------------
def kernel_name(op: Operation) -> str:
    """The ``sym_name`` of the loop.func holding ``op`` (or of ``op`` itself), for messages."""
    cur = op
    while cur is not None and cur.name != "loop.func":
        cur = cur.parent_op
    return cur.attributes.get("sym_name", "?") if cur is not None else "?"


def buffer_name(buf: Value) -> str:
    """How messages name a buffer: ``in0``/``out1`` for arguments (the C parameter names), else the
    alloc's tag or its type and memory space."""
    if buf.is_block_arg:
        fn = buf.owner.parent_op
        n_in = fn.attributes.get("num_inputs", 0) if fn is not None else 0
        return f"in{buf.index}" if buf.index < n_in else f"out{buf.index - n_in}"
    alloc = buf.op
    tag = alloc.attributes.get("tag")
    if tag:
        return f"'{tag}'"
    return f"the {alloc.attributes.get('space') or 'default'} alloc {alloc.attributes['type']}"


def gpu_axis(kind: str) -> int:
    """0, 1, 2 for the x, y, z axis of a ``block.*``/``thread.*`` loop kind."""
    return AXES.index(kind[-1])


def is_launch(op: Operation) -> bool:
    """Whether a top-level op is a launch: a nest whose outermost loop is a block loop."""
    return op.name == "loop.for" and op.attributes["kind"] in GPU_BLOCK_KINDS


def _fail(op: Operation, message: str) -> NoReturn:
    raise CompileError(f"kernel '{kernel_name(op)}': {message}")


def _loops_of(nest: Operation, kinds: tuple[str, ...]) -> list[Operation]:
    return [op for op in nest.walk() if op.name == "loop.for" and op.attributes["kind"] in kinds]


def _static_extent(loop: Operation) -> int:
    """The trip count of a GPU loop, which must be a static int (grid and block sizes are fixed
    when the kernel is launched, and the verifier compares them with the device limits)."""
    n = loop_extent(loop)
    if not isinstance(n, int):
        _fail(loop, f"{loop.attributes['kind']} loop has the symbolic extent '{n}': GPU loops need a "
                    f"static extent (bind a split loop of static factor instead)")
    return n


# ---- launch geometry ---------------------------------------------------------------------------
def launch_shape(nest: Operation) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of one top-level launch nest, x-y-z: per axis the largest extent of its block
    loops (the grid) and of its thread loops (the block); 1 on an axis without such a loop."""
    grid, block = [1, 1, 1], [1, 1, 1]
    for loop in _loops_of(nest, GPU_KINDS):
        kind = loop.attributes["kind"]
        dims = grid if kind in GPU_BLOCK_KINDS else block
        axis = gpu_axis(kind)
        dims[axis] = max(dims[axis], _static_extent(loop))
    return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])


def _shared_allocs(nest: Operation) -> list[Operation]:
    return [op for op in nest.walk() if op.name == "loop.alloc" and op.attributes.get("space") == "shared"]


def shared_bytes(nest: Operation) -> int:
    """Static shared memory per block of one launch nest: the sum of its shared allocs' sizes."""
    total = 0
    for alloc in _shared_allocs(nest):
        t = alloc.attributes["type"]
        if not t.is_static:
            _fail(alloc, f"shared alloc {buffer_name(alloc.results[0])} has the symbolic type {t}: shared "
                         f"memory must have a static size (allocate the tile, not the whole dim)")
        total += t.nbytes
    return total


# ---- the verifier -------------------------------------------------------------------------------
def verify_gpu_kernel(fn: Operation, target: GpuTarget) -> None:
    """Raises CompileError, naming the kernel and the fix, when ``fn`` breaks a rule of docs/gpu.md
    or a limit of ``target``, or when one of its accesses is out of bounds whatever the inputs."""
    for op in body(fn):
        if is_launch(op):
            _verify_launch(op, target)
        else:
            _verify_host(op)
    _verify_static_bounds(fn)


def _verify_host(op: Operation) -> None:
    """Top-level code that is not a launch runs once, outside every work-group: it may hold no
    GPU loop, no barrier and no shared memory."""
    for inner in op.walk():
        if inner.name == "loop.barrier":
            _fail(inner, "loop.barrier outside block loops: a barrier synchronises the threads of a "
                         "work-group, so it must sit under the block loops of a launch")
        if inner.name == "loop.alloc" and inner.attributes.get("space") == "shared":
            _fail(inner, f"shared alloc {buffer_name(inner.results[0])} outside block loops: allocate "
                         f"it under the block loops of the launch that uses it")
        if inner.name == "loop.for" and inner.attributes["kind"] in GPU_KINDS:
            _fail(inner, f"{inner.attributes['kind']} loop outside a launch: a top-level nest with GPU "
                         f"loops must have block loops outermost")


def _verify_launch(nest: Operation, target: GpuTarget) -> None:
    for op in nest.walk():
        if op.name == "loop.for":
            _verify_loop(op)
        elif op.name == "loop.alloc" and op.attributes.get("space") == "shared":
            _verify_shared_alloc(op)
    _, block = launch_shape(nest)
    threads = block[0] * block[1] * block[2]
    if threads > target.max_threads_per_block:
        _fail(nest, f"launch of block {block} has {threads} threads, more than the "
                    f"{target.max_threads_per_block} a block may hold on {target.name}: bind smaller "
                    f"factors to the thread loops")
    shared = shared_bytes(nest)
    if shared > target.shared_per_block:
        _fail(nest, f"launch declares {shared} bytes of shared memory, more than the "
                    f"{target.shared_per_block} a block may have on {target.name}: use smaller tiles")
    _verify_barriers(nest, block)


def _gpu_ancestors(op: Operation) -> list[Operation]:
    """The GPU loops enclosing ``op``, outermost first."""
    return [a for a in ancestors(op) if a.name == "loop.for" and a.attributes["kind"] in GPU_KINDS]


def _verify_loop(loop: Operation) -> None:
    a = loop.attributes
    kind = a["kind"]
    if kind == "vectorize":
        n = loop_extent(loop)
        if n not in VECTOR_WIDTHS:
            _fail(loop, f"vectorize loop of extent {n!r} in a launch: GPU vectors have {VECTOR_WIDTHS} "
                        f"lanes (split the loop by one of them first)")
        return
    if kind not in GPU_KINDS:
        return
    if a["lb"] != 0 or a["step"] != 1:
        _fail(loop, f"{kind} loop has lb={a['lb']}, step={a['step']}: GPU loops must be normalised "
                    f"(lb=0, step=1; the iv is the block or thread index)")
    _static_extent(loop)
    outer = _gpu_ancestors(loop)
    if any(o.attributes["kind"] == kind for o in outer):
        _fail(loop, f"{kind} loop nested in another {kind} loop: bind at most one loop per GPU axis "
                    f"on any path (fuse the two loops, or bind one to another axis)")
    if kind in GPU_BLOCK_KINDS and any(o.attributes["kind"] in GPU_THREAD_KINDS for o in outer):
        _fail(loop, f"{kind} loop inside a thread loop: block loops must enclose the thread loops")


def _verify_shared_alloc(alloc: Operation) -> None:
    """Shared memory is one copy per work-group, declared once: outside every thread loop."""
    if any(o.attributes["kind"] in GPU_THREAD_KINDS for o in _gpu_ancestors(alloc)):
        _fail(alloc, f"shared alloc {buffer_name(alloc.results[0])} inside a thread loop: declare it "
                     f"under the block loops and outside every thread loop")


def _verify_barriers(nest: Operation, block: tuple[int, int, int]) -> None:
    """Every thread of a group must reach every barrier: none under a thread-dependent ``loop.if``
    or in a thread loop that leaves some of the block's threads out (docs/gpu.md)."""
    thread_ivs = {id(iv(l)) for l in _loops_of(nest, GPU_THREAD_KINDS)}
    memo: dict = {}
    for barrier in nest.walk():
        if barrier.name != "loop.barrier":
            continue
        for a in ancestors(barrier):
            if a.name == "loop.if" and iv_deps(a.operands[0], memo) & thread_ivs:
                _fail(barrier, "loop.barrier under a loop.if whose condition depends on a thread index: "
                               "threads that skip it never arrive (move the barrier out of the if)")
            if a.name == "loop.for" and a.attributes["kind"] in GPU_THREAD_KINDS:
                axis = gpu_axis(a.attributes["kind"])
                if _static_extent(a) < block[axis]:
                    _fail(barrier, f"loop.barrier in a {a.attributes['kind']} loop of extent "
                                   f"{_static_extent(a)}, smaller than the block's {block[axis]} threads "
                                   f"on that axis: the other threads never arrive (move the barrier out "
                                   f"of the thread loop)")


# ---- static bounds ------------------------------------------------------------------------------
def _iv_ranges(fn: Operation) -> dict[int, tuple[int, int]]:
    """The values each static loop's iv takes, by id (GPU ivs: [0, extent-1]).  Unlike
    ``analysis.loop_ranges`` it honours lb and step, and leaves out loops that never run, so that
    an access under them is not reported."""
    out = {}
    for loop in fn.walk():
        if loop.name != "loop.for" or not isinstance(loop.attributes["ub"], int):
            continue
        a, n = loop.attributes, loop_extent(loop)
        if n:
            out[id(iv(loop))] = (a["lb"], a["lb"] + (n - 1) * a["step"])
    return out


def _affine_range(form, ranges: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """The exact range of an affine form over a box of ivs (terms of one iv are combined first,
    so ``(o*8 + t) - o*8`` ranges over t's values, not over an interval sum)."""
    lo = hi = form.const
    for key, coeff in form.terms:
        r = ranges.get(key)
        if r is None:
            return None
        a, b = coeff * r[0], coeff * r[1]
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def _verify_static_bounds(fn: Operation) -> None:
    """Loads without ``pad`` and stores whose index is affine in the ivs, and which every iteration
    reaches (not under a ``loop.if``), must stay inside the buffer for every iv value: the range
    of an affine form over a box of loops is attained, so one that leaves [0, dim-1] is a real
    out-of-bounds access (a schedule that split without a guard, a wrong tile offset)."""
    ranges = _iv_ranges(fn)
    for op in fn.walk():
        if op.name == "loop.load" and op.attributes.get("pad") is None:
            buf, idx = op.operands[0], op.operands[1:]
        elif op.name == "loop.store":
            buf, idx = op.operands[1], op.operands[2:]
        else:
            continue
        if any(a.name == "loop.if" for a in ancestors(op)):
            continue
        for k, (i, dim) in enumerate(zip(idx, buf.type.shape)):
            form = affine(i) if isinstance(dim, int) else None
            if form is None:
                continue
            r = _affine_range(form, ranges)
            if r is not None and (r[0] < 0 or r[1] > dim - 1):
                what = "load from" if op.name == "loop.load" else "store to"
                _fail(op, f"{what} {buffer_name(buf)} is out of bounds: index {k} ranges over "
                          f"[{r[0]}, {r[1]}] but the dim has {dim} elements (guard the access with a "
                          f"loop.if, pad the load, or fix the tile offsets)")
