"""A pointwise (1x1) convolution fused with the depthwise convolution that consumes it, in bands.

An inverted-residual block (MobileNetV2, EfficientNet) first expands its channels with a 1x1
convolution, then runs a depthwise 3x3 or 5x5 on the expanded tensor: MobileNetV2's second block
expands 16 planes of 112x112 to 96 (4.8 MB per image) and its depthwise layer reads them back.
As two kernels that tensor leaves the GEMM's core for L3 and the depthwise kernel streams it in
again, in a different order than it was written.  Fused, a thread takes one band of the depthwise
layer's output rows of one image: the 1x1 GEMM computes the input rows that band needs, every
expanded channel, into a per-thread buffer (``BAND_BYTES``, in L2) with its epilogue (bias, ReLU6
or SiLU), and the depthwise routine reads them from there and writes the band of its output with
its own epilogue.  The expanded tensor is never written to memory.

The price is the band's halo: a band of ``R`` output rows reads ``(R - 1) * sh + kh`` input rows,
so the rows between two bands are computed by both (``HALO_MAX`` bounds that share).  The
arithmetic is the two kernels', unchanged: the layer's generated GEMM with the 1x1 kernel's
packed weights and register tile on the band's columns, then the depthwise routine
(``depthwise.source``) and its epilogue callback on each chunk of a plane's rows, so results are
bit-identical to the unfused kernels at any band size or thread count.

Pairs are found at model emission (``find_pairs``): a 1x1 GEMM with compile-time weights whose
output (at least ``MIN_BYTES`` per image) only the depthwise kernel right after it reads, the
depthwise kernel on the row-vector routine, static shapes.  A depthwise kernel that ``dw_pw``
fuses with the 1x1 after it keeps that fusion.  ``TENSORFORGE_PW_DW=0`` turns this one off
(comparisons).
"""
from __future__ import annotations

import os

from ...ir.core import Operation
from . import depthwise
from .dw_pw import _count, _digest, _params, band_input_rows, dw_parts, even_bands, gemm_parts, pair_parts
from .tensorize import KERNEL_NAME, KernelPlan, Prepared, _guarded, _offset, _packed_b_floats, _prelude

ENV = "TENSORFORGE_PW_DW"
# Expanded rows of one band, all channels (per thread): written by the GEMM, read by the depthwise
# routine right after, both from L2 (2 MB per core on the machines measured).
BAND_BYTES = 768 << 10
# Only expanded tensors at least this large per image: smaller ones stay in L2 between the kernels.
MIN_BYTES = 1 << 20
# At most this share of extra 1x1 work on the bands' halo rows.
HALO_MAX = 0.10


def enabled() -> bool:
    return os.environ.get("TENSORFORGE_PW_DW", "1").strip().lower() not in ("0", "off", "false", "no")


def _rows_in(s: depthwise.DepthwiseShape, rows: int) -> int:
    """Input rows a band of ``rows`` output rows reads (at most the image's)."""
    return min(s.h, s.rows_read(rows))


def band_rows(dw: KernelPlan, rows: int = 0) -> tuple[int, int]:
    """(output rows per band, bands per image): even bands of ``rows`` rows when the tuner chose
    them (``Tuning.fusion_for``), else even bands whose expanded input rows fit ``BAND_BYTES``."""
    s = dw.plan.shape
    if not rows:
        row_bytes = dw.plan.channels * s.w * 4
        rows = s.oh
        while rows > 1 and _rows_in(s, rows) * row_bytes > BAND_BYTES:
            rows -= 1
    return even_bands(s.oh, rows)


def _halo_share(dw: KernelPlan, rows: int = 0) -> float:
    """Extra 1x1 work of the bands' overlapping input rows, as a share of the layer's."""
    s = dw.plan.shape
    rows, bands = band_rows(dw, rows)
    computed = sum(_rows_in_band(s, b * rows, min(s.oh, (b + 1) * rows)) for b in range(bands))
    return computed / s.h - 1.0


def _rows_in_band(s: depthwise.DepthwiseShape, oh0: int, oh1: int) -> int:
    a = max(0, oh0 * s.sh - s.ph)
    b = min(s.h, (oh1 - 1) * s.sh - s.ph + s.rows_read(1))
    return max(0, b - a)


def fusable(pw: KernelPlan, pw_op: Operation, dw: KernelPlan, dw_op: Operation) -> bool:
    """Whether ``dw_op`` (the kernel right after ``pw_op``) can read ``pw_op``'s output in bands:
    a 1x1 GEMM (not transposed, weights packed at compile time, B the activation read in place
    as [K, positions]) whose output only the depthwise kernel reads, as its input planes; the
    depthwise kernel static and on the row-vector routine; an expanded tensor of at least
    ``MIN_BYTES`` per image, split with at most ``HALO_MAX`` extra work; a batch that gives every
    thread whole images.  With one image split between the threads the bands' costs (the halo,
    narrower GEMMs) ate the saving: MobileNetV2 and EfficientNet-B0 at batch 1 ran 0.98x and
    1.00x fused, EfficientNet-B0 at batch 8 1.03x (paired, one process each)."""
    if pw.kind != "gemm" or pw.transposed or not pw.a_packed or pw.plan.b.arg in pw.packed_args:
        return False
    if dw.kind != "depthwise" or dw.dw_lanes or dw.dw_params.group_outputs:
        return False
    if len(pw_op.results) != 1 or len(dw_op.results) != 1:
        return False
    v = pw_op.results[0]
    p = dw.plan
    if [u for u, _ in v.uses] != [dw_op] or dw_op.operands[p.x.arg] is not v:     # its one use: the planes
        return False
    g, r, s = pw.plan, pw.roles, p.shape
    count, threads = _count(pw), pw.target.cores
    if count is None or count != _count(dw) or not all(isinstance(d, int) for d in (r.M, r.N, r.K)):
        return False
    if count < max(2, threads) or (count % threads and count < 4 * threads):
        return False
    n = s.h * s.w
    if r.N != n or r.M != p.channels or p.x_channel_stride != n:
        return False
    if not (g.c.const == 0 and g.ldc == n and g.b.cs == 1 and g.b.rs == n and g.b.flat.const == 0):
        return False
    if list(p.x_batch_stride.values()) != [p.channels * n] * len(p.x_batch_stride):
        return False
    return r.M * n * 4 >= MIN_BYTES and _halo_share(dw) <= HALO_MAX


def find_pairs(func_body, tz: Prepared | None, taken: set[int]) -> dict[int, Operation]:
    """id(1x1 kernel) -> the depthwise kernel right after it that it fuses with (``fusable``);
    kernels in ``taken`` (already fused otherwise) are left alone."""
    if tz is None or tz.table is not None or not enabled():
        return {}
    kernels = [op for op in func_body if op.name == "structured.kernel"]
    pairs: dict[int, Operation] = {}
    for a, b in zip(kernels, kernels[1:]):
        if id(a) in taken or id(b) in taken or id(a) in pairs:
            continue
        pw, dw = tz.plans.get(id(a)), tz.plans.get(id(b))
        if pw is not None and dw is not None and fusable(pw, a, dw, b):
            pairs[id(a)] = b
    return {k: v for k, v in pairs.items() if k not in {id(x) for x in pairs.values()}}


def _pw_band(pw: KernelPlan, kernel: Operation, plane: int) -> tuple[str, str, int]:
    """(helper text, routine name, the GEMM's register tile width): the 1x1 GEMM on input rows
    [ih_a, ih_b) of image ``bt`` into ``e`` (channel c's rows at ``e + c * plane``), the kernel's
    register tile and packed weights, its epilogue reads moved to the band's first column."""
    g, r = pw.plan, pw.roles
    helpers, gname, nr, decl, epi, names = gemm_parts(pw)
    params_c = ", ".join(_params(kernel, pw.packed_args, "in")[:-1])
    body = f"""(const long bt, const long j0, const long nb, float *restrict e, float *restrict ws, {params_c}) {{
  {decl}
  {gname}({r.M}, nb, {r.K}, in{g.a.arg}, {r.K}, in{g.b.arg} + ({_offset(g.b.flat, names)}) + j0, {g.b.rs}, e, {plane}, 0, {epi}, ws);
}}
"""
    routine = f"tfpwd_{_digest(body)}"
    return helpers + _guarded(routine, f"static inline void {routine}{body}"), routine, nr


def _dw_band(dw: KernelPlan, kernel: Operation, plane: int) -> tuple[str, str]:
    """(helper text, routine name): output rows [oh0, oh1) of image ``bt`` of every channel, the
    input rows [ih_a, ih_b) read from ``e`` (plane c at ``e + c * plane``), each chunk of rows
    then through the layer's epilogue, as ``KernelPlan._depthwise`` computes and finishes them."""
    p = dw.plan
    s = p.shape
    helpers, name, chunk, stage, decl, names, edecl, fn, ctx = dw_parts(dw)
    finish = (f"      {fn}({ctx}, y + a * {s.ow}L, {p.ldc}, c, a * {s.ow}L, 1, (tf_min(a + {chunk}, oh1) - a) * {s.ow}L);\n"
              if edecl else "")
    params = ", ".join(_params(kernel, dw.packed_args, "in"))
    body = f"""(const long bt, const long oh0, const long oh1, const long ih_a, const float *restrict e,
    float *restrict st, {params}) {{
  static const {depthwise.SHAPE_TYPE} shape = {s.c_init(dw.target.vector_width)};
  {' '.join(decl + edecl)}
  for (long c = 0; c < {p.channels}; c++) {{
    const float *x = e + c * {plane}L - ih_a * {s.w}L;     /* plane c's input row ih at x + ih * w */
    float *y = out0 + ({_offset(p.c, names)}) + c * {p.ldc}L;
    for (long a = oh0; a < oh1; a += {chunk}) {{
      {name}_chunk(&shape, x, in{p.w.arg} + c * {s.kh * s.kw}L, y, a, tf_min(a + {chunk}, oh1),
                   st, st + {stage}L);
{finish}    }}
  }}
}}
"""
    routine = f"tfdwe_{_digest(body)}"
    return helpers + _guarded(routine, f"static inline void {routine}{body}"), routine


def emit(pw: KernelPlan, pw_op: Operation, dw: KernelPlan, dw_op: Operation, rows: int = 0) -> str:
    """The fused kernel's C: helpers, then ``static void KERNEL_NAME(a0.. (pw_op's operands),
    b0.. (dw_op's operands; the 1x1 output's slot is not read), out0)``; ``rows``: the tuned
    band (``band_rows``)."""
    target = pw.target
    p = dw.plan
    s, vw = p.shape, target.vector_width
    rows, bands = band_rows(dw, rows)
    plane = _rows_in(s, rows) * s.w
    ptext, pname, nr = _pw_band(pw, pw_op, plane)
    dtext, dname = _dw_band(dw, dw_op, plane)
    ws = _packed_b_floats(pw.roles.K, plane, nr)
    scratch = s.scratch_floats(vw, dw.dw_params.chunk_outputs)
    sig, a, b, parallel = pair_parts(pw_op, pw, dw_op, dw)
    count = _count(dw)
    return f"""{_prelude(target)}{ptext}{dtext}
static void {KERNEL_NAME}({sig}) {{
  /* pointwise + depthwise in bands of {rows} output rows (pw_dw.py) */
  {parallel}
  {{
    float *e = tf_alloc({p.channels * plane}), *st = tf_alloc({scratch}), *ws = tf_alloc({ws});
    #pragma omp for schedule(static)
    for (long u = 0; u < {count * bands}L; u++) {{
      const long bt = u / {bands}, oh0 = (u - bt * {bands}) * {rows}, oh1 = tf_min(oh0 + {rows}, {s.oh});
{band_input_rows(s, "      ")}
      {pname}(bt, ih_a * {s.w}L, (ih_b - ih_a) * {s.w}L, e, ws, {', '.join(a)});
      {dname}(bt, oh0, oh1, ih_a, e, st, {', '.join(b)}, out0);
    }}
    free(e);
    free(st);
    free(ws);
  }}
}}
"""


def describe(pw: KernelPlan, dw: KernelPlan, rows: int = 0) -> str:
    """The fused kernel's schedule for people (``explain``)."""
    tuned = " (tuned)" if rows else ""
    halo = _halo_share(dw, rows)
    rows, bands = band_rows(dw, rows)
    s = dw.plan.shape
    return (f"{pw.describe()}\n{dw.describe()}\npointwise + depthwise fused (pw_dw.py): per image {bands} band(s) of "
            f"{rows} output rows{tuned}; each band's {_rows_in(s, rows)} expanded input rows ({dw.plan.channels} channels) "
            f"stay in a per-thread buffer that the depthwise routine reads at once "
            f"({halo:.0%} extra 1x1 work on the halo rows)")
