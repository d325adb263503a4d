"""Dense contractions in the structured IR: recognise them and describe them as (batched) GEMMs.

A contraction is a ``structured.compute`` with combiner ``add`` whose body yields
``read(A) * read(B)`` (no-op casts allowed) with index maps that are affine in the compute's
axes.  ``floordiv``/``mod`` of an axis by a constant (how grouped convolutions find their group)
splits that axis into two *virtual* axes (``hi = a // q``, ``lo = a % q``), after which every
index map is affine again.  Everything here is plain analysis: no C is written.

Two shapes are recognised:

* ``GemmPlan``: the parallel axes split into batch (read by both operands, or by neither), M
  (only A) and N (only B) and the reduction axes form K; each of M, N and K collapses to one
  strided dimension (axes that do not collapse become batch loops), so matmul, gemm,
  batch_matmul with broadcast batches, transposed operands, attention's ``q @ k^T`` and 1x1
  stride-1 convolutions are all ``C[M, N] = A[M, K] @ B[K, N]`` per batch point.
* ``ConvPlan``: a convolution ``x[n, g*Cg + c, oh*s + kh*d - p, ...] * w[o, c, kh, ...]`` as an
  implicit GEMM ``out[n, g][o, (oh, ow)] = W[g][o, (c, kh, kw)] @ col[(c, kh, kw), (oh, ow)]``
  whose B operand is gathered from x while it is packed.

Extents, strides and offsets are dims (``ir/symbolic.py``): ``int`` for static shapes, canonical
expression strings over the model's symbols for dynamic ones (a ``[b*s, 64]`` activation has row
stride 64 and M = ``b*s``; ``q @ k^T`` over ``[b, 12, s, 64]`` has batch stride ``768*s``).  All
arithmetic on them goes through the ``dim_*`` helpers, which return ints when the result is
constant, so a static model sees exactly the numbers it always did.  Where an analysis needs an
order or a size for a heuristic it uses the symbol hints (``symbolic.current_hint``); whether an
access is strided is decided on the exact expressions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...dialects.structured.ops import ComputeView
from ...ir.core import Operation, Value
from ...ir.symbolic import Dim, current_hint, dim_add, dim_divides, dim_floordiv, dim_mul, dim_prod
from ...ir.types import DType, IndexType

# A virtual axis: (domain axis, part) with part "" (the axis itself), "hi" (axis // q) or "lo" (axis % q).
Key = tuple[int, str]


def more_than_one(d: Dim) -> bool:
    """Whether an extent may exceed 1: a symbolic extent might, so its axis is kept (an axis of
    runtime extent 1 costs nothing; dropping one that is not would be wrong)."""
    return not isinstance(d, int) or d > 1


def positive(d: Dim) -> bool:
    """Strides are positive: a symbolic stride is a product of (positive) symbolic sizes."""
    return not isinstance(d, int) or d > 0


def _magnitude(d: Dim) -> int:
    """A number ordering strides: ints by size, a symbolic one by its hint (heuristic order only)."""
    return abs(d) if isinstance(d, int) else current_hint(d)


@dataclass
class Affine:
    """``const + sum(coeff * axis)`` over axis keys (raw keys may be ("div"/"mod", axis, q))."""

    terms: dict = field(default_factory=dict)    # key -> Dim coefficient
    const: Dim = 0

    def scaled(self, k: Dim) -> "Affine":
        terms = {a: dim_mul(c, k) for a, c in self.terms.items()}
        return Affine({a: c for a, c in terms.items() if c != 0}, dim_mul(self.const, k))

    def plus(self, other: "Affine", sign: int = 1) -> "Affine":
        terms = dict(self.terms)
        for a, c in other.terms.items():
            terms[a] = dim_add(terms.get(a, 0), dim_mul(sign, c))
            if terms[a] == 0:
                del terms[a]
        return Affine(terms, dim_add(self.const, dim_mul(sign, other.const)))

    def coeff(self, key: Key) -> Dim:
        return self.terms.get(key, 0)

    @property
    def static(self) -> bool:
        """Every coefficient and the constant are numbers."""
        return isinstance(self.const, int) and all(isinstance(c, int) for c in self.terms.values())


def parse_index(v: Value, axis_of: dict[int, int], memo: dict[int, Affine | None],
                extents: Sequence[int] = ()) -> Affine | None:
    """The affine form of an index value, or None when it is not (quasi-)affine in the axes.

    ``extents`` (per axis) lets ``floordiv``/``mod`` by q of an expression ``q*X + R`` whose rest R
    always lies in [0, q) simplify to X and R (what reshapes fused into a read produce)."""
    key = id(v)
    if key in memo:
        return memo[key]
    memo[key] = res = _parse(v, axis_of, memo, extents)
    return res


def _parse(v: Value, axis_of: dict[int, int], memo: dict, extents: Sequence[int]) -> Affine | None:
    if id(v) in axis_of:
        return Affine({(axis_of[id(v)], ""): 1})
    op = v.op
    if op is None or not isinstance(v.type, IndexType):
        return None
    name = op.name
    if name == "scalar.const":
        return Affine({}, int(op.attributes["value"]))
    if name == "scalar.dim":          # a symbolic size read at run time (docs/dynamic_shapes.md)
        return Affine({}, op.attributes["dim"])
    args = [parse_index(o, axis_of, memo, extents) for o in op.operands]
    if any(a is None for a in args):
        return None
    if name == "scalar.add":
        return args[0].plus(args[1])
    if name == "scalar.sub":
        return args[0].plus(args[1], -1)
    if name == "scalar.mul":
        if not args[0].terms:
            return args[1].scaled(args[0].const)
        if not args[1].terms:
            return args[0].scaled(args[1].const)
        return None
    if name in ("scalar.floordiv", "scalar.mod"):
        return _divmod(args[0], args[1], name == "scalar.floordiv", extents)
    return None


def _divmod(x: Affine, q: Affine, div: bool, extents: Sequence[int]) -> Affine | None:
    """``x // q`` or ``x % q`` for ``x = q*X + R``: X and R when R always lies in [0, q); else, when
    R is one axis ``a``, X + a // q and a % q (``a`` is then split into two virtual axes)."""
    if (q.terms or not isinstance(q.const, int) or q.const <= 0 or any(t[1] != "" for t in x.terms)
            or not x.static):
        return None
    q = q.const
    whole = Affine({t: c // q for t, c in x.terms.items() if c % q == 0})
    rest = Affine({t: c for t, c in x.terms.items() if c % q}, x.const)
    if extents and all(isinstance(extents[t[0]], int) for t in rest.terms):
        lo = rest.const + sum(min(0, c * (extents[t[0]] - 1)) for t, c in rest.terms.items())
        hi = rest.const + sum(max(0, c * (extents[t[0]] - 1)) for t, c in rest.terms.items())
        if 0 <= lo and hi < q:
            return whole if div else rest
    if rest.const or len(rest.terms) != 1:
        return None
    ((ax, c),) = rest.terms.items()
    if c != 1:
        return None
    part = Affine({("div" if div else "mod", ax[0], q): 1})
    return whole.plus(part) if div else part


@dataclass(frozen=True)
class VAxis:
    key: Key
    extent: Dim
    kind: str          # "p" or "r"


@dataclass
class Access:
    """One ``structured.read`` of a kernel input: per-dimension affine index maps over virtual axes."""

    arg: int                      # index of the kernel input read
    shape: tuple[Dim, ...]
    dims: list[Affine]
    pad: float | None
    dtype: DType

    def flat(self) -> Affine:
        """The element offset into the row-major tensor."""
        out, stride = Affine(), 1
        for d in range(len(self.shape) - 1, -1, -1):
            out = out.plus(self.dims[d].scaled(stride))
            stride = dim_mul(stride, self.shape[d])
        return out


class AxisSpace:
    """The virtual axes of one compute and the rewriting of raw affine forms onto them."""

    def __init__(self, domain: tuple[Dim, ...], iterators: str):
        self.domain, self.iterators = domain, iterators
        self.splits: dict[int, int] = {}

    def note(self, aff: Affine) -> bool:
        """Records the splits ``aff`` needs; False when they are inconsistent."""
        for t in aff.terms:
            if t[0] in ("div", "mod"):
                _, ax, q = t
                if not dim_divides(q, self.domain[ax]) or self.splits.get(ax, q) != q:
                    return False
                self.splits[ax] = q
        return True

    def normalize(self, aff: Affine) -> Affine:
        out = Affine({}, aff.const)
        for t, c in aff.terms.items():
            if t[0] in ("div", "mod"):
                part = Affine({(t[1], "hi" if t[0] == "div" else "lo"): c})
            elif t[0] in self.splits:
                part = Affine({(t[0], "hi"): dim_mul(c, self.splits[t[0]]), (t[0], "lo"): c})
            else:
                part = Affine({t: c})
            out = out.plus(part)
        return out

    def axes(self) -> list[VAxis]:
        out = []
        for a, (e, k) in enumerate(zip(self.domain, self.iterators)):
            q = self.splits.get(a)
            if q is None:
                out.append(VAxis((a, ""), e, k))
            else:
                out += [VAxis((a, "hi"), dim_floordiv(e, q), k), VAxis((a, "lo"), q, k)]
        return out

    def output(self) -> Affine:
        """Element offset of the compute's result (row-major over the parallel axes)."""
        par = [a for a, k in enumerate(self.iterators) if k == "p"]
        out, stride = Affine(), 1
        for a in reversed(par):
            out = out.plus(self.normalize(Affine({(a, ""): stride})))
            stride = dim_mul(stride, self.domain[a])
        return out


def _strip_casts(v: Value) -> Value:
    while v.op is not None and v.op.name == "scalar.cast":
        src = v.op.operands[0]
        if src.type != v.type:
            return v          # a real conversion: not a plain f32 product
        v = src
    return v


def read_access(read: Operation, args: dict[int, int], space: AxisSpace, axis_of: dict[int, int],
                memo: dict) -> Access | None:
    """``read`` as an Access of a kernel input, or None (reads an intermediate, or not affine)."""
    src = read.operands[0]
    if id(src) not in args:
        return None
    dims = [parse_index(i, axis_of, memo, space.domain) for i in read.operands[1:]]
    if any(d is None for d in dims) or not all(space.note(d) for d in dims):
        return None
    return Access(args[id(src)], tuple(src.type.shape), dims, read.attributes.get("pad"), src.type.dtype)


@dataclass
class Contraction:
    """``out[p...] = sum over r... of A[...] * B[...]`` over virtual axes."""

    compute: Operation
    space: AxisSpace
    a: Access
    b: Access
    skips_padding: bool = False      # padding taps add -0.0 (finite constant weights: ``_unguarded``)

    def finish(self) -> None:
        for acc in (self.a, self.b):
            acc.dims = [self.space.normalize(d) for d in acc.dims]

    @property
    def axes(self) -> list[VAxis]:
        return self.space.axes()


def _unguarded(value: Value) -> tuple[Value, set | None]:
    """``inside ? v : -0.0`` (a convolution with finite constant weights, lowered so that its
    padding taps add -0.0: ``lower_conv``) as ``v`` and the guard's comparisons, a set of
    (index value id, "scalar.ge"/"scalar.lt", bound); any other value as itself and None."""
    sel = value.op
    if sel is None or sel.name != "scalar.select":
        return value, None
    cond, v, other = sel.operands
    if other.op is None or other.op.name != "scalar.const" or float(other.op.attributes["value"]) != 0.0:
        return value, None
    found, stack = set(), [cond]
    while stack:
        c = stack.pop()
        if c.op is not None and c.op.name == "scalar.and":
            stack += list(c.op.operands)
        elif c.op is not None and c.op.name in ("scalar.ge", "scalar.lt"):
            q, bound = c.op.operands
            if bound.op is None or bound.op.name != "scalar.const":
                return value, None
            found.add((id(q), c.op.name, int(bound.op.attributes["value"])))
        else:
            return value, None
    return v, found


def _guards_padding(guard: set, read: Operation) -> bool:
    """``guard`` is exactly "the padded ``read`` falls inside the input on every spatial axis",
    so that dropping it leaves the same sum: outside, the read gives 0 and the finite weight's
    product is +-0 (what the guard's -0.0 stands for)."""
    if "pad" not in read.attributes:
        return False
    shape = read.operands[0].type.shape
    idx = read.operands[1:]
    want = set()
    for q, size in zip(idx[2:], shape[2:]):
        if not isinstance(size, int):
            return False
        want |= {(id(q), "scalar.ge", 0), (id(q), "scalar.lt", size)}
    return guard == want


def match_contraction(compute: Operation, kernel_args: list[Value]) -> Contraction | None:
    """The contraction that ``compute`` is, or None."""
    cv = ComputeView(compute)
    if cv.combiner != "add" or compute.attributes["dtype"] is not DType.f32 or not cv.reduction_axes:
        return None
    value, guard = _unguarded(cv.value)
    prod = _strip_casts(value)
    if prod.op is None or prod.op.name != "scalar.mul":
        return None
    reads = [_strip_casts(o).op for o in prod.op.operands]
    if any(r is None or r.name != "structured.read" for r in reads):
        return None
    if guard is not None and not any(_guards_padding(guard, r) for r in reads):
        return None
    args = {id(a): i for i, a in enumerate(kernel_args)}
    axis_of = {id(a): i for i, a in enumerate(cv.axes)}
    space, memo = AxisSpace(cv.domain, cv.iterators), {}
    acc = [read_access(r, args, space, axis_of, memo) for r in reads]
    if any(x is None or x.dtype is not DType.f32 for x in acc):
        return None
    c = Contraction(compute, space, acc[0], acc[1], skips_padding=guard is not None)
    c.finish()
    return c


# ---------------------------------------------------------------------------------------------
# Iteration roles shared by both plans


@dataclass
class Roles:
    """Which virtual axes form the batch loops (outermost first), M, N and K (outer to inner)."""

    batch: list[VAxis]
    m: list[VAxis]
    n: list[VAxis]
    k: list[VAxis]

    @staticmethod
    def size(group: list[VAxis]) -> Dim:
        return dim_prod(a.extent for a in group)

    @property
    def M(self) -> Dim:
        return self.size(self.m)

    @property
    def N(self) -> Dim:
        return self.size(self.n)

    @property
    def K(self) -> Dim:
        return self.size(self.k)

    @property
    def batch_count(self) -> Dim:
        return self.size(self.batch)

    @property
    def symbolic(self) -> bool:
        """Whether any extent is a runtime value."""
        return any(not isinstance(a.extent, int) for a in self.batch + self.m + self.n + self.k)


def collapse(aff: Affine, group: list[VAxis]) -> Dim | None:
    """``s`` with ``sum(coeff(a) * a for a in group) == s * flat`` (flat: row-major index over the
    group), or None when the access does not walk the group as one strided dimension."""
    s, inner = None, 1
    for ax in reversed(group):
        c = aff.coeff(ax.key)
        if s is None:
            s = c
        elif c != dim_mul(s, inner):
            return None
        inner = dim_mul(inner, ax.extent)
    return 0 if s is None else s


def split_collapsible(group: list[VAxis], affs: list[Affine]) -> tuple[list[VAxis], list[VAxis]]:
    """(peeled, kept): the longest inner run of ``group`` that every access in ``affs`` walks as
    one strided dimension is kept; the outer rest becomes batch loops."""
    kept: list[VAxis] = []
    for ax in reversed(group):
        trial = [ax] + kept
        if all(collapse(f, trial) is not None for f in affs):
            kept = trial
        else:
            break
    return group[:len(group) - len(kept)], kept


# ---------------------------------------------------------------------------------------------
# GEMM-like


@dataclass
class Matrix:
    """A 2-D strided view ``base[off + r*rs + c*cs]`` of kernel input ``arg`` (rows x cols)."""

    arg: int
    flat: Affine           # full element offset over virtual axes (batch terms included)
    rs: Dim
    cs: Dim

    @property
    def offset(self) -> Dim:
        return self.flat.const


@dataclass
class GemmPlan:
    """Per batch point: ``C[M, N] = A[M, K] @ B[K, N]`` (``swapped``: A is the compute's B read)."""

    contraction: Contraction
    roles: Roles
    a: Matrix
    b: Matrix
    c: Affine              # output element offset over virtual axes
    ldc: Dim
    swapped: bool = False


def plan_gemm(c: Contraction, constant_b: set[int] = frozenset()) -> GemmPlan | None:
    """``c`` as a batched GEMM, or None.  ``constant_b``: kernel inputs packed at compile time (their
    layout does not matter, so their axes need not collapse)."""
    if c.a.pad is not None or c.b.pad is not None:
        return None
    fa, fb, fc = c.a.flat(), c.b.flat(), c.space.output()
    axes = [x for x in c.axes if more_than_one(x.extent)]
    par = [x for x in axes if x.kind == "p"]
    k = [x for x in axes if x.kind == "r"]
    batch, m, n = [], [], []
    for x in par:
        in_a, in_b = fa.coeff(x.key) != 0, fb.coeff(x.key) != 0
        (batch if in_a == in_b else m if in_a else n).append(x)
    swapped = False
    if par:
        inner = min(par, key=lambda x: _magnitude(fc.coeff(x.key)))
        if fc.coeff(inner.key) != 1 or inner in batch:
            return None
        if inner in m:
            m, n, fa, fb, swapped = n, m, fb, fa, True
    acc_a, acc_b = (c.b, c.a) if swapped else (c.a, c.b)
    b_fixed = acc_b.arg in constant_b
    order = lambda g: sorted(g, key=lambda x: -_magnitude(fc.coeff(x.key)))   # noqa: E731  (output order)
    peel_m, m = split_collapsible(order(m), [fa, fc])
    peel_n, n = split_collapsible(order(n), [fc] if b_fixed else [fb, fc])
    batch = [x for x in par if x in batch or x in peel_m or x in peel_n]
    if any(collapse(f, k) is None for f in ([fa] if b_fixed else [fa, fb])):
        return None
    roles = Roles(batch, m, n, k)
    sam, sak = collapse(fa, m), collapse(fa, k)
    sbk, sbn = collapse(fb, k), collapse(fb, n)
    ldc = collapse(fc, m) if m else (max(roles.N, 1) if isinstance(roles.N, int) else roles.N)
    if collapse(fc, n) not in (1, 0):
        return None
    return GemmPlan(c, roles, Matrix(acc_a.arg, fa, sam, sak), Matrix(acc_b.arg, fb, sbk, sbn), fc, ldc, swapped)


def matrix_layout(mat: Matrix, rows: Dim, cols: Dim) -> tuple[bool, Dim] | None:
    """(transposed, leading dimension) of a runtime operand read by the GEMM's packers, or None when
    neither its rows nor its columns are contiguous."""
    rs = mat.rs if more_than_one(rows) else None
    cs = mat.cs if more_than_one(cols) else None
    if cs in (1, None) and (rs is None or positive(rs)):
        return False, rs if rs is not None else (max(cols, 1) if isinstance(cols, int) else cols)
    if rs in (1, None) and cs is not None and positive(cs):
        return True, cs
    return None


# ---------------------------------------------------------------------------------------------
# Convolution as an implicit GEMM


@dataclass
class ConvPlan:
    """``out[n, g*Og + o, p] = sum_{c, r} W[g*Og + o, c, r] * x[n, g*Cg + c, p*s + r*d - pad]``."""

    contraction: Contraction
    roles: Roles            # batch (n, g), m (o), n (spatial, row-major), k (c, kernel offsets)
    x: Access
    w: Access
    in_spatial: tuple[int, ...]       # H, W of x
    out_spatial: tuple[int, ...]      # OH, OW
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]             # leading pads
    channels: int                     # Cg: input channels per group
    x_batch_stride: dict = field(default_factory=dict)   # batch axis key -> element stride in x
    w_batch_stride: dict = field(default_factory=dict)
    c: Affine = field(default_factory=Affine)
    ldc: int = 0


def _single(aff: Affine) -> tuple[Key, int] | None:
    if len(aff.terms) != 1:
        return None
    ((k, c),) = aff.terms.items()
    return k, c


def plan_conv(c: Contraction) -> ConvPlan | None:
    """``c`` as a 1-d or 2-d convolution over NC(H)W data, or None."""
    axes = {x.key: x for x in c.axes}
    for x_acc, w_acc in ((c.a, c.b), (c.b, c.a)):
        plan = _conv(c, axes, x_acc, w_acc)
        if plan is not None:
            return plan
    return None


def _conv(c: Contraction, axes: dict[Key, VAxis], x: Access, w: Access) -> ConvPlan | None:
    rank = len(x.shape)
    nsp = rank - 2
    if nsp not in (1, 2) or len(w.shape) != rank or w.pad is not None:
        return None
    kind = lambda k: axes[k].kind      # noqa: E731
    # spatial dims of x: s * p + d * r + const with p parallel and r reduction
    out_sp, ker, strides, dils, pads = [], [], [], [], []
    for d in x.dims[2:]:
        par = [(k, v) for k, v in d.terms.items() if kind(k) == "p"]
        red = [(k, v) for k, v in d.terms.items() if kind(k) == "r"]
        if len(d.terms) != len(par) + len(red) or len(par) > 1 or len(red) > 1:
            return None
        p_key, s = par[0] if par else (None, 1)
        r_key, dl = red[0] if red else (None, 1)
        if s <= 0 or dl <= 0:
            return None
        out_sp.append(p_key)
        ker.append(r_key)
        strides.append(s)
        dils.append(dl)
        pads.append(-d.const)
    # channel dim of x: c (+ Cg * g); batch dim of x: n or 0
    ch = x.dims[1]
    c_terms = [(k, v) for k, v in ch.terms.items() if kind(k) == "r"]
    g_terms = [(k, v) for k, v in ch.terms.items() if kind(k) == "p"]
    if ch.const or len(c_terms) != 1 or c_terms[0][1] != 1 or len(g_terms) > 1:
        return None
    c_key = c_terms[0][0]
    cg = axes[c_key].extent
    g_key = g_terms[0][0] if g_terms else None
    if g_key is not None and g_terms[0][1] != cg:
        return None
    n_aff = x.dims[0]
    n_one = _single(n_aff)
    if n_aff.const or (n_aff.terms and (n_one is None or n_one[1] != 1 or kind(n_one[0]) != "p")):
        return None
    n_key = n_one[0] if n_one else None
    # w: [g*Og + o, c, r...]
    if _single(w.dims[1]) != (c_key, 1) or w.dims[1].const:
        return None
    for d, r_key in zip(w.dims[2:], ker):
        want = {r_key: 1} if r_key is not None else {}
        if d.terms != want or d.const:
            return None
    o_aff = w.dims[0]
    o_terms = {k: v for k, v in o_aff.terms.items() if k != g_key}
    if o_aff.const or len(o_terms) != 1:
        return None
    ((o_key, o_c),) = o_terms.items()
    og = axes[o_key].extent
    if o_c != 1 or kind(o_key) != "p" or (g_key is not None and o_aff.coeff(g_key) != og):
        return None
    used = {k for k in (n_key, g_key, o_key, c_key, *out_sp, *ker) if k is not None}
    if any(k not in used and ax.extent > 1 for k, ax in axes.items()):
        return None
    spatial = [axes[k] for k in out_sp if k is not None]
    kernel_axes = [axes[k] for k in ker if k is not None]
    fc = c.space.output()
    batch = [axes[k] for k in (n_key, g_key) if k is not None]
    roles = Roles(batch, [axes[o_key]], spatial, [axes[c_key]] + kernel_axes)
    fx, fw = x.flat(), w.flat()
    # The GEMM walks spatial positions row-major, so the output must too; W is a row-major [O, K].
    if collapse(fc, roles.n) != 1 or collapse(fc, roles.m) is None:
        return None
    if collapse(fw, roles.k) != 1 or collapse(fw, roles.m) != roles.K:
        return None
    in_sp = tuple(x.shape[2:])
    out_ext = tuple(axes[k].extent if k is not None else 1 for k in out_sp)
    k_ext = tuple(axes[k].extent if k is not None else 1 for k in ker)
    plan = ConvPlan(c, roles, x, w, in_sp, out_ext, k_ext, tuple(strides), tuple(dils), tuple(pads), cg,
                    {b.key: fx.coeff(b.key) for b in batch}, {b.key: fw.coeff(b.key) for b in batch},
                    fc, collapse(fc, roles.m))
    return plan
