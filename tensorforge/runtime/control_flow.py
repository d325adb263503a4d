"""Native execution of functions with ``graph.if`` / ``graph.loop`` / ``graph.scan``
(design: ``docs/control_flow.md``).

The function is cut at its control-flow ops into *steps*: each maximal run of other ops is a
**segment**, compiled by the normal pipeline into one native library (its inputs: the values it
reads from earlier steps; its outputs: the values later steps, nested bodies or the return
read); each control-flow op is a **control step** whose bodies are programs of the same kind
(recursively: a body's segments are native libraries too, its inputs the block arguments plus
the values of enclosing scopes it reads).  Running a program walks its steps: a segment is one
native call, a control step runs the op's semantics (``OpDef.run``, the same code the
reference interpreter uses) with a body call per branch taken or iteration.  Python sits
between native calls only at control-flow boundaries: one call per branch, per iteration.

A segment whose input types are static compiles when the program is built (errors surface at
``tensorforge.compile``); one that reads a run-time size (an ``if`` whose branches differ in
shape, a loop's carried value that grows, a scan output) compiles on first use per distinct
input shape (types re-inferred from the concrete shapes), cached.  Segments of constants only
are their values (no library).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import TensorforgeError
from ..ir.builder import make_op
from ..ir.builtin import FuncOp, ModuleOp
from ..ir.core import Operation, Value
from ..ir.opdef import CONSTANT_LIKE, TERMINATOR
from ..ir.types import TensorType

CONTROL_FLOW_OPS = ("graph.if", "graph.loop", "graph.scan")

# compile(module) -> a callable taking a list of arrays, returning a list of arrays
Compiler = Callable[[ModuleOp], Callable[[list], list]]


def has_control_flow(func: FuncOp) -> bool:
    return any(op.name in CONTROL_FLOW_OPS for op in func.body)


def captures(op: Operation) -> list[Value]:
    """Values of enclosing scopes that ``op``'s bodies read (not its operands)."""
    inner: set[int] = set()
    outer: dict[int, Value] = {}
    for nested in op.walk():
        for region in nested.regions:
            for block in region.blocks:
                inner.update(id(a) for a in block.args)
        inner.update(id(r) for r in nested.results)
    for nested in op.walk():
        if nested is op:
            continue
        for v in nested.operands:
            if id(v) not in inner:
                outer.setdefault(id(v), v)
    return list(outer.values())


class _Segment:
    """A run of non-control-flow ops compiled as one native function."""

    def __init__(self, ops: list[Operation], compiler: Compiler):
        self.ops = ops
        own = {id(r) for op in ops for r in op.results}
        mine = {id(op) for op in ops}
        ins: dict[int, Value] = {}
        for op in ops:
            for v in op.operands:
                if id(v) not in own:
                    ins.setdefault(id(v), v)
        self.ins = list(ins.values())
        self.outs = [r for op in ops for r in op.results if any(id(u) not in mine for u, _ in r.uses)]
        self.compiler = compiler
        self.constants: list[np.ndarray] | None = None
        self._cache: dict[tuple, Callable[[list], list]] = {}
        self._lock = threading.Lock()
        if not self.outs:
            return
        if all(op.opdef is not None and CONSTANT_LIKE in op.opdef.traits for op in ops):
            values = {}
            for op in ops:
                for r, arr in zip(op.results, op.opdef.evaluate([], op.attributes, [r.type for r in op.results])):
                    values[id(r)] = arr
            self.constants = [values[id(r)] for r in self.outs]
        elif all(isinstance(v.type, TensorType) and v.type.is_static for v in self.ins):
            self._cache[self._key_of_types()] = compiler(self._module(None))

    def _key_of_types(self) -> tuple:
        return tuple((v.type.shape, v.type.dtype.np.str) for v in self.ins)

    def _module(self, arrays: Sequence[np.ndarray] | None) -> ModuleOp:
        """The segment as a module; with ``arrays``, typed by their concrete shapes (re-inferred)."""
        types = [v.type if arrays is None else TensorType(tuple(np.shape(a)), v.type.dtype)
                 for v, a in zip(self.ins, arrays if arrays is not None else self.ins)]
        module = ModuleOp.create()
        func = module.add_function("main", types, [v.name_hint or f"in{i}" for i, v in enumerate(self.ins)])
        mapping: dict[Value, Value] = dict(zip(self.ins, func.args))
        block = func.body
        for op in self.ops:
            if arrays is None:
                new = op.clone(mapping)
            else:
                operands = [mapping[v] for v in op.operands]
                try:
                    new = make_op(op.name, operands, op.attributes, None, (), op.loc)
                except TensorforgeError:
                    if not all(isinstance(r.type, TensorType) and r.type.is_static for r in op.results):
                        raise
                    new = make_op(op.name, operands, op.attributes, [r.type for r in op.results], (), op.loc)
                for old, nv in zip(op.results, new.results):
                    nv.name_hint = old.name_hint
                    mapping[old] = nv
            block.append(new)
        func.set_return([mapping[v] for v in self.outs])
        return module

    def run(self, env: dict) -> None:
        if not self.outs:
            return
        if self.constants is not None:
            for v, arr in zip(self.outs, self.constants):
                env[id(v)] = arr
            return
        arrays = [env[id(v)] for v in self.ins]
        key = tuple((tuple(np.shape(a)), v.type.dtype.np.str) for v, a in zip(self.ins, arrays))
        fn = self._cache.get(key)
        if fn is None:
            with self._lock:
                fn = self._cache.get(key)
                if fn is None:
                    fn = self.compiler(self._module(arrays))
                    self._cache[key] = fn
        for v, arr in zip(self.outs, fn(arrays)):
            env[id(v)] = arr


class _Control:
    """A control-flow op: its semantics with bodies run as programs."""

    def __init__(self, op: Operation, compiler: Compiler):
        self.op = op
        self.captured = captures(op)
        self.bodies = []
        for region in op.regions:
            block = region.blocks[0]
            term = block.last
            self.bodies.append(Program(list(block.args) + self.captured, [o for o in block if o is not term],
                                       list(term.operands), compiler))

    def run(self, env: dict) -> None:
        args = [env[id(v)] for v in self.op.operands]
        outer = [env[id(v)] for v in self.captured]

        def call(index: int, block_args) -> list:
            return self.bodies[index].run(list(block_args) + outer)

        outs = self.op.opdef.run(self.op, args, call)
        for r, arr in zip(self.op.results, outs):
            arr = np.asarray(arr)
            env[id(r)] = arr.astype(r.type.dtype.np, copy=False) if isinstance(r.type, TensorType) else arr


class Program:
    """A block's ops as native segments and control steps; ``run(inputs) -> outputs``."""

    def __init__(self, inputs: list[Value], ops: list[Operation], outputs: list[Value], compiler: Compiler):
        self.inputs, self.outputs = inputs, outputs
        self.steps: list[Any] = []
        run: list[Operation] = []
        for op in ops:
            if op.name in CONTROL_FLOW_OPS:
                if run:
                    self.steps.append(_Segment(run, compiler))
                    run = []
                self.steps.append(_Control(op, compiler))
            elif not (op.opdef is not None and TERMINATOR in op.opdef.traits):
                run.append(op)
        if run:
            self.steps.append(_Segment(run, compiler))

    def run(self, arrays: Sequence[np.ndarray]) -> list:
        env: dict[int, Any] = {}
        for v, a in zip(self.inputs, arrays):
            a = np.asarray(a)
            if isinstance(v.type, TensorType) and a.dtype != v.type.dtype.np:
                a = a.astype(v.type.dtype.np)
            env[id(v)] = a
        for step in self.steps:
            step.run(env)
        return [env[id(v)] for v in self.outputs]


class ControlFlowModel:
    """The native model of a function with control flow: what ``CompiledModel.native`` holds
    (``run``, ``__call__``, the signature, threads).  ``source`` is None: there are several
    libraries, one per segment and body segment."""

    def __init__(self, func: FuncOp, compiler: Compiler, threads: int | None = None):
        from ..ir.symbolic import symbol_table_of
        from .signature import specs_from_values
        self.func = func
        self.program = Program(list(func.args), [op for op in func.body if op is not func.return_op],
                               list(func.outputs), compiler)
        self.inputs = specs_from_values(func.args, [a.type for a in func.args], "input")
        self.outputs = specs_from_values(func.outputs, [v.type for v in func.outputs], "output")
        self.symbols = symbol_table_of(func)
        self.source = None
        self._threads = threads

    @property
    def threads(self) -> int:
        from .native import default_threads
        return self._threads or default_threads()

    def set_threads(self, n: int) -> None:
        raise TensorforgeError("set_threads is not supported for a model with control flow; "
                               "pass threads= to tensorforge.compile")

    def run(self, inputs: Sequence[Any], out: Sequence[Any] | None = None) -> list:
        if out is not None:
            raise TensorforgeError("out= is not supported for a model with control flow (its output "
                                   "shapes may depend on the data)")
        if len(inputs) != len(self.inputs):
            raise TensorforgeError(f"the model takes {len(self.inputs)} input(s), got {len(inputs)}")
        as_torch = any(type(x).__module__.startswith("torch") for x in inputs)
        arrays = [x.detach().cpu().numpy() if type(x).__module__.startswith("torch") else np.asarray(x)
                  for x in inputs]
        for spec, a in zip(self.inputs, arrays):
            if a.ndim != len(spec.shape) or any(isinstance(d, int) and d != s for d, s in zip(spec.shape, a.shape)):
                raise TensorforgeError(f"input '{spec.name}' has shape {a.shape}, expected {list(spec.shape)}")
        outs = self.program.run(arrays)
        if as_torch:
            import torch
            return [torch.from_numpy(np.ascontiguousarray(o)) for o in outs]
        return outs

    def __call__(self, *inputs):
        outs = self.run(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)
