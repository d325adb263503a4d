"""Library kernels: hand-written C for graph ops that have no tensor-expression form, or one the
hand-written C runs much faster (a 2-D float32 max pool: ``MaxPool.library_kernel_if``).

The data-dependent ops (``graph.nonzero``, ``graph.compress``, ``graph.unique``,
``graph.non_max_suppression``) produce a result whose size depends on the input *values*.
Lowering wraps each in a library kernel (``passes/lower/graph_to_kernels.library_kernel``: a
``structured.kernel`` marked ``tf.library`` whose body is the graph op); ``emit_kernel`` asks
``emit_library_kernel`` for its C before the tensorizer and loop paths.

The contract with the runtime (docs/dynamic_shapes.md, "Data-dependent sizes"): the op's
``count`` symbol has a slot in ``tf_dims`` like any symbol; the runtime fills it with the
symbol's upper bound (buffers are sized at it) and the kernel overwrites it with the true count
(through a cast of ``tf_dims``: the runtime owns the array, it is writable).  Kernels called later
read ``tf_dims`` on entry and so run over the true extent; the runtime reads the counts back after
the call.  Results are written compactly with the true count as their extent (row-major
``[rank, count]`` for nonzero), so a consumer indexing with the true count reads them right.

Semantics follow the graph ops' reference (``dialects/graph/data_dependent.py``, ONNX's reference
implementation) exactly: NaN is non-zero (nonzero, compress's condition); Unique sorts with NaN
last, all NaNs one value in the flat case (``np.unique``'s ``equal_nan``) but NaN slices all
distinct along an axis, -0.0 equals 0.0, ties keep their input order (a stable sort), the first
occurrence's value and index represent a group; NMS computes in float64 as the reference does.
The models build with ``-ffast-math`` and gcc's ``optimize`` pragma does not reliably turn it off
(measured: NaN compares still folded), so these kernels decide nothing with a float comparison:
NaN tests and orderings use the bits (``tf_isnan_*``, the integer order keys ``tf_key_*``), and
NMS's float64 arithmetic goes through helpers that store every result to a ``volatile`` (no
contraction into FMAs, no reassociation), so it rounds as the reference does.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...errors import CompileError
from ...ir.core import Operation, Value
from ...ir.symbolic import Dim, c_identifier, dim_prod, symbols_of, to_c
from ...ir.types import DType
from ...passes.lower.graph_to_kernels import is_library_kernel, library_op
from .emit_loop import c_type

KERNEL_NAME = "KERNEL_NAME"        # codegen/c/model.py replaces its first occurrence by the C name

# One stable merge sort of int64 indices for every library kernel (guarded: emitted once per file).
_SORT_C = """#ifndef TF_LIB_SORT
#define TF_LIB_SORT
typedef int (*tf_lib_less)(const void* ctx, int64_t a, int64_t b);
/* Stable bottom-up merge sort of idx[0..n) by less(a, b); equal elements keep their order. */
static void tf_lib_sort(int64_t* idx, int64_t* tmp, int64_t n, tf_lib_less less, const void* ctx) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = less(ctx, idx[j], idx[i]) ? idx[j++] : idx[i++];
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof(int64_t));
  }
}
static void* tf_lib_alloc(int64_t n, size_t size) { return malloc((size_t)(n > 0 ? n : 1) * size); }
#endif
"""

_FLOAT_BITS = {DType.f32: "f32", DType.f64: "f64", DType.f16: "f16"}
NAN_KEY = "INT64_MAX"              # the order key of NaN: after every number


def _bits(dt: DType) -> str:
    b = _FLOAT_BITS.get(dt)
    if b is None and dt.is_float:
        raise CompileError(f"library kernels take f16/f32/f64 floats, not {dt} (bf16 is widened before lowering)")
    return b


def _nonzero(expr: str, dt: DType) -> str:
    """C truth of ``expr`` as NumPy's ``bool(x)``: NaN is true, -0.0 false (tested on the bits)."""
    if dt.is_float:
        b = _bits(dt)
        return f"(!tf_isnan_{b}({expr}) ? tf_key_{b}({expr}) != 0 : 1)"
    return f"({expr} != 0)"


def _key(expr: str, dt: DType) -> str:
    """An int64 order key of ``expr``: numbers in order (-0.0 == 0.0), NaN last and equal to NaN."""
    if dt.is_float:
        b = _bits(dt)
        return f"(tf_isnan_{b}({expr}) ? {NAN_KEY} : tf_key_{b}({expr}))"
    return f"((int64_t)({expr}))"


class _Kernel:
    """What a generator sees: C names of the operands (``in0``...) and results (``out0``...), their
    dims as C text (symbols read from ``tf_dims``), and the slot of the op's count symbol."""

    tiling = None       # a tuned qgemm.Tiling (int8 GEMM and convolution kernels)

    def __init__(self, kernel: Operation, symbols: Sequence[str]):
        self.kernel = kernel
        self.op = library_op(kernel)
        self.symbols = list(symbols)
        count = self.op.attributes["count"]
        if count not in self.symbols:
            raise CompileError(f"library kernel '{self.op.name}': its count symbol '{count}' is not in the model's "
                               f"symbol table (lowering declares it: declare_count_symbols)")
        self.count = count
        self.slot = self.symbols.index(count)
        self.used: set[str] = set()

    def dim(self, d: Dim) -> str:
        """``d`` as a C int64 expression."""
        s = symbols_of(d)
        if self.count in s:
            raise CompileError(f"library kernel '{self.op.name}' reads its own count '{self.count}' in {d}")
        unknown = s - set(self.symbols)
        if unknown:
            raise CompileError(f"library kernel '{self.op.name}': the symbol(s) {sorted(unknown)} are not declared")
        self.used |= s
        return f"((int64_t){to_c(d)})"

    def shape(self, v: Value) -> list[Dim]:
        return list(v.type.shape)

    def numel(self, v: Value) -> str:
        return self.dim(dim_prod(self.shape(v)))

    def signature(self) -> str:
        k = self.kernel
        params = [f"const {c_type(v.type)}* restrict in{i}" for i, v in enumerate(k.operands)]
        params += [f"{c_type(r.type)}* restrict out{j}" for j, r in enumerate(k.results)]
        params.append("const int64_t* restrict tf_dims")
        return f"static void {KERNEL_NAME}({', '.join(params)})"

    def function(self, body: list[str], helpers: str = "") -> str:
        decls = [f"  const int64_t tf_sym_{c_identifier(s)} = tf_dims[{k}];"
                 for k, s in enumerate(self.symbols) if s in self.used]
        write = ["  int64_t* const tf_dims_out = (int64_t*)tf_dims;   /* the runtime's array: writable */"]
        return (_SORT_C + helpers + self.signature() + " {\n" + "\n".join(decls + write + body)
                + f"\n  tf_dims_out[{self.slot}] = count;   /* {self.count}: the true size, for later kernels */"
                + "\n}\n")


def _nonzero_kernel(k: _Kernel) -> str:
    x = k.kernel.operands[0]
    dt = x.type.dtype
    shape = k.shape(x) or [1]
    rank = len(shape)
    dims = [k.dim(d) for d in shape]
    test = _nonzero("in0[i]", dt)
    body = [f"  const int64_t n = {k.numel(x)};",
            f"  const int64_t shape[{rank}] = {{{', '.join(dims)}}};",
            "  int64_t count = 0;",
            f"  for (int64_t i = 0; i < n; ++i) count += {test} ? 1 : 0;",
            "  int64_t j = 0;",
            "  for (int64_t i = 0; i < n; ++i) {",
            f"    if (!{test}) continue;",
            "    int64_t rem = i;",
            f"    for (int d = {rank - 1}; d >= 0; --d) {{ out0[d * count + j] = rem % shape[d]; rem /= shape[d]; }}",
            "    ++j;",
            "  }"]
    return k.function(body)


def _compress_kernel(k: _Kernel) -> str:
    x, cond = k.kernel.operands[:2]
    shape = k.shape(x)
    axis = k.op.attributes.get("axis")
    test = _nonzero("in1[i]", cond.type.dtype)
    if axis is None:
        outer, n, inner = "1", k.numel(x), "1"
    else:
        a = axis % len(shape)
        outer, n, inner = k.dim(dim_prod(shape[:a])), k.dim(shape[a]), k.dim(dim_prod(shape[a + 1:]))
    body = [f"  const int64_t outer = {outer}, n = {n}, inner = {inner}, m = {k.numel(cond)};",
            "  const int64_t lim = m < n ? m : n;   /* a shorter condition drops the rest */",
            "  int64_t count = 0;",
            f"  for (int64_t i = 0; i < lim; ++i) count += {test} ? 1 : 0;",
            "  for (int64_t o = 0; o < outer; ++o) {",
            "    int64_t j = 0;",
            "    for (int64_t i = 0; i < lim; ++i) {",
            f"      if (!{test}) continue;",
            "      memcpy(out0 + (o * count + j) * inner, in0 + (o * n + i) * inner, (size_t)inner * sizeof(*in0));",
            "      ++j;",
            "    }",
            "  }"]
    return k.function(body)


def _unique_helpers(dt: DType, flat: bool) -> tuple[str, str]:
    """(C of the comparison helpers for elements of ``dt``, their name suffix)."""
    suffix = f"{dt.name}_{'flat' if flat else 'axis'}"
    ct = c_type(dt)
    key = _key("v", dt)
    # equal slices: every element equal; NaN equals NaN only in the flat case (np.unique's equal_nan)
    nan_differs = dt.is_float and not flat
    eq_elem = f"ka == kb{' && ka != ' + NAN_KEY if nan_differs else ''}"
    text = f"""#ifndef TF_LIB_UNIQUE_{suffix}
#define TF_LIB_UNIQUE_{suffix}
typedef struct {{ const {ct}* x; int64_t n, outer, inner; }} tf_lib_slices_{suffix};
static inline int64_t tf_lib_key_{suffix}({ct} v) {{ return {key}; }}
/* slices a, b along the axis in lexicographic order of their elements' keys */
static int tf_lib_less_{suffix}(const void* ctx, int64_t a, int64_t b) {{
  const tf_lib_slices_{suffix}* s = (const tf_lib_slices_{suffix}*)ctx;
  for (int64_t o = 0; o < s->outer; ++o)
    for (int64_t t = 0; t < s->inner; ++t) {{
      int64_t ka = tf_lib_key_{suffix}(s->x[(o * s->n + a) * s->inner + t]);
      int64_t kb = tf_lib_key_{suffix}(s->x[(o * s->n + b) * s->inner + t]);
      if (ka != kb) return ka < kb;
    }}
  return 0;
}}
static int tf_lib_equal_{suffix}(const tf_lib_slices_{suffix}* s, int64_t a, int64_t b) {{
  for (int64_t o = 0; o < s->outer; ++o)
    for (int64_t t = 0; t < s->inner; ++t) {{
      int64_t ka = tf_lib_key_{suffix}(s->x[(o * s->n + a) * s->inner + t]);
      int64_t kb = tf_lib_key_{suffix}(s->x[(o * s->n + b) * s->inner + t]);
      if (!({eq_elem})) return 0;
    }}
  return 1;
}}
#endif
"""
    return text, suffix


def _unique_kernel(k: _Kernel) -> str:
    x = k.kernel.operands[0]
    shape = k.shape(x)
    axis = k.op.attributes.get("axis")
    is_sorted = bool(k.op.attributes.get("sorted", True))
    if axis is None:
        outer, n, inner = "1", k.numel(x), "1"
    else:
        a = axis % len(shape)
        outer, n, inner = k.dim(dim_prod(shape[:a])), k.dim(shape[a]), k.dim(dim_prod(shape[a + 1:]))
    helpers, sfx = _unique_helpers(x.type.dtype, axis is None)
    body = [f"  const int64_t outer = {outer}, n = {n}, inner = {inner};",
            f"  const tf_lib_slices_{sfx} s = {{in0, n, outer, inner}};",
            "  int64_t* perm = (int64_t*)tf_lib_alloc(n, sizeof(int64_t));",
            "  int64_t* tmp = (int64_t*)tf_lib_alloc(n, sizeof(int64_t));",
            "  int64_t* group = (int64_t*)tf_lib_alloc(n, sizeof(int64_t));    /* slice -> group (sorted order) */",
            "  int64_t* start = (int64_t*)tf_lib_alloc(n + 1, sizeof(int64_t)); /* group -> first sorted position */",
            "  int64_t* rank = (int64_t*)tf_lib_alloc(n, sizeof(int64_t));     /* group -> position in the result */",
            "  for (int64_t i = 0; i < n; ++i) perm[i] = i;",
            f"  tf_lib_sort(perm, tmp, n, tf_lib_less_{sfx}, &s);",
            "  int64_t count = 0;",
            "  for (int64_t p = 0; p < n; ++p) {",
            f"    if (p == 0 || !tf_lib_equal_{sfx}(&s, perm[p - 1], perm[p])) start[count++] = p;",
            "    group[perm[p]] = count - 1;",
            "  }",
            "  start[count] = n;"]
    if is_sorted:
        body.append("  for (int64_t g = 0; g < count; ++g) rank[g] = g;")
    else:   # groups in order of their first occurrence
        body += ["  for (int64_t g = 0; g < count; ++g) rank[g] = -1;",
                 "  int64_t next = 0;",
                 "  for (int64_t i = 0; i < n; ++i) if (rank[group[i]] < 0) rank[group[i]] = next++;"]
    body += ["  for (int64_t g = 0; g < count; ++g) {",
             "    const int64_t first = perm[start[g]], r = rank[g];   /* stable: the first occurrence */",
             "    out1[r] = first;",
             "    out3[r] = start[g + 1] - start[g];",
             "    for (int64_t o = 0; o < outer; ++o)",
             "      memcpy(out0 + (o * count + r) * inner, in0 + (o * n + first) * inner, (size_t)inner * sizeof(*in0));",
             "  }",
             "  for (int64_t i = 0; i < n; ++i) out2[i] = rank[group[i]];",
             "  free(perm); free(tmp); free(group); free(start); free(rank);"]
    return k.function(body, helpers)


_NMS_C = """#ifndef TF_LIB_NMS
#define TF_LIB_NMS
/* IEEE float64 under -ffast-math: compares on the bits (false with a NaN, -0.0 == 0.0), each
   arithmetic result stored to a volatile (rounded on its own: no FMA, no reassociation). */
static inline int tf_lib_gt(double a, double b) { return !tf_isnan_f64(a) && !tf_isnan_f64(b) && tf_key_f64(a) > tf_key_f64(b); }
static inline int tf_lib_le(double a, double b) { return !tf_isnan_f64(a) && !tf_isnan_f64(b) && tf_key_f64(a) <= tf_key_f64(b); }
static inline double tf_lib_add(double a, double b) { volatile double r = a + b; return r; }
static inline double tf_lib_sub(double a, double b) { volatile double r = a - b; return r; }
static inline double tf_lib_mul(double a, double b) { volatile double r = a * b; return r; }
static inline double tf_lib_div(double a, double b) { volatile double r = a / b; return r; }
/* Python's min/max of two floats (the first unless the second compares strictly better) and
   NumPy's minimum/maximum (NaN propagates): the reference's arithmetic, bit for bit. */
static inline double tf_lib_pymin(double a, double b) { return tf_lib_gt(a, b) ? b : a; }
static inline double tf_lib_pymax(double a, double b) { return tf_lib_gt(b, a) ? b : a; }
static inline double tf_lib_npmin(double a, double b) { return (tf_isnan_f64(a) || tf_isnan_f64(b)) ? NAN : (tf_lib_gt(b, a) ? a : b); }
static inline double tf_lib_npmax(double a, double b) { return (tf_isnan_f64(a) || tf_isnan_f64(b)) ? NAN : (tf_lib_gt(a, b) ? a : b); }
static double tf_lib_iou(const double* a, const double* b) {
  const double h = tf_lib_pymax(0.0, tf_lib_sub(tf_lib_pymin(a[2], b[2]), tf_lib_pymax(a[0], b[0])));
  const double w = tf_lib_pymax(0.0, tf_lib_sub(tf_lib_pymin(a[3], b[3]), tf_lib_pymax(a[1], b[1])));
  const double inter = tf_lib_mul(h, w);
  const double area_a = tf_lib_mul(tf_lib_sub(a[2], a[0]), tf_lib_sub(a[3], a[1]));
  const double area_b = tf_lib_mul(tf_lib_sub(b[2], b[0]), tf_lib_sub(b[3], b[1]));
  const double uni = tf_lib_sub(tf_lib_add(area_a, area_b), inter);
  return tf_lib_gt(uni, 0.0) ? tf_lib_div(inter, uni) : 0.0;
}
/* descending score, NaN last, ties in index order (argsort(-scores, kind="stable")) */
static int tf_lib_score_before(const void* ctx, int64_t a, int64_t b) {
  const double* s = (const double*)ctx;
  if (tf_isnan_f64(s[a])) return 0;
  return tf_isnan_f64(s[b]) || tf_lib_gt(s[a], s[b]);
}
#endif
"""


def _nms_kernel(k: _Kernel) -> str:
    boxes, scores, limit, iou, score = k.kernel.operands
    bdims, sdims = k.shape(boxes), k.shape(scores)
    center = bool(k.op.attributes.get("center_point_box", False))
    if center:      # [x_center, y_center, width, height]
        corners = ["tf_lib_sub(bx[1], tf_lib_div(bx[3], 2.0))", "tf_lib_sub(bx[0], tf_lib_div(bx[2], 2.0))",
                   "tf_lib_add(bx[1], tf_lib_div(bx[3], 2.0))", "tf_lib_add(bx[0], tf_lib_div(bx[2], 2.0))"]
    else:           # [y1, x1, y2, x2], either diagonal
        corners = ["tf_lib_npmin(bx[0], bx[2])", "tf_lib_npmin(bx[1], bx[3])",
                   "tf_lib_npmax(bx[0], bx[2])", "tf_lib_npmax(bx[1], bx[3])"]
    body = [f"  const int64_t nb = {k.dim(sdims[0])}, nc = {k.dim(sdims[1])}, n = {k.dim(bdims[1])};",
            f"  const int64_t limit = {k.numel(limit)} > 0 ? (int64_t)in2[0] : 0;",
            f"  const double iou_t = {k.numel(iou)} > 0 ? (double)in3[0] : 0.0;",
            f"  const int has_score_t = {k.numel(score)} > 0;",
            "  const double score_t = has_score_t ? (double)in4[0] : 0.0;",
            "  double* corners = (double*)tf_lib_alloc(4 * n, sizeof(double));",
            "  double* sc = (double*)tf_lib_alloc(n, sizeof(double));",
            "  int64_t* order = (int64_t*)tf_lib_alloc(n, sizeof(int64_t));",
            "  int64_t* tmp = (int64_t*)tf_lib_alloc(n, sizeof(int64_t));",
            "  int64_t* kept = (int64_t*)tf_lib_alloc(n, sizeof(int64_t));",
            "  int64_t count = 0;",
            "  for (int64_t b = 0; b < nb && limit > 0; ++b) {",
            "    for (int64_t i = 0; i < n; ++i) {",
            "      const double bx[4] = {(double)in0[(b * n + i) * 4], (double)in0[(b * n + i) * 4 + 1],",
            "                            (double)in0[(b * n + i) * 4 + 2], (double)in0[(b * n + i) * 4 + 3]};",
            *[f"      corners[4 * i + {c}] = {e};" for c, e in enumerate(corners)],
            "    }",
            "    for (int64_t c = 0; c < nc; ++c) {",
            "      for (int64_t i = 0; i < n; ++i) { sc[i] = (double)in1[(b * nc + c) * n + i]; order[i] = i; }",
            "      tf_lib_sort(order, tmp, n, tf_lib_score_before, sc);",
            "      int64_t nk = 0;",
            "      for (int64_t p = 0; p < n && nk < limit; ++p) {",
            "        const int64_t i = order[p];",
            "        if (has_score_t && !tf_lib_gt(sc[i], score_t)) continue;",
            "        int keep = 1;",
            "        for (int64_t q = 0; q < nk && keep; ++q) keep = tf_lib_le(tf_lib_iou(corners + 4 * i, corners + 4 * kept[q]), iou_t);",
            "        if (!keep) continue;",
            "        kept[nk++] = i;",
            "        out0[3 * count] = b; out0[3 * count + 1] = c; out0[3 * count + 2] = i;",
            "        ++count;",
            "      }",
            "    }",
            "  }",
            "  free(corners); free(sc); free(order); free(tmp); free(kept);"]
    return k.function(body, _NMS_C)


class _FixedKernel(_Kernel):
    """A library kernel of an op whose result size is known before it runs (scatter): no count
    symbol to write back."""

    def __init__(self, kernel: Operation, symbols: Sequence[str]):
        self.kernel = kernel
        self.op = library_op(kernel)
        self.symbols = list(symbols)
        self.count = None
        self.slot = None
        self.used: set[str] = set()

    def signature(self) -> str:
        text = super().signature()          # a static model calls its kernels without tf_dims
        return text if self.symbols else text.replace(", const int64_t* restrict tf_dims", "")

    def function(self, body: list[str], helpers: str = "") -> str:
        decls = [f"  const int64_t tf_sym_{c_identifier(s)} = tf_dims[{k}];"
                 for k, s in enumerate(self.symbols) if s in self.used]
        return _SORT_C + helpers + self.signature() + " {\n" + "\n".join(decls + body) + "\n}\n"


def _combine(reduction: str, dt: DType, a: str, b: str) -> str:
    """C of ``reduction(a, b)`` for a scatter: NumPy's add/multiply/minimum/maximum, NaN propagating
    (tested on the bits: the models build with -ffast-math)."""
    if reduction == "none":
        return b
    if reduction == "add":
        return f"{a} + {b}"
    if reduction == "mul":
        return f"{a} * {b}"
    pick = f"({b} < {a} ? {b} : {a})" if reduction == "min" else f"({b} > {a} ? {b} : {a})"
    if dt.is_float:
        n = _bits(dt)
        return f"(tf_isnan_{n}({a}) ? {a} : tf_isnan_{n}({b}) ? {b} : {pick})"
    return pick


def _scatter_nd_kernel(k: _Kernel) -> str:
    """``out = data``; then for each update row in order ``out[idx] = f(out[idx], upd)`` on a slice
    of ``inner`` elements (negative indices wrapped, then clamped: never a write outside)."""
    data, ind, _ = k.kernel.operands
    dt = data.type.dtype
    depth = ind.type.shape[-1]
    dshape = k.shape(data)
    lead = [k.dim(d) for d in dshape[:depth]] or ["1"]
    inner = k.dim(dim_prod(dshape[depth:]))
    rows = k.dim(dim_prod(list(ind.type.shape[:-1])))
    combine = _combine(k.op.attributes.get("reduction", "none"), dt, "dst[t]", "src[t]")
    body = [f"  const int64_t total = {k.numel(data)}, rows = {rows}, inner = {inner};",
            f"  const int64_t lead[{len(lead)}] = {{{', '.join(lead)}}};",
            "  memcpy(out0, in0, (size_t)total * sizeof(*in0));",
            "  for (int64_t u = 0; u < rows; ++u) {",
            "    int64_t off = 0;",
            f"    for (int d = 0; d < {depth}; ++d) {{",
            f"      int64_t j = (int64_t)in1[u * {depth} + d];",
            "      if (j < 0) j += lead[d];",
            "      j = j < 0 ? 0 : (j >= lead[d] ? lead[d] - 1 : j);",
            "      off = off * lead[d] + j;",
            "    }",
            f"    {c_type(data.type)}* dst = out0 + off * inner;",
            f"    const {c_type(data.type)}* src = in2 + u * inner;",
            f"    for (int64_t t = 0; t < inner; ++t) dst[t] = {combine};",
            "  }"]
    return k.function(body)


_GRID_C = """#ifndef TF_LIB_GRID
#define TF_LIB_GRID
/* GridSample's reflection at the borders lo/hi, in f64 as ONNX's reference (volatile: no FMA) */
static inline double tf_lib_gs_reflect(double x, double lo, double hi) {
  const double rng = hi - lo;
  if (!(rng > 0)) return lo;
  if (!(x < lo) && !(x > hi)) return x;
  volatile double dx = x < lo ? lo - x : x - hi;
  const int64_t n = (int64_t)(dx / rng);
  volatile double nr = (double)n * rng;
  volatile double r = dx - nr;
  const int even = (n % 2) == 0;
  if (x < lo) return even ? lo + r : hi - r;
  return even ? hi - r : lo + r;
}
#endif
"""


def _grid_sample_kernel(k: _Kernel) -> str:
    """Per output position: the taps of every spatial axis (index, weight; index -1 reads 0), then
    for every channel the sum over the tensor product of the taps (``dialects/graph/grid.py``)."""
    x, grid = k.kernel.operands
    at = k.op.attributes
    mode, padding, align = at.get("mode", "linear"), at.get("padding_mode", "zeros"), bool(at.get("align_corners"))
    xs = k.shape(x)
    spatial = [int(d) for d in xs[2:]]
    nsp = len(spatial)
    taps = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
    prec = "double" if x.type.dtype is DType.f64 else "float"
    ct = c_type(x.type)
    gt = c_type(grid.type)
    plane = 1
    for d in spatial:
        plane *= d
    positions = k.dim(dim_prod(k.shape(grid)[1:-1]))
    body = [f"  const int64_t nb = {k.dim(xs[0])}, nc = {k.dim(xs[1])}, np_ = {positions};",
            f"  const int64_t sizes[{nsp}] = {{{', '.join(map(str, spatial))}}};",
            "  #pragma omp parallel for if (nb * np_ * nc > 32768)",
            "  for (int64_t bp = 0; bp < nb * np_; ++bp) {",
            "    const int64_t b = bp / np_;",
            f"    const {gt}* g = in1 + bp * {nsp};",
            f"    int64_t idx[{nsp}][{taps}]; double w[{nsp}][{taps}];",
            f"    for (int a = 0; a < {nsp}; ++a) {{",
            "      const int64_t size = sizes[a];",
            f"      volatile {prec} gv = ({prec})g[{nsp - 1} - a];",
            f"      volatile {prec} t1 = gv + ({prec})1;"]
    if align:
        body += [f"      volatile {prec} t2 = t1 / ({prec})2;",
                 f"      volatile {prec} xv = t2 * ({prec})(size - 1);",
                 "      const double lo = 0.0, hi = (double)size - 1.0;"]
    else:
        body += [f"      volatile {prec} t2 = t1 * ({prec})size;",
                 f"      volatile {prec} t3 = t2 - ({prec})1;",
                 f"      volatile {prec} xv = t3 / ({prec})2;",
                 "      const double lo = -0.5, hi = (double)size - 0.5;"]
    rint = "rint" if prec == "double" else "rintf"
    body.append(f"      {prec} xc = {rint + '(xv)' if mode == 'nearest' else 'xv'};")
    if padding == "border":
        body.append(f"      if (xc < lo || xc > hi) xc = xc < 0 ? ({prec})0 : (xc > ({prec})(size - 1) ? ({prec})(size - 1) : xc);")
    elif padding == "reflection":
        body.append(f"      if (xc < lo || xc > hi) xc = ({prec})tf_lib_gs_reflect((double)xc, lo, hi);")
    body.append("      const double xd = (double)xc;")
    if mode == "nearest":
        body += ["      int64_t tap[1] = {(int64_t)xd};   /* truncation, as the reference's astype(int32) */",
                 "      w[a][0] = 1.0;"]
    else:
        body += ["      const double base = floor(xd), s = xd - base;",
                 "      const int64_t ib = (int64_t)base;"]
        if mode == "linear":
            body += ["      int64_t tap[2] = {ib, ib + 1};",
                     "      w[a][0] = 1.0 - s; w[a][1] = s;"]
        else:
            A = -0.75
            near = lambda t: f"((({A + 2}) * ({t}) - ({A + 3})) * ({t}) * ({t}) + 1.0)"
            far = lambda t: f"(((({A}) * ({t}) - {5 * A}) * ({t}) + {8 * A}) * ({t}) - {4 * A})"
            body += ["      int64_t tap[4] = {ib - 1, ib, ib + 1, ib + 2};",
                     f"      w[a][0] = {far('s + 1.0')}; w[a][1] = {near('s')};",
                     f"      w[a][2] = {near('1.0 - s')}; w[a][3] = {far('2.0 - s')};"]
    body.append(f"      for (int t = 0; t < {taps}; ++t) {{")
    body.append("        int64_t i = tap[t];")
    if padding == "zeros":
        body.append("        idx[a][t] = (i >= 0 && i < size) ? i : -1;")
    else:
        if padding == "reflection":
            body.append("        i = (int64_t)tf_lib_gs_reflect((double)i, lo, hi);")
        body.append("        idx[a][t] = i < 0 ? 0 : (i >= size ? size - 1 : i);")
    body += ["      }", "    }"]
    # the tensor product of the taps, per channel
    loops, ind = [], "      "
    for a in range(nsp):
        loops.append(f"{ind}for (int t{a} = 0; t{a} < {taps}; ++t{a}) {{")
        loops.append(f"{ind}  if (idx[{a}][t{a}] < 0) continue;")
        ind += "  "
    offset = "0"
    for a in range(nsp):
        offset = f"({offset}) * {spatial[a]} + idx[{a}][t{a}]"
    weight = " * ".join(f"w[{a}][t{a}]" for a in range(nsp))
    body += ["    for (int64_t c = 0; c < nc; ++c) {",
             f"      const {ct}* plane = in0 + (b * nc + c) * {plane};",
             "      double acc = 0.0;",
             *loops,
             f"{ind}acc += {weight} * (double)plane[{offset}];",
             *["      " + "  " * (nsp - 1 - a) + "}" for a in range(nsp)],
             f"      out0[(b * nc + c) * np_ + (bp - b * np_)] = ({ct})acc;",
             "    }",
             "  }"]
    return k.function(body, _GRID_C)


def _roi_align_kernel(k: _Kernel) -> str:
    """Per roi and output bin: the sample points' taps and weights (``dialects/graph/sampling.py``),
    applied to every channel at once (an f64 accumulator per channel); avg or max over samples."""
    x, rois, bi = k.kernel.operands
    at = k.op.attributes
    xs = k.shape(x)
    height, width = int(xs[2]), int(xs[3])
    oh, ow = int(at.get("output_height", 1)), int(at.get("output_width", 1))
    ratio = int(at.get("sampling_ratio", 0))
    scale = float(at.get("spatial_scale", 1.0))
    half = bool(at.get("half_pixel", True))
    is_max = at.get("mode", "avg") == "max"
    ct = c_type(x.type)
    body = [f"  const int64_t nb = {k.dim(xs[0])}, nc = {k.dim(xs[1])}, nr = {k.dim(k.shape(rois)[0])};",
            f"  const int64_t H = {height}, W = {width}, OH = {oh}, OW = {ow};",
            "  #pragma omp parallel for if (nr * nc * OH * OW > 32768)",
            "  for (int64_t r = 0; r < nr; ++r) {",
            "    double* acc = (double*)tf_lib_alloc(nc, sizeof(double));",
            "    int64_t b = (int64_t)in2[r];",
            "    b = b < 0 ? 0 : (b >= nb ? nb - 1 : b);",
            f"    const double off = {0.5 if half else 0.0};",
            f"    const double x1 = (double)in1[r * 4 + 0] * {scale!r} - off, y1 = (double)in1[r * 4 + 1] * {scale!r} - off;",
            f"    const double x2 = (double)in1[r * 4 + 2] * {scale!r} - off, y2 = (double)in1[r * 4 + 3] * {scale!r} - off;",
            "    double rw = x2 - x1, rh = y2 - y1;"]
    if not half:
        body.append("    if (rw < 1.0) rw = 1.0; if (rh < 1.0) rh = 1.0;")
    body += ["    const double bh = rh / (double)OH, bw = rw / (double)OW;",
             f"    int64_t gh = {ratio} > 0 ? {ratio} : (int64_t)ceil(rh / (double)OH);",
             f"    int64_t gw = {ratio} > 0 ? {ratio} : (int64_t)ceil(rw / (double)OW);",
             "    if (gh < 0) gh = 0; if (gw < 0) gw = 0;",
             "    const double count = (double)(gh * gw > 1 ? gh * gw : 1);",
             f"    const {ct}* img = in0 + b * nc * H * W;",
             "    for (int64_t ph = 0; ph < OH; ++ph) {",
             "      for (int64_t pw = 0; pw < OW; ++pw) {",
             "        for (int64_t c = 0; c < nc; ++c) acc[c] = 0.0;",
             "        int first = 1;",
             "        for (int64_t iy = 0; iy < gh; ++iy) {",
             "          const double yy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;",
             "          for (int64_t ix = 0; ix < gw; ++ix) {",
             "            double xx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw, y = yy;",
             "            int64_t pos[4] = {0, 0, 0, 0}; double wt[4] = {0.0, 0.0, 0.0, 0.0};",
             "            if (!(y < -1.0 || y > (double)H || xx < -1.0 || xx > (double)W)) {",
             "              if (y < 0) y = 0; if (xx < 0) xx = 0;",
             "              int64_t ylo = (int64_t)y, xlo = (int64_t)xx, yhi, xhi;",
             "              if (ylo >= H - 1) { ylo = yhi = H - 1; y = (double)ylo; } else yhi = ylo + 1;",
             "              if (xlo >= W - 1) { xlo = xhi = W - 1; xx = (double)xlo; } else xhi = xlo + 1;",
             "              const double ly = y - (double)ylo, lx = xx - (double)xlo, hy = 1.0 - ly, hx = 1.0 - lx;",
             "              pos[0] = ylo * W + xlo; pos[1] = ylo * W + xhi; pos[2] = yhi * W + xlo; pos[3] = yhi * W + xhi;",
             "              wt[0] = hy * hx; wt[1] = hy * lx; wt[2] = ly * hx; wt[3] = ly * lx;",
             "            }",
             "            for (int64_t c = 0; c < nc; ++c) {",
             f"              const {ct}* pl = img + c * H * W;"]
    if is_max:
        body += ["              double v = wt[0] * (double)pl[pos[0]];",
                 "              for (int t = 1; t < 4; ++t) { const double u = wt[t] * (double)pl[pos[t]]; if (u > v) v = u; }",
                 "              if (first || v > acc[c]) acc[c] = v;"]
    else:
        body.append("              acc[c] += wt[0] * (double)pl[pos[0]] + wt[1] * (double)pl[pos[1]]"
                    " + wt[2] * (double)pl[pos[2]] + wt[3] * (double)pl[pos[3]];")
    body += ["            }",
             "            first = 0;",
             "          }",
             "        }",
             "        for (int64_t c = 0; c < nc; ++c)",
             f"          out0[((r * nc + c) * OH + ph) * OW + pw] = ({ct})({'acc[c]' if is_max else 'acc[c] / count'});",
             "      }",
             "    }",
             "    free(acc);",
             "  }"]
    return k.function(body)


def _deform_conv_kernel(k: _Kernel) -> str:
    """Per batch: the bilinear samples of every channel and kernel tap (masked) into a column
    buffer, then the grouped GEMM with ``w`` plus the bias (``dialects/graph/sampling.py``)."""
    ops = k.kernel.operands
    x, w, offset = ops[0], ops[1], ops[2]
    has_mask = len(ops) == 5
    at = k.op.attributes
    xs, ws = k.shape(x), k.shape(w)
    c, height, width = int(xs[1]), int(xs[2]), int(xs[3])
    oc, kh, kw = int(ws[0]), int(ws[2]), int(ws[3])
    group, og = int(at.get("group", 1)), int(at.get("offset_group", 1))
    os_ = k.shape(offset)
    oh, ow = int(os_[2]), int(os_[3])
    st = tuple(at.get("strides", ()) or (1, 1))
    pd = tuple(at.get("pads", ()) or (0, 0, 0, 0))
    dl = tuple(at.get("dilations", ()) or (1, 1))
    ct = c_type(x.type)
    body = [f"  const int64_t nb = {k.dim(xs[0])};",
            f"  const int64_t C = {c}, H = {height}, W = {width}, OC = {oc}, KH = {kh}, KW = {kw}, K = {kh * kw};",
            f"  const int64_t OH = {oh}, OW = {ow}, P = {oh * ow}, OG = {og}, CG = {c // og};",
            f"  const int64_t ICG = {c // group}, OCG = {oc // group};",
            "  #pragma omp parallel for if (nb > 1 && nb * OC * P * ICG * K > 65536)",
            "  for (int64_t n = 0; n < nb; ++n) {",
            "    double* col = (double*)tf_lib_alloc(C * K * P, sizeof(double));",
            "    for (int64_t ch = 0; ch < C; ++ch) {",
            "      const int64_t g = ch / CG;",
            f"      const {ct}* pl = in0 + (n * C + ch) * H * W;",
            "      for (int64_t ki = 0; ki < KH; ++ki) for (int64_t kj = 0; kj < KW; ++kj) {",
            "        const int64_t kk = ki * KW + kj;",
            "        for (int64_t i = 0; i < OH; ++i) for (int64_t j = 0; j < OW; ++j) {",
            "          const int64_t p = i * OW + j;",
            "          const int64_t oc_ = ((n * OG + g) * K + kk) * 2;",
            f"          const double py = (double)(i * {st[0]} - {pd[0]} + ki * {dl[0]}) + (double)in2[oc_ * P + p];",
            f"          const double px = (double)(j * {st[1]} - {pd[1]} + kj * {dl[1]}) + (double)in2[(oc_ + 1) * P + p];",
            "          const double fy = floor(py), fx = floor(px), ly = py - fy, lx = px - fx;",
            "          const int64_t y0 = (int64_t)fy, x0 = (int64_t)fx;",
            "          double v = 0.0;",
            "          for (int dy = 0; dy < 2; ++dy) for (int dx = 0; dx < 2; ++dx) {",
            "            const int64_t yi = y0 + dy, xi = x0 + dx;",
            "            if (yi < 0 || yi >= H || xi < 0 || xi >= W) continue;",
            "            v += (dy ? ly : 1.0 - ly) * (dx ? lx : 1.0 - lx) * (double)pl[yi * W + xi];",
            "          }"]
    if has_mask:
        body.append("          v *= (double)in4[((n * OG + g) * K + kk) * P + p];")
    body += ["          col[(ch * K + kk) * P + p] = v;",
             "        }",
             "      }",
             "    }",
             "    for (int64_t o = 0; o < OC; ++o) {",
             "      const int64_t grp = o / OCG;",
             "      for (int64_t p = 0; p < P; ++p) {",
             "        double acc = (double)in3[o];",
             "        for (int64_t ci = 0; ci < ICG; ++ci) {",
             "          const int64_t ch = grp * ICG + ci;",
             "          for (int64_t kk = 0; kk < K; ++kk) acc += (double)in1[(o * ICG + ci) * K + kk] * col[(ch * K + kk) * P + p];",
             "        }",
             f"        out0[(n * OC + o) * P + p] = ({ct})acc;",
             "      }",
             "    }",
             "    free(col);",
             "  }"]
    return k.function(body)


POOL_ROWS = 8      # input rows split into phases before their horizontal maxima read them


def _max_pool_kernel(k: _Kernel) -> str:
    """2-D max pool (float32, or the uint8/int8 of a quantized model), one (image, channel) plane per
    task, separably.  Each input row is split into its ``sw`` column phases of the row padded with
    the lowest value (``ph_q[j] = padded[j*sw + q]``: one strided pass straight from the input);
    window column ``kx`` of output ``ox`` is then ``ph_{kx % sw}[ox + kx // sw]``, so the
    horizontal maximum is ``kw`` contiguous passes over the ``ow`` outputs, not over every input
    column followed by a strided pick (ResNet's 3x3/2 pool: half the compares, no gather).  Each
    output row is the max of its window's rows of those.

    ``POOL_ROWS`` rows are split before the horizontal passes read them: passes that read a row
    right after writing it at other offsets (the padded copy, then the shifted taps) wait on
    store-to-load forwarding, which fails for loads that span two stores; ResNet's 3x3/2 pool of
    64 planes of 112x112 ran 1.75x faster split in blocks of rows (266 -> 151 us on one thread).
    One image on several threads splits into bands of output rows of every plane, not planes:
    the stem convolution before that pool splits its output positions between the threads, so a
    thread reading whole planes read half of them from the other core's cache (the pool cost
    0.3 ms after the stem, 0.13 ms alone; 0.08 ms after it in bands).

    Exact in the reference's tap order (window row, then column): the NaN-keeping max (the first
    NaN wins, else the largest value, the later of equal ones for -0.0 against 0.0) is associative,
    so grouping the taps by rows changes nothing; padded columns only ever meet real taps as the
    lowest value, which loses to all of them (docs/numerics.md).  Rows outside the input are
    skipped, as the reference skips them."""
    x = k.kernel.operands[0]
    at = k.op.attributes
    n, c, h, w = (int(d) for d in x.type.shape)
    oh, ow = (int(d) for d in k.kernel.results[0].type.shape[2:])
    kh, kw = (int(v) for v in at["kernel"])
    sh, sw = (tuple(at.get("strides", ())) or (1, 1))
    pads = tuple(at.get("pads", ())) or (0, 0, 0, 0)
    ph, pw = pads[0], pads[1]
    phase_len = ow + (kw - 1) // sw               # entries of a phase the windows read
    phases = min(sw, kw)
    row_len = phases * phase_len
    work = n * c * oh * ow * kh * kw
    ct = c_type(x.type)
    low = "-INFINITY" if x.type.dtype.is_float else str(x.type.dtype.int_range[0])
    maxf = "(((a) > (b)) | ((a) != (a)) ? (a) : (b))"
    split = []
    for q in range(phases):
        # phase q's entry j is padded column j*sw + q, input column j*sw + q - pw
        lo = min(phase_len, max(0, -(-(pw - q) // sw)))
        hi = max(lo, min(phase_len, -(-(w + pw - q) // sw)))
        base = q * phase_len
        if lo:
            split.append(f"          for (int64_t j = 0; j < {lo}; ++j) pr[{base} + j] = {low};")
        if hi > lo:
            split.append(f"          for (int64_t j = {lo}; j < {hi}; ++j) pr[{base} + j] = xr[j * {sw} + {q - pw}];")
        if hi < phase_len:
            split.append(f"          for (int64_t j = {hi}; j < {phase_len}; ++j) pr[{base} + j] = {low};")

    def tap(kx: int) -> str:
        return f"pr[{(kx % sw) * phase_len + kx // sw} + ox]"
    # one pass per window column, the first reading two of them (the same form as the vertical
    # passes: gcc vectorises it, not a chain through a local, whose compare-selects it leaves as
    # mispredicted branches)
    hmax = ([f"          for (int64_t ox = 0; ox < {ow}; ++ox) hr[ox] = TF_POOL_MAX({tap(0)}, {tap(1)});"]
            + [f"          for (int64_t ox = 0; ox < {ow}; ++ox) hr[ox] = TF_POOL_MAX(hr[ox], {tap(kx)});"
               for kx in range(2, kw)]) if kw > 1 else [f"          for (int64_t ox = 0; ox < {ow}; ++ox) hr[ox] = {tap(0)};"]
    body = [f"  #define TF_POOL_MAX(a, b) {maxf}",
            f"  #pragma omp parallel if ({work} > 65536)",
            "  {",
            f"    {ct}* const ps = ({ct}*)malloc(sizeof({ct}) * {POOL_ROWS * row_len});",
            f"    {ct}* const hs = ({ct}*)malloc(sizeof({ct}) * {h * ow});",
            # one image on several threads: each takes a band of output rows of every plane (the rows
            # the convolution before it wrote on that core, ResNet's stem), not whole planes
            "    const int64_t T = omp_get_num_threads();",
            f"    const int64_t bands = T > 1 && {n} < T ? T : 1, rows = ({oh} + bands - 1) / bands;",
            "    #pragma omp for schedule(static)",
            f"    for (int64_t u = 0; u < bands * {n * c}; ++u) {{",
            f"      const int64_t p = u % {n * c}, oy0 = u / {n * c} * rows, oy1 = oy0 + rows < {oh} ? oy0 + rows : {oh};",
            f"      const int64_t ya = oy0 * {sh} - {ph} > 0 ? oy0 * {sh} - {ph} : 0;",
            f"      const int64_t yb = (oy1 - 1) * {sh} - {ph} + {kh} < {h} ? (oy1 - 1) * {sh} - {ph} + {kh} : {h};",
            f"      const {ct}* restrict xp = in0 + p * {h * w};",
            f"      {ct}* restrict yp = out0 + p * {oh * ow};",
            f"      for (int64_t y0 = ya; y0 < yb; y0 += {POOL_ROWS}) {{",
            f"        const int64_t y1 = y0 + {POOL_ROWS} < yb ? y0 + {POOL_ROWS} : yb;",
            "        for (int64_t y = y0; y < y1; ++y) {      /* the rows' column phases */",
            f"          const {ct}* restrict xr = xp + y * {w};",
            f"          {ct}* restrict pr = ps + (y - y0) * {row_len};",
            *split,
            "        }",
            f"        for (int64_t y = y0; y < y1; ++y) {{      /* their horizontal maxima at the {ow} outputs */",
            f"          const {ct}* restrict pr = ps + (y - y0) * {row_len};",
            f"          {ct}* restrict hr = hs + y * {ow};",
            *hmax,
            "        }",
            "      }",
            "      for (int64_t oy = oy0; oy < oy1; ++oy) {",
            f"        const int64_t y0 = oy * {sh} - {ph};",
            f"        const int64_t ky0 = y0 < 0 ? -y0 : 0, ky1 = y0 + {kh} > {h} ? {h} - y0 : {kh};",
            f"        {ct}* restrict yr = yp + oy * {ow};",
            "        if (ky0 >= ky1) {",
            f"          for (int64_t ox = 0; ox < {ow}; ++ox) yr[ox] = {low};",
            "          continue;",
            "        }",
            f"        memcpy(yr, hs + (y0 + ky0) * {ow}, sizeof({ct}) * {ow});",
            "        for (int64_t ky = ky0 + 1; ky < ky1; ++ky) {",
            f"          const {ct}* restrict hr = hs + (y0 + ky) * {ow};",
            f"          for (int64_t ox = 0; ox < {ow}; ++ox) yr[ox] = TF_POOL_MAX(yr[ox], hr[ox]);",
            "        }",
            "      }",
            "    }",
            "    free(ps);",
            "    free(hs);",
            "  }",
            "  #undef TF_POOL_MAX"]
    return k.function(body)


def conv_groups(op: Operation) -> int:
    """A convolution op's ``groups`` attribute (1 when absent)."""
    return int(op.attributes.get("groups", 1) or 1)


INT8_TUNED_OPS = ("graph.qmatmul", "graph.qconv")    # library kernels with a tuning space (qgemm.Tiling)


def int8_tunable(kernel: Operation) -> bool:
    """Whether ``kernel`` is an int8 GEMM or (non-depthwise) int8 convolution on the VNNI GEMM: its
    ``qgemm.Tiling`` is a tuning knob (``tune/space.Int8Space``).  A convolution on the direct
    kernel (``qconv_direct.py``) or the short-K one (``qconv.short_k``) has no such knob, so it is
    no tuning task; nor is any int8 GEMM on a host where it runs on AMX tiles (``qgemm_amx``:
    fixed 2 x 2 tiles of 16 x 16, the Tiling only shapes its fallback), or on one without VNNI
    (``qgemm.SCALAR``: the portable C loop has no Tiling, so every candidate would build the same
    code; the tuner measured them, and the seeds too wide for 16 registers failed as unused)."""
    from ..target import Target
    from . import qgemm, qgemm_amx
    if not is_library_kernel(kernel) or qgemm_amx.available() or qgemm.isa(Target.host()) == qgemm.SCALAR:
        return False
    op = library_op(kernel)
    if op.name not in INT8_TUNED_OPS or conv_groups(op) != 1:
        return False
    return op.name != "graph.qconv" or not (_qconv_direct(kernel) or _qconv_short_k(kernel))


def _qconv_short_k(kernel: Operation) -> bool:
    """Whether an int8 conv runs on the short-K kernel (``qconv.short_k``; it needs an epilogue:
    a scale operand)."""
    from . import qconv
    geometry = _direct_geometry(kernel)
    if geometry is None or len(kernel.operands) <= 4:
        return False
    _, c, h, w, _, kh, kw, sh, sw, ph, pw, _, _, oh, ow = geometry
    return qconv.short_k(kh, kw, sh, sw, (ph, pw), h, w, oh, ow, c)


def _qconv_direct(kernel: Operation) -> bool:
    """Whether an int8 conv runs on the direct kernel: with compile-time arranged weights
    (``qconv_arranged``), or by the C function's own run-time rule on a static geometry."""
    from . import qconv_direct
    if qconv_arranged(kernel):
        return True
    geometry = _direct_geometry(kernel)
    if geometry is None or not qconv_direct.enabled():
        return False
    _, _, _, _, o, kh, kw, sh, sw, _, _, _, _, oh, ow = geometry
    return qconv_direct.fits(o, kh, kw, sh, sw, oh, ow)


def _tiled(name: str, tiling) -> str:
    """The C name of an int8 kernel built with ``tiling`` (the default one keeps the plain name)."""
    return name if tiling is None else f"{name}_{tiling.key()}"


def _qmatmul_kernel(k: _Kernel) -> str:
    """int8 x int8 -> int32 matmul (``graph.qmatmul``) on the VNNI kernel of ``qgemm.py``: the zero
    point (and, for int8 activations, the +128 shift that makes them uint8) folds with the weights'
    column sums into one int32 per column, so the kernel sums raw products.  Arithmetic is modulo
    2^32 in unsigned C, as ONNX's int32 accumulation (no signed-overflow undefined behaviour)."""
    kk, n, rows = _contraction_sizes(k)
    signed = k.kernel.operands[0].type.dtype is DType.i8
    name = _tiled(f"tf_qgemm_{'s8' if signed else 'u8'}", k.tiling)
    body = [f"  int32_t* const comp = (int32_t*)malloc({max(n, 1)} * sizeof(int32_t));",
            f"  const uint32_t zp = (uint32_t)in3[0]{' + 128u' if signed else ''};",
            f"  for (int64_t j = 0; j < {n}; ++j) comp[j] = (int32_t)(0u - zp * (uint32_t)in2[j]);",
            f"  {name}({rows}, {n}, {kk}, (const uint8_t*)in0, {kk}, in1, comp, out0, {n});",
            "  free(comp);"]
    return k.function(body, helpers=_qgemm_text(name, signed, k.tiling))


def _conv_geometry(op: Operation, kernel: Operation) -> tuple[int, ...]:
    """(N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW) of a static 2-D conv kernel (the
    leading arguments of the int8 and bf16 conv kernels; pads: top and left)."""
    at = op.attributes
    n, c, h, w = (int(d) for d in kernel.operands[0].type.shape)
    o, oh, ow = (int(d) for d in kernel.results[0].type.shape[1:])
    kh, kw = (int(v) for v in at["kernel"])
    sh, sw = tuple(at.get("strides", ())) or (1, 1)
    ph, pw = (tuple(at.get("pads", ())) or (0, 0, 0, 0))[:2]
    dh, dw = tuple(at.get("dilations", ())) or (1, 1)
    return n, c, h, w, o, kh, kw, int(sh), int(sw), int(ph), int(pw), int(dh), int(dw), oh, ow


def _static_geometry(kernel: Operation, op_name: str, one_group: bool = True) -> tuple[int, ...] | None:
    """``_conv_geometry`` of a library conv ``op_name`` (one group unless ``one_group`` is False) with
    static shapes, else None."""
    if not is_library_kernel(kernel) or library_op(kernel).name != op_name:
        return None
    op = library_op(kernel)
    if one_group and conv_groups(op) != 1:
        return None
    if any(not isinstance(d, int) for v in (kernel.operands[0], kernel.results[0]) for d in v.type.shape):
        return None
    return _conv_geometry(op, kernel)


def _constant_weights(kernel: Operation) -> bool:
    """Whether a conv kernel's weights (operand 1) are a constant, so they can be laid out at
    compile time."""
    w = kernel.operands[1]
    return w.op is not None and w.op.name == "graph.constant"


def _direct_geometry(kernel: Operation) -> tuple[int, ...] | None:
    """``_conv_geometry`` of a one-group int8 conv with static shapes on a host where the direct
    kernel exists (AVX-512 VNNI), else None."""
    from ..target import Target
    from . import qgemm
    geometry = _static_geometry(kernel, "graph.qconv")
    return geometry if geometry is not None and qgemm.isa(Target.host()) == qgemm.AVX512_VNNI else None


def _depthwise_lanes(kernel: Operation) -> bool:
    """Whether depthwise int8 conv ``kernel`` (static shapes) runs 16 channels in the lanes on this
    host (``qdepthwise_lanes.applies``)."""
    from ..target import Target
    from . import qdepthwise_lanes
    geometry = _static_geometry(kernel, "graph.qconv", one_group=False)
    return geometry is not None and qdepthwise_lanes.applies(geometry, Target.host().features)


def _packable_geometry(kernel: Operation) -> tuple[int, ...] | None:
    """``_direct_geometry`` of an int8 conv whose weights are a constant, else None."""
    geometry = _direct_geometry(kernel)
    return geometry if geometry is not None and _constant_weights(kernel) else None


def qconv_arranged(kernel: Operation) -> bool:
    """Whether int8 conv ``kernel`` runs on the direct kernel with its weights arranged at compile
    time (``qconv_direct.arranged_fits``; the host has AVX-512 VNNI, one group, constant weights):
    ``tensorize.Prepared`` then passes ``qconv_direct.arrange_weights`` of its weight operand."""
    from . import qconv_direct
    geometry = _packable_geometry(kernel)
    if geometry is None:
        return False
    _, _, _, _, _, kh, kw, sh, sw, _, _, _, dw, oh, ow = geometry
    return qconv_direct.arranged_fits(kh, kw, sh, sw, dw, oh, ow)


def qconv_transposed(kernel: Operation) -> bool:
    """Whether int8 conv ``kernel`` runs transposed, positions x channels (``qconv_transposed.fits``:
    few output positions; the host has AVX-512 VNNI, one group, constant weights, a dequantizing
    epilogue, not a direct-kernel layer): ``tensorize.Prepared`` then passes
    ``qconv_transposed.pack_weights`` of its weight operand."""
    from . import qconv_transposed
    geometry = _packable_geometry(kernel)
    if geometry is None or len(kernel.operands) <= 4:
        return False
    n, o, oh, ow = geometry[0], geometry[4], geometry[13], geometry[14]
    return not qconv_arranged(kernel) and qconv_transposed.fits(n, o, oh, ow)


def qconv_arranged_weights(kernel: Operation, w_shifted: np.ndarray) -> np.ndarray:
    """The weight operand of a ``qconv_arranged`` kernel as the direct kernel reads it."""
    from . import qconv_direct
    c = int(kernel.operands[0].type.shape[1])
    kh, kw = (int(v) for v in library_op(kernel).attributes["kernel"])
    return qconv_direct.arrange_weights(w_shifted, c, kh * kw)


def qconv_transposed_weights(kernel: Operation, w_shifted: np.ndarray) -> np.ndarray:
    """The weight operand of a ``qconv_transposed`` kernel as its GEMM reads it."""
    from . import qconv_transposed as transposed
    c = int(kernel.operands[0].type.shape[1])
    kh, kw = (int(v) for v in library_op(kernel).attributes["kernel"])
    return transposed.pack_weights(w_shifted, c, kh * kw)


def _qconv_kernel(k: _Kernel) -> str:
    """int8 2-D convolution (``graph.qconv``) on the kernel of ``qconv.py``: the activations of each
    image packed at run time, the weights (uint8 ``w + 128``) read in place, NCHW int32 out, or
    float32 through the dequantizing epilogue (scale, bias, residual, relu operands); a depthwise
    one (``groups`` = channels) on the direct loop of ``qconv.depthwise_source``."""
    from . import nchwc, qconv
    x = k.kernel.operands[0]
    at = k.op.attributes
    n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow = _conv_geometry(k.op, k.kernel)
    signed = x.type.dtype is DType.i8
    name = f"tf_qconv_{'s8' if signed else 'u8'}"
    in_scale = float(at.get("input_scale", 0.0) or 0.0)
    ins = len(k.kernel.operands)
    out_scale = float(at.get("output_scale", 0.0) or 0.0)
    hi = nchwc.clip_bound(at.get("clip_max"))
    def f(attr: str, default: float) -> str:
        v = at.get(attr)
        return f"{float.hex(float(default if v is None else v))}f"

    mid = (f"{f('requant_scale', 0.0)}, {int(at.get('requant_zero_point', 0) or 0)}, {f('dequant_scale', 1.0)}, "
           f"{f('dequant_offset', -0.0)}, {f('residual_scale', 0.0)}, {f('residual_offset', -0.0)}")
    int_bias = ins > 5 and k.kernel.operands[5].type.dtype is DType.i32      # added to the sums (graph.qconv)
    biases = "0, (const int32_t*)in5" if int_bias else "in5, 0"
    epilogue = (f"in4, {biases}, {'in6' if ins > 6 else '0'}, {int(bool(at.get('relu', False)))}, {hi}" if ins > 4
                else "0, 0, 0, 0, 0, INFINITY") + f", {mid}, {float.hex(out_scale)}f, {int(at.get('output_zero_point', 0) or 0)}"
    if conv_groups(k.op) > 1:                            # depthwise: the direct loop
        name = f"tf_qdwconv_{'s8' if signed else 'u8'}"
        kp = int(k.kernel.operands[1].type.shape[1])
        body = [f"  {name}({n}, {c}, {h}, {w}, {kh}, {kw}, {sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {oh}, {ow}, "
                f"in0, {float.hex(in_scale)}f, in1, {kp}, in2, in3[0], {epilogue}, out0);"]
        return k.function(body, helpers=_host_kernel(name, lambda host, threads: qconv.depthwise_source(name, signed, threads)))
    name = _tiled(name, k.tiling)
    if qconv_arranged(k.kernel):          # stride 1, weights arranged at compile time (qconv_direct.py)
        body = [f"  {name}_arranged({n}, {c}, {h}, {w}, {o}, {kh}, {kw}, {ph}, {pw}, {dh}, {dw}, {oh}, {ow}, "
                f"in0, {float.hex(in_scale)}f, (const int32_t*)in1, in2, in3[0], {epilogue}, out0);"]
    elif qconv_transposed(k.kernel):      # few positions: positions x channels (qconv_transposed.py)
        body = [f"  {name}_transposed({n}, {c}, {h}, {w}, {o}, {kh}, {kw}, {sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {oh}, "
                f"{ow}, in0, {float.hex(in_scale)}f, (const int8_t*)in1, in2, in3[0], {epilogue}, out0);"]
    else:
        body = [f"  {name}({n}, {c}, {h}, {w}, {o}, {kh}, {kw}, {sh}, {sw}, {ph}, {pw}, {dh}, {dw}, {oh}, {ow}, "
                f"in0, {float.hex(in_scale)}f, in1, in2, in3[0], {epilogue}, out0);"]
    return k.function(body, helpers=_host_kernel(name, lambda host, threads: qconv.source(name, host, signed, threads,
                                                                                            tiling=k.tiling)))


def bf16_winograd(kernel: Operation) -> bool:
    """Whether bf16 conv ``kernel`` runs by Winograd F(2x2, 3x3) (``bf16_winograd.fits``: 3x3 stride 1,
    14x14 outputs or more, constant weights, static shapes): ``tensorize.Prepared`` then passes
    ``bf16_winograd.transform_weights`` of its weight operand."""
    from . import bf16_winograd as wino
    geometry = _static_geometry(kernel, "graph.bf16_conv")
    if geometry is None or not _constant_weights(kernel):
        return False
    _, _, _, _, _, kh, kw, sh, sw, _, _, dh, dw, oh, ow = geometry
    return wino.fits((kh, kw), (sh, sw), (dh, dw), oh, ow)


def bf16_winograd_weights(kernel: Operation, w_bits: np.ndarray) -> np.ndarray:
    """The weight operand of a ``bf16_winograd`` kernel as its 16 GEMMs read it."""
    from . import bf16_winograd as wino
    return wino.transform_weights(w_bits, int(kernel.operands[0].type.shape[1]))


def _bf16_conv_kernel(k: _Kernel) -> str:
    """bf16 2-D convolution (``graph.bf16_conv``) on ``bf16conv.py``: weights stored as bf16
    rows, the activations packed per image at run time, bias, residual and relu after the GEMM;
    3x3 stride-1 layers by Winograd F(2x2, 3x3) (``bf16_winograd.py``)."""
    from . import bf16_winograd as wino
    from . import bf16conv, nchwc
    at = k.op.attributes
    geometry = _conv_geometry(k.op, k.kernel)
    stride = int(k.kernel.operands[1].type.shape[1]) // 2
    hi = nchwc.clip_bound(at.get("clip_max"))
    residual = "in3" if len(k.kernel.operands) > 3 else "0"
    name = "tf_bf16conv"
    epilogue = f"in2, {residual}, {int(bool(at.get('relu', False)))}, {hi}, out0"
    if bf16_winograd(k.kernel):
        n, c, h, w, o, _, _, _, _, ph, pw, _, _, oh, ow = geometry
        body = [f"  {name}_winograd({n}, {c}, {h}, {w}, {o}, {ph}, {pw}, {oh}, {ow}, in0, in1, {wino.ustride(c)}, {epilogue});"]
    else:
        body = [f"  {name}({', '.join(str(v) for v in geometry)}, in0, in1, {stride}, {epilogue});"]
    return k.function(body, helpers=_host_kernel(name, lambda host, threads: bf16conv.source(name, host, threads)))


def _bf16_matmul_kernel(k: _Kernel) -> str:
    """bf16 x bf16 -> float32 matmul (``graph.bf16_matmul``) on the AVX512_BF16 kernel of
    ``bf16gemm.py``, the bias as its initial accumulator."""
    from . import bf16gemm
    kk, n, rows = _contraction_sizes(k)
    name = "tf_bf16gemm"
    body = [f"  {name}({rows}, {n}, {kk}, in0, {kk}, in1, in2, out0, {n});"]
    return k.function(body, helpers=_host_kernel(name, lambda host, threads: bf16gemm.source(name, host, threads=threads)))


def _contraction_sizes(k: _Kernel) -> tuple[int, int, int]:
    """(K, N, rows) of a low-precision matmul: its ``k``/``n`` attributes and the rows of all
    leading dims of the activations together."""
    at = k.op.attributes
    return int(at["k"]), int(at["n"]), int(dim_prod(k.kernel.operands[0].type.shape[:-1]))


def _host_kernel(name: str, source: Callable) -> str:
    """``source(host, threads)``, the C of kernel ``name`` for this machine's ISA and cores,
    guarded so that a model file holds it once."""
    from ..target import Target
    host = Target.host()
    guard = f"{name.upper()}_DEFINED"
    return f"#ifndef {guard}\n#define {guard}\n{source(host, max(1, host.cores))}\n#endif\n"


def _qgemm_text(name: str, signed: bool, tiling=None) -> str:
    """The int8 GEMM ``name`` for the host (VNNI where it has it; the exact scalar loop elsewhere)."""
    from . import qgemm
    return _host_kernel(name, lambda host, threads: qgemm.source(name, host, signed, threads=threads, tiling=tiling))


def _mbconv_kernel(k: _Kernel) -> str:
    """A depthwise blocked conv fused with the 1x1 convs around it (``graph.mbconv_nchwc``,
    ``nchwc_mbconv.py``), cut as its tuned ``BlockedParams`` say or by the untuned rules."""
    from . import nchwc_mbconv
    from ..target import Target
    host = Target.host()
    chain = nchwc_mbconv.chain_of(k.kernel, k.op)
    # each conv's weight and bias, the last one's residual after them (the op's own split)
    args = {stage: ops for stage, ops, _ in k.op.opdef.stages([f"in{i}" for i in range(len(k.kernel.operands))],
                                                              k.op.attributes)}
    last = args["project" if chain.project is not None else "dw"]
    residual = len(last) > 2
    name = nchwc_mbconv.kernel_name(chain, residual, k.tiling)
    helpers = nchwc_mbconv.source(name, chain, host, residual, max(1, host.cores), k.tiling)
    (we, be), (wd, bd), (wp, bp) = (args.get(s, ["0", "0"])[:2] for s in ("expand", "dw", "project"))
    call = f"  {name}(in0, {we}, {be}, {wd}, {bd}, {wp}, {bp}, {last[2] if residual else '0'}, out0);"
    return k.function([call], helpers=helpers)


def _conv_nchwc_kernel(k: _Kernel) -> str:
    """A blocked convolution (``graph.conv_nchwc``) with its epilogue, on ``nchwc.py``'s register
    tiles, cut as its tuned ``BlockedParams`` say (``k.tiling``) or by the untuned rules."""
    from . import nchwc
    from ..target import Target
    host = Target.host()
    at = k.op.attributes
    g = nchwc.ConvGeometry.of(k.kernel, k.op)
    # x, w and the bias if any; the residual; the gate (the op's own split of its operands)
    main, res, gate = k.op.opdef.split_operands([f"in{i}" for i in range(len(k.kernel.operands))], at)
    act = nchwc.epilogue_act(at)
    gated, residual = gate is not None, res is not None
    groups = conv_groups(k.op)
    params = k.tiling
    # (act is in the name: a SiLU and a plain conv of one geometry are two kernels)
    name = nchwc.conv_name(g, residual, act, at.get("clip_max"), groups, params) + ("_g" if gated else "")
    m = nchwc_winograd(k.kernel, params)
    threads = max(1, host.cores)
    if groups > 1:
        helpers = nchwc.dw_source(name, g, host, residual, act, at.get("clip_max"), threads,
                                  params.rows if params else 0)
    elif m:
        from . import nchwc_winograd as wino
        helpers = wino.source(name, g, m, host, residual, act, at.get("clip_max"), threads, params)
    else:
        helpers = nchwc.conv_source(name, g, host, residual, act, at.get("clip_max"), threads, params, gated)
    if len(main) > 2:
        bias = main[2]
        body = []
    else:
        bias = "tf_zero_bias"
        body = [f"  static const float tf_zero_bias[{g.ob * g.vw}] = {{0}};"]
    body.append(f"  {name}(in0, in1, {bias}, {res or '0'}, out0{f', {gate}' if gated else ''});")
    return k.function(body, helpers=helpers)


# The blocked convolutions the tuner cuts by ``nchwc.BlockedParams``.
BLOCKED_CONVS = ("graph.conv_nchwc", "graph.mbconv_nchwc")


def blocked_tunable(kernel: Operation) -> bool:
    """Whether ``kernel`` is a blocked float32 convolution (``graph.conv_nchwc``, static shapes) or a
    fused chain of them (``graph.mbconv_nchwc``): its ``nchwc.BlockedParams``
    (algorithm, register tile, input chunk, band) are a tuning knob (``tune/space.BlockedSpace``)."""
    if not is_library_kernel(kernel) or library_op(kernel).name not in BLOCKED_CONVS:
        return False
    return all(v.type.is_static for v in (kernel.operands[0], kernel.operands[1], kernel.results[0]))


def blocked_geometry(kernel: Operation):
    """(``nchwc.ConvGeometry``, groups) of the conv a ``blocked_tunable`` kernel's params cut: its
    own, or a fused chain's 1x1 conv (``nchwc_mbconv.Chain.tuned``; the band its ``BlockedParams``
    set counts the chain's output rows)."""
    from . import nchwc, nchwc_mbconv
    op = library_op(kernel)
    if op.name == "graph.mbconv_nchwc":
        return nchwc_mbconv.chain_of(kernel, op).tuned, 1
    return nchwc.ConvGeometry.of(kernel, op), conv_groups(op)


def blocked_algorithms(kernel: Operation) -> tuple[str, ...]:
    """The algorithms a ``blocked_tunable`` conv may run: "depthwise" for a depthwise one, "mbconv"
    for a fused chain; "direct", and both Winograd tile sizes for a 3x3 stride-1 one with constant
    weights (``nchwc_winograd.eligible``)."""
    from . import nchwc, nchwc_winograd as wino
    op = library_op(kernel)
    if op.name == "graph.mbconv_nchwc":
        return ("mbconv",)
    if conv_groups(op) != 1:
        return ("depthwise",)
    if _constant_weights(kernel) and wino.eligible(nchwc.ConvGeometry.of(kernel, op)):
        return ("direct", "winograd2", "winograd4")
    return ("direct",)


def nchwc_winograd(kernel: Operation, params=None) -> int:
    """m when a blocked conv kernel runs by Winograd F(m x m, 3x3), else 0: as its tuned
    ``BlockedParams`` name it, else by ``nchwc_winograd.tile_size`` (3x3 stride 1 over enough
    tiles); only with constant weights (transformed at compile time)."""
    if not blocked_tunable(kernel) or "winograd2" not in blocked_algorithms(kernel):
        return 0
    if params is not None and params.algorithm:
        return {"winograd2": 2, "winograd4": 4}.get(params.algorithm, 0)
    from . import nchwc, nchwc_winograd as wino
    return wino.tile_size(nchwc.ConvGeometry.of(kernel, library_op(kernel)))


def nchwc_winograd_weights(kernel: Operation, w: np.ndarray, params=None) -> np.ndarray:
    """The weight operand of an ``nchwc_winograd`` kernel: ``U [a*a][OB][CB][16][16]``."""
    from . import nchwc_winograd as wino
    return wino.transform_weights(w, nchwc_winograd(kernel, params))


def _layout_transform_kernel(k: _Kernel) -> str:
    """``graph.layout_transform`` of an activation (a weight's is folded at compile time; one that
    is not gets plain loops)."""
    from . import nchwc
    from ...dialects.graph.layout import LayoutTransform
    x, y = k.kernel.operands[0].type, k.kernel.results[0].type
    if not (x.is_static and y.is_static):
        raise CompileError(f"layout_transform{k.op.location_str()}: blocked layouts need static shapes")
    (skind, _), (dkind, _) = LayoutTransform.kinds(k.op.attributes)
    if "NCHWc" in (skind, dkind):
        return k.function(nchwc.transform_source(x.shape, y.shape, dkind == "NCHWc"))
    return k.function(nchwc.weight_transform_source(x.shape, y.shape, dkind == "OIHWio"))


def _blocked_pool_kernel(k: _Kernel) -> str:
    """A pool on NCHW[x]c (``graph.*_pool_nchwc``): 2-D windows or global, float32."""
    from . import nchwc
    x, y = k.kernel.operands[0].type, k.kernel.results[0].type
    block = x.shape[-1] if x.rank == 5 else 0
    if (x.dtype is not DType.f32 or not (x.is_static and y.is_static) or block < 1 or block & (block - 1)):
        raise CompileError(f"{k.op.name}{k.op.location_str()}: the blocked pools take static 2-D float32 tensors "
                           f"blocked by a power of two, got {x}")
    kind = k.op.name.split(".")[1][:-len("_pool_nchwc")]
    return k.function(nchwc.pool_source(kind, x.shape, y.shape, k.op.attributes), helpers=nchwc.pool_helpers(block))


_GENERATORS: dict[str, Callable[[_Kernel], str]] = {
    "graph.max_pool": _max_pool_kernel,
    "graph.qmatmul": _qmatmul_kernel,
    "graph.qconv": _qconv_kernel,
    "graph.bf16_matmul": _bf16_matmul_kernel,
    "graph.bf16_conv": _bf16_conv_kernel,
    "graph.nonzero": _nonzero_kernel,
    "graph.compress": _compress_kernel,
    "graph.unique": _unique_kernel,
    "graph.non_max_suppression": _nms_kernel,
    "graph.scatter_nd": _scatter_nd_kernel,
    "graph.grid_sample": _grid_sample_kernel,
    "graph.roi_align": _roi_align_kernel,
    "graph.deform_conv": _deform_conv_kernel,
    "graph.conv_nchwc": _conv_nchwc_kernel,
    "graph.mbconv_nchwc": _mbconv_kernel,
    "graph.layout_transform": _layout_transform_kernel,
    "graph.max_pool_nchwc": _blocked_pool_kernel,
    "graph.avg_pool_nchwc": _blocked_pool_kernel,
    "graph.global_avg_pool_nchwc": _blocked_pool_kernel,
    "graph.global_max_pool_nchwc": _blocked_pool_kernel,
}


def _fixed_size(op: Operation) -> bool:
    return bool(getattr(op.opdef, "library_kernel", False)) or hasattr(op.opdef, "library_kernel_if")


def emit_library_kernel(kernel: Operation, symbols: Sequence[str] | None, tiling=None) -> str | None:
    """The C of a library kernel as ``static void KERNEL_NAME(inputs..., outputs..., tf_dims)``
    (guarded helpers before it), or None when ``kernel`` is not a library kernel.  ``symbols`` is
    the model's symbol order (the ``tf_dims`` order); it holds the op's count symbol.  ``tiling``:
    a tuned ``qgemm.Tiling`` for an int8 GEMM or convolution (``int8_tunable``), tuned
    ``nchwc.BlockedParams`` for a blocked conv (``blocked_tunable``)."""
    if not is_library_kernel(kernel):
        return None
    op = library_op(kernel)
    gen = _GENERATORS.get(op.name)
    if gen is None:
        raise CompileError(f"no library kernel for '{op.name}'{op.location_str()}")
    for v in list(kernel.operands) + list(kernel.results):
        if v.type.dtype is DType.bf16:
            raise CompileError(f"library kernel '{op.name}': bf16 tensors are widened to f32 before lowering "
                               f"(lower_function); got {v.type}")
    fixed = _fixed_size(op)                                      # no count symbol (scatter, grid_sample)
    k = (_FixedKernel if fixed else _Kernel)(kernel, symbols or [])
    k.tiling = tiling if int8_tunable(kernel) or blocked_tunable(kernel) else None
    return gen(k)


def _int8_gemm_engine() -> str:
    """What the host's int8 GEMM blocks run on: AMX tiles (``qgemm_amx``) or vpdpbusd vectors."""
    from . import qgemm_amx
    return "AMX-tile (tdpbusd)" if qgemm_amx.available() else "VNNI (vpdpbusd)"


def describe(kernel: Operation, params=None) -> str:
    """One line for ``explain``: what a library kernel runs (``params``: its tuned ones)."""
    op = library_op(kernel)
    why = "fixed size" if _fixed_size(op) else "data-dependent size"
    text = f"library kernel: hand-written C for {op.name} ({why})"
    if op.name == "graph.qconv":
        from . import qconv_direct
        if conv_groups(op) > 1:
            how = "int8 depthwise: " + ("16 channels in the vector lanes, vpdpbusd (a small 3x3 plane)"
                                        if _depthwise_lanes(kernel) else "per-channel flat loops")
        elif _qconv_direct(kernel):
            when = "at compile time" if qconv_arranged(kernel) else "per call"
            how = (f"int8 direct convolution on channel-quad interleaved padded planes, weights arranged {when}, "
                   f"tiles of {qconv_direct.MR} channels x {16 * qconv_direct.NRV} positions")
        elif qconv_transposed(kernel):
            how = (f"int8 {_int8_gemm_engine()} GEMM transposed: output positions x channels, the activations transposed "
                   "per call, the weights packed at compile time")
        elif _qconv_short_k(kernel):
            how = "int8 1x1 with a short K: vpdpbusd sums kept in registers through the epilogue"
        else:
            how = f"int8 {_int8_gemm_engine()} GEMM on activations packed per image (im2col for windows wider than 1x1)"
        text += f"; {how}"
    elif op.name == "graph.qmatmul":
        text += f"; int8 {_int8_gemm_engine()} GEMM, the weights packed at compile time"
    elif op.name == "graph.bf16_conv":
        how = ("bf16 Winograd F(2x2, 3x3): 16 vdpbf16ps GEMMs on the transformed tiles, weights transformed "
               "at compile time" if bf16_winograd(kernel) else f"bf16 {_bf16_gemm_engine()} GEMM on activations packed per image")
        text += f"; {how}"
    elif op.name == "graph.bf16_matmul":
        text += f"; bf16 {_bf16_gemm_engine()} GEMM, the weights packed at compile time"
    elif op.name == "graph.conv_nchwc":
        text += f"; {_describe_conv_nchwc(kernel, op, params)}"
    elif op.name == "graph.mbconv_nchwc":
        from . import nchwc_mbconv
        from ..target import Target
        text += f"; {nchwc_mbconv.describe(nchwc_mbconv.chain_of(kernel, op), Target.host(), params)}"
    return text


def _describe_conv_nchwc(kernel: Operation, op: Operation, params=None) -> str:
    """What a blocked conv runs (``nchwc.py``, ``nchwc_winograd.py``) and how it is cut."""
    from . import nchwc
    from ..target import Target
    g = nchwc.ConvGeometry.of(kernel, op)
    tuned = " (tuned)" if params is not None else ""
    if conv_groups(op) > 1:
        rows = params.rows if params is not None and params.rows else nchwc.dw_rows(Target.host())
        return f"NCHW{g.vw}c depthwise, channels in the lanes, {rows}-position tiles{tuned}"
    m = nchwc_winograd(kernel, params)
    if m:
        return (f"NCHW{g.vw}c Winograd F({m}x{m}, 3x3): vector transforms, {(m + 2) ** 2} 1x1 blocked products "
                f"over the tiles, weights transformed at compile time{tuned}")
    gate = op.opdef.split_operands(list(range(len(kernel.operands))), op.attributes)[2]
    sub = nchwc.subsampled(g, gated=gate is not None)
    run = sub or g
    p = nchwc.conv_plan(run, Target.host(), params)
    groups = (f" (groups of {', '.join(map(str, p.groups))} output blocks: an even share a thread)"
              if p.groups else "")
    return (f"NCHW{g.vw}c direct{' on a subsampled copy of x' if sub else ''}: tiles of {p.rows} positions x "
            f"{p.blocks} output blocks{groups}, input blocks in chunks of {p.chunk}, "
            + ("the whole map a work unit" if nchwc.small_map(run) else f"bands of {p.band} rows") + tuned)


def _bf16_gemm_engine() -> str:
    """What the host's bf16 GEMM sweeps run on: AMX tiles (``bf16gemm_amx``) or vdpbf16ps vectors."""
    from . import bf16gemm_amx
    return "AMX-tile (tdpbf16ps)" if bf16gemm_amx.available() else "vdpbf16ps"


__all__ = ["BLOCKED_CONVS", "INT8_TUNED_OPS", "bf16_winograd", "bf16_winograd_weights", "blocked_algorithms",
           "blocked_geometry", "blocked_tunable",
           "conv_groups", "describe", "emit_library_kernel",
           "nchwc_winograd", "nchwc_winograd_weights",
           "int8_tunable", "qconv_arranged",
           "qconv_arranged_weights", "qconv_transposed", "qconv_transposed_weights"]
