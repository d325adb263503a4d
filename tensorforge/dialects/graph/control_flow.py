"""Control flow of the graph dialect: ``graph.if``, ``graph.loop``, ``graph.scan`` (ops with
regions) and their terminator ``graph.yield``.  Design: ``docs/control_flow.md``.

Regions are *not* isolated (as ``scf.if``/``scf.for`` in MLIR): a body reads values of the
enclosing function directly.  Each body is one block ending in ``graph.yield``:

- ``graph.if(cond)``: two regions (then, else), no block arguments; each yields one value per
  result.  ``cond`` is a one-element bool tensor.
- ``graph.loop(max_trip, cond, inits...) {num_scan = K, has_cond}``: ONNX ``Loop``.  The body's
  arguments are ``(iter: i64[], cond: i1[], carried...)``; it yields ``(cond, carried...,
  scan...)``.  Results: the final carried values, then the K scan outputs stacked on a new
  leading axis whose length is the number of iterations run (a run-time size: a fresh symbol).
  ``has_cond = false`` ignores the condition the body yields (ONNX's for-loop form).
- ``graph.scan(inits..., xs...) {num_scan_inputs = M, scan_input_axes, scan_input_directions,
  scan_output_axes, scan_output_directions}``: ONNX ``Scan`` (opset 9+).  Body arguments: the
  carried values then one slice of every scan input; it yields the carried values then one
  slice of every scan output.  The trip count is the scan inputs' length on their scan axes.

Result types are given when an op is built (the frontend computes them from the bodies): a dim
that differs between the branches of an ``if`` or between iterations of a loop is a symbol no
input binds, bound at run time from the array (as data-dependent sizes are).  The verifier
checks that each yielded type is an instance of the declared one (same element type and rank;
a static result dim must equal the yielded one).

One definition of the semantics serves both executors: ``run(op, args, call)`` where
``call(region_index, block_args) -> yielded arrays`` runs a body; the reference interpreter
passes a body interpreter (``ir/interpreter.run_block``), the native runtime a compiled body
(``runtime/control_flow.py``).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir.opdef import TERMINATOR, Attr, OpDef, expect, register
from ...ir.types import DType, TensorType

RegionCall = Callable[[int, Sequence[np.ndarray]], list]

CONTROL_FLOW_OPS = ("graph.if", "graph.loop", "graph.scan")

INT64_MAX = np.iinfo(np.int64).max


def _body(op, index: int, what: str):
    expect(len(op.regions) > index and len(op.regions[index].blocks) == 1,
           f"needs a {what} region with exactly one block")
    block = op.regions[index].blocks[0]
    term = block.last
    expect(term is not None and term.name == "graph.yield", f"the {what} region must end with graph.yield")
    return block, term


def instance_of(declared, actual) -> bool:
    """Whether a value of type ``actual`` may flow where ``declared`` is expected: same element
    type and rank, and every static declared dim equal to the actual one (a symbolic declared
    dim accepts any size: it is bound at run time)."""
    if not isinstance(declared, TensorType) or not isinstance(actual, TensorType):
        return declared == actual
    if declared.dtype is not actual.dtype or declared.rank != actual.rank:
        return False
    return all(isinstance(d, str) or d == a for d, a in zip(declared.shape, actual.shape))


def _check_yield(types, declared, what: str) -> None:
    expect(len(types) == len(declared), f"{what} yields {len(types)} values, expected {len(declared)}")
    for i, (t, d) in enumerate(zip(types, declared)):
        expect(instance_of(d, t), f"{what} yields {t} as value #{i}, which does not fit {d}")


def _scalar_of(t, dtype: DType, what: str) -> None:
    expect(isinstance(t, TensorType) and t.dtype is dtype and all(d == 1 for d in t.shape),
           f"{what} must be a one-element {dtype} tensor, got {t}")


@register
class Yield(OpDef):
    """Ends a control-flow body; its operands are the body's results."""

    name = "graph.yield"
    operands = ("values*",)
    results = ()
    traits = frozenset({TERMINATOR})

    def verify(self, op):
        parent = op.parent_op
        expect(parent is not None and parent.name in CONTROL_FLOW_OPS,
               "must be the terminator of a graph.if / graph.loop / graph.scan body")


class ControlFlowOp(OpDef):
    """Base: result types are given (never inferred from the operands alone)."""

    results = ("outs*",)

    def cost(self, operand_types, result_types, attrs):
        from ...ir.opdef import Cost
        return Cost(0.0, 0.0)

    def run(self, op, args: Sequence[np.ndarray], call: RegionCall) -> list[np.ndarray]:
        raise NotImplementedError

    def compute(self, *args, **attrs):   # pragma: no cover - regions need ``run``
        raise NotImplementedError("control-flow ops are evaluated with run(op, args, call)")


@register
class If(ControlFlowOp):
    """``then`` region when ``cond`` holds, else the ``else`` region."""

    name = "graph.if"
    operands = ("cond",)

    def verify(self, op):
        _scalar_of(op.operands[0].type, DType.bool, "the condition")
        expect(len(op.regions) == 2, "needs two regions (then, else)")
        declared = [r.type for r in op.results]
        for i, what in ((0, "then"), (1, "else")):
            block, term = _body(op, i, what)
            expect(not block.args, f"the {what} region takes no arguments")
            _check_yield([v.type for v in term.operands], declared, f"the {what} region")

    def run(self, op, args, call):
        return list(call(0 if bool(np.asarray(args[0]).reshape(-1)[0]) else 1, []))


@register
class Loop(ControlFlowOp):
    """ONNX ``Loop``: ``while iter < max_trip and cond`` (see the module docstring)."""

    name = "graph.loop"
    operands = ("max_trip", "cond", "inits*")
    attrs = {"num_scan": Attr("int", 0, "scan outputs (stacked per iteration) after the carried values"),
             "has_cond": Attr("bool", True, "false: the condition the body yields is ignored")}

    def verify(self, op):
        _scalar_of(op.operands[0].type, DType.i64, "max_trip")
        _scalar_of(op.operands[1].type, DType.bool, "cond")
        k = op.attributes["num_scan"]
        n = len(op.operands) - 2
        expect(k >= 0 and len(op.results) == n + k,
               f"has {len(op.results)} results; {n} carried values and {k} scan outputs give {n + k}")
        expect(len(op.regions) == 1, "needs one body region")
        block, term = _body(op, 0, "body")
        expect(len(block.args) == n + 2, f"the body takes {len(block.args)} arguments, expected {n + 2} "
                                         f"(iteration, condition, {n} carried)")
        _scalar_of(block.args[0].type, DType.i64, "the iteration argument")
        _scalar_of(block.args[1].type, DType.bool, "the condition argument")
        for i, (a, v) in enumerate(zip(block.args[2:], op.operands[2:])):
            expect(instance_of(a.type, v.type), f"carried value #{i}: initial {v.type} does not fit {a.type}")
        ys = [v.type for v in term.operands]
        expect(len(ys) == 1 + n + k, f"the body yields {len(ys)} values, expected {1 + n + k}")
        _scalar_of(ys[0], DType.bool, "the yielded condition")
        _check_yield(ys[1:1 + n], [a.type for a in block.args[2:]], "the body (carried)")
        for j, (t, r) in enumerate(zip(ys[1 + n:], op.results[n:])):
            expect(isinstance(r.type, TensorType) and r.type.rank == t.rank + 1
                   and instance_of(TensorType(r.type.shape[1:], r.type.dtype), t),
                   f"scan output #{j}: the body yields {t}, which does not fit {r.type} without its leading axis")
        for i, (a, r) in enumerate(zip(block.args[2:], op.results[:n])):
            expect(instance_of(r.type, a.type), f"result #{i} has type {r.type}; the carried value is {a.type}")

    def run(self, op, args, call):
        k = op.attributes["num_scan"]
        has_cond = op.attributes["has_cond"]
        max_trip = int(np.asarray(args[0]).reshape(-1)[0])
        cond = np.asarray(args[1]).reshape(np.shape(args[1]))
        carried = list(args[2:])
        n = len(carried)
        scans: list[list[np.ndarray]] = [[] for _ in range(k)]
        it = 0
        while it < max_trip and (not has_cond or bool(np.asarray(cond).reshape(-1)[0])):
            outs = call(0, [np.asarray(it, dtype=np.int64).reshape(op.regions[0].blocks[0].args[0].type.shape),
                            cond, *carried])
            if has_cond:
                cond = outs[0]
            carried = list(outs[1:1 + n])
            for j in range(k):
                scans[j].append(np.asarray(outs[1 + n + j]))
            it += 1
        results = list(carried)
        for j, r in enumerate(op.results[n:]):
            if scans[j]:
                results.append(np.stack(scans[j]))
            else:
                elem = [d if isinstance(d, int) else 0 for d in r.type.shape[1:]]
                results.append(np.zeros([0, *elem], r.type.dtype.np))
        return results


@register
class Scan(ControlFlowOp):
    """ONNX ``Scan`` (opset 9+): the body runs once per slice of the scan inputs."""

    name = "graph.scan"
    operands = ("values*",)
    attrs = {"num_scan_inputs": Attr("int"),
             "scan_input_axes": Attr("ints", ()), "scan_input_directions": Attr("ints", ()),
             "scan_output_axes": Attr("ints", ()), "scan_output_directions": Attr("ints", ())}

    @staticmethod
    def layout(op):
        """(N carried, M scan inputs, K scan outputs, input axes, input dirs, output axes, output dirs)."""
        a = op.attributes
        m = a["num_scan_inputs"]
        n = len(op.operands) - m
        k = len(op.results) - n
        in_axes = list(a["scan_input_axes"]) or [0] * m
        in_dirs = list(a["scan_input_directions"]) or [0] * m
        out_axes = list(a["scan_output_axes"]) or [0] * k
        out_dirs = list(a["scan_output_directions"]) or [0] * k
        return n, m, k, in_axes, in_dirs, out_axes, out_dirs

    def verify(self, op):
        a = op.attributes
        m = a["num_scan_inputs"]
        expect(1 <= m <= len(op.operands), f"num_scan_inputs {m} out of range for {len(op.operands)} operands")
        n, m, k, in_axes, in_dirs, out_axes, out_dirs = self.layout(op)
        expect(k >= 0, f"has {len(op.results)} results, fewer than its {n} carried values")
        expect(len(in_axes) == m and len(in_dirs) == m, "scan_input_axes/directions need one entry per scan input")
        expect(len(out_axes) == k and len(out_dirs) == k, "scan_output_axes/directions need one entry per scan output")
        expect(all(d in (0, 1) for d in in_dirs + out_dirs), "directions are 0 (forward) or 1 (reverse)")
        block, term = _body(op, 0, "body")
        expect(len(block.args) == n + m, f"the body takes {len(block.args)} arguments, expected {n + m}")
        for i, (arg, v) in enumerate(zip(block.args, op.operands)):
            if i < n:
                expect(instance_of(arg.type, v.type), f"carried value #{i}: initial {v.type} does not fit {arg.type}")
            else:
                t = v.type
                ax = in_axes[i - n] % max(t.rank, 1)
                sliced = TensorType(t.shape[:ax] + t.shape[ax + 1:], t.dtype)
                expect(instance_of(arg.type, sliced), f"scan input #{i - n}: a slice {sliced} does not fit {arg.type}")
        ys = [v.type for v in term.operands]
        expect(len(ys) == n + k, f"the body yields {len(ys)} values, expected {n + k}")
        _check_yield(ys[:n], [b.type for b in block.args[:n]], "the body (carried)")

    def run(self, op, args, call):
        n, m, k, in_axes, in_dirs, out_axes, out_dirs = self.layout(op)
        carried = list(args[:n])
        xs = [np.asarray(x) for x in args[n:]]
        axes = [ax % max(x.ndim, 1) for ax, x in zip(in_axes, xs)]
        lengths = {x.shape[ax] for x, ax in zip(xs, axes)}
        if len(lengths) != 1:
            raise ValueError(f"scan inputs have different lengths on their scan axes: {sorted(lengths)}")
        (length,) = lengths
        scans: list[list[np.ndarray]] = [[] for _ in range(k)]
        for t in range(length):
            slices = [np.take(x, length - 1 - t if d else t, axis=ax) for x, ax, d in zip(xs, axes, in_dirs)]
            outs = call(0, [*carried, *slices])
            carried = list(outs[:n])
            for j in range(k):
                scans[j].append(np.asarray(outs[n + j]))
        results = list(carried)
        for j, r in enumerate(op.results[n:]):
            if scans[j]:
                ys = scans[j][::-1] if out_dirs[j] else scans[j]
                rank = ys[0].ndim + 1
                results.append(np.stack(ys, axis=out_axes[j] % rank))
            else:
                results.append(np.zeros([d if isinstance(d, int) else 0 for d in r.type.shape], r.type.dtype.np))
        return results
