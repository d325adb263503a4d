"""Elementwise consumers of a contraction, in the same kernel, as a GEMM epilogue.

After the contraction ``acc`` a kernel may hold a chain of elementwise computes over the same
output domain (``acc + bias[o]``, then a ReLU, then ``+ residual``...).  Each reads the previous
value of the chain at exactly its own index (and kernel inputs at affine indices), so the chain
is a per-element expression of ``acc``: it becomes one ``Epilogue`` whose C body evaluates the
scalar ops lane by lane on each finished output vector (a loop of constant trip count that the
compiler vectorizes; transcendental functions go to the vector math library like in the loop
path), so the result is stored once and never read back.

Reads of kernel inputs become epilogue pointer parameters; their offset must be
``i * cm + j * cn`` in the GEMM's row ``i`` and column ``j`` (plus a per-batch part that the
caller adds to the pointer), which is what ``EpilogueRead`` records.

Over symbolic shapes the row stride ``cm`` may be a runtime value (a C expression in the context's
initializer, so the callback text stays shared); the column stride ``cn`` is written into the
callback's text and must be a number (a chain whose reads step by a symbolic amount per column is
left to the loop path).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...dialects.structured.ops import ComputeView
from ...ir.core import Operation, Value
from ...ir.types import DType, IndexType
from ...ir.symbolic import Dim, dim_mul, to_c
from .contraction import Affine, AxisSpace, Roles, collapse, more_than_one, parse_index
from .emit_loop import c_literal, c_type, scalar_expr
from .epilogues import Epilogue, EpilogueParam


@dataclass
class EpilogueRead:
    """A kernel input read by the epilogue at ``flat`` (over the contraction's virtual axes)."""

    arg: int
    flat: Affine
    index: int             # position among the chain's reads (names the parameter)
    cm: Dim = 0            # element stride per GEMM row (symbolic: a runtime value in the context)
    cn: int = 0            # element stride per GEMM column

    @property
    def param(self) -> str:
        return f"ep{self.index}"


@dataclass
class EpilogueChain:
    """The computes fused after a contraction, and the reads they need."""

    computes: list[Operation]
    reads: list[EpilogueRead]
    _read_of: dict[int, EpilogueRead]       # id(structured.read op) -> its EpilogueRead

    @property
    def result(self) -> Value | None:
        return self.computes[-1].results[0] if self.computes else None

    def bind(self, roles: Roles) -> bool:
        """Fixes each read's row and column strides for ``roles``; False when one is not strided."""
        for r in self.reads:
            cm, cn = collapse(r.flat, roles.m), collapse(r.flat, roles.n)
            if cm is None or cn is None or any(r.flat.coeff(x.key) != 0 for x in roles.k):
                return False
            if not isinstance(cn, int):
                return False
            r.cm, r.cn = cm, cn
        return True

    def _scalar_code(self, read_expr) -> tuple[list[str], str]:
        """C declarations evaluating the chain on one element ``acc`` (reads of kernel inputs
        spelled by ``read_expr(read)``), and the name of the final value."""
        lines: list[str] = []
        names: dict[int, str] = {}
        prev = "acc"
        for comp in self.computes:
            cv = ComputeView(comp)
            for op in cv.body:
                if op.name == "structured.yield":
                    names[id(comp.results[0])] = names[id(op.operands[0])]
                    prev = names[id(op.operands[0])]
                    continue
                res = op.results[0] if op.results else None
                if res is None or isinstance(res.type, IndexType):
                    continue
                if op.name == "structured.read":
                    rd = self._read_of.get(id(op))
                    if rd is None:     # a read of the chain's previous value
                        names[id(res)] = names.get(id(op.operands[0]), prev)
                        continue
                    expr = read_expr(rd)
                elif op.name == "scalar.const":
                    names[id(res)] = c_literal(op.attributes["value"], res.type)
                    continue
                else:
                    expr = scalar_expr(op, [names[id(v)] for v in op.operands])
                v = f"v{len(lines) + 1}"
                names[id(res)] = v
                lines.append(f"const {c_type(res.type)} {v} = {expr};")
        return lines, prev

    def epilogue(self) -> Epilogue | None:
        """The chain as one inline Epilogue (None for an empty chain)."""
        if not self.computes:
            return None
        lines, prev = self._scalar_code(lambda rd: f"{rd.param}[{_offset(rd)}]")
        body = " ".join(lines)
        loop = (f"for (int l = 0; l < NLANES; l++) {{ const float acc = tf_ein[l]; {body} "
                f"tf_eout[l] = (float){prev}; }}")
        text = ("float tf_ein[TF_VW], tf_eout[TF_VW] = {0}; tf_st(tf_ein, x);\n"
                f"    if (nv >= TF_VW) {{\n      _Pragma(\"omp simd\") {loop.replace('NLANES', 'TF_VW')}\n"
                f"    }} else {{\n      {loop.replace('NLANES', 'nv')}\n    }}\n    x = tf_ld(tf_eout);")
        params = tuple(EpilogueParam(r.param, "ptr", "tile") for r in self.reads)
        return Epilogue("fused", text, params)

    def register_form(self) -> tuple[list[EpilogueRead], tuple[float, float] | None] | None:
        """The chain as a ``tf_epi_regs`` epilogue, which the GEMM micro-kernel applies to its
        accumulators (microkernels.py): (the reads it adds, in order, and the clamp's bounds or
        None).  That is, over the chain's computes in order: at most two additions of an input
        read by row or by column (``cn`` 0 or 1) to the running value, then at most one ReLU or
        clip of it.  None for any other chain: it keeps the callback."""
        terms: list[EpilogueRead] = []
        clamp: tuple[float, float] | None = None
        for comp in self.computes:
            body = list(ComputeView(comp).body)
            # the running value: the previous compute's (its reads here), then each op's result
            running = {id(op.results[0]) for op in body
                       if op.name == "structured.read" and id(op) not in self._read_of}
            for op in body:
                if op.name == "structured.yield":
                    if len(op.operands) != 1 or id(op.operands[0]) not in running:
                        return None
                    continue
                if op.name == "structured.read" or (op.results and isinstance(op.results[0].type, IndexType)):
                    continue
                if clamp is not None or not op.results or sum(id(v) in running for v in op.operands) != 1:
                    return None
                others = [v for v in op.operands if id(v) not in running]
                reads = [self._read_of.get(id(v.op)) if v.op is not None else None for v in others]
                if op.name == "scalar.add" and len(reads) == 1 and reads[0] is not None:
                    if reads[0].cn not in (0, 1) or len(terms) == 2:
                        return None
                    terms.append(reads[0])
                elif op.name == "scalar.relu" and not others:
                    clamp = (0.0, float("inf"))
                elif op.name == "scalar.clip" and not others:
                    lo, hi = op.attributes.get("min"), op.attributes.get("max")
                    clamp = (float("-inf") if lo is None else float(lo), float("inf") if hi is None else float(hi))
                    if clamp[0] != clamp[0] or clamp[1] != clamp[1]:    # a NaN bound
                        return None
                else:
                    return None
                running = {id(op.results[0])}
        return terms, clamp

    def regs_init(self, pointers: dict[int, str]) -> str | None:
        """A C initializer of the ``tf_epi_regs`` of ``register_form`` (``pointers``: each read's
        pointer at the GEMM's (0, 0), by read index); None when the chain has no such form."""
        form = self.register_form()
        if form is None:
            return None
        terms, clamp = form
        def number(x: float) -> str:
            return ("__builtin_inff()" if x > 0 else "-__builtin_inff()") if abs(x) == float("inf") else f"{x!r}f"
        ps = [pointers[t.index] for t in terms] + ["0"] * (2 - len(terms))
        cms = [_c(t.cm) for t in terms] + ["0"] * (2 - len(terms))
        cns = [str(t.cn) for t in terms] + ["0"] * (2 - len(terms))
        lo, hi = clamp or (0.0, 0.0)
        return (f"{{ {{ {', '.join(ps)} }}, {{ {', '.join(cms)} }}, {{ {', '.join(cns)} }}, {len(terms)}, "
                f"{int(clamp is not None)}, {number(lo)}, {number(hi)} }}")

    def ctx_type(self) -> str:
        """The C struct type the callback's context has: one pointer and one row stride per read."""
        return f"tf_epi_ctx{max(1, len(self.reads))}"

    def ctx_typedef(self) -> str:
        n = max(1, len(self.reads))
        return f"typedef struct {{ const float *p[{n}]; long cm[{n}]; }} {self.ctx_type()};\n"

    def ctx_init(self, pointers: list[str]) -> str:
        """A C initializer of the context from the reads' pointers (already at the GEMM's (0, 0))."""
        ptrs = ", ".join(pointers) or "0"
        cms = ", ".join(_c(r.cm) for r in self.reads) or "0"
        return f"{{ {{ {ptrs} }}, {{ {cms} }} }}"

    def callback(self, name: str) -> str:
        """The chain as a ``tf_epi_fn`` named ``name`` applied in place to a tile of C. Row strides
        are runtime values from the context, column strides (0 or 1 nearly always) are in the
        text, so layers whose chains differ only in size share one function.

        Columns go in whole vectors; a row's last ``cols % TF_VW`` as one more vector, loaded and
        stored partially (``tf_ld_n``/``tf_st_n``: masked on AVX-512).  Left to the compiler, that
        tail is a scalar loop where a clamp or a ReLU becomes a branch on the data, mispredicted
        about every other element: on row segments that are rarely a multiple of 16 (a strided
        layer's grid) the epilogue took a third of a 3x3/2 stem's time."""
        def read(rd: EpilogueRead, tail: bool = False) -> str:
            if rd.cn == 0:
                return f"{rd.param}[0]"
            if tail:
                return f"tb{rd.index}[l]"
            return f"{rd.param}[l]" if rd.cn == 1 else f"{rd.param}[l * {rd.cn}]"

        lines, prev = self._scalar_code(read)
        tail_lines, tail_prev = self._scalar_code(lambda rd: read(rd, tail=True))
        rows = "".join(f"    const float *restrict {r.param} = e->p[{r.index}] + i * e->cm[{r.index}]"
                       f"{f' + j0 * {r.cn}' if r.cn else ''};\n" for r in self.reads)
        gathers = "".join(
            f"      float tb{r.index}[TF_VW] __attribute__((aligned(64)));\n"
            + (f"      tf_st(tb{r.index}, tf_ld_n({r.param} + l0, (int)n));\n" if r.cn == 1 else
               f"      for (long l = 0; l < TF_VW; l++) tb{r.index}[l] = l < n ? {r.param}[(l0 + l) * {r.cn}] : 0.0f;\n")
            for r in self.reads if r.cn)
        return f"""static void {name}(const void *ctx, float *c, long ldc, long i0, long j0, long rows, long cols) {{
  const {self.ctx_type()} *e = (const {self.ctx_type()} *)ctx;
  (void)e; (void)j0;
  for (long r = 0; r < rows; r++) {{
    const long i = i0 + r;
    float *restrict cr = c + r * ldc;
    (void)i;
{rows}    long l0 = 0;
    for (; l0 + TF_VW <= cols; l0 += TF_VW) {{
      _Pragma("omp simd")
      for (long l = l0; l < l0 + TF_VW; l++) {{ const float acc = cr[l]; {" ".join(lines)} cr[l] = (float){prev}; }}
    }}
    if (l0 < cols) {{      /* the tail as one partial vector */
      const long n = cols - l0;
      float ta[TF_VW] __attribute__((aligned(64)));
      tf_st(ta, tf_ld_n(cr + l0, (int)n));
{gathers}      _Pragma("omp simd")
      for (long l = 0; l < TF_VW; l++) {{ const float acc = ta[l]; {" ".join(tail_lines)} ta[l] = (float){tail_prev}; }}
      tf_st_n(cr + l0, tf_ld(ta), (int)n);
    }}
  }}
}}
"""


def _offset(rd: EpilogueRead) -> str:
    terms = []
    if rd.cm:
        terms.append(f"i * {_c(rd.cm)}" if rd.cm != 1 else "i")
    if rd.cn:
        terms.append(f"(j + l) * {rd.cn}" if rd.cn != 1 else "(j + l)")
    return " + ".join(terms) or "0"


def match_chain(contraction: Operation, kernel: Operation, space: AxisSpace) -> EpilogueChain | None:
    """The elementwise computes after ``contraction`` in ``kernel`` when they form a chain that ends
    in the kernel's only result; None when the kernel holds anything else."""
    body = kernel.regions[0].blocks[0]
    args = {id(a): i for i, a in enumerate(body.args)}
    computes = [o for o in body if o.name == "structured.compute"]
    if not computes or computes[0] is not contraction:
        return None
    par_axes = [a for a, k in enumerate(space.iterators) if k == "p"]
    big = [a for a in par_axes if more_than_one(space.domain[a])]
    extents = {x.key: x.extent for x in space.axes()}
    out_flat = {k: c for k, c in space.output().terms.items() if more_than_one(extents[k])}
    chain_values = {id(contraction.results[0])}
    chain: list[Operation] = []
    reads: dict[tuple, EpilogueRead] = {}
    read_of: dict[int, EpilogueRead] = {}
    for comp in computes[1:]:
        cv = ComputeView(comp)
        # the same elements in the same order: equal extents once unit axes are dropped
        mine = [i for i, e in enumerate(cv.domain) if more_than_one(e)]
        if (cv.combiner != "none" or comp.attributes["dtype"] is not DType.f32
                or [cv.domain[i] for i in mine] != [space.domain[a] for a in big]):
            return None
        axis_of = {id(cv.axes[i]): a for i, a in zip(mine, big)}
        memo: dict = {id(a): Affine() for i, a in enumerate(cv.axes) if cv.domain[i] == 1}
        touches_chain = False
        for op in cv.body:
            if op.name != "structured.read":
                continue
            src = op.operands[0]
            if id(src) in chain_values:
                prev = chain[-1].results[0] if chain else contraction.results[0]
                flat = _flat(op, src.type.shape, axis_of, memo, space)
                if (src is not prev or flat is None or flat.const != 0
                        or {k: c for k, c in flat.terms.items() if more_than_one(extents[k])} != out_flat):
                    return None
                touches_chain = True
                continue
            if id(src) not in args or op.attributes.get("pad") is not None or src.type.dtype is not DType.f32:
                return None
            flat = _flat(op, src.type.shape, axis_of, memo, space)
            if flat is None:
                return None
            k = (args[id(src)], tuple(sorted(flat.terms.items())), flat.const)
            rd = reads.setdefault(k, EpilogueRead(args[id(src)], flat, len(reads)))
            read_of[id(op)] = rd
        if not touches_chain:
            return None
        chain.append(comp)
        chain_values.add(id(comp.results[0]))
    result = chain[-1].results[0] if chain else contraction.results[0]
    ret = body.last
    if len(ret.operands) != 1 or ret.operands[0] is not result:
        return None
    # every value before the last is read only by the next compute of the chain
    for v in ([contraction.results[0]] + [c.results[0] for c in chain])[:-1]:
        for user, _ in v.uses:
            owner = user.parent_op
            if owner not in chain:
                return None
    return EpilogueChain(chain, list(reads.values()), read_of)


def _c(d: Dim) -> str:
    """A stride in C: the number itself, or the runtime expression (parenthesised)."""
    return str(d) if isinstance(d, int) else f"({to_c(d)})"


def _flat(read: Operation, shape: tuple[Dim, ...], axis_of: dict[int, int], memo: dict,
          space: AxisSpace) -> Affine | None:
    """The element offset of ``read`` over the contraction's virtual axes, or None."""
    out, stride = Affine(), 1
    dims = [parse_index(i, axis_of, memo, space.domain) for i in read.operands[1:]]
    for d in range(len(shape) - 1, -1, -1):
        aff = dims[d]
        if aff is None:
            return None
        for t in aff.terms:
            if t[0] in ("div", "mod") and space.splits.get(t[1]) != t[2]:
                return None
        out = out.plus(space.normalize(aff).scaled(stride))
        stride = dim_mul(stride, shape[d])
    return out
