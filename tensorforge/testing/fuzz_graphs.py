"""Random valid ONNX graphs for the differential fuzzer.

A ``Case`` is one small random graph with its input values: plain Python data (nodes, the
values of its inputs and constants, the names of its outputs), so that it pickles between
processes, can be shrunk by the minimiser and printed as the code of a regression test.
``build_case`` grows one: it keeps a pool of the tensors made so far and applies random op
generators to them; each generator picks operands (from the pool, or fresh inputs and
constants of a suitable shape) and random attributes, and the node's result type comes from
ONNX's own shape inference (strict mode), which also rejects attributes that do not fit; a
rejected node is simply not added.  ``to_model`` turns one case, or several side by side (a
batch: their names are already disjoint), into a ``ModelProto``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from .fuzz_values import DEFAULT_SPECIALS, random_value

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
I32 = np.dtype(np.int32)
BOOL = np.dtype(np.bool_)
MAX_NUMEL = 2048           # largest tensor a generator may make (keeps the interpreter fast)


# ---- cases -----------------------------------------------------------------------------------
@dataclass
class Node:
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    red_len: int = 1        # how many terms each result element sums (for the tolerance)


@dataclass
class Case:
    """One random graph and its inputs.  ``types`` maps every tensor name to (dtype str, shape)."""

    name: str
    opset: int
    nodes: list[Node]
    inputs: dict[str, np.ndarray]
    inits: dict[str, np.ndarray]
    outputs: list[str]
    types: dict[str, tuple[str, tuple]]
    seed: int = 0

    @property
    def ops(self) -> list[str]:
        return sorted({n.op for n in self.nodes})

    def copy(self) -> "Case":
        return Case(self.name, self.opset, [Node(n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.red_len)
                                            for n in self.nodes],
                    {k: v.copy() for k, v in self.inputs.items()}, dict(self.inits), list(self.outputs),
                    dict(self.types), self.seed)

    def feeds(self) -> list[np.ndarray]:
        return list(self.inputs.values())


def _attr_value(v):
    if isinstance(v, np.ndarray):
        return numpy_helper.from_array(v)
    return v


def onnx_node(n: Node) -> onnx.NodeProto:
    return helper.make_node(n.op, n.inputs, n.outputs, **{k: _attr_value(v) for k, v in n.attrs.items()})


def _vi(name: str, dtype: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))


def to_model(cases: Case | Sequence[Case], extra_outputs: Sequence[str] = ()) -> onnx.ModelProto:
    """One model holding every case side by side (their tensor names must be disjoint)."""
    cases = [cases] if isinstance(cases, Case) else list(cases)
    nodes, inputs, inits, outputs = [], [], [], []
    for c in cases:
        nodes += [onnx_node(n) for n in c.nodes]
        inputs += [_vi(k, str(v.dtype), v.shape) for k, v in c.inputs.items()]
        inits += [numpy_helper.from_array(v, k) for k, v in c.inits.items()]
        outs = list(c.outputs) + [e for e in extra_outputs if e in c.types and e not in c.outputs]
        outputs += [_vi(o, *c.types[o]) for o in outs]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    opset = max(c.opset for c in cases)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10,
                             producer_name="tensorforge-fuzz")


# ---- the builder -----------------------------------------------------------------------------
class Reject(Exception):
    """A generator cannot apply here (no fitting operand, attributes shape inference refuses)."""


class Builder:
    def __init__(self, rng: np.random.Generator, opset: int, prefix: str, fraction: float,
                 specials: Sequence[str], allow_empty: bool = True):
        self.rng, self.opset, self.prefix = rng, opset, prefix
        self.fraction, self.specials, self.allow_empty = fraction, tuple(specials), allow_empty
        self.nodes: list[Node] = []
        self.inputs: dict[str, np.ndarray] = {}
        self.inits: dict[str, np.ndarray] = {}
        self.types: dict[str, tuple[str, tuple]] = {}
        self.pool: list[str] = []          # tensors operations may read (inputs and results)
        self.used: set[str] = set()
        self._n = 0

    # names and types
    def fresh(self, base: str) -> str:
        self._n += 1
        return f"{self.prefix}{base}{self._n}"

    def dtype(self, name: str) -> np.dtype:
        return np.dtype(self.types[name][0])

    def shape(self, name: str) -> tuple:
        return tuple(self.types[name][1])

    # random shapes
    def dim(self, lo: int = 1, hi: int = 5) -> int:
        r = self.rng.random()
        if self.allow_empty and r < 0.03:
            return 0
        if r < 0.25:
            return 1
        return int(self.rng.integers(max(lo, 2), max(hi, 2) + 1))

    def rand_shape(self, rank: int | None = None, max_numel: int = 256) -> tuple:
        if rank is None:
            rank = int(self.rng.choice([0, 1, 1, 2, 2, 3, 3, 4]))
        shape = [self.dim() for _ in range(rank)]
        while int(np.prod(shape)) > max_numel:
            i = int(np.argmax(shape))
            shape[i] = max(1, shape[i] // 2)
        return tuple(shape)

    # leaves
    def add_input(self, shape: Sequence[int], dtype=F32) -> str:
        name = self.fresh("in")
        self.inputs[name] = random_value(self.rng, tuple(shape), dtype, self.fraction, self.specials)
        self.types[name] = (str(np.dtype(dtype)), tuple(shape))
        self.pool.append(name)
        return name

    def const(self, value, dtype=None) -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh("c")
        self.inits[name] = arr
        self.types[name] = (str(arr.dtype), tuple(arr.shape))
        return name

    def weight(self, shape: Sequence[int], positive: bool = False) -> str:
        """A float constant operand (weights); sometimes a graph input instead (specials included)."""
        if not positive and self.rng.random() < 0.3:
            return self.add_input(shape)
        w = self.rng.standard_normal(tuple(shape)).astype(np.float32)
        if positive:
            w = np.abs(w) + np.float32(0.1)
        return self.const(w)

    def pick(self, dtype=F32, rank: tuple[int, int] = (0, 4), pred: Callable[[tuple], bool] | None = None,
             fresh_p: float = 0.25, shape: tuple | None = None) -> str:
        """A tensor of ``dtype`` with a rank in ``rank`` (and ``pred(shape)``): from the pool, or a new input."""
        dtype = np.dtype(dtype)
        ok = [n for n in self.pool if self.dtype(n) == dtype and rank[0] <= len(self.shape(n)) <= rank[1]
              and (pred is None or pred(self.shape(n)))]
        if ok and self.rng.random() >= fresh_p:
            # prefer results not read yet, so the graph grows deep rather than wide
            fresh = [n for n in ok if n not in self.used]
            src = fresh if fresh and self.rng.random() < 0.7 else ok
            return src[int(self.rng.integers(len(src)))]
        if shape is None:
            for _ in range(20):
                shape = self.rand_shape(int(self.rng.integers(rank[0], rank[1] + 1)))
                if pred is None or pred(shape):
                    break
            else:
                raise Reject("no shape satisfies the predicate")
        if dtype.kind == "b":
            name = self.fresh("in")
            self.inputs[name] = self.rng.random(shape) < 0.5
            self.types[name] = ("bool", tuple(shape))
            self.pool.append(name)
            return name
        return self.add_input(shape, dtype)

    def broadcast_partner_shape(self, shape: tuple) -> tuple:
        s = list(shape)
        r = self.rng.random()
        if r < 0.35:
            return tuple(s)
        if r < 0.6:
            return tuple(1 if self.rng.random() < 0.5 else d for d in s)
        if r < 0.8 and s:
            return tuple(s[int(self.rng.integers(0, len(s) + 1)):])
        if len(s) < 4:
            return (int(self.rng.choice([1, 2, 3])),) + tuple(1 if self.rng.random() < 0.3 else d for d in s)
        return tuple(s)

    def partner(self, x: str, dtype=None) -> str:
        """An operand that broadcasts with ``x`` (same dtype)."""
        dtype = self.dtype(x) if dtype is None else np.dtype(dtype)
        target = self.broadcast_partner_shape(self.shape(x))
        cands = [n for n in self.pool if n != x and self.dtype(n) == dtype and _broadcastable(self.shape(n), self.shape(x))
                 and _numel(np.broadcast_shapes(self.shape(n), self.shape(x))) <= MAX_NUMEL]
        if cands and self.rng.random() < 0.4:
            return cands[int(self.rng.integers(len(cands)))]
        if self.rng.random() < 0.15 and dtype.kind == "f":
            return self.const(self.rng.standard_normal(target).astype(dtype))
        return self.pick(dtype, shape=target, fresh_p=1.0)

    # nodes
    def emit(self, op: str, inputs: Sequence[str], attrs: dict | None = None, n_out: int = 1,
             red_len: int = 1) -> list[str]:
        """Adds the node if ONNX shape inference accepts it; returns its result names."""
        attrs = dict(attrs or {})
        outs = [self.fresh(op.lower()[:6]) for _ in range(n_out)]
        node = Node(op, list(inputs), outs, attrs, red_len)
        types = _infer(node, self.types, self.inits, self.opset)
        for o in outs:
            if o not in types:
                raise Reject(f"{op}: no inferred type")
            dt, shape = types[o]
            if any(not isinstance(d, int) or d < 0 for d in shape) or _numel(shape) > MAX_NUMEL:
                raise Reject(f"{op}: unknown or too large result shape {shape}")
        for o in outs:
            self.types[o] = types[o]
            self.pool.append(o)
        self.used.update(i for i in inputs if i)
        self.nodes.append(node)
        return outs

    def one(self, op: str, inputs: Sequence[str], attrs: dict | None = None, red_len: int = 1) -> str:
        return self.emit(op, inputs, attrs, 1, red_len)[0]


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(tuple(a), tuple(b))
        return True
    except ValueError:
        return False


def _infer(node: Node, types: dict, inits: dict, opset: int) -> dict:
    """Result types of ``node`` by ONNX shape inference (strict: bad attributes raise Reject)."""
    ins = [i for i in dict.fromkeys(node.inputs) if i]
    graph = helper.make_graph(
        [onnx_node(node)], "infer",
        [_vi(i, *types[i]) for i in ins if i not in inits],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.outputs],
        [numpy_helper.from_array(inits[i], i) for i in ins if i in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - any refusal just means "not this node"
        raise Reject(str(exc)[:200]) from None
    out = {}
    for vi in list(inferred.graph.output) + list(inferred.graph.value_info):
        tt = vi.type.tensor_type
        if vi.name not in node.outputs or not tt.elem_type or not tt.HasField("shape"):
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        out[vi.name] = (str(helper.tensor_dtype_to_np_dtype(tt.elem_type)), shape)
    return out


# ---- op generators ---------------------------------------------------------------------------
# Each takes a Builder, adds one or a few nodes (raising Reject when it cannot) and returns nothing.
# OPS maps a generator name to (function, ONNX op kinds it covers, weight).
OPS: dict[str, tuple[Callable, tuple[str, ...], float]] = {}
# tolerance class of every ONNX op kind the generators emit
EXACT_OPS = {"Abs", "Neg", "Relu", "Max", "Min", "Where", "Equal", "Less", "Greater", "LessOrEqual",
             "GreaterOrEqual", "And", "Or", "Xor", "Not", "IsNaN", "IsInf", "Floor", "Ceil", "Round", "Sign",
             "Clip", "Cast", "Reshape", "Transpose", "Slice", "Concat", "Split", "Gather", "Pad", "Expand", "Tile",
             "Squeeze", "Unsqueeze", "Flatten", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "MaxPool",
             "GlobalMaxPool", "Identity", "Mod"}


def gen(name: str, kinds: Sequence[str], weight: float = 1.0):
    def deco(fn):
        OPS[name] = (fn, tuple(kinds), weight)
        return fn
    return deco


def _any_float(b: Builder, rank=(0, 4), pred=None) -> str:
    return b.pick(F32, rank, pred)


UNARY = ["Abs", "Neg", "Exp", "Log", "Sqrt", "Relu", "Sigmoid", "Tanh", "Erf", "Reciprocal", "Floor", "Ceil",
         "Round", "Sin", "Cos", "Sign", "Softplus", "Softsign"]
for _op in UNARY:
    def _unary(b: Builder, _op=_op):
        x = _any_float(b)
        if _op in ("Log", "Sqrt") and b.rng.random() < 0.5:     # mostly in-domain values too
            x = b.one("Abs", [x])
        b.one(_op, [x])
    gen(_op, [_op], 0.6)(_unary)


@gen("UnaryAttr", ["Elu", "LeakyRelu", "HardSigmoid", "Selu", "Celu", "ThresholdedRelu"], 1.5)
def _unary_attr(b: Builder):
    op = str(b.rng.choice(["Elu", "LeakyRelu", "HardSigmoid", "Selu", "Celu", "ThresholdedRelu"]))
    attrs = {}
    if op in ("Elu", "LeakyRelu", "Celu", "ThresholdedRelu") and b.rng.random() < 0.7:
        attrs["alpha"] = float(np.round(b.rng.uniform(0.05, 2.0), 3))
    if op == "HardSigmoid":
        attrs = {"alpha": float(np.round(b.rng.uniform(0.1, 0.5), 3)), "beta": float(np.round(b.rng.uniform(0.2, 0.8), 3))}
    b.one(op, [_any_float(b)], attrs)


@gen("Clip", ["Clip"])
def _clip(b: Builder):
    x = _any_float(b)
    lo, hi = sorted(np.round(b.rng.normal(0, 1.5, 2), 2).astype(np.float32))
    r = b.rng.random()
    ins = [x, b.const(np.float32(lo)) if r > 0.2 else "", b.const(np.float32(hi)) if r < 0.8 else ""]
    while ins[-1] == "":
        ins.pop()
    b.one("Clip", ins)


@gen("IsNaNInf", ["IsNaN", "IsInf", "Not", "Where"])
def _isnan(b: Builder):
    x = _any_float(b)
    op = str(b.rng.choice(["IsNaN", "IsInf"]))
    attrs = {}
    if op == "IsInf" and b.rng.random() < 0.5:
        attrs = {"detect_negative": int(b.rng.integers(2)), "detect_positive": int(b.rng.integers(2))}
    m = b.one(op, [x], attrs)
    if b.rng.random() < 0.3:
        m = b.one("Not", [m])
    if b.rng.random() < 0.6:       # the usual way to use a mask: replace the flagged values
        b.one("Where", [m, b.const(np.float32(b.rng.normal())), x])


BINARY = ["Add", "Sub", "Mul", "Div", "Pow"]
for _op in BINARY:
    def _binary(b: Builder, _op=_op):
        x = _any_float(b)
        y = b.partner(x)
        if _op == "Pow" and b.rng.random() < 0.5:      # small integer exponents are the common case
            y = b.const(np.float32(b.rng.choice([2.0, 3.0, 0.5, -1.0, 1.5])))
        b.one(_op, [x, y] if b.rng.random() < 0.8 else [y, x])
    gen(_op, [_op], 1.2)(_binary)


@gen("MaxMin", ["Max", "Min", "Sum", "Mean"], 2.0)
def _variadic(b: Builder):
    op = str(b.rng.choice(["Max", "Min", "Max", "Min", "Sum", "Mean"]))
    x = _any_float(b)
    ins = [x] + [b.partner(x) for _ in range(int(b.rng.choice([1, 1, 2])))]
    b.one(op, ins)


@gen("Mod", ["Mod"], 0.5)
def _mod(b: Builder):
    x = _any_float(b)
    b.one("Mod", [x, b.partner(x)], {"fmod": 1})


@gen("Compare", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "And", "Or", "Xor"], 2.0)
def _compare(b: Builder):
    op = str(b.rng.choice(["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]))
    x = _any_float(b)
    y = b.partner(x)
    c = b.one(op, [x, y])
    if b.rng.random() < 0.3:
        other = b.pick(BOOL, shape=b.shape(c), fresh_p=0.5, pred=lambda s, c=c: _broadcastable(s, b.shape(c)))
        c = b.one(str(b.rng.choice(["And", "Or", "Xor"])), [c, other])
    if b.rng.random() < 0.8:
        b.one("Where", [c, x, y] if b.rng.random() < 0.5 else [c, y, b.partner(x)])


@gen("IntArith", ["Add", "Sub", "Mul", "Max", "Min", "Abs", "Neg", "Div", "Mod", "Sign", "Cast"], 1.0)
def _int_arith(b: Builder):
    dt = I64 if b.rng.random() < 0.6 else I32
    x = b.pick(dt)
    op = str(b.rng.choice(["Add", "Sub", "Mul", "Max", "Min", "Abs", "Neg", "Div", "Mod", "Sign"]))
    if op in ("Abs", "Neg", "Sign"):
        y = b.one(op, [x])
    elif op in ("Div", "Mod"):   # a divisor without zeros: integer division by zero is undefined
        d = b.rng.choice([-3, -2, -1, 1, 2, 3, 5], size=b.broadcast_partner_shape(b.shape(x))).astype(dt)
        y = b.one(op, [x, b.const(d)], {"fmod": int(b.rng.integers(2))} if op == "Mod" else {})
    else:
        y = b.one(op, [x, b.partner(x)])
    if b.rng.random() < 0.5:
        b.one("Cast", [y], {"to": TensorProto.FLOAT})


def _axes(b: Builder, rank: int, allow_none: bool = True):
    if rank == 0:
        return None
    if allow_none and b.rng.random() < 0.15:
        return None
    k = int(b.rng.integers(1, rank + 1))
    axes = sorted(b.rng.choice(rank, size=k, replace=False).tolist())
    return [a - rank if b.rng.random() < 0.3 else a for a in axes]


REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum"]


@gen("Reduce", REDUCE, 4.0)
def _reduce(b: Builder):
    op = str(b.rng.choice(REDUCE))
    x = _any_float(b, (1, 4)) if b.rng.random() < 0.95 else _any_float(b, (0, 0))
    shape = b.shape(x)
    axes = _axes(b, len(shape))
    if op == "ReduceLogSum":
        x = b.one("Abs", [x])
    attrs = {"keepdims": int(b.rng.integers(2))}
    ins = [x]
    if axes is not None:
        ins.append(b.const(np.array(axes, np.int64)))
    red = _numel(shape) // max(1, _numel([shape[a] for a in range(len(shape)) if axes is not None and a not in
                                          [ax % len(shape) for ax in axes]])) if axes is not None else _numel(shape)
    b.one(op, ins, attrs, red_len=max(1, red))


@gen("ArgMaxMin", ["ArgMax", "ArgMin"], 1.0)
def _arg(b: Builder):
    x = _any_float(b, (1, 4), pred=lambda s: all(d > 0 for d in s))
    r = len(b.shape(x))
    attrs = {"axis": int(b.rng.integers(-r, r)), "keepdims": int(b.rng.integers(2)),
             "select_last_index": int(b.rng.random() < 0.3)}
    y = b.one(str(b.rng.choice(["ArgMax", "ArgMin"])), [x], attrs)
    if b.rng.random() < 0.3:
        b.one("Cast", [y], {"to": TensorProto.FLOAT})


@gen("CumSum", ["CumSum"], 0.6)
def _cumsum(b: Builder):
    x = _any_float(b, (1, 4))
    r = len(b.shape(x))
    ax = int(b.rng.integers(-r, r))
    b.one("CumSum", [x, b.const(np.int64(ax))], {"exclusive": int(b.rng.integers(2)), "reverse": int(b.rng.integers(2))},
          red_len=max(1, b.shape(x)[ax]))


@gen("Softmax", ["Softmax", "LogSoftmax"], 1.5)
def _softmax(b: Builder):
    x = _any_float(b, (1, 4))
    r = len(b.shape(x))
    ax = int(b.rng.integers(-r, r))
    b.one(str(b.rng.choice(["Softmax", "LogSoftmax"])), [x], {"axis": ax}, red_len=max(1, b.shape(x)[ax]))


@gen("MatMul", ["MatMul"], 2.0)
def _matmul(b: Builder):
    a = _any_float(b, (1, 4), pred=lambda s: s[-1] <= 16)
    sa = b.shape(a)
    k = sa[-1]
    n = b.dim(1, 6)
    if len(sa) == 1:
        sb = (k,) if b.rng.random() < 0.3 else (k, n)
    else:
        batch = b.broadcast_partner_shape(sa[:-2]) if len(sa) > 2 and b.rng.random() < 0.7 else ()
        sb = tuple(batch) + (k, n) if b.rng.random() < 0.9 else (k,)
    w = b.weight(sb)
    ins = [a, w] if b.rng.random() < 0.85 else None
    if ins is None:             # (n, k) @ a.T is rarer: swap roles through a transpose-free form
        ins = [a, w]
    b.one("MatMul", ins, red_len=max(1, k))


@gen("Gemm", ["Gemm"], 1.0)
def _gemm(b: Builder):
    ta, tb = int(b.rng.integers(2)), int(b.rng.integers(2))
    a = _any_float(b, (2, 2))
    m, k = b.shape(a)[::-1] if ta else b.shape(a)
    n = b.dim(1, 6)
    w = b.weight((n, k) if tb else (k, n))
    attrs = {"transA": ta, "transB": tb}
    if b.rng.random() < 0.5:
        attrs["alpha"] = float(np.round(b.rng.uniform(-2, 2), 2))
    ins = [a, w]
    if b.rng.random() < 0.7:
        cshape = [(m, n), (n,), (1, n), (m, 1), (1,), ()][int(b.rng.integers(6))]
        ins.append(b.weight(cshape))
        if b.rng.random() < 0.5:
            attrs["beta"] = float(np.round(b.rng.uniform(-2, 2), 2))
    b.one("Gemm", ins, attrs, red_len=max(1, k))


def _spatial_input(b: Builder, nsp: int | None = None) -> str:
    nsp = nsp or int(b.rng.choice([1, 2, 2]))
    return b.pick(F32, (2 + nsp, 2 + nsp), fresh_p=0.5,
                  shape=(b.dim(1, 2), int(b.rng.integers(1, 5)), *[int(b.rng.integers(1, 8)) for _ in range(nsp)]))


def _conv_attrs(b: Builder, nsp: int, kernel) -> dict:
    attrs = {}
    if b.rng.random() < 0.5:
        attrs["strides"] = [int(b.rng.integers(1, 3)) for _ in range(nsp)]
    if b.rng.random() < 0.3:
        attrs["dilations"] = [int(b.rng.integers(1, 3)) for _ in range(nsp)]
    r = b.rng.random()
    if r < 0.5:
        attrs["pads"] = [int(b.rng.integers(0, k)) if k > 1 else 0 for k in kernel] * 2
        if b.rng.random() < 0.5:
            attrs["pads"] = [int(b.rng.integers(0, k)) if k > 1 else 0 for k in list(kernel) * 2]
    elif r < 0.6:
        attrs["auto_pad"] = str(b.rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    return attrs


@gen("Conv", ["Conv"], 2.0)
def _conv(b: Builder):
    x = _spatial_input(b)
    n, c, *sp = b.shape(x)
    nsp = len(sp)
    g = int(b.rng.choice([d for d in range(1, c + 1) if c % d == 0])) if c and b.rng.random() < 0.4 else 1
    o = g * int(b.rng.integers(1, 3))
    kernel = [int(b.rng.integers(1, 4)) for _ in range(nsp)]
    w = b.weight((o, c // g, *kernel))
    attrs = _conv_attrs(b, nsp, kernel)
    if g > 1:
        attrs["group"] = g
    ins = [x, w] + ([b.weight((o,))] if b.rng.random() < 0.5 else [])
    b.one("Conv", ins, attrs, red_len=max(1, (c // g) * _numel(kernel)))


@gen("ConvTranspose", ["ConvTranspose"], 1.0)
def _conv_transpose(b: Builder):
    x = _spatial_input(b)
    n, c, *sp = b.shape(x)
    nsp = len(sp)
    g = int(b.rng.choice([d for d in range(1, c + 1) if c % d == 0])) if c and b.rng.random() < 0.3 else 1
    o = g * int(b.rng.integers(1, 3))
    kernel = [int(b.rng.integers(1, 4)) for _ in range(nsp)]
    w = b.weight((c, o // g, *kernel))
    attrs = _conv_attrs(b, nsp, kernel)
    attrs.pop("auto_pad", None)
    if g > 1:
        attrs["group"] = g
    strides = attrs.get("strides", [1] * nsp)
    if b.rng.random() < 0.3 and max(strides) > 1:
        attrs["output_padding"] = [int(b.rng.integers(0, s)) for s in strides]
    ins = [x, w] + ([b.weight((o,))] if b.rng.random() < 0.5 else [])
    b.one("ConvTranspose", ins, attrs, red_len=max(1, c * _numel(kernel)))


@gen("Pool", ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"], 1.5)
def _pool(b: Builder):
    x = _spatial_input(b)
    sp = b.shape(x)[2:]
    op = str(b.rng.choice(["MaxPool", "AveragePool", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
    if op.startswith("Global"):
        b.one(op, [x], red_len=max(1, _numel(sp)))
        return
    kernel = [int(b.rng.integers(1, min(4, max(2, d + 1)))) for d in sp]
    attrs = {"kernel_shape": kernel}
    attrs.update(_conv_attrs(b, len(sp), kernel))
    if op == "AveragePool":
        attrs.pop("dilations", None) if b.opset < 19 else None
        if b.rng.random() < 0.5:
            attrs["count_include_pad"] = int(b.rng.integers(2))
    if b.rng.random() < 0.3:
        attrs["ceil_mode"] = 1
    b.one(op, [x], attrs, red_len=max(1, _numel(kernel)))


@gen("LayerNorm", ["LayerNormalization"], 1.0)
def _layer_norm(b: Builder):
    x = _any_float(b, (1, 4))
    shape = b.shape(x)
    r = len(shape)
    ax = int(b.rng.integers(-r, r))
    norm_shape = shape[ax:]
    ins = [x, b.weight(norm_shape)]
    if b.rng.random() < 0.6:
        ins.append(b.weight(norm_shape))
    attrs = {"axis": ax}
    if b.rng.random() < 0.5:
        attrs["epsilon"] = float(b.rng.choice([1e-5, 1e-3, 1e-6]))
    b.one("LayerNormalization", ins, attrs, red_len=max(1, _numel(norm_shape)))


@gen("BatchNorm", ["BatchNormalization"], 1.0)
def _batch_norm(b: Builder):
    x = _any_float(b, (2, 4))
    c = b.shape(x)[1]
    ins = [x, b.weight((c,)), b.weight((c,)), b.weight((c,)), b.weight((c,), positive=True)]
    attrs = {"epsilon": float(b.rng.choice([1e-5, 1e-3]))} if b.rng.random() < 0.5 else {}
    b.one("BatchNormalization", ins, attrs)


@gen("Attention", ["MatMul", "Transpose", "Mul", "Add", "Softmax", "Attention"], 1.5)
def _attention(b: Builder):
    bsz, lq, lk = b.dim(1, 2), b.dim(1, 5), b.dim(1, 5)
    d, dv = int(b.rng.integers(1, 9)), int(b.rng.integers(1, 9))
    use_op = b.opset >= 23 and b.rng.random() < 0.5
    if use_op:
        heads = int(b.rng.integers(1, 3))
        q = b.pick(F32, shape=(bsz, heads, lq, d), fresh_p=1.0)
        k = b.pick(F32, shape=(bsz, heads, lk, d), fresh_p=1.0)
        v = b.pick(F32, shape=(bsz, heads, lk, dv), fresh_p=1.0)
        attrs = {}
        if b.rng.random() < 0.4:
            attrs["is_causal"] = 1
        if b.rng.random() < 0.3:
            attrs["scale"] = float(np.round(b.rng.uniform(0.1, 1.0), 3))
        ins = [q, k, v]
        if b.rng.random() < 0.3:
            ins.append(b.weight((lq, lk)))
        b.one("Attention", ins, attrs, red_len=max(1, lk + d))
        return
    q = b.pick(F32, shape=(bsz, lq, d), fresh_p=0.7, pred=lambda s: len(s) == 3)
    bsz, lq, d = b.shape(q)
    k = b.pick(F32, shape=(bsz, lk, d), fresh_p=1.0)
    v = b.pick(F32, shape=(bsz, lk, dv), fresh_p=1.0)
    kt = b.one("Transpose", [k], {"perm": [0, 2, 1]})
    s = b.one("MatMul", [q, kt], red_len=max(1, d))
    s = b.one("Mul", [s, b.const(np.float32(1.0 / np.sqrt(max(d, 1))))])
    if b.rng.random() < 0.3:
        s = b.one("Add", [s, b.weight((lq, lk))])
    p = b.one("Softmax", [s], {"axis": -1}, red_len=max(1, lk))
    b.one("MatMul", [p, v], red_len=max(1, lk))


@gen("Cast", ["Cast", "Clip", "IsNaN", "Where", "Round"], 1.5)
def _cast(b: Builder):
    x = _any_float(b)
    to = [TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.DOUBLE, TensorProto.FLOAT16,
          TensorProto.INT8, TensorProto.UINT8][int(b.rng.integers(7))]
    if to in (TensorProto.INT32, TensorProto.INT64, TensorProto.INT8, TensorProto.UINT8):
        # float -> int is only defined for values in range: make them finite and in range first
        lo, hi = (0.0, 200.0) if to == TensorProto.UINT8 else (-100.0, 100.0)
        x = b.one("Clip", [x, b.const(np.float32(lo)), b.const(np.float32(hi))])
        x = b.one("Where", [b.one("IsNaN", [x]), b.const(np.float32(0)), x])
        if b.rng.random() < 0.5:
            x = b.one("Round", [x])
    y = b.one("Cast", [x], {"to": to})
    if b.rng.random() < 0.6 or to == TensorProto.FLOAT16:
        b.one("Cast", [y], {"to": TensorProto.FLOAT})


@gen("Reshape", ["Reshape"], 1.0)
def _reshape(b: Builder):
    x = _any_float(b, (0, 4)) if b.rng.random() < 0.8 else b.pick(I64)
    shape = b.shape(x)
    n = _numel(shape)
    dims = []
    rest = n
    for _ in range(int(b.rng.integers(0, 3))):
        divs = [d for d in range(1, min(rest, 8) + 1) if rest % d == 0] if rest else [0, 1]
        d = int(b.rng.choice(divs))
        dims.append(d)
        rest = rest // d if d else 0
    dims.append(rest)
    if n and b.rng.random() < 0.4:
        dims[int(b.rng.integers(len(dims)))] = -1
    b.rng.shuffle(dims)
    b.one("Reshape", [x, b.const(np.array(dims, np.int64))])


@gen("Transpose", ["Transpose"], 1.0)
def _transpose(b: Builder):
    x = _any_float(b, (1, 4))
    perm = b.rng.permutation(len(b.shape(x))).tolist()
    b.one("Transpose", [x], {"perm": perm} if b.rng.random() < 0.9 else {})


@gen("Slice", ["Slice"], 1.2)
def _slice(b: Builder):
    x = _any_float(b, (1, 4))
    shape = b.shape(x)
    axes = _axes(b, len(shape), allow_none=False)
    starts, ends, steps = [], [], []
    for a in axes:
        d = shape[a]
        step = int(b.rng.choice([1, 1, 1, 2, 3, -1, -2]))
        lo, hi = -d - 2, d + 2
        s, e = int(b.rng.integers(lo, hi + 1)), int(b.rng.integers(lo, hi + 1))
        if b.rng.random() < 0.15:
            e = int(np.iinfo(np.int64).max if step > 0 else np.iinfo(np.int64).min)
        starts.append(s), ends.append(e), steps.append(step)
    ins = [x, b.const(np.array(starts, np.int64)), b.const(np.array(ends, np.int64)), b.const(np.array(axes, np.int64))]
    if any(s != 1 for s in steps) or b.rng.random() < 0.5:
        ins.append(b.const(np.array(steps, np.int64)))
    b.one("Slice", ins)


@gen("Concat", ["Concat"], 1.0)
def _concat(b: Builder):
    x = _any_float(b, (1, 4))
    shape = b.shape(x)
    ax = int(b.rng.integers(-len(shape), len(shape)))
    ins = [x]
    for _ in range(int(b.rng.integers(1, 3))):
        s = list(shape)
        s[ax] = int(b.rng.integers(0 if b.allow_empty else 1, 4))
        ins.append(b.pick(F32, shape=tuple(s), fresh_p=0.8, pred=lambda t, s=s: tuple(t) == tuple(s)))
    b.rng.shuffle(ins)
    b.one("Concat", ins, {"axis": ax})


@gen("Split", ["Split"], 0.8)
def _split(b: Builder):
    x = _any_float(b, (1, 4))
    shape = b.shape(x)
    ax = int(b.rng.integers(-len(shape), len(shape)))
    d = shape[ax]
    k = int(b.rng.integers(2, 4))
    if b.opset >= 18 and b.rng.random() < 0.4:
        if d < k:
            raise Reject("split: too few")
        b.emit("Split", [x], {"axis": ax, "num_outputs": k}, n_out=k)
        return
    cuts = sorted(b.rng.integers(0, d + 1, k - 1).tolist())
    sizes = np.diff([0] + cuts + [d]).astype(np.int64)
    b.emit("Split", [x, b.const(sizes)], {"axis": ax}, n_out=k)


@gen("Gather", ["Gather"], 1.0)
def _gather(b: Builder):
    x = _any_float(b, (1, 4), pred=lambda s: all(d > 0 for d in s))
    shape = b.shape(x)
    ax = int(b.rng.integers(-len(shape), len(shape)))
    d = shape[ax]
    ishape = b.rand_shape(int(b.rng.choice([0, 1, 1, 2])), max_numel=8)
    idx = b.rng.integers(-d, d, ishape).astype(np.int64)
    b.one("Gather", [x, b.const(idx)], {"axis": ax})


@gen("Pad", ["Pad"], 1.0)
def _pad(b: Builder):
    x = _any_float(b, (1, 4))
    shape = b.shape(x)
    mode = str(b.rng.choice(["constant", "constant", "reflect", "edge"]))
    r = len(shape)
    if mode == "constant":
        pads = [int(b.rng.integers(-min(1, d), 3)) for d in shape] + [int(b.rng.integers(-min(1, d), 3)) for d in shape]
    elif mode == "reflect":
        pads = [int(b.rng.integers(0, max(1, d))) for d in shape] * 2
    else:
        pads = [int(b.rng.integers(0, 3)) if d else 0 for d in shape] * 2
    if any(d == 0 for d in shape) and mode != "constant":
        raise Reject("pad: empty")
    ins = [x, b.const(np.array(pads, np.int64))]
    if mode == "constant" and b.rng.random() < 0.5:
        ins.append(b.const(np.float32(np.round(b.rng.normal(), 2))))
    b.one("Pad", ins, {"mode": mode})
    del r


@gen("Expand", ["Expand"], 0.8)
def _expand(b: Builder):
    x = _any_float(b, (0, 3))
    shape = list(b.shape(x))
    target = [d if d != 1 or b.rng.random() < 0.5 else int(b.rng.integers(1, 4)) for d in shape]
    if b.rng.random() < 0.4:
        target = [int(b.rng.integers(1, 4))] + target
    if b.rng.random() < 0.2 and target:
        target = [1 if d != 0 and b.rng.random() < 0.5 else d for d in target]   # 1s keep x's dims
    b.one("Expand", [x, b.const(np.array(target, np.int64))])


@gen("Tile", ["Tile"], 0.6)
def _tile(b: Builder):
    x = _any_float(b, (1, 3))
    reps = [int(b.rng.integers(1, 4)) for _ in b.shape(x)]
    b.one("Tile", [x, b.const(np.array(reps, np.int64))])


@gen("SqueezeEtc", ["Squeeze", "Unsqueeze", "Flatten"], 0.8)
def _squeeze(b: Builder):
    op = str(b.rng.choice(["Squeeze", "Unsqueeze", "Flatten"]))
    x = _any_float(b, (0, 3))
    shape = b.shape(x)
    r = len(shape)
    if op == "Squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        if not ones:
            raise Reject("squeeze: no unit dim")
        axes = [a for a in ones if b.rng.random() < 0.7] or ones[:1]
        b.one("Squeeze", [x, b.const(np.array(axes, np.int64))])
    elif op == "Unsqueeze":
        b.one("Unsqueeze", [x, b.const(np.array([int(b.rng.integers(-(r + 1), r + 1))], np.int64))])
    else:
        if r == 0:
            raise Reject("flatten: scalar")
        b.one("Flatten", [x], {"axis": int(b.rng.integers(-r, r + 1))})


ALL_OP_KINDS = sorted({k for _, kinds, _ in OPS.values() for k in kinds})


def select_generators(ops: Sequence[str] | None) -> list[str]:
    """Generator names for ``--ops`` (generator names or ONNX op kinds); None: all of them."""
    if not ops:
        return list(OPS)
    want = set(ops)
    names = [g for g, (_, kinds, _) in OPS.items() if g in want or want & set(kinds)]
    if not names:
        raise ValueError(f"no generator makes {sorted(want)}; op kinds: {', '.join(ALL_OP_KINDS)}")
    return names


def build_case(rng: np.random.Generator, name: str, opset: int = 18, generators: Sequence[str] | None = None,
               fraction: float | None = None, specials: Sequence[str] = DEFAULT_SPECIALS,
               max_ops: int = 6, seed: int = 0) -> Case:
    """One random graph: 1..max_ops generator applications over a pool of tensors."""
    gens = list(generators or OPS)
    weights = np.array([OPS[g][2] for g in gens], float)
    weights /= weights.sum()
    if fraction is None:
        fraction = float(rng.choice([0.0, 0.0, 0.02, 0.1, 0.3]))
    b = Builder(rng, opset, name + "_", fraction, specials, allow_empty=rng.random() < 0.3)
    target = int(rng.integers(1, max_ops + 1))
    tries = 0
    while len(b.nodes) == 0 or (tries < 4 * target and _applied(b) < target):
        tries += 1
        g = gens[int(rng.choice(len(gens), p=weights))]
        snapshot = (len(b.nodes), dict(b.inputs), dict(b.inits), dict(b.types), list(b.pool), set(b.used), b._n)
        try:
            OPS[g][0](b)
            b._applied = getattr(b, "_applied", 0) + 1
        except Reject:
            n, b.inputs, b.inits, b.types, b.pool, b.used, b._n = snapshot   # undo partial work
            del b.nodes[n:]
        if tries > 60:
            break
    produced = [o for n in b.nodes for o in n.outputs]
    outs = [o for o in produced if o not in b.used]
    outs += [o for o in produced if o in b.used and o not in outs and rng.random() < 0.2]
    case = Case(name, opset, b.nodes, b.inputs, b.inits, outs, b.types, seed)
    return prune(case)


def _applied(b: Builder) -> int:
    return getattr(b, "_applied", 0)


def prune(case: Case) -> Case:
    """Drops nodes, inputs and constants nothing reaches an output from (a case stays valid)."""
    live = set(case.outputs)
    keep = []
    for n in reversed(case.nodes):
        if any(o in live for o in n.outputs):
            keep.append(n)
            live.update(i for i in n.inputs if i)
    keep.reverse()
    case.nodes = keep
    case.inputs = {k: v for k, v in case.inputs.items() if k in live}
    case.inits = {k: v for k, v in case.inits.items() if k in live}
    produced = {o for n in keep for o in n.outputs}
    case.types = {k: v for k, v in case.types.items() if k in live or k in produced}
    return case
