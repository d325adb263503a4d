"""PyTorch frontend: core-ATen FX graphs to ``graph`` ops, and the ``torch.compile`` backend.

Two ways in, one converter:

* ``import_torch(module, example_inputs)`` runs ``torch.export`` and ``run_decompositions``
  down to the core-ATen opset (attention excepted, see ``decompositions``), binds parameters,
  buffers and lifted constants as ``graph.constant`` and keeps the user inputs as function
  arguments.  Outputs may be any pytree (tuples, dicts, transformers' ``ModelOutput`` holding a
  ``DynamicCache``, whose classes ``register_output_pytrees`` registers): the graph returns the
  leaf tensors, and ``output_tree`` rebuilds the structure for torch callers of the compiled
  model (NumPy callers, ``run`` and saved ``.tfm`` models get the flat tensors).
* ``torch.compile(m, backend="tensorforge")``: Dynamo hands over an FX graph of torch calls;
  ``tensorforge_backend`` lowers it with AOT autograd in inference mode, using the same core
  ATen decomposition table, so both paths meet the same op set.  AOT autograd rather than a bare
  ``make_fx``: it functionalises in-place ops (``ReLU(inplace=True)``, ``add_``), returns input
  mutations as extra outputs and replays them in its runtime wrapper, and regenerates outputs
  that alias inputs; ``make_fx`` would leave all of that to us.  Parameters and buffers (the
  inputs Dynamo marks static) that the graph does not mutate are frozen into constants, as
  inductor's freezing does, so that graph passes can fold them (BatchNorm into conv, weight
  layouts); changing a weight after compiling needs a new ``torch.compile``.

Every ATen op is converted by a handler registered under its ``name.overload``; the handler
gets the op's arguments bound to its schema (defaults filled in), with FX nodes replaced by
IR values.  Each converted result is checked against the shape and dtype that tracing recorded,
so a wrong handler fails at import, naming the node, instead of computing garbage.

This module imports torch only when it is used: ``import tensorforge`` stays fast and works
without torch (``register_backend`` is the hook it calls).
"""
from __future__ import annotations

import importlib.util
import math
import operator
import re
import sys
import warnings
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import FrontendError, TensorforgeWarning, UnsupportedOpError
from ..ir.builder import Builder
from ..ir.builtin import ModuleOp
from ..ir.core import Value
from ..ir.types import DType, TensorType

if importlib.util.find_spec("torch") is None:       # lets ``import tensorforge`` skip the hook
    raise ImportError("tensorforge.frontends.torch needs PyTorch (pip install 'tensorforge[torch]')")

__all__ = ["import_torch", "import_exported_program", "import_fx_graph", "register_backend",
           "tensorforge_backend", "supported_ops", "output_tree", "OutputTree"]

BACKEND_NAME = "tensorforge"
INT64_MAX = 2 ** 63 - 1

_TORCH_DTYPES = {
    "float32": DType.f32, "float16": DType.f16, "bfloat16": DType.bf16, "float64": DType.f64,
    "int8": DType.i8, "int16": DType.i16, "int32": DType.i32, "int64": DType.i64,
    "uint8": DType.u8, "bool": DType.bool,
}


def to_dtype(torch_dtype) -> DType:
    """The IR element type of a ``torch.dtype``."""
    name = str(torch_dtype).removeprefix("torch.")
    try:
        return _TORCH_DTYPES[name]
    except KeyError:
        raise UnsupportedOpError(f"torch dtype {name} is not supported "
                                 f"(supported: {', '.join(_TORCH_DTYPES)})") from None


def to_numpy(t) -> np.ndarray:
    """A detached CPU copy of a tensor as NumPy (bf16 widened to f32, as the IR holds it)."""
    import torch

    t = t.detach().cpu()
    if t.dtype is torch.bfloat16:
        t = t.to(torch.float32)
    return t.contiguous().numpy()


# ---- the handler table -------------------------------------------------------------------

Handler = Callable[..., Any]
_HANDLERS: dict[str, Handler] = {}


def aten(*names: str):
    """Registers a handler for ATen ops named ``op.overload`` (e.g. ``"add.Tensor"``)."""
    def deco(fn: Handler) -> Handler:
        for n in names:
            if n in _HANDLERS:
                raise RuntimeError(f"two handlers for aten.{n}")
            _HANDLERS[n] = fn
        return fn
    return deco


def supported_ops() -> list[str]:
    """Every ATen ``op.overload`` the importer converts."""
    return sorted(_HANDLERS)


def _op_name(target) -> str:
    """``aten.add.Tensor`` -> ``add.Tensor`` (the handler key); other namespaces keep theirs."""
    name = getattr(target, "_name", None)        # OpOverload: "aten::add.Tensor"
    if isinstance(name, str) and "::" in name:
        ns, rest = name.split("::", 1)
        full = rest if "." in rest else rest + ".default"
        return full if ns == "aten" else f"{ns}.{full}"
    return getattr(target, "__qualname__", None) or str(target)


def _display_name(target) -> str:
    """How errors name an op: ``aten.add.Tensor``, ``prims.x.default`` or a Python function."""
    name = getattr(target, "_name", None)
    return f"aten.{_op_name(target)}" if isinstance(name, str) and name.startswith("aten::") \
        else _op_name(target)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def source_line(node) -> str | None:
    """``file:line in func: code`` of the innermost user frame that produced ``node``."""
    trace = node.meta.get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    if not frames:
        return None
    path, line, func, code = frames[-1]
    return f"{path}:{line} in {func}: {code.strip()}"


# ---- the importer ------------------------------------------------------------------------

class FxImporter:
    """Converts one FX graph of core ATen ops into a ``ModuleOp`` with a ``main`` function.

    ``constants`` maps placeholder names to the tensors they are bound to (parameters,
    buffers, lifted constants); every other placeholder becomes a function argument.
    ``hint`` is appended to unsupported-op errors (e.g. "the module is in training mode").
    ``symbolic`` (a ``torch_symbolic.SymbolicShapes``) imports SymInt sizes as symbolic dims;
    without it every shape must be static.
    """

    def __init__(self, graph, constants: dict[str, Any], owner=None, hint: str = "", symbolic=None):
        self.graph = graph
        self.constants = constants
        self.owner = owner                      # GraphModule, for get_attr nodes
        self.hint = hint
        self.symbolic = symbolic
        self.env: dict[Any, Any] = {}
        self.pending: dict[Any, Any] = {}       # placeholder -> tensor, emitted on first use
        self.node = None                        # the node being converted (for errors)
        self.args: dict[str, Any] = {}          # its arguments by schema name
        self.module = ModuleOp.create()
        self.func = None
        self.b: Builder | None = None
        self._scalars: dict[tuple, Value] = {}

    # -- driver ------------------------------------------------------------------------
    def run(self) -> ModuleOp:
        nodes = list(self.graph.nodes)
        args = [n for n in nodes if n.op == "placeholder" and n.name not in self.constants
                and not (self.symbolic and self.symbolic.is_scalar_node(n))]
        types = [self.meta_type(n) for n in args]
        self.func = self.module.add_function("main", types, [n.name for n in args])
        self.b = self.func.builder()
        for n, a in zip(args, self.func.args):
            self.env[n] = a
        if self.symbolic:
            self.symbolic.bind_arguments(self.func)
        outputs = None
        for node in nodes:
            self.node = node
            if node.op == "placeholder":
                if node.name in self.constants:
                    self.pending[node] = self.constants[node.name]
                elif node not in self.env:          # a SymInt input: its value is its symbol
                    self.env[node] = self.symbolic.scalar_value(node)
            elif node.op == "get_attr":
                self.pending[node] = _get_attr(self.owner, node.target)
            elif node.op == "call_function":
                self.env[node] = self.convert(node)
            elif node.op == "output":
                outputs = self.output_values(node)
            else:
                raise FrontendError(f"FX node '{node.name}': unsupported node kind '{node.op}' "
                                    f"(call_module/call_method should not survive export)")
        self.node = None
        self.func.set_return(outputs or [])
        if self.symbolic:
            self.symbolic.finish(self.func)
        return self.module

    def output_values(self, node) -> list[Value]:
        import torch.utils._pytree as pytree

        import torch.fx

        flat, _ = pytree.tree_flatten(node.args[0])
        for x in flat:
            if not isinstance(x, torch.fx.Node):
                raise UnsupportedOpError(f"the model returns {x!r} ({type(x).__name__}); tensorforge "
                                         f"compiles models whose outputs are all tensors")
        return [self.operand(x) for x in flat]

    def convert(self, node):
        target = node.target
        if self.symbolic and self.symbolic.is_scalar_node(node):
            return self.symbolic.scalar_value(node)      # a size: its traced expression
        if target is operator.getitem:
            seq, index = node.args
            value = self.env[seq][index]
            if value is None:
                raise self.unsupported(f"output #{index} of '{seq.name}' ({_display_name(seq.target)}) is used, "
                                       f"but only the first result of that op is supported")
            return value
        name = _op_name(target)
        handler = (self.symbolic and self.symbolic.handler(name)) or _HANDLERS.get(name)
        if handler is None:
            if name.split(".")[0] in _IGNORED:
                return None
            raise self.unsupported()
        import torch.fx

        args = torch.fx.node.map_arg(node.args, self.operand)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.operand)
        self.b.loc = node.name
        bound = _bind(target, args, kwargs, node)
        self.args = dict(zip(_arg_names(target), bound))
        result = handler(self, node, *bound)
        self.check_result(node, result)
        return result

    # -- values --------------------------------------------------------------------------
    def operand(self, node) -> Any:
        """The IR value of an FX node (emitting a pending constant at its first use)."""
        if node in self.pending:
            self.env[node] = self.const_tensor(self.pending.pop(node), node.name)
        try:
            return self.env[node]
        except KeyError:
            raise FrontendError(f"FX node '{node.name}' is used before it is defined") from None

    def const_tensor(self, tensor, name: str | None = None) -> Value:
        import torch

        if not isinstance(tensor, torch.Tensor):
            raise UnsupportedOpError(f"placeholder '{name}' is bound to a {type(tensor).__name__}, "
                                     f"not a tensor")
        v = self.g.constant(to_numpy(tensor), to_dtype(tensor.dtype))
        v.name_hint = name
        return v

    @property
    def g(self):
        return self.b.graph

    def emit(self, opname: str, *operands, **attrs):
        return getattr(self.g, opname)(*operands, **attrs)

    def scalar(self, value, dtype: DType) -> Value:
        """A rank-0 constant; repeated scalars share one op."""
        key = (type(value).__name__, repr(value), dtype)      # repr keeps -0.0 apart from 0.0
        v = self._scalars.get(key)
        if v is None:
            v = self._scalars[key] = self.g.constant(np.asarray(value, dtype=dtype.np), dtype)
        return v

    def tensor(self, x, dtype: DType) -> Value:
        """``x`` (a value or a Python number) as a tensor of ``dtype``."""
        if isinstance(x, Value):
            return self.cast(x, dtype)
        if isinstance(x, (bool, int, float)):
            return self.scalar(x, dtype)
        if isinstance(x, str) and self.symbolic:        # a symbolic size used as a value
            return self.symbolic.dim_tensor(self, x, dtype)
        raise self.unsupported(f"operand {x!r} ({type(x).__name__}) where a tensor or number was expected")

    def cast(self, v: Value, dtype: DType) -> Value:
        return v if v.type.dtype is dtype else self.g.cast(v, dtype=dtype)

    # -- metadata recorded by tracing -----------------------------------------------------
    def meta(self, node=None):
        node = self.node if node is None else node
        val = node.meta.get("val")
        if val is None:
            raise FrontendError(f"FX node '{node.name}' has no traced value (meta['val']); "
                                f"import graphs made by torch.export or AOT autograd")
        return val

    def meta_type(self, node=None, val=None) -> TensorType:
        val = self.meta(node) if val is None else val
        node = self.node if node is None else node
        shape = self.symbolic.shape(val) if self.symbolic else _static_shape(val, node)
        return TensorType(shape, to_dtype(val.dtype))

    def out_shape(self) -> tuple[int, ...]:
        return self.meta_type().shape

    def out_dtype(self) -> DType:
        return to_dtype(self.meta().dtype)

    def check_result(self, node, result) -> None:
        """The converted value must have the type tracing recorded: catches handler bugs early."""
        vals = self.meta(node)
        if isinstance(result, Value):
            results, vals = [result], [vals]
        elif isinstance(result, (tuple, list)):
            results = list(result)
            if not isinstance(vals, (tuple, list)):
                raise FrontendError(f"node '{node.name}' ({_display_name(node.target)}): handler returned "
                                    f"{len(results)} results for one traced value")
        else:
            return
        for i, (r, val) in enumerate(zip(results, vals)):
            if r is None or val is None:
                continue
            want = self.meta_type(node, val)
            if r.type != want:
                raise FrontendError(f"node '{node.name}' ({_display_name(node.target)}) result #{i}: "
                                    f"converted to {r.type} but torch traced {want}")

    # -- errors ----------------------------------------------------------------------------
    def unsupported(self, detail: str = "") -> UnsupportedOpError:
        node = self.node
        what = _display_name(node.target) if node is not None else "op"
        msg = f"unsupported PyTorch op {what}"
        if node is not None:
            msg += f" at FX node '{node.name}'"
            where = source_line(node)
            if where:
                msg += f" ({where})"
        if detail:
            msg += f": {detail}"
        else:
            msg += ("; tensorforge converts the core ATen ops listed by "
                    "tensorforge.frontends.torch.supported_ops()")
        if self.hint:
            msg += f" ({self.hint})"
        return UnsupportedOpError(msg)


# Ops that only check or annotate; they have no result a model uses.
_IGNORED = {"_assert_tensor_metadata", "_assert_async", "_assert_scalar", "sym_constrain_range",
            "sym_constrain_range_for_size", "_print"}


def _get_attr(owner, target: str):
    obj = owner
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _static_shape(val, node) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in val.shape):
        raise UnsupportedOpError(
            f"FX node '{node.name}' has a dynamic shape {tuple(val.shape)}; tensorforge compiles static "
            f"shapes (export without dynamic_shapes, or torch.compile(..., dynamic=False))")
    return tuple(val.shape)


def _arg_names(target) -> list[str]:
    schema = getattr(target, "_schema", None)
    return [a.name for a in schema.arguments] if schema is not None else []


def _bind(target, args: tuple, kwargs: dict, node) -> list:
    """The op's arguments in schema order with defaults filled in."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return list(args) + list(kwargs.values())
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out.append(args[i])
        elif a.name in kwargs:
            out.append(kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            raise FrontendError(f"FX node '{node.name}': missing argument '{a.name}' of {_op_name(target)}")
    return out


# ---- elementwise ------------------------------------------------------------------------

_UNARY = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "exp": "exp", "log": "log",
          "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "reciprocal", "neg": "neg", "abs": "abs",
          "erf": "erf", "sin": "sin", "cos": "cos", "floor": "floor", "ceil": "ceil", "sign": "sign",
          "round": "round", "silu": "silu", "logical_not": "not", "bitwise_not": "not"}


def _unary(opname: str) -> Handler:
    def handle(cx: FxImporter, node, x, *_):
        return cx.emit(opname, cx.cast(x, cx.out_dtype()))
    return handle


for _name, _op in _UNARY.items():
    aten(f"{_name}.default")(_unary(_op))


@aten("gelu.default")
def _gelu(cx, node, x, approximate="none"):
    return cx.g.gelu(x, approximate=approximate)


@aten("hardtanh.default")
def _hardtanh(cx, node, x, min_val=-1.0, max_val=1.0):
    return cx.g.clip(x, min=min_val, max=max_val)


@aten("clamp.default")
def _clamp(cx, node, x, lo=None, hi=None):
    return cx.g.clip(cx.cast(x, cx.out_dtype()), min=lo, max=hi)


@aten("clamp.Tensor")
def _clamp_tensor(cx, node, x, lo=None, hi=None):
    dt = cx.out_dtype()
    y = cx.cast(x, dt)
    if lo is not None:
        y = cx.g.max(y, cx.tensor(lo, dt))
    if hi is not None:
        y = cx.g.min(y, cx.tensor(hi, dt))
    return y


@aten("leaky_relu.default")
def _leaky_relu(cx, node, x, negative_slope=0.01):
    return cx.g.leaky_relu(x, alpha=negative_slope)


@aten("elu.default")
def _elu(cx, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """ATen's elu, which SELU (scale) and CELU (input_scale = 1 / alpha) decompose into:
    ``scale * x`` above 0, ``scale * alpha * expm1(input_scale * x)`` at or below (so -0.0 stays
    -0.0, as in PyTorch)."""
    if input_scale != 1:
        neg = cx.g.elu(cx.g.mul(x, cx.scalar(input_scale, x.type.dtype)), alpha=alpha)
        y = cx.g.select(cx.g.gt(x, cx.scalar(0.0, x.type.dtype)), x, neg)
    else:
        y = cx.g.elu(x, alpha=alpha)
    return y if scale == 1 else cx.g.mul(y, cx.scalar(scale, x.type.dtype))


@aten("hardsigmoid.default")
def _hardsigmoid(cx, node, x):
    return cx.g.hard_sigmoid(x, alpha=1.0 / 6.0, beta=0.5)


@aten("hardswish.default")
def _hardswish(cx, node, x):
    return cx.g.mul(x, cx.g.hard_sigmoid(x, alpha=1.0 / 6.0, beta=0.5))


@aten("softplus.default")
def _softplus(cx, node, x, beta=1.0, threshold=20.0):
    # torch returns x itself above threshold/beta; there softplus(x) - x < 2e-9 for the default.
    if beta == 1:
        return cx.g.softplus(x)
    b = cx.scalar(float(beta), x.type.dtype)
    return cx.g.div(cx.g.softplus(cx.g.mul(x, b)), b)


@aten("log1p.default")
def _log1p(cx, node, x):
    """log1p without losing a tiny x to ``1 + x`` rounding (log(1 + 1e-10) is 0 in float32):
    with u = 1 + x, log1p(x) = log(u) * x / (u - 1), which cancels the rounding of u (Goldberg);
    x itself where u rounds to 1 (so -0.0 stays -0.0), u where u is +inf."""
    x = cx.cast(x, cx.out_dtype())
    dt = x.type.dtype
    one = cx.scalar(1.0, dt)
    u = cx.g.add(x, one)
    fixed = cx.g.mul(cx.g.log(u), cx.g.div(x, cx.g.sub(u, one)))
    fixed = cx.g.select(cx.g.eq(u, cx.scalar(float("inf"), dt)), u, fixed)
    return cx.g.select(cx.g.eq(u, one), x, fixed)


@aten("expm1.default")
def _expm1(cx, node, x):
    """expm1 without the cancellation of exp(x) - 1 near 0 (PyTorch's celu decomposes into it):
    graph.elu is expm1 below 0, and above it expm1(x) = -expm1(-x) * exp(x) exactly."""
    x = cx.cast(x, cx.out_dtype())
    dt = x.type.dtype
    above = cx.g.mul(cx.g.neg(cx.g.elu(cx.g.neg(x), alpha=1.0)), cx.g.exp(x))
    return cx.g.select(cx.g.lt(x, cx.scalar(0.0, dt)), cx.g.elu(x, alpha=1.0), above)


@aten("log2.default", "log10.default")
def _log_base(cx, node, x):
    x = cx.cast(x, cx.out_dtype())
    base = 2.0 if _op_name(node.target).startswith("log2") else 10.0
    return cx.g.mul(cx.g.log(x), cx.scalar(1.0 / math.log(base), x.type.dtype))


@aten("trunc.default")
def _trunc(cx, node, x):
    return _truncate(cx, x)


def _truncate(cx, x: Value) -> Value:
    if not x.type.dtype.is_float:
        return x
    negative = cx.g.lt(x, cx.scalar(0.0, x.type.dtype))
    return cx.g.select(negative, cx.g.ceil(x), cx.g.floor(x))


def _common_dtype(node) -> DType:
    """torch's type promotion over a node's tensor and number arguments."""
    import torch

    operands = []
    for a in node.args:
        if hasattr(a, "meta") and "val" in a.meta:
            v = a.meta["val"]
            operands.append(torch.empty((1,) * v.dim(), dtype=v.dtype) if v.dim() else
                            torch.empty((), dtype=v.dtype))
        elif isinstance(a, (bool, int, float)):
            operands.append(a)
    if len(operands) == 1:
        return to_dtype(operands[0].dtype if isinstance(operands[0], torch.Tensor) else
                        torch.tensor(operands[0]).dtype)
    return to_dtype(torch.result_type(*operands[:2]))


_ARITH = {"add": "add", "sub": "sub", "mul": "mul", "remainder": "mod", "fmod": "fmod"}
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_LOGICAL = {"logical_and": "and", "logical_or": "or", "logical_xor": "xor"}
_BITWISE_BOOL = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor"}


def _arith(opname: str) -> Handler:
    def handle(cx, node, a, b, alpha=1):
        dt = cx.out_dtype()
        rhs = cx.tensor(b, dt)
        if alpha != 1:
            rhs = cx.g.mul(rhs, cx.scalar(alpha, dt))
        return cx.emit(opname, cx.tensor(a, dt), rhs)
    return handle


def _compare(opname: str) -> Handler:
    def handle(cx, node, a, b):
        dt = _common_dtype(node)
        return cx.emit(opname, cx.tensor(a, dt), cx.tensor(b, dt))
    return handle


def _logical(opname: str, bool_only: bool = False) -> Handler:
    def handle(cx, node, a, b):
        if bool_only and any(isinstance(v, Value) and v.type.dtype is not DType.bool for v in (a, b)):
            raise cx.unsupported("bitwise ops are supported on bool tensors only")
        return cx.emit(opname, cx.tensor(a, DType.bool), cx.tensor(b, DType.bool))
    return handle


for _name, _op in _ARITH.items():
    aten(f"{_name}.Tensor", f"{_name}.Scalar")(_arith(_op))
aten("maximum.default")(_arith("max"))
aten("minimum.default")(_arith("min"))
for _name, _op in _COMPARE.items():
    aten(f"{_name}.Tensor", f"{_name}.Scalar")(_compare(_op))
for _name, _op in _LOGICAL.items():
    aten(f"{_name}.default")(_logical(_op))
for _name, _op in _BITWISE_BOOL.items():
    aten(f"{_name}.Tensor", f"{_name}.Scalar")(_logical(_op, bool_only=True))


@aten("div.Tensor", "div.Scalar")
def _div(cx, node, a, b):
    dt = cx.out_dtype()
    return cx.g.div(cx.tensor(a, dt), cx.tensor(b, dt))


@aten("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(cx, node, a, b, rounding_mode=None):
    dt = cx.out_dtype()
    if rounding_mode is None:
        return cx.g.div(cx.tensor(a, dt), cx.tensor(b, dt))
    if rounding_mode == "trunc" and not dt.is_float:
        return cx.g.div(cx.tensor(a, dt), cx.tensor(b, dt))      # graph.div truncates integers
    # Exact for integers below 2^53: divide in f64, round, convert back.
    work = dt if dt.is_float else DType.f64
    q = cx.g.div(cx.tensor(a, work), cx.tensor(b, work))
    q = cx.g.floor(q) if rounding_mode == "floor" else _truncate(cx, q)
    return cx.cast(q, dt)


@aten("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar")
def _pow(cx, node, a, b):
    dt = cx.out_dtype()
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, Value):
        if b == 2:
            a = cx.cast(a, dt)
            return cx.g.mul(a, a)
        if b == 0.5 and dt.is_float:
            return cx.g.sqrt(cx.cast(a, dt))
    return cx.g.pow(cx.tensor(a, dt), cx.tensor(b, dt))


@aten("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def _where(cx, node, cond, a, b):
    dt = cx.out_dtype()
    return cx.g.select(cx.tensor(cond, DType.bool), cx.tensor(a, dt), cx.tensor(b, dt))


@aten("masked_fill.Scalar", "masked_fill.Tensor")
def _masked_fill(cx, node, x, mask, value):
    dt = cx.out_dtype()
    return cx.g.select(cx.tensor(mask, DType.bool), cx.tensor(value, dt), cx.cast(x, dt))


@aten("_to_copy.default")
def _to_copy(cx, node, x, dtype=None, *_):
    return cx.cast(x, cx.out_dtype())


@aten("to.dtype")
def _to_dtype(cx, node, x, *_):
    return cx.cast(x, cx.out_dtype())


@aten("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default")
def _same(cx, node, x, *_):
    return x


# ---- creation ----------------------------------------------------------------------------

@aten("arange.start_step", "arange.start", "arange.default")
def _arange(cx, node, *_):
    (size,) = cx.out_shape()
    start, step = cx.args.get("start", 0), cx.args.get("step", 1)
    return cx.g.iota(size=size, start=float(start), step=float(step), dtype=cx.out_dtype())


@aten("full.default", "full_like.default", "scalar_tensor.default", "zeros.default", "ones.default",
      "zeros_like.default", "ones_like.default", "new_zeros.default", "new_ones.default", "new_full.default")
def _full(cx, node, *args):
    name = _op_name(node.target).split(".")[0]
    fill = {"zeros": 0, "ones": 1, "zeros_like": 0, "ones_like": 1, "new_zeros": 0, "new_ones": 1}.get(name)
    if fill is None:
        fill = args[0] if name == "scalar_tensor" else args[1] if name in ("full", "full_like") else args[2]
    dt = cx.out_dtype()
    return cx.g.constant(np.full(cx.out_shape(), fill, dtype=dt.np), dt)


# ---- linear algebra ------------------------------------------------------------------------

@aten("addmm.default")
def _addmm(cx, node, bias, a, b, beta=1, alpha=1):
    return cx.g.gemm(a, b, bias, alpha=float(alpha), beta=float(beta))


@aten("mm.default")
def _mm(cx, node, a, b):
    return cx.g.matmul(a, b)


@aten("bmm.default")
def _bmm(cx, node, a, b):
    return cx.g.batch_matmul(a, b)


@aten("convolution.default")
def _convolution(cx, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    pads = tuple(padding) + tuple(padding)
    attrs = dict(strides=tuple(stride), pads=pads, dilations=tuple(dilation), groups=int(groups))
    if transposed:
        return cx.g.conv_transpose(x, w, bias, output_padding=tuple(output_padding), **attrs)
    return cx.g.conv(x, w, bias, **attrs)


# ---- normalisation -------------------------------------------------------------------------

def _ones_or(cx, v, n: int, dtype: DType, fill: float) -> Value:
    return v if v is not None else cx.g.constant(np.full((n,), fill, dtype=dtype.np), dtype)


@aten("_native_batch_norm_legit_no_training.default")
def _batch_norm(cx, node, x, weight, bias, mean, var, momentum, eps):
    c, dt = x.type.shape[1], x.type.dtype
    out = cx.g.batch_norm(x, _ones_or(cx, weight, c, dt, 1.0), _ones_or(cx, bias, c, dt, 0.0),
                          mean, var, epsilon=float(eps))
    return out, None, None


@aten("native_batch_norm.default", "_native_batch_norm_legit.default")
def _batch_norm_training(cx, node, x, weight, bias, mean, var, training, *rest):
    if training:
        raise cx.unsupported("BatchNorm in training mode (batch statistics); call module.eval()")
    return _batch_norm(cx, node, x, weight, bias, mean, var, rest[0], rest[1])


@aten("native_layer_norm.default")
def _layer_norm(cx, node, x, normalized_shape, weight, bias, eps):
    axis = x.type.rank - len(normalized_shape)
    if weight is None and bias is not None:
        weight = cx.g.constant(np.ones(tuple(normalized_shape), dtype=x.type.dtype.np), x.type.dtype)
    return cx.g.layer_norm(x, weight, bias, axis=axis, epsilon=float(eps)), None, None


@aten("native_group_norm.default")
def _group_norm(cx, node, x, weight, bias, n, c, hw, group, eps):
    dt = x.type.dtype
    out = cx.g.group_norm(x, _ones_or(cx, weight, c, dt, 1.0), _ones_or(cx, bias, c, dt, 0.0),
                          num_groups=int(group), epsilon=float(eps))
    return out, None, None


# ---- pooling -------------------------------------------------------------------------------

def _per_axis(values, n: int) -> tuple[int, ...]:
    values = tuple(values) if isinstance(values, (list, tuple)) else (values,)
    return values * n if len(values) == 1 else values


@aten("max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
def _max_pool_indices(cx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(cx, node, x, kernel_size, stride, padding, dilation, ceil_mode), None


@aten("max_pool2d.default", "max_pool1d.default", "max_pool3d.default")
def _max_pool(cx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    n = x.type.rank - 2
    kernel = _per_axis(kernel_size, n)
    strides = _per_axis(stride, n) if stride else kernel
    pads = _per_axis(padding, n)
    return cx.g.max_pool(x, kernel=kernel, strides=strides, pads=pads + pads,
                         dilations=_per_axis(dilation, n), ceil_mode=bool(ceil_mode))


@aten("avg_pool2d.default", "avg_pool1d.default", "avg_pool3d.default")
def _avg_pool(cx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    if divisor_override is not None:
        raise cx.unsupported(f"divisor_override={divisor_override}")
    n = x.type.rank - 2
    kernel = _per_axis(kernel_size, n)
    strides = _per_axis(stride, n) if stride else kernel
    pads = _per_axis(padding, n)
    return cx.g.avg_pool(x, kernel=kernel, strides=strides, pads=pads + pads, ceil_mode=bool(ceil_mode),
                         count_include_pad=bool(count_include_pad))


@aten("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default",
      "adaptive_avg_pool1d.default")
def _adaptive_avg_pool(cx, node, x, output_size):
    spatial = x.type.shape[2:]
    out = _per_axis(output_size, len(spatial))
    if all(o == 1 for o in out):
        return cx.g.global_avg_pool(x)
    if any(s % o for s, o in zip(spatial, out)):
        raise cx.unsupported(f"adaptive pooling of {spatial} to {out}: sizes that do not divide evenly")
    kernel = tuple(s // o for s, o in zip(spatial, out))
    return cx.g.avg_pool(x, kernel=kernel, strides=kernel)


# ---- reductions ----------------------------------------------------------------------------

def _axes(dim, rank: int) -> tuple[int, ...]:
    if dim is None:
        return ()
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted(d % rank for d in dims)) if rank else ()


def _reduce(opname: str) -> Handler:
    def handle(cx, node, x, *_):
        dim, keepdim = cx.args.get("dim"), cx.args.get("keepdim", False)    # overloads differ
        return cx.emit(opname, cx.cast(x, cx.out_dtype()), axes=_axes(dim, x.type.rank),
                       keepdims=bool(keepdim))
    return handle


aten("mean.dim", "mean.default")(_reduce("reduce_mean"))
aten("sum.dim_IntList", "sum.default")(_reduce("reduce_sum"))
aten("amax.default")(_reduce("reduce_max"))
aten("amin.default")(_reduce("reduce_min"))
aten("prod.dim_int", "prod.default")(_reduce("reduce_prod"))
aten("any.dim", "any.dims", "any.default")(_reduce("reduce_max"))      # on bools: max is any
aten("all.dim", "all.dims", "all.default")(_reduce("reduce_min"))


@aten("var.correction", "var.dim")
def _var(cx, node, x, dim=None, correction=None, keepdim=False):
    if isinstance(correction, bool):            # var.dim(x, dim, unbiased, keepdim)
        correction = 1 if correction else 0
    correction = 1 if correction is None else correction
    axes = _axes(dim, x.type.rank) or tuple(range(x.type.rank))
    count = math.prod(x.type.shape[a] for a in axes)
    centered = cx.g.sub(x, cx.g.reduce_mean(x, axes=axes, keepdims=True))
    total = cx.g.reduce_sum(cx.g.mul(centered, centered), axes=axes, keepdims=bool(keepdim))
    return cx.g.div(total, cx.scalar(float(max(count - correction, 0)), x.type.dtype))


@aten("argmax.default", "argmin.default")
def _argmax(cx, node, x, dim=None, keepdim=False):
    opname = "argmax" if _op_name(node.target).startswith("argmax") else "argmin"
    if dim is None:
        flat = cx.g.reshape(x, shape=(math.prod(x.type.shape),))
        out = cx.emit(opname, flat, axis=0, keepdims=False)
        return cx.g.reshape(out, shape=cx.out_shape()) if keepdim else out
    return cx.emit(opname, x, axis=dim, keepdims=bool(keepdim))


@aten("max.dim", "min.dim")
def _max_dim(cx, node, x, dim, keepdim=False):
    largest = _op_name(node.target).startswith("max")
    values = cx.emit("reduce_max" if largest else "reduce_min", x, axes=(dim % x.type.rank,),
                     keepdims=bool(keepdim))
    return values, cx.emit("argmax" if largest else "argmin", x, axis=dim, keepdims=bool(keepdim))


@aten("max.default", "min.default")
def _max_all(cx, node, x):
    return cx.emit("reduce_max" if _op_name(node.target).startswith("max") else "reduce_min", x)


@aten("linalg_vector_norm.default")
def _vector_norm(cx, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    x = cx.cast(x, cx.out_dtype())
    axes, keep = _axes(dim, x.type.rank), bool(keepdim)
    if ord == 2:
        return cx.g.sqrt(cx.g.reduce_sum(cx.g.mul(x, x), axes=axes, keepdims=keep))
    if ord == 1:
        return cx.g.reduce_sum(cx.g.abs(x), axes=axes, keepdims=keep)
    if ord == math.inf:
        return cx.g.reduce_max(cx.g.abs(x), axes=axes, keepdims=keep)
    raise cx.unsupported(f"vector norm of order {ord} (supported: 1, 2, inf)")


@aten("_softmax.default", "_log_softmax.default")
def _softmax(cx, node, x, dim, half_to_float=False):
    opname = "softmax" if _op_name(node.target) == "_softmax.default" else "log_softmax"
    return cx.emit(opname, cx.cast(x, cx.out_dtype()), axis=dim)


@aten("cumsum.default")
def _cumsum(cx, node, x, dim, dtype=None):
    return cx.g.cumsum(cx.cast(x, cx.out_dtype()), axis=dim)


@aten("topk.default")
def _topk(cx, node, x, k, dim=-1, largest=True, sorted=True):
    return list(cx.g.topk(x, k=int(k), axis=dim, largest=bool(largest), sorted=bool(sorted)))


# ---- shapes --------------------------------------------------------------------------------

@aten("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default")
def _reshape(cx, node, x, size):
    shape = cx.out_shape()
    return x if x.type.shape == shape else cx.g.reshape(x, shape=shape)


@aten("permute.default")
def _permute(cx, node, x, dims):
    perm = tuple(d % x.type.rank for d in dims)
    return x if perm == tuple(range(x.type.rank)) else cx.g.transpose(x, perm=perm)


@aten("t.default")
def _t(cx, node, x):
    return cx.g.transpose(x, perm=(1, 0)) if x.type.rank == 2 else x


@aten("transpose.int")
def _transpose(cx, node, x, dim0, dim1):
    perm = list(range(x.type.rank))
    perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
    return _permute(cx, node, x, perm)


@aten("unsqueeze.default")
def _unsqueeze(cx, node, x, dim):
    return cx.g.unsqueeze(x, axes=(dim % (x.type.rank + 1),))


@aten("squeeze.dim", "squeeze.dims", "squeeze.default")
def _squeeze(cx, node, x, dim=None):
    rank = x.type.rank
    dims = range(rank) if dim is None else _axes(dim, rank)
    axes = tuple(d for d in dims if x.type.shape[d] == 1)
    return cx.g.squeeze(x, axes=axes) if axes else x


@aten("expand.default", "expand_copy.default")
def _expand(cx, node, x, size, implicit=False):
    shape = cx.out_shape()
    return x if x.type.shape == shape else cx.g.expand(x, shape=shape)


@aten("cat.default")
def _cat(cx, node, tensors, dim=0):
    dt = cx.out_dtype()
    parts = [cx.cast(t, dt) for t in tensors if not (t.type.rank == 1 and t.type.shape[0] == 0)]
    if len(parts) == 1:
        return parts[0]
    return cx.g.concat(parts, axis=dim % parts[0].type.rank)


def _split(cx, x, sizes, dim):
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) == 1:
        return [x]
    return list(cx.g.split(x, axis=dim % x.type.rank, sizes=sizes))


@aten("split_with_sizes.default", "split_with_sizes_copy.default")
def _split_with_sizes(cx, node, x, split_sizes, dim=0):
    return _split(cx, x, split_sizes, dim)


@aten("split.Tensor", "split_copy.Tensor")
def _split_tensor(cx, node, x, split_size, dim=0):
    n = x.type.shape[dim]
    sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
    return _split(cx, x, sizes, dim)


@aten("unbind.int")
def _unbind(cx, node, x, dim=0):
    dim = dim % x.type.rank
    return [cx.g.squeeze(p, axes=(dim,)) for p in _split(cx, x, [1] * x.type.shape[dim], dim)]


@aten("slice.Tensor", "slice_copy.Tensor")
def _slice(cx, node, x, dim=0, start=None, end=None, step=1):
    dim = dim % x.type.rank
    n = x.type.shape[dim]
    begin, stop, _ = slice(start, end, step).indices(n)
    if step == 1 and begin == 0 and stop == n:
        return x
    return cx.g.slice(x, starts=(begin,), ends=(stop,), axes=(dim,), steps=(step,))


@aten("select.int", "select_copy.int")
def _select(cx, node, x, dim, index):
    dim = dim % x.type.rank
    index = index % x.type.shape[dim]
    part = cx.g.slice(x, starts=(index,), ends=(index + 1,), axes=(dim,), steps=(1,))
    return cx.g.squeeze(part, axes=(dim,))


@aten("flip.default")
def _flip(cx, node, x, dims):
    axes = tuple(sorted({d % x.type.rank for d in dims}))
    if not axes:
        return x
    n = len(axes)
    return cx.g.slice(x, starts=(-1,) * n, ends=(-INT64_MAX,) * n, axes=axes, steps=(-1,) * n)


@aten("slice_scatter.default")
def _slice_scatter(cx, node, x, src, dim=0, start=None, end=None, step=1):
    """``x`` with ``x[start:end:step]`` along ``dim`` replaced by ``src``: a concat of three parts."""
    dim = dim % x.type.rank
    n = x.type.shape[dim]
    begin, stop, _ = slice(start, end, step).indices(n)
    if step != 1:
        raise cx.unsupported(f"slice_scatter with step {step}")
    src = cx.cast(src, x.type.dtype)
    parts = []
    if begin > 0:
        parts.append(_slice(cx, node, x, dim, 0, begin))
    parts.append(src)
    if stop < n:
        parts.append(_slice(cx, node, x, dim, stop, n))
    return parts[0] if len(parts) == 1 else cx.g.concat(parts, axis=dim)


@aten("select_scatter.default")
def _select_scatter(cx, node, x, src, dim, index):
    dim = dim % x.type.rank
    index = index % x.type.shape[dim]
    return _slice_scatter(cx, node, x, cx.g.unsqueeze(src, axes=(dim,)), dim, index, index + 1)


@aten("copy.default")
def _copy(cx, node, x, src, non_blocking=False):
    """Functional ``x.copy_(src)``: ``src`` broadcast to ``x``'s shape, in ``x``'s dtype."""
    src = cx.cast(src, x.type.dtype)
    return src if src.type.shape == x.type.shape else cx.g.expand(src, shape=x.type.shape)


@aten("index_select.default")
def _index_select(cx, node, x, dim, index):
    return cx.g.gather(x, cx.cast(index, DType.i64), axis=dim % x.type.rank)


@aten("index.Tensor")
def _index(cx, node, x, indices):
    """torch advanced indexing ``x[..., i0, i1, ...]`` by integer tensors (None = the whole axis)."""
    used = [d for d, t in enumerate(indices) if t is not None]
    if any(indices[d].type.dtype is DType.bool for d in used):
        raise cx.unsupported("boolean-mask indexing (its output shape depends on the mask values)")
    if len(used) == 1:
        return cx.g.gather(x, cx.cast(indices[used[0]], DType.i64), axis=used[0])
    # Several index tensors: gather rows of x with its indexed axes moved to the front and
    # flattened into one, at the row-major linear index of the (broadcast) index tuple.
    shape, rank = x.type.shape, x.type.rank
    rest = [d for d in range(rank) if d not in used]
    flat = cx.g.reshape(cx.g.transpose(x, perm=tuple(used + rest)),
                        shape=(math.prod(shape[d] for d in used),) + tuple(shape[d] for d in rest))
    linear = None
    for d in used:
        size = cx.scalar(shape[d], DType.i64)
        term = cx.g.mod(cx.cast(indices[d], DType.i64), size)          # negative indices wrap
        linear = term if linear is None else cx.g.add(cx.g.mul(linear, size), term)
    out = cx.g.gather(flat, linear, axis=0)
    first = used[0]
    if used == list(range(first, first + len(used))) and first > 0:
        # Adjacent index tensors keep their place in the result (torch's rule); others go first.
        nb = out.type.rank - len(rest)
        perm = tuple(range(nb, nb + first)) + tuple(range(nb)) + tuple(range(nb + first, out.type.rank))
        out = cx.g.transpose(out, perm=perm)
    return out


@aten("gather.default")
def _gather(cx, node, x, dim, index, sparse_grad=False):
    return cx.g.gather_elements(x, index, axis=dim % x.type.rank)


@aten("embedding.default")
def _embedding(cx, node, weight, indices, *_):
    return cx.g.embedding(weight, cx.cast(indices, DType.i64))


def _torch_pads(pad: Sequence[int], rank: int) -> tuple[int, ...]:
    """torch's (last_begin, last_end, prev_begin, prev_end, ...) as (begin..., end...)."""
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return tuple(begins) + tuple(ends)


@aten("constant_pad_nd.default")
def _constant_pad(cx, node, x, pad, value=0):
    return cx.g.pad(x, pads=_torch_pads(pad, x.type.rank), mode="constant", value=float(value))


@aten("reflection_pad1d.default", "reflection_pad2d.default", "reflection_pad3d.default")
def _reflect_pad(cx, node, x, padding):
    return cx.g.pad(x, pads=_torch_pads(padding, x.type.rank), mode="reflect")


@aten("replication_pad1d.default", "replication_pad2d.default", "replication_pad3d.default")
def _edge_pad(cx, node, x, padding):
    return cx.g.pad(x, pads=_torch_pads(padding, x.type.rank), mode="edge")


@aten("repeat.default")
def _repeat(cx, node, x, repeats):
    extra = len(repeats) - x.type.rank
    if extra > 0:
        x = cx.g.reshape(x, shape=(1,) * extra + x.type.shape)
    return cx.g.tile(x, repeats=tuple(repeats))


@aten("upsample_nearest2d.vec", "upsample_nearest2d.default", "upsample_nearest1d.vec",
      "upsample_nearest3d.vec")
def _upsample_nearest(cx, node, x, *_):
    return cx.g.resize(x, sizes=cx.out_shape(), mode="nearest",
                       coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@aten("upsample_bilinear2d.vec", "upsample_bilinear2d.default", "upsample_linear1d.vec")
def _upsample_linear(cx, node, x, output_size, align_corners, *_):
    mode = "align_corners" if align_corners else "pytorch_half_pixel"
    return cx.g.resize(x, sizes=cx.out_shape(), mode="linear", coordinate_transformation_mode=mode)


# ---- attention -----------------------------------------------------------------------------

def _attention(cx, q, k, v, mask, dropout_p, is_causal, scale) -> Value:
    """SDPA as one ``graph.attention``.  Grouped-query attention (fewer KV heads than query
    heads: ``enable_gqa=True``, or what the CPU flash kernel accepts without the flag) needs no
    repeat of k and v: the op reads each KV head for every query head of its group."""
    if dropout_p:
        raise cx.unsupported(f"attention dropout p={dropout_p}")
    if mask is not None and mask.type.dtype is not DType.bool:
        mask = cx.cast(mask, q.type.dtype)
    k, v = _unrepeated_kv_heads(k), _unrepeated_kv_heads(v)
    return cx.g.attention(q, k, v, mask, scale=scale, causal=bool(is_causal))


def _unrepeated_kv_heads(t: Value) -> Value:
    """The KV tensor before a ``repeat_kv`` (transformers' GQA without ``enable_gqa``):
    ``x[:, :, None].expand(B, H, n, L, D).reshape(B, H * n, L, D)``.  ``graph.attention`` reads
    head ``h // n`` of ``x`` for query head ``h``, which is what the repeat spelled out, so the
    copy goes (dead-code elimination removes it when nothing else reads it)."""
    shape = t.type.shape
    wide = t.op.operands[0] if t.op is not None and t.op.name == "graph.reshape" else None
    if wide is None or wide.op is None or wide.op.name != "graph.expand" or len(shape) < 3:
        return t
    unit = wide.op.operands[0]
    if unit.op is None or unit.op.name not in ("graph.unsqueeze", "graph.reshape"):
        return t
    x = unit.op.operands[0]
    if x.type.rank < 3 or wide.type.rank != x.type.rank + 1:
        return t
    *lead, h, length, d = x.type.shape
    n = wide.type.shape[-3]
    if not (isinstance(h, int) and isinstance(n, int) and n > 1):
        return t
    grouped = (unit.type.shape == (*lead, h, 1, length, d) and wide.type.shape == (*lead, h, n, length, d)
               and shape == (*lead, h * n, length, d))
    return x if grouped else t


@aten("scaled_dot_product_attention.default")
def _sdpa(cx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _attention(cx, q, k, v, attn_mask, dropout_p, is_causal, scale)


@aten("_scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_cpu(cx, node, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    return _attention(cx, q, k, v, attn_mask, dropout_p, is_causal, scale), None


def decompositions() -> dict:
    """torch's core-ATen decomposition table, except attention: ``graph.attention`` keeps it whole
    (so a backend can fuse it), and torch's own decomposition of it fails on some models."""
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    for op in list(table):
        if "scaled_dot_product" in str(op):
            del table[op]
    return table


# ---- entry points ---------------------------------------------------------------------------

def import_torch(module, example_inputs: Sequence, dynamic_shapes: Any = None) -> ModuleOp:
    """Exports ``module`` with ``example_inputs`` and converts it to the graph dialect.

    ``dynamic_shapes`` is torch.export's spec: the dims it names stay symbolic (with the ranges
    and the example's sizes as hints in the symbol table, see ``torch_symbolic.py``)."""
    import torch

    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    hint = "the module is in training mode: call module.eval() first" if _trains(module) else ""
    register_output_pytrees(module)
    try:
        ep = torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    except Exception as e:  # export's own errors carry the detail; say which step failed
        spec = f" with dynamic_shapes={dynamic_shapes!r}" if dynamic_shapes is not None else ""
        raise FrontendError(f"torch.export could not trace {type(module).__name__}{spec}: "
                            f"{type(e).__name__}: {e}{' (' + hint + ')' if hint else ''}") from e
    ep = ep.run_decompositions(decompositions())
    symbolic = None
    if dynamic_shapes is not None:
        from .torch_symbolic import SymbolicShapes
        symbolic = SymbolicShapes.from_exported_program(ep)
    module_op = import_exported_program(ep, hint=hint, symbolic=symbolic)
    record_output_tree(module_op, ep.call_spec.out_spec)
    return module_op


def _trains(module) -> bool:
    """Whether a part of ``module`` that computes differently in training (batch norm, instance
    norm, dropout) is in training mode: then an error's hint says to call ``eval()``.  The training
    flag alone says nothing: ``convert_pt2e`` returns its graph in training mode, with no such part."""
    import torch.nn as nn

    kinds = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm, nn.modules.dropout._DropoutNd)
    return any(isinstance(m, kinds) and m.training for m in module.modules())


def import_exported_program(ep, hint: str = "", symbolic=None) -> ModuleOp:
    """Converts a (core-ATen decomposed) ``torch.export.ExportedProgram``; ``symbolic`` (a
    ``torch_symbolic.SymbolicShapes``) for one exported with ``dynamic_shapes``."""
    from torch.export.graph_signature import InputKind, OutputKind

    sig = ep.graph_signature
    constants: dict[str, Any] = {}
    for spec in sig.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            continue
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = ep.state_dict.get(spec.target)
            if value is None:
                value = ep.constants[spec.target]
            constants[spec.arg.name] = value
        else:
            raise UnsupportedOpError(f"exported input '{spec.arg.name}' of kind {spec.kind.name} "
                                     f"(only tensors, parameters, buffers and constants)")
    for spec in sig.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise UnsupportedOpError(
                f"the model's forward mutates '{spec.target}' ({spec.kind.name}); tensorforge compiles "
                f"pure inference graphs{' (' + hint + ')' if hint else ''}")
    return FxImporter(ep.graph_module.graph, constants, ep.graph_module, hint, symbolic).run()


def import_fx_graph(gm, constants: dict[str, Any] | None = None, symbolic=None) -> ModuleOp:
    """Converts a GraphModule of core ATen ops (as AOT autograd or ``make_fx`` produce).

    ``constants`` binds placeholders (by name) to tensors; the others become arguments
    (SymInt placeholders excepted when ``symbolic`` is given: they are the sizes' symbols).
    """
    return FxImporter(gm.graph, dict(constants or {}), gm, symbolic=symbolic).run()


# ---- structured outputs (ModelOutput, caches, dicts, nested tuples) -------------------------

def register_output_pytrees(module) -> None:
    """Lets ``torch.export`` flatten the containers a transformers model returns.

    A decoder's output holds a ``DynamicCache``, which torch's pytree does not know until
    transformers' own exporter registers every cache class; without it export fails with
    "Found <class 'DynamicCache'> in output, which is not a known type".  Registration is
    process-wide and idempotent (what ``transformers.exporters`` does before each export).
    """
    if "transformers" not in sys.modules:          # a transformers model has imported it
        return
    try:
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
        from transformers.modeling_utils import PreTrainedModel
    except ImportError:                             # another transformers version: export says what fails
        return
    seen: set[str] = set()
    for sub in module.modules():
        if isinstance(sub, PreTrainedModel) and type(sub).__module__ not in seen:
            seen.add(type(sub).__module__)          # its module may define model-specific caches
            register_cache_pytrees_for_model(sub)


class OutputTree:
    """Rebuilds what a model's ``forward`` returned (a ``ModelOutput`` holding a
    ``DynamicCache``, a dict, nested tuples) from the compiled model's flat outputs, so that
    ``cm(ids).last_hidden_state`` works as in eager.

    ``spec`` is torch.export's ``out_spec``; the compiled function returns the tensors in its
    leaf order (``torch.utils._pytree``).  A container that cannot be rebuilt outside the traced
    forward (its pytree ``unflatten`` needs state that flattening did not keep) gives the flat
    tuple of tensors instead, with one ``TensorforgeWarning`` that names it.
    """

    __slots__ = ("spec", "broken")

    def __init__(self, spec):
        self.spec = spec
        self.broken: str | None = None

    def __call__(self, flat: Sequence) -> Any:
        if self.broken is None:
            try:
                return self.spec.unflatten(list(flat))
            except Exception as e:      # third-party unflatten code: any failure means flat outputs
                self.broken = f"{type(e).__name__}: {e}"
                warnings.warn(f"the model's output structure ({_container_names(self.spec)}) cannot be "
                              f"rebuilt from its tensors ({self.broken}); returning the {len(flat)} "
                              f"output tensors as a flat tuple, in torch.utils._pytree leaf order",
                              TensorforgeWarning, stacklevel=3)
        return tuple(flat)


def _container_names(spec) -> str:
    names, todo = [], [spec]
    while todo:
        s = todo.pop()
        if not s.is_leaf():
            names.append(getattr(s.type, "__name__", str(s.type)))
            todo.extend(s.children())
    return ", ".join(dict.fromkeys(names))


_OUTPUT_TREES: "weakref.WeakKeyDictionary[ModuleOp, OutputTree]" = weakref.WeakKeyDictionary()


def record_output_tree(module: ModuleOp, spec) -> None:
    """Remembers how to rebuild ``module``'s outputs, unless they are one tensor or a flat tuple
    (returned as they are, as before structured outputs were rebuilt)."""
    if spec is not None and not _is_flat(spec):
        _OUTPUT_TREES[module] = OutputTree(spec)


def output_tree(module: ModuleOp) -> OutputTree | None:
    """The ``OutputTree`` the importer recorded for ``module`` (None: flat outputs)."""
    return _OUTPUT_TREES.get(module)


def _is_flat(spec) -> bool:
    if spec.is_leaf():
        return True
    return spec.type is tuple and all(c.is_leaf() for c in spec.children())


# ---- torch.compile backend -----------------------------------------------------------------

def _static_positions(gm) -> list[int]:
    """Dynamo placeholders that are parameters or buffers (it marks them static)."""
    return [i for i, n in enumerate(gm.graph.find_nodes(op="placeholder"))
            if n.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")]


def _mutated_inputs() -> set[int]:
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return set()
    return {i for i, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata}


def tensorforge_backend(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """The ``torch.compile`` backend: Dynamo FX graph -> core ATen (inference) -> tensorforge.

    ``options`` (``torch.compile(..., options={...})``) go to ``tensorforge.compile``, e.g.
    ``{"target": "interpreter"}``.  Compiled regions run without autograd: their outputs do
    not require grad.
    """
    import torch
    from torch._dynamo.exc import TensorifyScalarRestartAnalysis
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..api import compile as tf_compile

    real_inputs = list(example_inputs)
    # dynamic=True, or Dynamo's automatic dynamic after a call with new sizes: SymInts among the
    # inputs, symbolic tensor shapes; the graph compiles once for the whole range.
    dynamic = any(not isinstance(x, torch.Tensor) for x in real_inputs)
    static = set(_static_positions(gm))

    def compile_inference(aten_gm, fake_inputs):
        # AOT autograd calls this under its fake-tensor mode; the frozen weights are real tensors.
        with unset_fake_temporarily():
            return build(aten_gm)

    def build(aten_gm):
        placeholders = list(aten_gm.graph.find_nodes(op="placeholder"))
        frozen: dict[str, Any] = {}
        if len(placeholders) == len(real_inputs):   # AOT kept Dynamo's inputs one to one
            for i in static - _mutated_inputs():
                frozen[placeholders[i].name] = real_inputs[i]
        symbolic, sizes = None, set()
        if dynamic:     # SymInt placeholders are the symbols, bound from the tensors' shapes
            from .torch_symbolic import SymbolicShapes, symint_placeholders
            symbolic, sizes = SymbolicShapes.from_fx_graph(aten_gm.graph), symint_placeholders(aten_gm.graph)
        runtime = [i for i, p in enumerate(placeholders) if p.name not in frozen and p.name not in sizes]
        compiled = tf_compile(import_fx_graph(aten_gm, frozen, symbolic), **dict(options or {}))

        def run(args):
            picked = [args[i] for i in runtime]
            args.clear()
            outs = compiled(*picked)
            outs = outs if isinstance(outs, tuple) else (outs,)
            return [o if isinstance(o, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(o))
                    for o in outs]

        run._boxed_call = True
        return run

    with torch.no_grad():
        try:
            return aot_module_simplified(gm, real_inputs, fw_compiler=compile_inference,
                                         decompositions=decompositions())
        except TensorifyScalarRestartAnalysis:
            # With dynamic=True Dynamo lifts Python floats (RMSNorm's eps, an attention scale)
            # into graph inputs.  Ops that take a C++ double specialise them while AOT traces,
            # and AOT then asks Dynamo to restart the whole frame, which would invoke this
            # backend a second time per graph.  The first attempt has already recorded those
            # floats as specialised, with value guards in the shape environment that Dynamo turns
            # into guards on the attribute, so tracing again here succeeds, and the float becomes
            # a constant of the compiled kernels (a changed value recompiles).
            return aot_module_simplified(gm, real_inputs, fw_compiler=compile_inference,
                                         decompositions=decompositions())


def register_backend() -> None:
    """Makes ``torch.compile(m, backend="tensorforge")`` work.

    When Dynamo is already loaded the backend is registered now; otherwise Dynamo finds it
    through the ``torch_dynamo_backends`` entry point the first time a backend is looked up,
    so that ``import tensorforge`` does not pay for importing torch.
    """
    if "torch._dynamo" not in sys.modules:
        return
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend as register

    # A pending entry point means Dynamo is loading us right now and registers the backend itself
    # (registering it here too would make its own registration fail with "duplicate name").
    if BACKEND_NAME not in _COMPILER_FNS and _BACKENDS.get(BACKEND_NAME) is None:
        register(tensorforge_backend, name=BACKEND_NAME)


# Handlers kept in modules of their own register as those are imported: PT2E's quantized_decomposed ops.
importlib.import_module(f"{__package__}.torch_quant")
