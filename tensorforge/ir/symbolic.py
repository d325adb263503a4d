"""Symbolic dimension arithmetic: the sizes of dynamic shapes.

A dimension (``types.Dim``) is an ``int`` or a ``str``.  A string dim is a *canonical expression*
over named symbols: ``"batch"``, ``"128*batch"``, ``"batch*seq"``, ``"seq+1"``, ``"(seq-1)//2+1"``,
``"min(seq,512)"``.  Canonical means that two dims with the same value for every binding of the
symbols print the same whenever this module can prove it (polynomials are kept in a normal form;
floor division and modulo by constants, min and max are opaque atoms inside it), so shape checks
compare dims with ``==`` as they always did.

Every shape computation in the compiler goes through the helpers at the bottom of this module
(``dim_mul``, ``dim_prod``, ``dim_floordiv``, ...), which return an ``int`` whenever the result is
constant: static models never see a string dim.

Symbols carry constraints (``SymbolRange``: min..max and a known divisor), declared once per
model (``tensorforge.compile(..., dynamic_shapes=...)``, ONNX ``dim_param``); a ``SymbolTable``
maps them and gives representative *hint* values that cost models and heuristics use where a
number is needed to choose a schedule (never to decide legality).

Why our own and not sympy: the core compiler depends on NumPy only, dims are small polynomials,
and canonical printing must be stable across versions because dims are part of kernel keys and
tuning-database keys.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Union

from ..errors import ShapeError

Dim = Union[int, str]

# ---------------------------------------------------------------------------------------------
# Expressions: a polynomial  sum(coeff * prod(atom ** power))  over atoms.
# An atom is a symbol name (str) or an opaque term: ("//", poly, c), ("%", poly, c),
# ("min", poly, poly), ("max", poly, poly).

Monomial = tuple            # sorted tuple of (atom, power)
_CONST: Monomial = ()


class Expr:
    """An immutable polynomial over symbols and opaque atoms with integer coefficients."""

    __slots__ = ("terms", "_key")

    def __init__(self, terms: Mapping[Monomial, int]):
        t = {m: int(c) for m, c in terms.items() if c != 0}
        object.__setattr__(self, "terms", t)
        object.__setattr__(self, "_key", tuple(sorted(t.items(), key=lambda mc: _mono_sort_key(mc[0]))))

    def __setattr__(self, name, value):
        raise AttributeError("Expr is immutable")

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def const(c: int) -> "Expr":
        return Expr({_CONST: int(c)})

    @staticmethod
    def symbol(name: str) -> "Expr":
        return Expr({((name, 1),): 1})

    @staticmethod
    def atom(a) -> "Expr":
        return Expr({((a, 1),): 1})

    # -- queries ----------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return all(m == _CONST for m in self.terms)

    @property
    def value(self) -> int:
        if not self.is_const:
            raise ShapeError(f"dimension {self} is symbolic, not a number")
        return self.terms.get(_CONST, 0)

    def __eq__(self, other):
        other = _lift(other) if isinstance(other, (int, str)) else other
        return isinstance(other, Expr) and other._key == self._key

    def __hash__(self):
        return hash(self._key)

    def coeff_gcd(self) -> int:
        """The gcd of the coefficients (0 for the zero polynomial)."""
        g = 0
        for c in self.terms.values():
            g = _gcd(g, abs(c))
        return g

    # -- arithmetic -------------------------------------------------------------------------------
    def __add__(self, other) -> "Expr":
        o = _lift(other)
        t = dict(self.terms)
        for m, c in o.terms.items():
            t[m] = t.get(m, 0) + c
        return Expr(t)

    __radd__ = __add__

    def __neg__(self) -> "Expr":
        return Expr({m: -c for m, c in self.terms.items()})

    def __sub__(self, other) -> "Expr":
        return self + (-_lift(other))

    def __rsub__(self, other) -> "Expr":
        return _lift(other) - self

    def __mul__(self, other) -> "Expr":
        o = _lift(other)
        t: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.terms.items():
                m = _mono_mul(m1, m2)
                t[m] = t.get(m, 0) + c1 * c2
        return Expr(t)

    __rmul__ = __mul__

    def __floordiv__(self, other) -> "Expr":
        o = _lift(other)
        if o.is_const:
            c = o.value
            if c == 0:
                raise ShapeError(f"division of the dimension {self} by zero")
            if c == 1:
                return self
            if self.is_const:
                return Expr.const(self.value // c)
            if c > 0 and all(v % c == 0 for v in self.terms.values()):
                return Expr({m: v // c for m, v in self.terms.items()})
            # split off the exactly divisible part when the rest is a non-negative constant < c
            rest = self.terms.get(_CONST, 0)
            if c > 0 and 0 <= rest < c and all(v % c == 0 for m, v in self.terms.items() if m != _CONST) \
                    and _nonneg(self - rest):
                return Expr({m: v // c for m, v in self.terms.items() if m != _CONST})
            return Expr.atom(("//", self, c))
        q = _exact_div(self, o)
        if q is not None:
            return q
        raise ShapeError(f"cannot divide the dimension {self} by the symbolic {o}")

    def __mod__(self, other) -> "Expr":
        o = _lift(other)
        if not o.is_const:
            if _exact_div(self, o) is not None:
                return Expr.const(0)
            raise ShapeError(f"cannot take the dimension {self} modulo the symbolic {o}")
        c = o.value
        if c == 0:
            raise ShapeError(f"modulo of the dimension {self} by zero")
        if self.is_const:
            return Expr.const(self.value % c)
        if c > 0 and all(v % c == 0 for v in self.terms.values()):
            return Expr.const(0)
        return Expr.atom(("%", self, c))

    # -- evaluation and printing ------------------------------------------------------------------
    def evaluate(self, env: Mapping[str, int]) -> int:
        total = 0
        for m, c in self.terms.items():
            v = c
            for a, p in m:
                v *= _eval_atom(a, env) ** p
            total += v
        return total

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for m in self.terms:
            for a, _ in m:
                out |= _atom_symbols(a)
        return out

    def __str__(self) -> str:
        return _print_poly(self, str)

    def to_c(self, name_of: Callable[[str], str]) -> str:
        """A C expression of type int64_t; ``name_of(symbol)`` is the C variable holding it."""
        return _print_poly(self, name_of, c=True)

    def __repr__(self) -> str:
        return f"Expr({self})"


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _atom_sort_key(a) -> tuple:
    if isinstance(a, str):
        return (0, a)
    return (1, a[0], str(a[1]), str(a[2]))


def _mono_sort_key(m: Monomial) -> tuple:
    return (-sum(p for _, p in m), tuple((_atom_sort_key(a), p) for a, p in m))


def _mono_mul(m1: Monomial, m2: Monomial) -> Monomial:
    powers: dict = {}
    order: dict = {}
    for a, p in m1 + m2:
        k = _atom_sort_key(a)
        powers[k] = powers.get(k, 0) + p
        order[k] = a
    return tuple((order[k], powers[k]) for k in sorted(powers))


def _lift(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise ShapeError(f"bad dimension {x!r}")
    if isinstance(x, int):
        return Expr.const(x)
    if hasattr(x, "__index__"):
        return Expr.const(int(x))
    if isinstance(x, str):
        return parse(x)
    raise ShapeError(f"bad dimension {x!r}: dims are ints or symbolic expressions")


def _nonneg(e: Expr) -> bool:
    """Whether ``e`` is provably >= 0 (all symbols are sizes, so >= 0): non-negative coefficients."""
    return all(c >= 0 for c in e.terms.values())


def _exact_div(a: Expr, b: Expr) -> Expr | None:
    """``a / b`` when ``b`` is one monomial that divides every term of ``a`` exactly, else None."""
    if len(b.terms) != 1:
        return None
    ((mb, cb),) = b.terms.items()
    if cb == 0:
        return None
    out = {}
    bpow = dict((_atom_sort_key(x), (x, p)) for x, p in mb)
    for m, c in a.terms.items():
        if c % cb:
            return None
        apow = {_atom_sort_key(x): (x, p) for x, p in m}
        rem = dict(apow)
        for k, (x, p) in bpow.items():
            if k not in rem or rem[k][1] < p:
                return None
            left = rem[k][1] - p
            if left:
                rem[k] = (x, left)
            else:
                del rem[k]
        mono = tuple(rem[k] for k in sorted(rem))
        out[mono] = out.get(mono, 0) + c // cb
    return Expr(out)


def _eval_atom(a, env: Mapping[str, int]) -> int:
    if isinstance(a, str):
        try:
            return int(env[a])
        except KeyError:
            raise ShapeError(f"the symbolic dimension '{a}' has no value") from None
    op, x, y = a
    xv = x.evaluate(env)
    yv = y if isinstance(y, int) else y.evaluate(env)
    if op == "//":
        return xv // yv
    if op == "%":
        return xv % yv
    if op == "min":
        return min(xv, yv)
    return max(xv, yv)


def _atom_symbols(a) -> set[str]:
    if isinstance(a, str):
        return {a}
    out = a[1].symbols()
    if isinstance(a[2], Expr):
        out |= a[2].symbols()
    return out


def _print_atom(a, name_of, c: bool) -> str:
    if isinstance(a, str):
        return name_of(a)
    op, x, y = a
    xs = _print_poly(x, name_of, c)
    if op in ("//", "%"):
        if c:
            fn = "tf_floordiv" if op == "//" else "tf_imod"
            return f"{fn}({xs}, INT64_C({y}))"
        return f"({xs}){op}{y}" if len(x.terms) > 1 or not _simple(x) else f"{xs}{op}{y}"
    ys = _print_poly(y, name_of, c)
    if c:
        return f"(({xs}) {'<' if op == 'min' else '>'} ({ys}) ? ({xs}) : ({ys}))"
    return f"{op}({xs},{ys})"


def _simple(x: Expr) -> bool:
    """One term with coefficient 1 and one atom of power 1 (prints without parentheses)."""
    if len(x.terms) != 1:
        return False
    ((m, cf),) = x.terms.items()
    return cf == 1 and len(m) == 1 and m[0][1] == 1 and isinstance(m[0][0], str)


def _print_poly(e: Expr, name_of, c: bool = False) -> str:
    if not e.terms:
        return "INT64_C(0)" if c else "0"
    parts: list[str] = []
    for m, cf in e._key:
        factors = []
        for a, p in m:
            s = _print_atom(a, name_of, c)
            if not c and not isinstance(a, str) and a[0] in ("//", "%") and (len(m) > 1 or p > 1 or cf != 1):
                s = f"({s})"      # "4*((h-1)//2)": "4*(h-1)//2" would read back as (4*(h-1))//2
            factors.extend([s] * p)
        if m == _CONST:
            body = f"INT64_C({abs(cf)})" if c else str(abs(cf))
        else:
            if abs(cf) != 1:
                factors.insert(0, f"INT64_C({abs(cf)})" if c else str(abs(cf)))
            body = "*".join(factors)
        sign = "-" if cf < 0 else "+"
        parts.append((sign, body))
    text = ("-" if parts[0][0] == "-" else "") + parts[0][1]
    for sign, body in parts[1:]:
        text += sign + body
    return f"({text})" if c and len(parts) > 1 else text


# ---------------------------------------------------------------------------------------------
# Parsing canonical (or any) expression text

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_.]*)|(//|[-+*%(),]))")


def parse(text: str) -> Expr:
    """An expression from text: symbols, integers, ``+ - * // %``, ``min(a, b)``, ``max(a, b)``."""
    tokens = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ShapeError(f"bad dimension expression '{text}' at '{text[pos:]}'")
        tokens.append(m.group(1) and int(m.group(1)) if m.group(1) else (m.group(2) and ("id", m.group(2)))
                      or m.group(3))
        pos = m.end()
    p = _Parser(tokens, text)
    e = p.sum()
    if p.i != len(tokens):
        raise ShapeError(f"bad dimension expression '{text}'")
    return e


class _Parser:
    def __init__(self, tokens: list, text: str):
        self.t, self.i, self.text = tokens, 0, text

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self):
        tok = self.peek()
        if tok is None:
            raise ShapeError(f"bad dimension expression '{self.text}': unexpected end")
        self.i += 1
        return tok

    def sum(self) -> Expr:
        e = self.term()
        while self.peek() in ("+", "-"):
            e = e + self.term() if self.take() == "+" else e - self.term()
        return e

    def term(self) -> Expr:
        e = self.unary()
        while self.peek() in ("*", "//", "%"):
            op = self.take()
            r = self.unary()
            e = e * r if op == "*" else (e // r if op == "//" else e % r)
        return e

    def unary(self) -> Expr:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        tok = self.take()
        if isinstance(tok, int):
            return Expr.const(tok)
        if tok == "(":
            e = self.sum()
            if self.take() != ")":
                raise ShapeError(f"bad dimension expression '{self.text}': expected ')'")
            return e
        if isinstance(tok, tuple):
            name = tok[1]
            if name in ("min", "max") and self.peek() == "(":
                self.take()
                a = self.sum()
                if self.take() != ",":
                    raise ShapeError(f"bad dimension expression '{self.text}': {name} takes two arguments")
                b = self.sum()
                if self.take() != ")":
                    raise ShapeError(f"bad dimension expression '{self.text}': expected ')'")
                return _minmax(name, a, b)
            return Expr.symbol(name)
        raise ShapeError(f"bad dimension expression '{self.text}': unexpected '{tok}'")


def _minmax(op: str, a: Expr, b: Expr) -> Expr:
    if a == b:
        return a
    if a.is_const and b.is_const:
        return Expr.const(min(a.value, b.value) if op == "min" else max(a.value, b.value))
    d = a - b
    if d.is_const:
        first = d.value <= 0
        return (a if first else b) if op == "min" else (b if first else a)
    # 0 is a lower bound of every size
    if b.is_const and b.value == 0 and _nonneg(a):
        return b if op == "min" else a
    if a.is_const and a.value == 0 and _nonneg(b):
        return a if op == "min" else b
    x, y = sorted((a, b), key=lambda e: str(e))
    return Expr.atom((op, x, y))


# ---------------------------------------------------------------------------------------------
# The dim-level API the compiler uses: ints stay ints, strings are canonical.

def as_expr(d: Dim | Expr) -> Expr:
    return _lift(d)


def as_dim(e: Expr | Dim) -> Dim:
    """``e`` as a dim: an int when constant, else its canonical text."""
    if isinstance(e, int) and not isinstance(e, bool):
        return e
    e = _lift(e)
    return e.value if e.is_const else str(e)


def canonical(d: Dim) -> Dim:
    """A dim in canonical form (``"2*b"`` for ``"b*2"``; ``3`` for ``"1+2"``)."""
    return d if isinstance(d, int) else as_dim(parse(d))


def is_symbolic(d) -> bool:
    return isinstance(d, str)


def dim_add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return as_dim(_lift(a) + _lift(b))


def dim_sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return as_dim(_lift(a) - _lift(b))


def dim_mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return as_dim(_lift(a) * _lift(b))


def dim_prod(dims: Iterable[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return as_dim(_lift(a) // _lift(b))


def dim_ceildiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return as_dim((_lift(a) + _lift(b) - 1) // _lift(b))


def dim_mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return as_dim(_lift(a) % _lift(b))


def dim_min(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return as_dim(_minmax("min", _lift(a), _lift(b)))


def dim_max(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return as_dim(_minmax("max", _lift(a), _lift(b)))


def dim_divides(factor: int, d: Dim, table: "SymbolTable | None" = None) -> bool:
    """Whether ``factor`` provably divides ``d`` for every allowed value of its symbols."""
    if isinstance(d, int):
        return d % factor == 0
    e = _lift(d)
    if e.coeff_gcd() % factor == 0:
        return True
    if table is not None:
        # every term divisible given the symbols' declared divisors
        for m, c in e.terms.items():
            mult = abs(c)
            for a, p in m:
                if isinstance(a, str) and a in table.ranges:
                    mult *= table.ranges[a].divisor ** p
            if mult % factor:
                return False
        return True
    return False


def dims_equal(a: Dim, b: Dim) -> bool:
    """Provably equal (canonical forms agree)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return _lift(a) == _lift(b)


def symbols_of(d: Dim) -> set[str]:
    return set() if isinstance(d, int) else _lift(d).symbols()


def shape_symbols(shape: Iterable[Dim]) -> list[str]:
    """The symbols of a shape in order of first appearance."""
    seen: dict[str, None] = {}
    for d in shape:
        if isinstance(d, str):
            for s in sorted(_lift(d).symbols()):
                seen.setdefault(s, None)
    return list(seen)


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """The value of ``d`` for symbol values ``env``."""
    return d if isinstance(d, int) else _lift(d).evaluate(env)


def evaluate_shape(shape: Iterable[Dim], env: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, env) for d in shape)


def to_c(d: Dim, name_of: Callable[[str], str] = lambda s: f"tf_sym_{c_identifier(s)}") -> str:
    """A C ``int64_t`` expression for ``d``; symbols are read from ``name_of(symbol)``."""
    if isinstance(d, int):
        return str(d)
    return _lift(d).to_c(name_of)


def c_identifier(symbol: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in symbol)


def split_symbol_list(text: str) -> list[str]:
    """Splits ``"b,min(s,8),s"`` at top-level commas (the printer's list of symbolic dims)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    out.append(cur)
    return out


# ---------------------------------------------------------------------------------------------
# Constraints and hints

@dataclass(frozen=True)
class SymbolRange:
    """What is known of one symbol: ``lo <= value <= hi`` and ``value % divisor == 0``;
    ``hint`` is a representative value for cost models (the example input's size by default)."""

    name: str
    lo: int = 1
    hi: int | None = None
    divisor: int = 1
    hint: int | None = None
    # A data-dependent size (the count of a nonzero/unique/...): no input binds it, running its op
    # does; ``bound`` is its upper bound as a dim of the other symbols (buffers are sized at it).
    bound: Dim | None = None

    @property
    def is_data_dependent(self) -> bool:
        return self.bound is not None

    def contains(self, value: int) -> bool:
        return self.lo <= value and (self.hi is None or value <= self.hi) and value % self.divisor == 0

    def describe(self) -> str:
        hi = "inf" if self.hi is None else str(self.hi)
        text = f"{self.lo}..{hi}"
        if self.divisor > 1:
            text += f" (multiple of {self.divisor})"
        return text

    @property
    def representative(self) -> int:
        if self.hint is not None:
            return self.hint
        if self.hi is not None:
            return max(self.lo, min(self.hi, 64))
        return max(self.lo, 64)

    def to_json(self) -> dict:
        out = {"name": self.name, "lo": self.lo, "hi": self.hi, "divisor": self.divisor, "hint": self.hint}
        if self.bound is not None:          # only data-dependent symbols: other tables print as before
            out["bound"] = self.bound
        return out

    @staticmethod
    def from_json(d: Mapping) -> "SymbolRange":
        bound = d.get("bound")
        return SymbolRange(str(d["name"]), int(d.get("lo", 1)), None if d.get("hi") is None else int(d["hi"]),
                           int(d.get("divisor", 1)), None if d.get("hint") is None else int(d["hint"]),
                           None if bound is None else (int(bound) if isinstance(bound, int) else canonical(str(bound))))


class SymbolTable:
    """The symbols of one model: ranges, divisors and hints."""

    def __init__(self, ranges: Iterable[SymbolRange] = ()):
        self.ranges: dict[str, SymbolRange] = {r.name: r for r in ranges}

    def add(self, r: SymbolRange) -> None:
        self.ranges[r.name] = r

    def get(self, name: str) -> SymbolRange:
        return self.ranges.get(name) or SymbolRange(name)

    def hints(self) -> dict[str, int]:
        return {n: r.representative for n, r in self.ranges.items()}

    def hint(self, d: Dim) -> int:
        """A representative value of ``d`` (for heuristics only)."""
        if isinstance(d, int):
            return d
        env = {s: self.get(s).representative for s in _lift(d).symbols()}
        return max(0, _lift(d).evaluate(env))

    def upper_bound(self, d: Dim) -> int | None:
        """The largest value of ``d`` over the declared ranges, when every symbol has a max and
        ``d`` grows with its symbols (non-negative coefficients); else None."""
        if isinstance(d, int):
            return d
        e = _lift(d)
        env = {}
        for s in e.symbols():
            hi = self.get(s).hi
            if hi is None:
                return None
            env[s] = hi
        if not _nonneg(e):
            return None
        return e.evaluate(env)

    def to_json(self) -> list:
        return [r.to_json() for r in self.ranges.values()]

    def data_dependent(self) -> list[str]:
        """The data-dependent symbols (``SymbolRange.bound`` set), in table order."""
        return [n for n, r in self.ranges.items() if r.bound is not None]

    def at_bounds(self, env: Mapping[str, int]) -> dict[str, int]:
        """``env`` (values of the input-bound symbols) plus every data-dependent symbol at its upper
        bound, evaluated in table order (a bound may read an earlier data-dependent symbol)."""
        out = dict(env)
        for n, r in self.ranges.items():
            if r.bound is not None and n not in env:
                out[n] = max(0, evaluate(r.bound, out))
        return out

    @staticmethod
    def from_json(data: Iterable[Mapping]) -> "SymbolTable":
        return SymbolTable(SymbolRange.from_json(d) for d in data)


def hint_of(d: Dim, table: SymbolTable | None = None) -> int:
    """A number standing for ``d`` in heuristics: ``d`` itself when static, else its hint."""
    if isinstance(d, int):
        return d
    return (table or _DEFAULT_TABLE).hint(d)


_DEFAULT_TABLE = SymbolTable()


# ---------------------------------------------------------------------------------------------
# A function's symbols ride on it as the attribute "tf.symbols" (JSON text: printable, parsable).

SYMBOLS_ATTR = "tf.symbols"


def symbol_table_of(func) -> SymbolTable:
    """The ranges declared for ``func``'s symbolic dims (an empty table for a static function)."""
    import json
    text = func.attributes.get(SYMBOLS_ATTR)
    return SymbolTable.from_json(json.loads(text)) if text else SymbolTable()


def enclosing_symbols_text(op) -> str | None:
    """The ``tf.symbols`` attribute of the nearest op enclosing ``op`` that has one (a kernel's
    function), as text; None outside any function with symbols."""
    cur = op.parent_op
    while cur is not None:
        text = cur.attributes.get(SYMBOLS_ATTR)
        if text:
            return text
        cur = cur.parent_op
    return None


def set_symbol_table(func, table: SymbolTable) -> None:
    import json
    if table.ranges:
        func.attributes[SYMBOLS_ATTR] = json.dumps(table.to_json(), sort_keys=True)
    else:
        func.attributes.pop(SYMBOLS_ATTR, None)


# ---------------------------------------------------------------------------------------------
# Hints for passes that only see types (graph-level cost models, fusion, reordering): the pass
# that knows the function makes its table current; op cost hooks read it without a parameter.

from contextlib import contextmanager as _contextmanager
from contextvars import ContextVar as _ContextVar

_CURRENT_TABLE: _ContextVar["SymbolTable | None"] = _ContextVar("tensorforge_symbol_hints", default=None)


@_contextmanager
def hints_from(table: "SymbolTable | None"):
    """Makes ``table`` the one ``current_hint`` reads while the block runs (heuristics only)."""
    token = _CURRENT_TABLE.set(table)
    try:
        yield table
    finally:
        _CURRENT_TABLE.reset(token)


def current_hint(d: Dim) -> int:
    """``hint_of(d)`` under the table made current by ``hints_from`` (the default one outside)."""
    return hint_of(d, _CURRENT_TABLE.get())


def hint_elements(shape: Iterable[Dim], table: "SymbolTable | None" = None) -> int:
    """Element count of ``shape`` with each symbolic dim at its hint (``table``, else the current
    one): a sensible size for cost models, where ``num_elements`` would count a symbol as 1."""
    n = 1
    for d in shape:
        n *= d if isinstance(d, int) else (hint_of(d, table) if table is not None else current_hint(d))
    return n


def hint_nbytes(t) -> int:
    """Bytes of a tensor or buffer type with symbolic dims at their current hints."""
    return hint_elements(t.shape) * t.dtype.itemsize


# ---------------------------------------------------------------------------------------------
# Added for kernels over symbolic shapes (lowering and schedules).

def dim_exact_div(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when ``b`` provably divides ``a`` (for every value of the symbols), else None.
    ``b`` must be one term (``64``, ``"s"``, ``"4*b*s"``); reshape index maps group dims by it."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b != 0 and a % b == 0 else None
    q = _exact_div(_lift(a), _lift(b))
    return None if q is None else as_dim(q)
