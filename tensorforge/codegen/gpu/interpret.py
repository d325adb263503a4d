"""A race-checking interpreter for GPU loop.funcs (docs/gpu.md), on NumPy arrays.

It is the oracle of GPU schedules on machines without a GPU, and a bug detector: a schedule that
forgets a barrier often works by luck on hardware (the threads of a warp run in lockstep), so
here the threads of a work-group run one at a time, each from one barrier to its next in one
go, in a random order per phase.  A missing read-after-write barrier then reads a shared
element no thread has written yet (allocations start as NaN, or a garbage pattern for ints), a
missing write-after-read barrier lets a fast thread overwrite a tile a slow one still reads,
and a barrier that only some threads reach is reported rather than hanging.

Every thread runs as a Python generator that yields at each ``loop.barrier``.  The IR is first
compiled into closures (one per op) so that a small kernel runs in well under a second.  Scalar
ops have their reference NumPy semantics (the ``compute`` of their graph twins, as the
structured interpreter evaluates them), at the op's dtype: float32 stays float32.
"""
from __future__ import annotations

import operator
from typing import Callable, Iterable, Mapping, NoReturn, Sequence

import numpy as np

from ...dialects.loop.ops import GPU_BLOCK_KINDS, GPU_KINDS, loop_extent
from ...dialects.scalar import element_dtype
from ...errors import CompileError, IRError, ShapeError
from ...ir.core import Block, Operation
from ...ir.opdef import lookup
from ...ir.symbolic import evaluate, symbols_of
from ...ir.types import DType, IndexType
from ...schedule.analysis import body, iv
from .verify import buffer_name, gpu_axis, is_launch, launch_shape

GARBAGE_BYTE = 0xA5       # fills fresh integer buffers: -1515870811 as i32, -91 as i8


class _Group:
    """One work-group's shared memory: the shared allocs, by id of their op."""

    __slots__ = ("shared",)

    def __init__(self) -> None:
        self.shared: dict[int, np.ndarray] = {}


class _Thread:
    """One thread's values (id of an SSA value -> Python int for index, NumPy scalar or array), its
    block and thread indices (None outside a launch) and its group."""

    __slots__ = ("env", "block", "thread", "group")

    def __init__(self, env: dict, block=None, thread=None, group: _Group | None = None):
        self.env, self.block, self.thread, self.group = env, block, thread, group


# A compiled op: a plain function of the thread, or (``True`` beside it) a generator function
# that yields each loop.barrier it reaches.
Step = Callable[[_Thread], object]
Compiled = tuple[Step, bool]


def run_gpu_kernel(fn: Operation, args: Sequence[np.ndarray], seed: int = 0, *,
                   symbols: Mapping[str, int] | None = None) -> None:
    """Runs the ``loop.func`` ``fn`` in place on ``args`` (its buffer arguments in order, inputs
    then outputs), with the threads of each work-group in an order drawn from ``seed``.

    Raises CompileError, naming the kernel, for an out-of-bounds access, a barrier that not every
    thread of a group reaches, or a GPU loop or barrier outside a launch.  ``symbols`` gives the
    values of symbolic dims; by default they come from the argument axes that are one symbol."""
    name = fn.attributes.get("sym_name", "?")
    params = body(fn).args
    if len(args) != len(params):
        raise IRError(f"kernel '{name}' takes {len(params)} buffers, got {len(args)}")
    env = _symbol_values(fn, args, symbols)
    interp = _Interpreter(fn, env, np.random.default_rng(seed))
    host = _Thread({id(p): _check_arg(name, k, p.type, a) for k, (p, a) in enumerate(zip(params, args))})
    with np.errstate(all="ignore"):
        for op in body(fn):
            interp.run_top(op, host)


def _check_arg(name: str, k: int, t, arr) -> np.ndarray:
    ok = isinstance(arr, np.ndarray) and arr.ndim == t.rank and arr.dtype == t.dtype.np and all(
        isinstance(d, str) or d == n for d, n in zip(t.shape, arr.shape))
    if not ok:
        got = f"{arr.dtype}{list(arr.shape)}" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise IRError(f"kernel '{name}': argument {k} must be a {t.dtype.np}{list(t.shape)} array, got {got}")
    return arr


def _symbol_values(fn: Operation, args: Sequence[np.ndarray], given: Mapping[str, int] | None) -> dict[str, int]:
    values = dict(given or {})
    for p, a in zip(body(fn).args, args):
        for d, n in zip(p.type.shape, np.shape(a)):
            if isinstance(d, str) and symbols_of(d) == {d}:
                values.setdefault(d, int(n))
    return values


def garbage(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """A fresh buffer whose reads before a write show: NaN for floats, a byte pattern for ints."""
    np_dt = dtype.np
    if np_dt.kind == "f":
        return np.full(shape, np.nan, np_dt)
    if np_dt.kind == "b":
        return np.ones(shape, np_dt)
    return np.full(shape + (np_dt.itemsize,), GARBAGE_BYTE, np.uint8).view(np_dt).reshape(shape)


# ---- scalar ops ---------------------------------------------------------------------------------
# Fast paths that give the same values as the reference computes: Python operators on two NumPy
# scalars of one dtype run the same ufunc loops as np.add & co. on 0-d arrays; index values are
# Python ints (exact, as int64 is short of overflow).
_SAME_TYPE_OPS: dict[str, Callable] = {
    "scalar.add": operator.add, "scalar.sub": operator.sub, "scalar.mul": operator.mul,
    "scalar.eq": operator.eq, "scalar.ne": operator.ne, "scalar.lt": operator.lt,
    "scalar.le": operator.le, "scalar.gt": operator.gt, "scalar.ge": operator.ge,
}
_INDEX_OPS: dict[str, Callable] = {
    "scalar.floordiv": lambda a, b: a // b if b else 0,      # NumPy gives 0 for a zero divisor
    "scalar.mod": lambda a, b: a % b if b else 0,
    "scalar.max": max, "scalar.min": min,
}
_DATA_OPS: dict[str, Callable] = {"scalar.max": np.maximum, "scalar.min": np.minimum}   # NaN wins


def _fast_scalar(op: Operation) -> Callable | None:
    types = [v.type for v in op.operands]
    if op.name == "scalar.index_cast":
        return int
    if op.name == "scalar.select" and types[1] == types[2]:
        return lambda c, a, b: a if c else b
    if len(types) != 2 or types[0] != types[1]:
        return None
    if isinstance(types[0], IndexType):
        return _SAME_TYPE_OPS.get(op.name) or _INDEX_OPS.get(op.name)
    return _SAME_TYPE_OPS.get(op.name) or _DATA_OPS.get(op.name)


def _reference_scalar(op: Operation) -> Callable:
    """The op's reference semantics (its definition's ``evaluate``) on 0-d arrays of the operand
    types, with the result at the result type: the structured interpreter's evaluation, per element."""
    opdef, attrs = op.opdef, dict(op.attributes)
    if opdef is None:
        raise CompileError(f"'{op.name}' is not a registered op")
    result_types = [r.type for r in op.results]
    in_dtypes = [element_dtype(v.type).np for v in op.operands]
    out_dtype = element_dtype(result_types[0]).np
    to_index = isinstance(result_types[0], IndexType)

    def ev(*values):
        arrays = [np.asarray(v, dtype=d) for v, d in zip(values, in_dtypes)]
        out = np.asarray(opdef.evaluate(arrays, attrs, result_types)[0])
        if out.dtype != out_dtype:
            out = out.astype(out_dtype)
        return int(out) if to_index else out[()]
    return ev


def _const_value(value, t):
    return int(value) if isinstance(t, IndexType) else np.asarray(value, dtype=element_dtype(t).np)[()]


def _bf16_round(v):
    """A bf16 element as C stores it (``tf_bf16_bits``: to nearest even), held as float32."""
    return lookup("graph.cast").compute(np.asarray(v, np.float32), DType.bf16)[()]


# ---- the interpreter ----------------------------------------------------------------------------
def _sequence(steps: list[Compiled]) -> Compiled:
    """One block: a plain function when no op in it can reach a barrier, else a generator."""
    if not any(gen for _, gen in steps):
        fns = [f for f, _ in steps]

        def run(t):
            for f in fns:
                f(t)
        return run, False

    def run_gen(t):
        for f, gen in steps:
            if gen:
                yield from f(t)
            else:
                f(t)
    return run_gen, True


def _repeat(key: int | None, iterations: Callable[[_Thread], Iterable], body_step: Compiled) -> Compiled:
    """Runs a body once per value of ``iterations(t)``, binding it to the iv ``key`` (None: a guard)."""
    run, gen = body_step
    if gen:
        def repeat_gen(t):
            env = t.env
            for i in iterations(t):
                if key is not None:
                    env[key] = i
                yield from run(t)
        return repeat_gen, True

    def repeat(t):
        env = t.env
        for i in iterations(t):
            if key is not None:
                env[key] = i
            run(t)
    return repeat, False


_ONCE = (None,)


class _Interpreter:
    """Compiles the ops of one loop.func to closures and runs its top-level ops."""

    def __init__(self, fn: Operation, symbols: dict[str, int], rng: np.random.Generator):
        self.name = fn.attributes.get("sym_name", "?")
        self.symbols = symbols
        self.rng = rng

    def fail(self, message: str) -> NoReturn:
        raise CompileError(f"kernel '{self.name}': {message}")

    def dim(self, d) -> int:
        if isinstance(d, int):
            return d
        try:
            return evaluate(d, self.symbols)
        except ShapeError as e:      # a symbol without a value
            self.fail(f"the symbolic dim '{d}' needs values for its symbols ({e}); pass symbols=")

    # -- running ----------------------------------------------------------------------------------
    def run_top(self, op: Operation, host: _Thread) -> None:
        step, gen = self.op(op)
        if is_launch(op):
            self.launch(op, step if gen else _as_generator(step), host)
        elif gen:
            for _ in step(host):
                self.fail("loop.barrier outside a launch: barriers belong under the block loops")
        else:
            step(host)

    def launch(self, nest: Operation, program: Step, host: _Thread) -> None:
        grid, block = launch_shape(nest)
        for b in _points(grid):
            group = _Group()
            threads = [_Thread(dict(host.env), b, t, group) for t in _points(block)]
            self.run_group(b, threads, [program(t) for t in threads])

    def run_group(self, b, threads: list[_Thread], gens: list) -> None:
        """Runs the threads of one group phase by phase: every live thread, in a shuffled order,
        runs to its next barrier; then all must wait at the same barrier, or all have finished."""
        live = list(range(len(gens)))
        while live:
            arrived: dict[int, Operation] = {}
            for k in self.rng.permutation(len(live)):
                i = live[k]
                try:
                    arrived[i] = next(gens[i])
                except StopIteration:
                    pass
            self.check_converged(b, threads, live, arrived)
            live = sorted(arrived)

    def check_converged(self, b, threads: list[_Thread], live: list[int], arrived: dict[int, Operation]) -> None:
        if not arrived:
            return
        if len(arrived) < len(live):
            done = [threads[i].thread for i in live if i not in arrived]
            waiting = [threads[i].thread for i in arrived]
            self.fail(f"divergent barrier in work-group {b}: threads {_few(waiting)} wait at a loop.barrier "
                      f"that threads {_few(done)} never reach (a barrier under a thread-dependent if, or in "
                      f"a thread loop smaller than the block)")
        if len({id(op) for op in arrived.values()}) > 1:
            self.fail(f"divergent barrier in work-group {b}: its threads wait at different loop.barrier ops")

    # -- compiling ----------------------------------------------------------------------------------
    def block(self, blk: Block) -> Compiled:
        return _sequence([self.op(op) for op in blk])

    def op(self, op: Operation) -> Compiled:
        name = op.name
        method = _OPS.get(name)
        if method is not None:
            return method(self, op)
        if name.startswith("scalar."):
            return self.scalar(op), False
        self.fail(f"'{name}' cannot be interpreted")

    def for_(self, op: Operation) -> Compiled:
        kind = op.attributes["kind"]
        if kind in GPU_KINDS:
            iterations = self.gpu_iterations(op)
        else:
            a = op.attributes
            values = range(a["lb"], self.dim(a["ub"]), a["step"])

            def iterations(t):
                return values
        return _repeat(id(iv(op)), iterations, self.block(body(op)))

    def gpu_iterations(self, op: Operation) -> Callable[[_Thread], Iterable]:
        """A block or thread loop runs its body once, with the iv at this thread's block or thread
        index on its axis, when that index is below its extent."""
        a = op.attributes
        kind, lb, step = a["kind"], a["lb"], a["step"]
        n, axis, is_block = self.dim(loop_extent(op)), gpu_axis(kind), kind in GPU_BLOCK_KINDS

        def iterations(t):
            where = t.block if is_block else t.thread
            if where is None:
                self.fail(f"{kind} loop outside a launch: a top-level nest with GPU loops needs block "
                          f"loops outermost")
            i = where[axis]
            return (lb + i * step,) if i < n else ()
        return iterations

    def if_(self, op: Operation) -> Compiled:
        cond = id(op.operands[0])
        return _repeat(None, lambda t: _ONCE if t.env[cond] else (), self.block(body(op)))

    def barrier(self, op: Operation) -> Compiled:
        def wait(t):
            yield op
        return wait, True

    def alloc(self, op: Operation) -> Compiled:
        """A fresh buffer each time the alloc runs (per thread under the block loops); a shared
        one is made once per work-group, by the first of its threads to get there."""
        t_ = op.attributes["type"]
        key, dtype = id(op.results[0]), t_.dtype
        shape = tuple(self.dim(d) for d in t_.shape)
        shared = op.attributes.get("space") == "shared"

        def alloc(t):
            if shared and t.group is not None:
                arr = t.group.shared.get(id(op))
                if arr is None:
                    arr = t.group.shared[id(op)] = garbage(shape, dtype)
                t.env[key] = arr
            else:
                t.env[key] = garbage(shape, dtype)
        return alloc, False

    def load(self, op: Operation) -> Compiled:
        buf, res = op.operands[0], id(op.results[0])
        b, idx = id(buf), [id(v) for v in op.operands[1:]]
        pad = op.attributes.get("pad")
        pad = None if pad is None else _const_value(pad, op.results[0].type)
        check = self.bounds_check("load from", buf)

        def load(t):
            env = t.env
            arr = env[b]
            i = tuple(env[k] for k in idx)
            if not all(0 <= x < n for x, n in zip(i, arr.shape)):
                if pad is not None:
                    env[res] = pad
                    return
                check(i, arr)
            env[res] = arr[i]
        return load, False

    def store(self, op: Operation) -> Compiled:
        val, buf = id(op.operands[0]), op.operands[1]
        b, idx = id(buf), [id(v) for v in op.operands[2:]]
        convert = _bf16_round if buf.type.dtype is DType.bf16 else None
        check = self.bounds_check("store to", buf)

        def store(t):
            env = t.env
            arr = env[b]
            i = tuple(env[k] for k in idx)
            if not all(0 <= x < n for x, n in zip(i, arr.shape)):
                check(i, arr)
            arr[i] = env[val] if convert is None else convert(env[val])
        return store, False

    def bounds_check(self, what: str, buf) -> Callable:
        def report(i, arr):
            self.fail(f"{what} {buffer_name(buf)} at index {tuple(int(x) for x in i)} is out of bounds of "
                      f"its shape {arr.shape}")
        return report

    def scalar(self, op: Operation) -> Step:
        res = id(op.results[0])
        if op.name in ("scalar.const", "scalar.dim"):
            value = (_const_value(op.attributes["value"], op.results[0].type) if op.name == "scalar.const"
                     else self.dim(op.attributes["dim"]))

            def const(t):
                t.env[res] = value
            return const
        fn = _fast_scalar(op) or _reference_scalar(op)
        args = [id(v) for v in op.operands]
        if len(args) == 1:
            (a0,) = args
            return lambda t: t.env.__setitem__(res, fn(t.env[a0]))
        if len(args) == 2:
            a0, a1 = args
            return lambda t: t.env.__setitem__(res, fn(t.env[a0], t.env[a1]))

        def apply(t):
            env = t.env
            env[res] = fn(*[env[k] for k in args])
        return apply

    def nothing(self, op: Operation) -> Compiled:
        return (lambda t: None), False


_OPS: dict[str, Callable[[_Interpreter, Operation], Compiled]] = {
    "loop.for": _Interpreter.for_, "loop.if": _Interpreter.if_, "loop.barrier": _Interpreter.barrier,
    "loop.alloc": _Interpreter.alloc, "loop.load": _Interpreter.load, "loop.store": _Interpreter.store,
    "loop.return": _Interpreter.nothing, "loop.prefetch": _Interpreter.nothing,
}


def _as_generator(step: Step) -> Step:
    """A launch without barriers still runs as generators: its threads' one phase is shuffled too."""
    def gen(t):
        step(t)
        return
        yield
    return gen


def _points(dims: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """Every (x, y, z) index below ``dims``, x fastest."""
    return [(x, y, z) for z in range(dims[2]) for y in range(dims[1]) for x in range(dims[0])]


def _few(items: list, n: int = 4) -> str:
    text = ", ".join(map(str, items[:n]))
    return text + (f" and {len(items) - n} more" if len(items) > n else "")

