"""A depthwise convolution fused with the pointwise (1x1) convolution that consumes it, in bands.

An inverted-residual block (MobileNetV2) runs a depthwise 3x3 and then a 1x1 convolution on its
output.  As two kernels, the depthwise layer writes its whole output (MobileNetV2's first block:
32 planes of 112x112, 1.6 MB per image) and the 1x1 GEMM reads it back: from memory at batch 8,
and as 32 rows 50 KB apart whose streams the prefetchers do not keep up with (that GEMM ran at a
third of onnxruntime's speed inside the model).  Fused, a thread takes one band of output rows of
one image: it computes the band's depthwise outputs for every channel into a per-thread buffer
(``BAND_BYTES``, in L2), applies the depthwise layer's epilogue (bias, ReLU6), then runs the 1x1
GEMM on that buffer and writes the band of the block's output with the 1x1 layer's epilogue (bias,
the residual add).  Nothing is recomputed: a 1x1 convolution reads each depthwise output at its
own position only, so bands of output rows split both layers exactly; only the depthwise input's
halo rows are staged twice.  XNNPACK and TVM fuse inverted residual blocks the same way.

The arithmetic is the two kernels', unchanged: the depthwise routine (``depthwise.source``) and
its epilogue callback on each channel's rows of the band, and the layer's generated GEMM with
the same register tile (the packed weights are the 1x1 kernel's) on ``nb`` columns at a time, its
epilogue reads offset to the band's first column.  So results are bit-identical to the unfused
kernels, at any band size or thread count.

Pairs are found at model emission (``find_pairs``): a depthwise kernel on the row-vector routine
(wide planes; the channels-in-lanes kernel of 14x14 and 7x7 planes keeps its own), immediately
followed by the 1x1 GEMM that is its output's only user, static shapes.  The memory plan keeps
the depthwise kernel's inputs alive until the fused call (``keep_alive``), and the depthwise
output gets no arena space.  ``TENSORFORGE_DW_PW=0`` turns the fusion off (comparisons).
"""
from __future__ import annotations

import hashlib
import os
from typing import NamedTuple

from ...ir.core import Operation
from ..target import Target
from . import depthwise
from .emit_loop import c_type
from .tensorize import (B_DIRECT_MAX_K, B_DIRECT_MAX_M, KERNEL_NAME, KernelPlan, Prepared, _batch_index, _epi_callback,
                        _epi_pair, _gemm_params, _gemm_source, _guarded, _offset, _packed_b_floats, _prelude, _strided)

ENV = "TENSORFORGE_DW_PW"          # "0": the two kernels apart (comparisons; ``enabled`` reads it)
# Depthwise outputs of one band, all channels (per thread): the 1x1 GEMM reads them from L2 right
# after they are written, next to its weights and the band's output tiles.
BAND_BYTES = 256 << 10


def enabled() -> bool:
    return os.environ.get("TENSORFORGE_DW_PW", "1").strip().lower() not in ("0", "off", "false", "no")


def _count(plan: KernelPlan) -> int | None:
    """The static batch count of a plan with at most one batch axis, else None."""
    batch = plan.roles.batch
    if len(batch) > 1:
        return None
    count = batch[0].extent if batch else 1
    return count if isinstance(count, int) else None


def fusable(dw: KernelPlan, dw_op: Operation, pw: KernelPlan, pw_op: Operation) -> bool:
    """Whether ``pw_op`` (the kernel right after ``dw_op``) can consume ``dw_op``'s output in bands:
    a static depthwise kernel on the row-vector routine whose output only ``pw_op`` reads, as the B
    of a 1x1 GEMM (channels as K, the plane's positions as N, both contiguous as the depthwise
    kernel writes them) with its weights packed at compile time, at a batch that gives every
    thread whole images.  At batch 1 the activations stay in L3 and the bands' own costs win
    (halo rows staged twice, narrower GEMMs): MobileNetV2 ran 0.96x fused on 2 threads and
    0.97x on one, against 1.03x and 1.02x at batch 8."""
    if dw.kind != "depthwise" or dw.dw_lanes or dw.dw_params.group_outputs or pw.kind != "gemm" or pw.transposed:
        return False
    if not pw.a_packed or pw.plan.b.arg in pw.packed_args or len(dw_op.results) != 1 or len(pw_op.results) != 1:
        return False
    v = dw_op.results[0]
    if [u for u, _ in v.uses] != [pw_op] or pw_op.operands[pw.plan.b.arg] is not v:
        return False
    p, g = dw.plan, pw.plan
    s, r = p.shape, pw.roles
    n = s.oh * s.ow
    count, T = _count(dw), dw.target.cores
    if count is None or count != _count(pw) or not all(isinstance(d, int) for d in (r.M, r.N, r.K)):
        return False
    if count < max(2, T) or (count % T and count < 4 * T):
        return False
    if r.N != n or r.K != p.channels or p.ldc != n or p.c.const != 0:
        return False
    return g.b.cs == 1 and g.b.rs == n and g.b.flat.const == 0 and g.ldc == n


def find_pairs(func_body, tz: Prepared | None) -> dict[int, Operation]:
    """id(depthwise kernel) -> the 1x1 kernel right after it that it fuses with (``fusable``)."""
    if tz is None or tz.table is not None or not enabled():
        return {}
    kernels = [op for op in func_body if op.name == "structured.kernel"]
    pairs: dict[int, Operation] = {}
    for a, b in zip(kernels, kernels[1:]):
        dw, pw = tz.plans.get(id(a)), tz.plans.get(id(b))
        if dw is not None and pw is not None and id(a) not in pairs and fusable(dw, a, pw, b):
            pairs[id(a)] = b
    return {k: v for k, v in pairs.items() if k not in {id(x) for x in pairs.values()}}


def even_bands(oh: int, rows: int) -> tuple[int, int]:
    """(rows per band, bands per image) of ``oh`` output rows split into even bands of at most
    ``rows`` rows (clipped to [1, oh]): the last band is never much shorter than the others."""
    bands = -(-oh // min(max(1, rows), oh))
    rows = -(-oh // bands)
    return rows, -(-oh // rows)


def band_choices(oh: int) -> list[int]:
    """Every distinct row count ``even_bands`` gives for ``oh`` output rows (the tuner's choices
    of a fused pair's band, ``tune/space.FusionSpace``), ascending."""
    return sorted({even_bands(oh, r)[0] for r in range(1, oh + 1)})


def band_rows(dw: KernelPlan, rows: int = 0) -> tuple[int, int]:
    """(rows per band, bands per image): even bands of ``rows`` rows when the tuner chose them
    (``Tuning.fusion_for``), else of at most ``BAND_BYTES`` of depthwise outputs."""
    s = dw.plan.shape
    if not rows:
        rows = -(-s.oh // min(s.oh, max(1, -(-s.oh * dw.plan.channels * s.ow * 4 // BAND_BYTES))))
    return even_bands(s.oh, rows)


def _params(kernel: Operation, packed: set[int], prefix: str) -> list[str]:
    ps = [f"const {'float' if i in packed else c_type(v.type)}* restrict {prefix}{i}" for i, v in enumerate(kernel.operands)]
    return ps + [f"{c_type(r.type)}* restrict out{j}" for j, r in enumerate(kernel.results)]


def pair_parts(first_op: Operation, first: KernelPlan, second_op: Operation,
               second: KernelPlan) -> tuple[str, list[str], list[str], str]:
    """(C parameter list, the first kernel's argument names, the second's, the parallel pragma)
    of a fused pair's kernel ``KERNEL_NAME(a0.. (first's operands), b0.. (second's), out0)``."""
    a = [f"a{i}" for i in range(len(first_op.operands))]
    b = [f"b{i}" for i in range(len(second_op.operands))]
    sig = ", ".join(_params(first_op, first.packed_args, "a")[:-1] + _params(second_op, second.packed_args, "b"))
    parallel = "#pragma omp parallel" if first.target.cores > 1 else "#pragma omp parallel num_threads(1)"
    return sig, a, b, parallel


def band_input_rows(s: depthwise.DepthwiseShape, indent: str) -> str:
    """C declaring ``ih_a``, ``ih_b``: the input rows that output rows [oh0, oh1) read, clipped to
    the image."""
    return (f"{indent}long ih_a = oh0 * {s.sh} - {s.ph}, ih_b = (oh1 - 1) * {s.sh} - {s.ph} + {s.rows_read(1)};\n"
            f"{indent}if (ih_a < 0) ih_a = 0;\n"
            f"{indent}if (ih_b > {s.h}) ih_b = {s.h};")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class DwParts(NamedTuple):
    """What a fused kernel's depthwise band routine is built from: the routines' C (the
    depthwise ``source`` and the epilogue callback), the routine name, output rows per call of
    its ``_chunk`` routine and the staged floats that call takes, the batch index declarations
    and names, the epilogue's declarations and its callback and context (``"0"`` without one)."""

    helpers: str
    name: str
    chunk: int
    stage: int
    decl: list
    names: dict
    edecl: list
    fn: str
    ctx: str


def dw_parts(dw: KernelPlan) -> DwParts:
    p = dw.plan
    s, vw = p.shape, dw.target.vector_width
    name = depthwise.routine_name(p.kernel, p.strides, p.dilations, vw)
    chunk_outputs = dw.dw_params.chunk_outputs
    decl, names = _batch_index(dw.roles.batch, "bt")
    etext, edecl, epi = _epi_callback(dw.chain, names)
    fn, ctx = _epi_pair(epi)
    helpers = (depthwise.SHAPE_TYPEDEF + _guarded(name, depthwise.source(p.kernel, p.strides, p.dilations, vw, name))
               + etext)
    return DwParts(helpers, name, s.chunk_rows(vw, chunk_outputs), s.stage_floats(vw, chunk_outputs), decl, names,
                   edecl, fn, ctx)


def _dw_band(dw: KernelPlan, kernel: Operation) -> tuple[str, str]:
    """(helper text, routine name): output rows [oh0, oh1) of image ``bt`` of every channel plane
    into ``d`` (plane c at ``d + c * nb``), each channel's rows then through the layer's epilogue,
    as ``KernelPlan._depthwise`` computes and finishes them."""
    p = dw.plan
    s = p.shape
    helpers, name, chunk, stage, decl, names, edecl, fn, ctx = dw_parts(dw)
    finish = f"    {fn}({ctx}, d + c * nb, nb, c, j0, 1, nb);\n" if edecl else ""
    params = ", ".join(_params(kernel, dw.packed_args, "in")[:-1])
    body = f"""(const long bt, const long oh0, const long oh1, float *restrict d, float *restrict st, {params}) {{
  static const {depthwise.SHAPE_TYPE} shape = {s.c_init(dw.target.vector_width)};
  {' '.join(decl + edecl)}
  const long j0 = oh0 * {s.ow}L, nb = (oh1 - oh0) * {s.ow}L;
  const float *restrict x = {_strided(f"in{p.x.arg}", p.x_batch_stride, names)};
{band_input_rows(s, "  ")}
  for (long c = 0; c < {p.channels}; c++) {{
    float *y = d + c * nb - j0;      /* plane c's row oh lands at d + c * nb + (oh - oh0) * ow */
    if (c + 1 < {p.channels}) {{       /* the next plane's rows: a new stream the prefetchers would ramp up on */
      const char *q = (const char *)(x + (c + 1) * {p.x_channel_stride}L + ih_a * {s.w}L);
      for (long i = 0; i < (ih_b - ih_a) * {s.w * 4}L; i += 64) __builtin_prefetch(q + i, 0, 2);
    }}
    for (long a = oh0; a < oh1; a += {chunk})
      {name}_chunk(&shape, x + c * {p.x_channel_stride}L, in{p.w.arg} + c * {s.kh * s.kw}L, y, a, tf_min(a + {chunk}, oh1),
                   st, st + {stage}L);
{finish}  }}
}}
"""
    routine = f"tfdwb_{_digest(body)}"
    return helpers + _guarded(routine, f"static inline void {routine}{body}"), routine


class GemmParts(NamedTuple):
    """What a fused kernel's band routine for a 1x1 layer is built from: the generated GEMM's C
    and the epilogue's, the GEMM's name and register tile width, the declarations of the batch
    index and the epilogue (reads moved to column ``j0``), the GEMM call's epilogue arguments
    and the batch names."""

    helpers: str
    gname: str
    nr: int
    decl: str
    epi: str
    names: dict


def gemm_parts(pw: KernelPlan) -> GemmParts:
    """The 1x1 kernel's own GEMM (register tile, packed weights' panels) for a band of columns."""
    r, target = pw.roles, pw.target
    params = pw.tuned(_gemm_params(target, r.N, 1, r.M, r.K))
    assert params.mr == pw.mr, "the band GEMM must read the weights in the panels they were packed in"
    b_direct = r.M <= B_DIRECT_MAX_M and r.K <= B_DIRECT_MAX_K
    gname, gtext = _gemm_source(params, target, False, False, True, b_direct)
    decl, names = _batch_index(r.batch, "bt")
    etext, edecl, epi = _epi_callback(pw.chain, names, col0="j0", registers=True)
    return GemmParts(gtext + etext, gname, params.nr, " ".join(decl + edecl), epi, names)


def _pw_band(pw: KernelPlan, kernel: Operation) -> tuple[str, str, int]:
    """(helper text, routine name, the GEMM's register tile width): the 1x1 GEMM on columns
    [j0, j0 + nb) of image ``bt``, B being the band buffer ``d`` (row stride nb), with the kernel's
    register tile (its packed weights' panels) and its epilogue reads moved to column j0."""
    g, r = pw.plan, pw.roles
    helpers, gname, nr, decl, epi, names = gemm_parts(pw)
    params_c = ", ".join(_params(kernel, pw.packed_args, "in"))
    body = f"""(const long bt, const long j0, const long nb, const float *restrict d, float *restrict ws, {params_c}) {{
  {decl}
  {gname}({r.M}, nb, {r.K}, in{g.a.arg}, {r.K}, d, nb, out0 + ({_offset(g.c, names)}) + j0, {g.ldc}, 0, {epi}, ws);
}}
"""
    routine = f"tfpwb_{_digest(body)}"
    return helpers + _guarded(routine, f"static inline void {routine}{body}"), routine, nr


def emit(dw: KernelPlan, dw_op: Operation, pw: KernelPlan, pw_op: Operation, rows: int = 0) -> str:
    """The fused kernel's C: helpers, then ``static void KERNEL_NAME(a0.. (dw_op's operands),
    b0.. (pw_op's operands; the depthwise output's slot is not read), out0)``; ``rows``: the
    tuned band (``band_rows``)."""
    target: Target = dw.target
    s, vw = dw.plan.shape, target.vector_width
    rows, bands = band_rows(dw, rows)
    dtext, dname = _dw_band(dw, dw_op)
    ptext, pname, nr = _pw_band(pw, pw_op)
    nb_max = rows * s.ow
    ws = _packed_b_floats(pw.roles.K, nb_max, nr)
    scratch = s.scratch_floats(vw, dw.dw_params.chunk_outputs)
    sig, a, b, parallel = pair_parts(dw_op, dw, pw_op, pw)
    count = _count(dw)
    return f"""{_prelude(target)}{dtext}{ptext}
static void {KERNEL_NAME}({sig}) {{
  /* depthwise + pointwise in bands of {rows} output rows (dw_pw.py) */
  {parallel}
  {{
    float *st = tf_alloc({scratch}), *d = tf_alloc({dw.plan.channels * nb_max}), *ws = tf_alloc({ws});
    #pragma omp for schedule(static)
    for (long u = 0; u < {count * bands}L; u++) {{
      const long bt = u / {bands}, oh0 = (u - bt * {bands}) * {rows}, oh1 = tf_min(oh0 + {rows}, {s.oh});
      {dname}(bt, oh0, oh1, d, st, {', '.join(a)});
      {pname}(bt, oh0 * {s.ow}L, (oh1 - oh0) * {s.ow}L, d, ws, {', '.join(b)}, out0);
    }}
    free(st);
    free(d);
    free(ws);
  }}
}}
"""


def describe(dw: KernelPlan, pw: KernelPlan, rows: int = 0) -> str:
    """The fused kernel's schedule for people (``explain``)."""
    tuned = " (tuned)" if rows else ""
    rows, bands = band_rows(dw, rows)
    s = dw.plan.shape
    return (f"{dw.describe()}\n{pw.describe()}\ndepthwise + pointwise fused (dw_pw.py): per image {bands} band(s) of "
            f"{rows} output rows{tuned}; each band's depthwise outputs ({dw.plan.channels} x {rows * s.ow}) stay in a "
            f"per-thread buffer that the 1x1 GEMM reads at once")
