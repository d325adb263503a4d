"""Library kernels: hand-written C for graph ops that have no tensor-expression form.

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
        write = [f"  int64_t* const tf_dims_out = (int64_t*)tf_dims;   /* the runtime's array: writable */"]
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


_GENERATORS: dict[str, Callable[[_Kernel], str]] = {
    "graph.nonzero": _nonzero_kernel,
    "graph.compress": _compress_kernel,
    "graph.unique": _unique_kernel,
    "graph.non_max_suppression": _nms_kernel,
}


def emit_library_kernel(kernel: Operation, symbols: Sequence[str] | None) -> str | None:
    """The C of a library kernel as ``static void KERNEL_NAME(inputs..., outputs..., tf_dims)``
    (guarded helpers before it), or None when ``kernel`` is not a library kernel.  ``symbols`` is
    the model's symbol order (the ``tf_dims`` order); it holds the op's count symbol."""
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
    return gen(_Kernel(kernel, symbols or []))


def describe(kernel: Operation) -> str:
    """One line for ``explain``: what a library kernel runs."""
    return f"library kernel: hand-written C for {library_op(kernel).name} (data-dependent size)"


__all__ = ["describe", "emit_library_kernel"]
