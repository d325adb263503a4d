"""GPU-scheduled ``loop.func`` -> OpenCL C or CUDA C, one kernel function per launch.

Both languages are C with different spellings for the same few things: how a kernel and its
buffer parameters are declared, where the block and thread indices come from, how shared memory
and barriers are written, and how a float's bits are read.  Each backend's ``language.py`` holds
those spellings (``LANGUAGES`` by name); everything else (scalar expressions, loads, stores,
guards) is the C emitter's (``emit_loop.py``), with the C library's math names instead of the
CPU's inline vector math.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...dialects.loop.ops import GPU_BLOCK_KINDS, GPU_KINDS, GPU_THREAD_KINDS
from ...dialects.scalar import INDEX
from ...errors import CompileError
from ...ir.core import Operation, Value
from ...ir.types import BufferType, DType, IndexType
from ...schedule.analysis import ALLOC, FOR, LOAD, STORE, body, buffer_of, extent, indices, is_pure, walk_ops
from .language import Language, languages
from .verify import launch_shape, shared_bytes
from ..c import vmath
from ..c.emit_loop import INDEX_SPELLING, FunctionEmitter, c_type

INT32_LIMIT = 2 ** 31 - 1
_AXES = {"x": 0, "y": 1, "z": 2}
LANGUAGES = languages()


@dataclass
class PrintedLaunch:
    """One launch of a kernel: its function text and its shape."""

    name: str
    text: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int


class GpuEmitter(FunctionEmitter):
    """Prints one launch nest of a GPU-scheduled loop.func as a kernel function."""

    bool_as_bytes = False       # a cast would drop OpenCL's address space; no host vectorizer to help

    def __init__(self, fn: Operation, nest: Operation, lang: Language, name: str, params: list[Value],
                 n_inputs: int):
        super().__init__(fn, name, static=False)
        self.nest = nest
        self.lang = lang
        self.params = params
        self.n_inputs = n_inputs
        _, self.block_dims = launch_shape(nest)

    def _emit(self) -> str:
        decls, setup = [], []
        shared = self._read_and_written()
        for k, v in enumerate(self.params):
            t = v.type
            if t.dtype is DType.f16:
                raise CompileError(f"kernel '{self.c_name}': float16 buffers have no GPU lowering yet")
            name = f"p{k}"
            self.names[id(v)] = name
            fields = {"const": "const " if k < self.n_inputs else "", "type": c_type(t), "name": name, "k": k,
                      "restrict": "" if id(v) in shared else self.lang.restrict}
            decls.append(self.lang.param.format(**fields))
            if self.lang.param_setup:
                setup.append("  " + self.lang.param_setup.format(**fields))
        threads = self.block_dims[0] * self.block_dims[1] * self.block_dims[2]
        head = self.lang.kernel.format(name=self.c_name, params=", ".join(decls), threads=threads,
                                       bx=self.block_dims[0], by=self.block_dims[1], bz=self.block_dims[2])
        self.lines.append(head + " {")
        self.lines += setup
        for op in walk_ops(self.nest, ALLOC):          # shared arrays live at kernel scope (OpenCL requires it)
            if op.attributes.get("space") == "shared":
                self._declare(op, 1, self.lang.shared)
        for op in body(self.fn):                        # top-level index math and constants the nest reads
            if is_pure(op):
                self.op(op, 1)
        with vmath.libm_math():
            self.op(self.nest, 1)
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def _read_and_written(self) -> set[int]:
        """The ids of the global buffers this kernel both stores to and loads from: one thread
        writes what another reads after a barrier (a row's mean in global scratch), so they must
        not be ``restrict``.  With it the compiler may assume no other access path exists and
        move a load above the barrier: on an H200, NVRTC's code read a layer norm's statistics
        before thread 0 had written them (NaN rows)."""
        stored = {id(buffer_of(op)) for op in walk_ops(self.nest, STORE)}
        loaded = {id(buffer_of(op)) for op in walk_ops(self.nest, LOAD)}
        return stored & loaded

    def emit(self) -> str:
        """The kernel's text; its index arithmetic is 32-bit when every buffer and loop fits."""
        token = INDEX_SPELLING.set(("int32_t", "{}") if self.narrow else INDEX_SPELLING.get())
        try:
            return self._emit()
        finally:
            INDEX_SPELLING.reset(token)

    @property
    def narrow(self) -> bool:
        sizes = [a.type.num_elements for a in body(self.fn).args]
        sizes += [op.attributes["type"].num_elements for op in walk_ops(self.fn, ALLOC)]
        sizes += [extent(op) for op in walk_ops(self.fn, FOR)]
        return max(sizes, default=0) < INT32_LIMIT

    def _declare(self, op: Operation, depth: int, prefix: str = "") -> None:
        t = op.attributes["type"]
        v = self.fresh("t")
        self.names[id(op.results[0])] = v
        if t.rank == 0 and not prefix:
            self.scalars.add(id(op.results[0]))
            self.lines.append(f"{'  ' * depth}{c_type(t.dtype)} {v};")
        else:
            self.lines.append(f"{'  ' * depth}{prefix}{c_type(t)} {v}[{max(t.num_elements, 1)}];")

    def op(self, op: Operation, depth: int) -> None:
        ind = "  " * depth
        name = op.name
        if name == FOR:
            self._loop(op, depth)
        elif name == ALLOC:
            if op.attributes.get("space") != "shared":
                if not op.attributes["type"].is_static:
                    raise CompileError(f"kernel '{self.c_name}': a local buffer of run-time size has no GPU lowering")
                self._declare(op, depth)
        elif name == "loop.barrier":
            self.lines.append(ind + self.lang.barrier)
        elif name == "loop.prefetch":
            pass                    # a CPU cache hint: GPU loads are coalesced, not prefetched line by line
        elif name in ("scalar.mod", "scalar.floordiv") and isinstance(op.operands[0].type, IndexType) \
                and INDEX_SPELLING.get()[0] == "int32_t":
            v = self.fresh("v")
            self.names[id(op.results[0])] = v
            fn = "tf_imod32" if name == "scalar.mod" else "tf_floordiv32"
            args = ", ".join(self.name(x) for x in op.operands)
            self.lines.append(f"{ind}const int32_t {v} = {fn}({args});")
        elif name == "scalar.bitcast":
            raise CompileError(f"kernel '{self.c_name}': bitcast has no GPU lowering yet")
        else:
            super().op(op, depth)

    def _loop(self, op: Operation, depth: int) -> None:
        ind = "  " * depth
        a = op.attributes
        kind = a["kind"]
        v = self.fresh("i")
        self.names[id(body(op).args[0])] = v
        if kind in GPU_KINDS:
            axis = kind[-1]
            src = self.lang.block_index if kind in GPU_BLOCK_KINDS else self.lang.thread_index
            index = src.format(axis=_AXES[axis], axis_name=axis)
            self.lines.append(f"{ind}{{ const {c_type(INDEX)} {v} = {index};")
            partial = kind in GPU_THREAD_KINDS and extent(op) < self.block_dims[_AXES[axis]]
            if partial:
                self.lines.append(f"{ind}if ({v} < {extent(op)}) {{")
            self.block(body(op), depth + 1)
            self.lines.append(f"{ind}}}" + ("}" if partial else ""))
            return
        if kind == "vectorize" and self.lang.vector_load:
            self._vector_loop(op, depth)
            return
        if kind == "unroll":
            self.lines.append(f"{ind}#pragma unroll")
        self.lines.append(f"{ind}for ({c_type(INDEX)} {v} = {a['lb']}; {v} < {a['ub']}; {v} += {a['step']}) {{")
        self.block(body(op), depth + 1)
        self.lines.append(f"{ind}}}")

    def _vector_loop(self, op: Operation, depth: int) -> None:
        """A ``vectorize`` loop, unrolled: each contiguous, aligned float load and store of its body
        becomes one vector access (lane k reads component k; the stores go out after the last lane)."""
        ind = "  " * depth + "  "
        n = extent(op)
        lane_iv = body(op).args[0]
        children = list(body(op))
        vectors = _vector_accesses(children, lane_iv, n, body(self.fn))
        loaded: dict[int, str] = {}
        stored: dict[int, list[str]] = {}
        pointers: dict[int, str] = {}
        self.lines.append(f"{'  ' * depth}{{")
        for lane in range(n):
            self.names[id(lane_iv)] = str(lane)
            for c in children:
                if id(c) not in vectors:
                    self.op(c, depth + 1)
                elif c.name == LOAD:
                    if lane == 0:
                        loaded[id(c)] = self.fresh("w")
                        self.lines.append(f"{ind}const float{n} {loaded[id(c)]} = "
                                          f"{self.lang.vector_load.format(n=n, ptr=self._address(c))};")
                    self.names[id(c.results[0])] = loaded[id(c)] + self.lang.components[lane]
                else:
                    if lane == 0:
                        pointers[id(c)] = self._address(c)
                    stored.setdefault(id(c), []).append(self.name(c.operands[0]))
        for c in children:
            if id(c) in stored:
                value = self.lang.vector_value.format(n=n, lanes=", ".join(stored[id(c)]))
                self.lines.append(ind + self.lang.vector_store.format(n=n, value=value, ptr=pointers[id(c)]))
        self.lines.append(f"{'  ' * depth}}}")

    def _address(self, access: Operation) -> str:
        """The pointer a load or store reads or writes, as C (the buffer plus its row-major offset)."""
        buf = buffer_of(access)
        return f"{self.name(buf)} + {self.index_of(buf, indices(access))}"


def _vector_accesses(ops: list[Operation], lane: Value, n: int, top) -> set[int]:
    """The loads and stores among ``ops`` that move ``n`` neighbouring floats of a global buffer:
    float32, no padding, an offset of the form ``n*k + lane`` (so aligned to the vector, given
    buffers that start 16-byte aligned: the memory plan's offsets are multiples of 64).  None when
    the body stores a buffer it also loads (the stores move after the last lane)."""
    loads = [op for op in ops if op.name == LOAD]
    stores = [op for op in ops if op.name == STORE]
    if {id(buffer_of(op)) for op in loads} & {id(buffer_of(op)) for op in stores}:
        return set()
    out = set()
    for op in loads + stores:
        buf, idx = buffer_of(op), indices(op)
        t = buf.type
        global_buffer = buf.op is None or buf.op.parent is top
        if (global_buffer and t.dtype is DType.f32 and t.rank and t.is_static and op.attributes.get("pad") is None
                and _aligned_lanes(idx, t.shape, lane, n)):
            out.add(id(op))
    return out


def _aligned_lanes(idx, shape, lane: Value, n: int) -> bool:
    """Whether the row-major offset of ``idx`` is ``n*k + lane`` for some integer ``k``: linear in
    the lane with coefficient 1, every other term (loop variables and opaque index values alike) a
    multiple of ``n``."""
    total: dict = {}
    stride = 1
    for i, d in zip(reversed(idx), reversed(shape)):
        for key, c in _linear_terms(i).items():
            total[key] = total.get(key, 0) + c * stride
        stride *= d
    lane_coeff = total.pop(id(lane), 0)
    return lane_coeff == 1 and all(c % n == 0 for c in total.values())


def _linear_terms(v: Value) -> dict:
    """``v`` as ``{id(atom): coefficient, None: constant}``: sums and constant multiples are
    expanded, anything else (a loop variable, a division, a load) is an atom."""
    op = v.op
    if op is not None and op.name == "scalar.const":
        return {None: int(op.attributes["value"])}
    if op is not None and op.name in ("scalar.add", "scalar.sub"):
        a, b = (_linear_terms(x) for x in op.operands)
        sign = 1 if op.name == "scalar.add" else -1
        for key, c in b.items():
            a[key] = a.get(key, 0) + sign * c
        return a
    if op is not None and op.name == "scalar.mul":
        a, b = (_linear_terms(x) for x in op.operands)
        for const, other in ((a, b), (b, a)):
            if set(const) <= {None}:
                k = const.get(None, 0)
                return {key: c * k for key, c in other.items()}
    return {id(v): 1}


def print_launches(fn: Operation, language: str, base_name: str) -> tuple[list[PrintedLaunch], list[Value]]:
    """Every launch of a GPU-scheduled ``fn`` as a kernel function of ``language``, and the kernel
    parameters they all take: the function's buffers (inputs, then outputs), then its global
    scratch buffers (top-level allocs), in that order."""
    lang = LANGUAGES[language]
    args = list(body(fn).args)
    scratch = [op.results[0] for op in body(fn) if op.name == ALLOC]
    params = args + scratch
    n_inputs = fn.attributes["num_inputs"]
    launches = []
    for op in body(fn):
        if op.name == FOR:
            if op.attributes["kind"] not in GPU_BLOCK_KINDS:
                raise CompileError(f"kernel '{base_name}': top-level loop '{op.attributes.get('tag')}' is not bound "
                                   f"to the grid (the GPU schedule left it sequential)")
            name = f"{base_name}_{len(launches)}"
            text = GpuEmitter(fn, op, lang, name, params, n_inputs).emit()
            grid, block = launch_shape(op)
            launches.append(PrintedLaunch(name, text, grid, block, shared_bytes(op)))
        elif op.name not in (ALLOC, "loop.return") and not is_pure(op):
            raise CompileError(f"kernel '{base_name}': '{op.name}' outside every launch")
    return launches, params


def scratch_types(fn: Operation) -> list[BufferType]:
    """The global scratch buffers of a GPU-scheduled ``fn`` (its top-level allocs), in parameter order."""
    return [op.attributes["type"] for op in body(fn) if op.name == ALLOC]
