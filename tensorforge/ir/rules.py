"""Declarative rewrite rules: the algebra written as data, turned into Patterns automatically.

    rule("transpose-transpose",
         "transpose(transpose(x, perm=p), perm=q)",
         "transpose(x, perm=compose(p, q))")
    rule("mul-zero-int", "mul(x, 0)", "0", where="is_int(x)")

Source, result and constraint are strings in Python expression syntax, read with ``ast`` and
interpreted here (never ``eval``'d).

Source pattern (what to match):
  ``op(a, b, attr=...)``  an op of the rule's dialect (``graph`` unless told otherwise) with
                          exactly these operands; a dotted name (``graph.add``) names any op.
                          Python keywords get a trailing underscore: ``and_(x, y)``.
  ``x``                   any value; the same name twice must be the same value.  ``_`` matches anything.
  ``0``, ``1.5``, ``-1``  a splat constant operand equal to that number (any shape, any type).
  ``splat(v)``            a splat constant operand; ``v`` binds its scalar value.
  ``const(c)``            any constant operand; ``c`` binds the value.
  ``t := op(...)``        also binds the op's result to ``t`` (for ``one_use(t)`` and friends).
  ``attr=p`` / ``attr=(1, 0)``  binds the attribute to ``p`` / requires that literal value.

Result (what to replace the matched op with): a bound value, an op call whose attributes are
expressions over the bindings, or a number: at the top a splat constant of the matched op's
type, as an operand a rank-0 constant of the sibling operands' element type.

Constraint (``where``): an expression over the bindings using ``RULE_FUNCTIONS`` (``shape``,
``dtype``, ``is_int``, ``one_use``, ``compose``, ``is_identity``, ``lossless``, ...), comparisons,
``and``/``or``/``not``, arithmetic, indexing; element types by name (``dtype(x) == f32``).

Type safety: a rule fires only if the replacement has exactly the matched value's type, so
``add(x, 0) -> x`` cannot fire where the 0 broadcasts ``x`` to a bigger shape, and
``cast(x, dtype=d) -> x`` fires only when ``d`` is already ``x``'s element type.
"""
from __future__ import annotations

import ast
import operator
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import PassError, TensorforgeError
from .attributes import Dense, check_attr
from .core import Operation, Value
from .opdef import lookup
from .rewrite import Pattern, PatternRewriter, constant_value
from .types import DType, TensorType

# ---- functions usable in constraints and result attributes ------------------------------
_EXACT_INT_BITS = {DType.f16: 11, DType.bf16: 8, DType.f32: 24, DType.f64: 53, DType.f8e4m3fn: 4,
                   DType.f8e4m3fnuz: 4, DType.f8e5m2: 3, DType.f8e5m2fnuz: 3, DType.f4e2m1: 2}
_INT_RANGE = {d: d.int_range for d in DType if not d.is_float}
_FLOAT_WIDENING = {(DType.f16, DType.f32), (DType.f16, DType.f64), (DType.bf16, DType.f32),
                   (DType.bf16, DType.f64), (DType.f32, DType.f64)}


def lossless(src: DType, dst: DType) -> bool:
    """True when every value of ``src`` converts to ``dst`` exactly (a widening cast)."""
    if src is dst:
        return True
    if src in _INT_RANGE:
        lo, hi = _INT_RANGE[src]
        if dst in _INT_RANGE:
            dlo, dhi = _INT_RANGE[dst]
            return dlo <= lo and hi <= dhi
        limit = 2 ** _EXACT_INT_BITS[dst]
        return -limit <= lo and hi <= limit
    return (src, dst) in _FLOAT_WIDENING


def compose(p: Sequence[int], q: Sequence[int]) -> tuple[int, ...]:
    """The permutation of ``transpose(transpose(x, p), q)`` as one transpose."""
    return tuple(p[i] for i in q)


def inverse(p: Sequence[int]) -> tuple[int, ...]:
    out = [0] * len(p)
    for i, j in enumerate(p):
        out[j] = i
    return tuple(out)


def is_identity(p: Sequence[int]) -> bool:
    """``p`` leaves every axis in place (negative entries count from the end)."""
    n = len(p)
    return all(a % n == i for i, a in enumerate(p))


def _dtype_of(v: Value) -> DType:
    return v.type.dtype


def same_dim(a, b) -> bool:
    """Two dims that are provably equal (``dims_equal`` on canonical forms), so that a rule
    comparing an attribute's ``("s*b", 64)`` with a type's ``("b*s", 64)`` sees them equal;
    names that are no expression (``"batch size"``) compare by spelling."""
    if a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    from ..errors import ShapeError
    from .symbolic import dims_equal
    try:
        return dims_equal(a, b)
    except ShapeError:
        return False


def same_shape(a, b) -> bool:
    """``same_dim`` axis by axis (and equal ranks)."""
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b))


RULE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "shape": lambda v: v.type.shape,
    "dtype": _dtype_of,
    "rank": lambda v: len(v.type.shape),
    "type_of": lambda v: v.type,
    "is_float": lambda v: _dtype_of(v).is_float,
    "is_int": lambda v: _dtype_of(v).is_int,
    "is_bool": lambda v: _dtype_of(v) is DType.bool,
    "is_static": lambda v: v.type.is_static,
    "one_use": lambda v: len(v.uses) == 1,
    "same_type": lambda a, b: a.type == b.type,
    "same_dim": same_dim,
    "same_shape": same_shape,
    "compose": compose,
    "inverse": inverse,
    "is_identity": is_identity,
    "lossless": lossless,
    "len": len, "tuple": tuple, "sorted": sorted, "abs": abs, "min": min, "max": max,
}
"""Helpers a rule may call in ``where`` and in result attributes; add more with ``rule_function``."""


def rule_function(fn: Callable | None = None, *, name: str | None = None):
    """Decorator that makes ``fn`` callable from rule constraints and result attributes."""
    def add(f):
        RULE_FUNCTIONS[name or f.__name__] = f
        return f
    return add(fn) if fn is not None else add


# ---- parsed forms -------------------------------------------------------------------------
class _OpPat:
    __slots__ = ("name", "args", "attrs", "bind")

    def __init__(self, name, args, attrs, bind=None):
        self.name, self.args, self.attrs, self.bind = name, args, attrs, bind


class _Var:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class _Splat:
    """Source: a splat constant equal to ``value`` (a number) or binding it to ``var``."""

    __slots__ = ("value", "var", "bind")

    def __init__(self, value=None, var=None, bind=None):
        self.value, self.var, self.bind = value, var, bind


class _Const:
    __slots__ = ("bind",)

    def __init__(self, bind):
        self.bind = bind


class _AttrVar:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class _AttrLit:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _OpBuild:
    __slots__ = ("name", "args", "attrs")

    def __init__(self, name, args, attrs):
        self.name, self.args, self.attrs = name, args, attrs


class _SplatBuild:
    __slots__ = ("value",)     # a closure over the bindings

    def __init__(self, value):
        self.value = value


class _Planned:
    """An op the result will create, with its inferred type (nothing is built yet)."""

    __slots__ = ("name", "operands", "attrs", "type")

    def __init__(self, name, operands, attrs, type):
        self.name, self.operands, self.attrs, self.type = name, operands, attrs, type


class _PlannedConst:
    __slots__ = ("value", "type")

    def __init__(self, value, type):
        self.value, self.type = value, type


_DTYPE_NAMES = {d.value: d for d in DType} | {d.name: d for d in DType}
"""Element types by name (``f32``, ``i64``, ``bool``/``i1``) in constraints and result attributes."""

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: operator.truediv}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b, ast.Is: operator.eq, ast.IsNot: operator.ne}


class _Compiler:
    """Reads one rule's three strings into matchers, builders and closures."""

    def __init__(self, rule: "Rule"):
        self.rule = rule
        self.value_vars: set[str] = set()
        self.attr_vars: set[str] = set()
        self.scalar_vars: set[str] = set()

    def fail(self, what: str, node: ast.AST | None = None) -> None:
        where = f" (column {node.col_offset + 1})" if node is not None and hasattr(node, "col_offset") else ""
        raise PassError(f"rule '{self.rule.name}': {what}{where}")

    def parse(self, text: str, part: str) -> ast.expr:
        try:
            return ast.parse(text.strip(), mode="eval").body
        except SyntaxError as e:
            self.fail(f"cannot parse {part} '{text}': {e.msg} at column {e.offset}")
            raise  # unreachable

    def op_name(self, func: ast.expr) -> str:
        parts = []
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            self.fail("an op must be named by an identifier", func)
        parts.append(func.id)
        parts = [p[:-1] if p.endswith("_") else p for p in reversed(parts)]
        return ".".join(parts) if len(parts) > 1 else f"{self.rule.dialect}.{parts[0]}"

    # ---- source -------------------------------------------------------------------
    def source(self, node: ast.expr, top: bool = False):
        bind = None
        if isinstance(node, ast.NamedExpr):
            bind = node.target.id
            self.value_vars.add(bind)
            node = node.value
        if isinstance(node, ast.Call):
            fname = node.func.id if isinstance(node.func, ast.Name) else None
            if fname in ("splat", "const") and not top:
                return self.constant_source(fname, node, bind)
            args = [self.source(a) for a in node.args]
            attrs = {}
            for kw in node.keywords:
                if kw.arg is None:
                    self.fail("**kwargs are not allowed in a pattern", kw.value)
                attrs[kw.arg] = self.attr_source(kw.value)
            return _OpPat(self.op_name(node.func), args, attrs, bind)
        if top:
            self.fail("the source pattern must be an op, e.g. 'add(x, 0)'", node)
        if bind is not None:
            self.fail("':=' binds op results only", node)
        if isinstance(node, ast.Name):
            if node.id != "_":
                self.value_vars.add(node.id)
            return _Var(node.id)
        number = self.number(node)
        if number is not None:
            return _Splat(value=number)
        self.fail(f"unsupported source syntax '{ast.unparse(node)}'", node)

    def constant_source(self, fname: str, node: ast.Call, bind: str | None):
        if len(node.args) != 1 or node.keywords:
            self.fail(f"{fname}(...) takes one argument", node)
        arg = node.args[0]
        if fname == "const":
            if not isinstance(arg, ast.Name):
                self.fail("const(c) binds a name", arg)
            self.value_vars.add(arg.id)
            return _Const(arg.id)
        if bind is not None:
            self.value_vars.add(bind)
        if isinstance(arg, ast.Name):
            self.scalar_vars.add(arg.id)
            return _Splat(var=arg.id, bind=bind)
        number = self.number(arg)
        if number is None:
            self.fail("splat(...) takes a name or a number", arg)
        return _Splat(value=number, bind=bind)

    @staticmethod
    def number(node: ast.expr):
        try:
            v = ast.literal_eval(node)
        except ValueError:
            return None
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def attr_source(self, node: ast.expr):
        if isinstance(node, ast.Name) and node.id not in ("True", "False", "None"):
            self.attr_vars.add(node.id)
            return _AttrVar(node.id)
        try:
            return _AttrLit(check_attr(ast.literal_eval(node)))
        except (ValueError, TensorforgeError):
            self.fail(f"an attribute pattern is a name or a literal, not '{ast.unparse(node)}'", node)

    # ---- expressions (constraints, result attributes) -----------------------------------
    def expr(self, node: ast.expr) -> Callable[[dict], Any]:
        if isinstance(node, ast.Constant):
            value = node.value
            return lambda b: value
        if isinstance(node, ast.Name):
            name = node.id
            if name not in self.bound and name in _DTYPE_NAMES:
                dtype = _DTYPE_NAMES[name]
                return lambda b: dtype
            if name not in self.bound:
                self.fail(f"'{name}' is not bound by the source pattern (bound: "
                          f"{', '.join(sorted(self.bound)) or 'nothing'})", node)
            return lambda b: b[name]
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.expr(e) for e in node.elts]
            return lambda b: tuple(f(b) for f in items)
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in RULE_FUNCTIONS or node.keywords:
                self.fail(f"unknown function in '{ast.unparse(node)}' (known: {', '.join(sorted(RULE_FUNCTIONS))})",
                          node)
            fname = node.func.id
            args = [self.expr(a) for a in node.args]
            return lambda b: RULE_FUNCTIONS[fname](*(f(b) for f in args))
        if isinstance(node, ast.BoolOp):
            parts = [self.expr(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return lambda b: all(f(b) for f in parts)
            return lambda b: any(f(b) for f in parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            inner = self.expr(node.operand)
            if isinstance(node.op, ast.Not):
                return lambda b: not inner(b)
            return lambda b: -inner(b)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            fn, lhs, rhs = _BINOPS[type(node.op)], self.expr(node.left), self.expr(node.right)
            return lambda b: fn(lhs(b), rhs(b))
        if isinstance(node, ast.Compare):
            first = self.expr(node.left)
            ops = [(_CMPOPS[type(o)], self.expr(c)) for o, c in zip(node.ops, node.comparators)
                   if type(o) in _CMPOPS]
            if len(ops) != len(node.ops):
                self.fail("unsupported comparison", node)

            def compare(b):
                left = first(b)
                for fn, right in ops:
                    r = right(b)
                    if not fn(left, r):
                        return False
                    left = r
                return True
            return compare
        if isinstance(node, ast.Subscript):
            base, index = self.expr(node.value), self.expr(node.slice)
            return lambda b: base(b)[index(b)]
        self.fail(f"unsupported expression '{ast.unparse(node)}'", node)

    @property
    def bound(self) -> set[str]:
        return self.value_vars | self.attr_vars | self.scalar_vars

    # ---- result -------------------------------------------------------------------
    def result(self, node: ast.expr):
        if isinstance(node, ast.Name):
            if node.id not in self.value_vars:
                self.fail(f"result value '{node.id}' is not a value bound by the source pattern", node)
            return _Var(node.id)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "splat":
                if len(node.args) != 1:
                    self.fail("splat(...) takes one argument", node)
                return _SplatBuild(self.expr(node.args[0]))
            if any(kw.arg is None for kw in node.keywords):
                self.fail("**kwargs are not allowed in a result", node)
            args = [self.result(a) for a in node.args]
            attrs = {kw.arg: self.expr(kw.value) for kw in node.keywords}
            return _OpBuild(self.op_name(node.func), args, attrs)
        number = self.number(node)
        if number is not None:
            return _SplatBuild(lambda b: number)
        self.fail(f"unsupported result syntax '{ast.unparse(node)}'", node)


# ---- matching -----------------------------------------------------------------------------
def _splat_scalar(v: Value, want=None):
    """The scalar of a splat constant (equal to ``want`` when given), else None.

    Cheap rejections come first: weights are big and ``add(x, 0)`` is tried on every add.
    """
    arr = constant_value(v)
    if arr is None or arr.size == 0:
        return None
    first = arr.flat[0]
    if want is not None and first != want:
        return None
    if arr.size > 1 and (arr.flat[-1] != first or not (arr == first).all()):
        return None
    return first.item()


def _bind(b: dict, name: str | None, value) -> bool:
    if name is None:
        return True
    if name in b:
        return b[name] is value if isinstance(value, Value) else b[name] == value
    b[name] = value
    return True


def _match_value(node, v: Value, b: dict) -> bool:
    if isinstance(node, _Var):
        return node.name == "_" or _bind(b, node.name, v)
    if isinstance(node, _OpPat):
        op = v.op
        return op is not None and len(op.results) == 1 and _match_op(node, op, b)
    if isinstance(node, _Splat):
        scalar = _splat_scalar(v, node.value)
        if scalar is None or (node.var is not None and not _bind(b, node.var, scalar)):
            return False
        return _bind(b, node.bind, v)
    if isinstance(node, _Const):
        return constant_value(v) is not None and _bind(b, node.bind, v)
    return False


def _match_op(node: _OpPat, op: Operation, b: dict) -> bool:
    if op.name != node.name or len(op.operands) != len(node.args):
        return False
    for key, pat in node.attrs.items():
        if key not in op.attributes:
            return False
        value = op.attributes[key]
        if isinstance(pat, _AttrVar):
            if not _bind(b, pat.name, value):
                return False
        elif value != pat.value:
            return False
    for pat, v in zip(node.args, op.operands):
        if not _match_value(pat, v, b):
            return False
    return node.bind is None or _bind(b, node.bind, op.results[0])


# ---- planning and building the result ----------------------------------------------------
def _plan(node, b: dict, root_type, const_op: str):
    """The result as a tree of values and planned ops with inferred types; None if impossible."""
    if isinstance(node, _Var):
        return b[node.name]
    if isinstance(node, _SplatBuild):
        return _splat_plan(node, b, root_type)
    operands: list[Any] = [None if isinstance(a, _SplatBuild) else _plan(a, b, root_type, const_op)
                           for a in node.args]
    if any(o is None for o, a in zip(operands, node.args) if not isinstance(a, _SplatBuild)):
        return None
    typed = [o for o in operands if o is not None]
    for i, a in enumerate(node.args):
        if isinstance(a, _SplatBuild):
            if not typed:
                return None
            operands[i] = _splat_plan(a, b, TensorType((), typed[0].type.dtype))
            if operands[i] is None:
                return None
    opdef = lookup(node.name)
    try:
        attrs = opdef.normalize_attrs({k: f(b) for k, f in node.attrs.items()})
        types = opdef.infer([o.type for o in operands], attrs)
    except TensorforgeError:
        return None
    if len(types) != 1:
        return None
    return _Planned(node.name, operands, attrs, types[0])


def _splat_plan(node: _SplatBuild, b: dict, t) -> _PlannedConst | None:
    if not isinstance(t, TensorType) or not t.is_static:
        return None
    return _PlannedConst(node.value(b), t)


def _materialize(plan, rewriter: PatternRewriter, const_op: str) -> Value:
    if isinstance(plan, Value):
        return plan
    if isinstance(plan, _PlannedConst):
        arr = np.full(plan.type.shape, plan.value, dtype=plan.type.dtype.np)
        return rewriter.create(const_op, [], {"value": Dense(arr, plan.type.dtype)}).results[0]
    operands = [_materialize(o, rewriter, const_op) for o in plan.operands]
    return rewriter.create(plan.name, operands, plan.attrs, [plan.type]).results[0]


def _op_names(node) -> list[str]:
    if isinstance(node, (_OpPat, _OpBuild)):
        return [node.name] + [n for a in node.args for n in _op_names(a)]
    return []


# ---- rules --------------------------------------------------------------------------------
class Rule:
    """A rewrite written as data: ``source -> result where constraint``.

    Parsed (and checked for unbound names) on construction; ``pattern()`` gives the Pattern
    that the drivers run.
    """

    __slots__ = ("name", "source", "result", "where", "benefit", "dialect", "doc",
                 "_src", "_res", "_cond")

    def __init__(self, name: str, source: str, result: str, where: str | None = None, *,
                 benefit: int = 1, dialect: str = "graph", doc: str = ""):
        self.name, self.source, self.result, self.where = name, source, result, where
        self.benefit, self.dialect, self.doc = benefit, dialect, doc
        c = _Compiler(self)
        self._src = c.source(c.parse(source, "source"), top=True)
        self._cond = c.expr(c.parse(where, "constraint")) if where else None
        self._res = c.result(c.parse(result, "result"))

    @property
    def root(self) -> str:
        """The op name the rule matches at its top."""
        return self._src.name

    def pattern(self) -> "RulePattern":
        return RulePattern(self)

    def __str__(self) -> str:
        text = f"{self.name}: {self.source} -> {self.result}"
        return text + (f"  where {self.where}" if self.where else "")

    def __repr__(self):
        return f"<Rule {self}>"


def rule(name: str, source: str, result: str, where: str | None = None, **kw) -> Rule:
    """``rule("add-zero", "add(x, 0)", "x")``: see the module docstring for the syntax."""
    return Rule(name, source, result, where, **kw)


class RulePattern(Pattern):
    """Runs one ``Rule``: match, check the constraint, plan the result, check its type, build."""

    def __init__(self, r: Rule):
        super().__init__(r.name, r.root, r.benefit)
        self.rule = r
        self.const_op = f"{r.dialect}.constant"
        for name in _op_names(r._src) + _op_names(r._res) + [self.const_op]:
            if lookup(name) is None:
                raise PassError(f"rule '{r.name}' uses unknown op '{name}'")

    def match(self, op: Operation) -> dict | None:
        """The bindings if ``op`` matches the source and the constraint holds, else None."""
        b: dict = {}
        if len(op.results) != 1 or not _match_op(self.rule._src, op, b):
            return None
        cond = self.rule._cond
        if cond is not None and not cond(b):
            return None
        return b

    def match_and_rewrite(self, op, rewriter):
        b = self.match(op)
        if b is None:
            return False
        root_type = op.results[0].type
        plan = _plan(self.rule._res, b, root_type, self.const_op)
        if plan is None or plan.type != root_type:
            return False
        rewriter.replace_op(op, [_materialize(plan, rewriter, self.const_op)])
        return True


def rules_to_patterns(rules: Sequence[Rule]) -> list[Pattern]:
    return [r.pattern() for r in rules]


__all__ = ["RULE_FUNCTIONS", "Rule", "RulePattern", "compose", "inverse", "is_identity", "lossless",
           "rule", "rule_function", "rules_to_patterns"]
