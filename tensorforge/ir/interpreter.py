"""Reference interpreter: runs a graph-level function on NumPy arrays.

It is the oracle of every numerical test, so it is deliberately simple: each op's NumPy
reference semantics, one op at a time, in program order.

Symbolic dims: the symbols are bound from the input arrays (an axis whose dim is exactly a
symbol binds it; an axis ``a*s+c`` solves for a single unknown ``s``), checked against the
function's declared ranges, and every input and every op result must have the shape its
symbolic type evaluates to.  A symbol no input binds (a data-dependent size) is bound by the
first result axis that is exactly that symbol.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Sequence

import numpy as np

from ..errors import IRError, ShapeError, TensorforgeError
from .builtin import FuncOp, ModuleOp
from .core import Operation, Value
from .symbolic import Expr, SymbolTable, parse, symbol_table_of
from .types import TensorType


def _coerce_input(x, t, i: int, fname: str) -> np.ndarray:
    arr = np.asarray(x)
    if isinstance(t, TensorType):
        if arr.ndim != t.rank or any(isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape)):
            raise IRError(f"input #{i} of '{fname}' has shape {arr.shape}, expected {t}")
        if arr.dtype != t.dtype.np:
            arr = arr.astype(t.dtype.np)
    return arr


class SymbolBinder:
    """The run-time values of a function's symbolic dims: bound from actual shapes, then used
    to check that every later shape is what its symbolic type evaluates to."""

    def __init__(self, table: SymbolTable | None = None):
        self.sizes: dict[str, int] = {}
        self.table = table or SymbolTable()
        self._exprs: dict[str, Expr | None] = {}

    def expr(self, d: str) -> Expr | None:
        """``d`` parsed once; None for a name that is no expression (ONNX ``"batch size"``)."""
        if d not in self._exprs:
            try:
                self._exprs[d] = parse(d)
            except ShapeError:
                self._exprs[d] = None
        return self._exprs[d]

    def bind(self, shape, actual, what: str) -> None:
        """Binds the symbols ``shape`` determines from ``actual``: plain symbols first, then
        single unknowns of linear dims (``2*s``, ``s+1``)."""
        pending = []
        for d, n in zip(shape, actual):
            if not isinstance(d, str):
                continue
            e = self.expr(d)
            if e is None or (len(e.terms) == 1 and e.terms.get(((d, 1),)) == 1):
                self._bind_one(d, int(n), what)
            else:
                pending.append((d, e, int(n)))
        for d, e, n in pending:
            self._solve_linear(d, e, n, what)

    def _bind_one(self, name: str, value: int, what: str) -> None:
        if name in self.sizes:
            return
        r = self.table.ranges.get(name)
        if r is not None and not r.contains(value):
            raise ShapeError(f"{what} gives '{name}' = {value}, outside its range {r.describe()}")
        self.sizes[name] = value

    def _solve_linear(self, d: str, e: Expr, n: int, what: str) -> None:
        unknown = [s for s in e.symbols() if s not in self.sizes]
        if len(unknown) != 1:
            return
        (u,) = unknown
        at0, at1 = (e.evaluate({**self.sizes, u: v}) for v in (0, 1))
        slope = at1 - at0
        if slope > 0 and (n - at0) % slope == 0 and e.evaluate({**self.sizes, u: (n - at0) // slope}) == n:
            self._bind_one(u, (n - at0) // slope, what)

    def check(self, shape, actual, what: str) -> None:
        """A ShapeError unless ``actual`` is ``shape`` evaluated (dims whose symbols are still
        unbound are taken as they come)."""
        if len(shape) != len(actual):
            raise ShapeError(f"{what} has shape {tuple(actual)}, but its type has rank {len(shape)}")
        for axis, (d, n) in enumerate(zip(shape, actual)):
            want = self.value(d)
            if want is not None and want != n:
                raise ShapeError(f"{what} has shape {tuple(actual)}, but its type {tuple(shape)} gives "
                                 f"{want} on axis {axis} for {self.describe(d)}")

    def value(self, d) -> int | None:
        """``d`` evaluated under the bound symbols; None while one of them is unbound."""
        if isinstance(d, int):
            return d
        e = self.expr(d)
        if e is None:
            return self.sizes.get(d)
        return e.evaluate(self.sizes) if e.symbols() <= self.sizes.keys() else None

    def describe(self, d) -> str:
        e = self.expr(d) if isinstance(d, str) else None
        names = sorted(e.symbols()) if e is not None else [d]
        return ", ".join(f"{n} = {self.sizes[n]}" for n in names if n in self.sizes) or "its symbols"

    def bind_and_check(self, t, arr: np.ndarray, what: str) -> None:
        if isinstance(t, TensorType) and not t.is_static:
            self.bind(t.shape, arr.shape, what)
            self.check(t.shape, arr.shape, what)


_SYMBOL_SIZES: ContextVar[dict[str, int] | None] = ContextVar("tensorforge_symbol_sizes", default=None)


def symbol_sizes() -> dict[str, int]:
    """Run-time sizes of the named dims of the function being interpreted, bound from its inputs.

    Ops whose attributes name symbols (``graph.reshape`` to ``("N", 768)``) read them here, since
    ``compute`` sees only arrays; empty outside ``run_function``.
    """
    return _SYMBOL_SIZES.get() or {}


@contextmanager
def symbol_sizes_bound(sizes: dict[str, int]):
    """Makes ``sizes`` what ``symbol_sizes()`` returns while the block runs (kernel evaluators
    that bound the symbols themselves)."""
    token = _SYMBOL_SIZES.set(dict(sizes))
    try:
        yield
    finally:
        _SYMBOL_SIZES.reset(token)


@contextmanager
def bound_symbols(func: FuncOp, inputs: Sequence):
    """Binds ``func``'s symbols from ``inputs`` (checking their shapes and ranges) and makes
    them what ``symbol_sizes()`` returns while the block runs; yields the ``SymbolBinder``.
    For evaluators other than ``run_function`` (kernels, fused functions) that need the sizes."""
    binder = SymbolBinder(symbol_table_of(func))
    symbolic = [(i, a.type, np.shape(x)) for i, (a, x) in enumerate(zip(func.args, inputs))
                if isinstance(a.type, TensorType) and not a.type.is_static and a.type.rank == np.ndim(x)]
    for i, t, shape in symbolic:          # every input binds before any is checked
        binder.bind(t.shape, shape, f"input #{i} of '{func.sym_name}'")
    for i, t, shape in symbolic:
        binder.check(t.shape, shape, f"input #{i} of '{func.sym_name}'")
    token = _SYMBOL_SIZES.set(binder.sizes)
    try:
        yield binder
    finally:
        _SYMBOL_SIZES.reset(token)


def run_function(func: FuncOp, inputs: Sequence, observer: Callable[[Operation, list], None] | None = None
                 ) -> list[np.ndarray]:
    """Evaluates ``func`` on ``inputs``; ``observer(op, results)`` sees every op's results."""
    if len(inputs) != len(func.args):
        raise IRError(f"'{func.sym_name}' takes {len(func.args)} inputs, got {len(inputs)}")
    with bound_symbols(func, inputs) as binder:
        return _run_function(func, inputs, observer, binder)


def _run_function(func: FuncOp, inputs: Sequence, observer: Callable[[Operation, list], None] | None,
                  binder: SymbolBinder) -> list[np.ndarray]:
    env: dict[int, np.ndarray] = {}
    for i, (a, x) in enumerate(zip(func.args, inputs)):
        env[id(a)] = _coerce_input(x, a.type, i, func.sym_name)
    remaining: dict[int, int] = {}
    for op in func.body:
        for v in _reads(op):
            remaining[id(v)] = remaining.get(id(v), 0) + 1
    for op in func.body:
        if op.name == "func.return":
            return [env[id(v)] for v in op.operands]
        _step(op, env, binder, observer)
        for v in _reads(op):  # free intermediates early: whole models run here
            remaining[id(v)] -= 1
            if remaining[id(v)] == 0 and not v.is_block_arg:
                env.pop(id(v), None)
    raise IRError(f"'{func.sym_name}' has no func.return")


def _step(op: Operation, env: dict, binder, observer) -> None:
    """Runs one op on the values in ``env``, checks its results against their types (binding
    symbols in ``binder``) and stores them in ``env``: the same step for a function body and a
    region body."""
    if op.opdef is None:
        raise IRError(f"cannot interpret unregistered op '{op.name}'{op.location_str()}")
    args = [env[id(v)] for v in op.operands]
    try:
        outs = _evaluate(op, args, env, binder, observer)
    except TensorforgeError:
        raise
    except Exception as e:  # a reference implementation rejected its inputs
        raise IRError(f"interpreting '{op.name}'{op.location_str()} failed: {type(e).__name__}: {e}") from e
    for k, (r, arr) in enumerate(zip(op.results, outs)):
        binder.bind_and_check(r.type, arr, f"result #{k} of '{op.name}'{op.location_str()}")
    if observer is not None:
        observer(op, outs)
    for r, arr in zip(op.results, outs):
        env[id(r)] = arr


def _reads(op: Operation) -> list[Value]:
    """The values ``op`` reads: its operands and, for an op with regions, the values of the
    enclosing scopes its bodies use (so that they stay alive until the op ran)."""
    if not op.regions:
        return op.operands
    inner: set[int] = set()
    outer: dict[int, Value] = {id(v): v for v in op.operands}
    for nested in op.walk():
        if nested is not op:
            for v in nested.operands:
                if id(v) not in inner:
                    outer.setdefault(id(v), v)
        for region in nested.regions:
            for block in region.blocks:
                inner.update(id(a) for a in block.args)
        inner.update(id(r) for r in nested.results)
    return [v for k, v in outer.items() if k not in inner]


def _evaluate(op: Operation, args: list, env: dict, binder: SymbolBinder,
              observer: Callable[[Operation, list], None] | None) -> list:
    """One op's results: its reference semantics, or for an op with regions (``graph.if``,
    ``graph.loop``, ``graph.scan``) its ``run`` hook with the bodies interpreted."""
    if not op.regions:
        return op.opdef.evaluate(args, op.attributes, [r.type for r in op.results])

    def call(index: int, block_args) -> list:
        return run_block(op.regions[index].blocks[0], block_args, env, binder, observer)

    outs = op.opdef.run(op, args, call)
    return [np.asarray(o).astype(r.type.dtype.np, copy=False) if isinstance(r.type, TensorType) else o
            for o, r in zip(outs, op.results)]


def run_block(block, args: Sequence, env: dict, binder: SymbolBinder | None = None,
              observer: Callable[[Operation, list], None] | None = None) -> list:
    """Runs one body block of an op with regions: ``args`` bind its arguments, values of the
    enclosing scopes are read from ``env`` (not changed); returns the terminator's operands.
    Symbols in the body's types are bound afresh per run (a loop's carried sizes may change)."""
    inner = SymbolBinder(binder.table if binder is not None else None)
    if binder is not None:
        inner.sizes.update(binder.sizes)
    local = dict(env)
    for i, (a, x) in enumerate(zip(block.args, args)):
        arr = np.asarray(x)
        if isinstance(a.type, TensorType):
            if arr.dtype != a.type.dtype.np:
                arr = arr.astype(a.type.dtype.np)
            inner.bind_and_check(a.type, arr, f"body argument #{i}")
        local[id(a)] = arr
    token = _SYMBOL_SIZES.set(inner.sizes)
    try:
        for op in block:
            if op.opdef is not None and op.opdef.traits and "terminator" in op.opdef.traits:
                return [local[id(v)] for v in op.operands]
            _step(op, local, inner, observer)
    finally:
        _SYMBOL_SIZES.reset(token)
    raise IRError("a body block has no terminator")


def interpret(module_or_func: ModuleOp | FuncOp, *inputs) -> list[np.ndarray]:
    """Runs the module's main function (or the given function) on NumPy inputs."""
    func = module_or_func.main if isinstance(module_or_func, ModuleOp) else module_or_func
    return run_function(func, inputs)
