"""A depthwise blocked conv with the 1x1 convs around it as one kernel (``graph.mbconv_nchwc``).

A mobile inverted bottleneck (MobileNetV2, EfficientNet) runs a 1x1 conv that expands the channels
six-fold, a depthwise 3x3 or 5x5 on the expanded tensor, and a 1x1 conv that projects it back.
As separate kernels the expanded tensor is written and read back, and so is the depthwise output:
at batch 8, 8 x 4.8 MB and 8 x 1.6 MB for MobileNetV2's second block, through memory.  Fused, a
work unit is one band of output rows of one image, and the thread:

1. (``expand``) runs the expand conv on the input rows the band's depthwise windows read
   (halo rows included: a band recomputes the rows it shares with its neighbours) into its
   buffer ``e``, the rows of each channel block a plane;
2. runs the depthwise conv on them (``e``, or the input itself) into its buffer ``d`` (with
   ``project``) or the result;
3. (``project``) runs the project conv on ``d`` while it is in L2, writing the band of the result.

Nothing else is recomputed (a 1x1 conv reads each input at its own position), and the buffers
stay in L2.  XNNPACK and TVM fuse inverted residual blocks the same way; ``dw_pw.py`` and
``pw_dw.py`` do it for pairs in the plain layout.

The arithmetic is the convs' own: the depthwise row routine (``nchwc.dw_row_source``) with its
epilogue, and the 1x1 convs' register tiles (``nchwc._tile_function``) over runs of positions
taken as one flat run (a 1x1 stride-1 conv's positions are contiguous in its input and output),
input blocks in the same chunks, so the result is bit-identical to the separate kernels' at any
band or thread count.

The untuned band (``band_rows``) holds at most ``BAND_BYTES`` of buffers and splits the images'
rows into units that share evenly among the threads; ``BlockedParams.band`` (the tuner's
``"mbconv"`` algorithm) sets it, and ``blocks``, ``rows``, ``chunk`` cut the project conv's tiles
(the expand conv's without a project conv) as they cut a direct blocked conv's.  Within a unit a
1x1 conv sweeps its positions in runs of about ``nchwc.BAND_POSITIONS`` per chunk of weights, so
its partial sums stay in L1 as the direct kernel's do.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from ...errors import CompileError
from ...ir.core import Operation
from ..target import Target
from . import nchwc
from .dw_pw import even_bands

# Buffers of one band (the expanded input rows and the depthwise outputs, every channel block) per
# thread: the convs read them from L2 right after they are written, next to their weights.
BAND_BYTES = 256 << 10
# ... with an expand conv, whose halo rows a band recomputes: a bigger band, fewer halos.
EXPAND_BAND_BYTES = 768 << 10


@dataclass(frozen=True)
class Chain:
    """The convs of an ``mbconv_nchwc``: the depthwise one's geometry, the expand and project 1x1
    convs' (None where absent), and the epilogues (act, clip_max) of each, in turn."""

    expand: nchwc.ConvGeometry | None
    dw: nchwc.ConvGeometry
    project: nchwc.ConvGeometry | None
    epilogues: tuple

    @property
    def tuned(self) -> nchwc.ConvGeometry:
        """The 1x1 conv whose tile and chunk a ``BlockedParams`` cuts: the project conv, else the
        expand conv."""
        return self.project or self.expand


def chain_of(kernel: Operation, op: Operation) -> Chain:
    """The convs of an ``mbconv_nchwc`` kernel (``op`` its graph op)."""
    at = op.attributes
    expand, project = bool(at.get("expand", False)), bool(at.get("project", False))
    types = [v.type for v in kernel.operands] + [kernel.results[0].type]
    if types[0].rank != 5 or not all(t.is_static for t in types):
        raise CompileError(f"mbconv_nchwc{op.location_str()}: the native kernel takes static 2-D convolutions "
                           f"(x {types[0].shape}); run the layout pass only on such models")
    x, y = types[0], types[-1]
    wd = next(ops[0] for stage, ops, _ in op.opdef.stages(types[:-1], at) if stage == "dw")
    n, _, h, w, _ = x.shape
    _, _, kh, kw, _, vw = wd.shape
    cb = wd.shape[0]
    ge = None
    if expand:
        ge = nchwc.ConvGeometry(n, x.shape[1], h, w, x.shape[-1], cb, h, w, vw, 1, 1, 1, 1, 0, 0, 1, 1,
                                int(at.get("expand_in_channels", 0) or 0))
    pads = nchwc._ints(at, "dw_pads", 4, 0)
    sh, sw = nchwc._ints(at, "dw_strides", 2, 1)
    dh, dwd = nchwc._ints(at, "dw_dilations", 2, 1)
    oh = (h + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pads[1] + pads[3] - dwd * (kw - 1) - 1) // sw + 1
    gd = nchwc.ConvGeometry(n, cb, h, w, vw, cb, oh, ow, vw, kh, kw, sh, sw, pads[0], pads[1], dh, dwd)
    gp = None
    if project:
        gp = nchwc.ConvGeometry(n, cb, oh, ow, vw, y.shape[1], oh, ow, vw, 1, 1, 1, 1, 0, 0, 1, 1)
    if tuple(y.shape) != (n, gp.ob if gp else cb, oh, ow, vw):
        raise CompileError(f"mbconv_nchwc{op.location_str()}: result {y.shape} does not follow from its convs")
    epilogues = ((nchwc.epilogue_act(at, "expand_"), at.get("expand_clip_max")) if expand else None,
                 (nchwc.epilogue_act(at, "dw_"), at.get("dw_clip_max")),
                 (nchwc.epilogue_act(at), at.get("clip_max")) if project else None)
    return Chain(ge, gd, gp, epilogues)


def input_rows(gd: nchwc.ConvGeometry, rows: int) -> int:
    """Input rows the windows of ``rows`` consecutive output rows read, at most."""
    return min(gd.h, (rows - 1) * gd.sh + (gd.kh - 1) * gd.dh + 1)


def band_rows(chain: Chain, threads: int, rows: int = 0) -> tuple[int, int]:
    """(rows per band, bands per image): ``rows`` when tuned, else the fewest even bands whose
    buffers fit ``BAND_BYTES`` (``EXPAND_BAND_BYTES`` with an expand conv) and whose units
    (images x bands) share evenly among ``threads`` (or are many: at least four a thread)."""
    gd = chain.dw
    if rows:
        return even_bands(gd.oh, rows)
    plane = gd.vw * 4

    def size(r: int) -> int:
        return (gd.ob * r * gd.ow * plane if chain.project else 0) + \
            (gd.cb * input_rows(gd, r) * gd.w * plane if chain.expand else 0)
    budget = EXPAND_BAND_BYTES if chain.expand else BAND_BYTES
    fewest = next((b for b in range(1, gd.oh + 1) if size(even_bands(gd.oh, -(-gd.oh // b))[0]) <= budget), gd.oh)
    for bands in range(fewest, gd.oh + 1):
        r, b = even_bands(gd.oh, -(-gd.oh // bands))
        units = gd.n * b
        if units % threads == 0 or units >= 4 * threads:
            return r, b
    return even_bands(gd.oh, -(-gd.oh // fewest))


def recompute(chain: Chain, threads: int, rows: int = 0) -> float:
    """The share of the expand conv's work its bands add by recomputing their halo rows (0 without
    an expand conv)."""
    if not chain.expand:
        return 0.0
    gd = chain.dw
    r, bands = band_rows(chain, threads, rows)
    read = sum(_in_span(gd, b * r, min(gd.oh, b * r + r)) for b in range(bands))
    return read / gd.h - 1.0


def _in_span(gd: nchwc.ConvGeometry, oh0: int, oh1: int) -> int:
    """Input rows [ih_a, ih_b) the windows of output rows [oh0, oh1) read, clipped to the image."""
    a = max(0, oh0 * gd.sh - gd.ph)
    b = min(gd.h, (oh1 - 1) * gd.sh - gd.ph + (gd.kh - 1) * gd.dh + 1)
    return max(0, b - a)


def _band_function(name: str, gb: nchwc.ConvGeometry, plan: nchwc.ConvPlan, positions: int, target: Target
                   ) -> tuple[str, set[tuple[int, int]]]:
    """``{name}_band{positions}(d, w, y, bias, res, bounds)``: a 1x1 conv on ``positions``
    consecutive positions of ``d`` (block planes ``gb.h * gb.w`` positions apart) into ``y`` at
    the band's first position (block planes ``gb.oh * gb.ow`` apart), group of output blocks by
    group, in runs of about ``BAND_POSITIONS`` positions per chunk of input blocks; and the
    (blocks, positions) tiles it calls."""
    groups = -(-gb.ob // plan.blocks)
    tail = gb.ob - (groups - 1) * plan.blocks
    fmt = {"xcb": gb.h * gb.w * gb.bi, "bi": gb.bi, "wcb": gb.bi * gb.vw, "vw": gb.vw, "chunk": plan.chunk,
           "cb": gb.cb}
    args = ("d + c0 * {xcb} + {p} * {bi}, wg + c0 * {wcb}, yg + {p} * {vw}, bg, rg ? rg + {p} * {vw} : 0, "
            "bounds, 0, 1, 0, 1, {chunk}, c0 == 0, c0 + {chunk} == {cb}")
    tiles: set[tuple[int, int]] = set()

    def sweep(bl: int) -> str:
        rows = plan.rows_for(bl, target)
        run = max(rows, nchwc.BAND_POSITIONS // rows * rows)
        out = []
        for s0 in range(0, positions, run):
            full, rem = divmod(min(run, positions - s0), rows)
            calls = []
            if full:
                calls.append(f"for (long p = {s0}; p < {s0 + full * rows}; p += {rows}) "
                             f"{nchwc._tile_name(name, 1, rows, bl)}({args.format(p='p', **fmt)});")
                tiles.add((bl, rows))
            if rem:
                calls.append(f"{nchwc._tile_name(name, 1, rem, bl)}({args.format(p=s0 + full * rows, **fmt)});")
                tiles.add((bl, rem))
            out.append(f"      for (long c0 = 0; c0 < {gb.cb}; c0 += {plan.chunk}) {{ {' '.join(calls)} }}")
        return "\n".join(out)
    body = sweep(plan.blocks)
    if tail != plan.blocks:
        body = f"    if (og < {groups - 1}) {{\n{body}\n    }} else {{\n{sweep(tail)}\n    }}"
    yob = gb.oh * gb.ow * gb.vw
    text = f"""
static void {name}_band{positions}(const float *restrict d, const float *restrict w, float *y,
    const float *restrict bias, const float *res, const float *bounds) {{
  for (long og = 0; og < {groups}; og++) {{
    const long ob0 = og * {plan.blocks};
    const float *wg = w + ob0 * {gb.cb * gb.bi * gb.vw};
    float *yg = y + ob0 * {yob};
    const float *bg = bias + ob0 * {gb.vw};
    const float *rg = res ? res + ob0 * {yob} : 0;
    (void)rg;
{body}
  }}
}}
"""
    return text, tiles


def _pointwise(name: str, gb: nchwc.ConvGeometry, plan: nchwc.ConvPlan, counts: set[int], target: Target,
               residual: bool, act: str) -> tuple[str, dict[int, str]]:
    """The C of a 1x1 conv over runs of each of ``counts`` positions (``_band_function``, tiles
    named ``name``), and the band function of each count."""
    tiles: set[tuple[int, int]] = set()
    texts, names = [], {}
    for positions in sorted(counts):
        text, used = _band_function(name, gb, plan, positions, target)
        texts.append(text)
        tiles |= used
        names[positions] = f"{name}_band{positions}"
    return "".join([nchwc._tile_function(name, gb, tc, bl, residual, act) for bl, tc in sorted(tiles)] + texts), names


def _dispatch(names: dict[int, str], count: str, args: str, indent: str) -> str:
    """C calling the band function of the run of ``count`` positions (a C expression)."""
    if len(names) == 1:
        return f"{indent}{next(iter(names.values()))}({args});"
    calls = [f"if ({count} == {p}) {fn}({args});" for p, fn in sorted(names.items())]
    return indent + f"\n{indent}else ".join(calls)


def source(name: str, chain: Chain, target: Target, residual: bool, threads: int,
           params: nchwc.BlockedParams | None = None) -> str:
    """The C of ``name(x, we, be, wd, bd, wp, bp, res, y)`` (absent convs' pointers unused): the
    fused kernel, its helpers guarded."""
    gd, ge, gp = chain.dw, chain.expand, chain.project
    if gd.vw != target.vector_width:
        raise CompileError(f"mbconv_nchwc: the block {gd.vw} is not the target's vector width "
                           f"{target.vector_width}; run the layout pass with block={target.vector_width}")
    rows, bands = band_rows(chain, threads, params.band if params else 0)
    plain = replace(params, band=0) if params else None
    (e_act, e_clip), (d_act, d_clip), (p_act, p_clip) = (chain.epilogues[0] or ("", None), chain.epilogues[1],
                                                         chain.epilogues[2] or ("", None))
    spans = {(min(gd.oh, b * rows + rows) - b * rows, _in_span(gd, b * rows, min(gd.oh, b * rows + rows)))
             for b in range(bands)}
    parts = [nchwc.dw_row_source(name + "_d", gd, target, False, d_act)]
    rin = max(span for _, span in spans)
    work = []
    if ge is not None:
        # the expand conv reads the input image's rows [ih_a, ih_b) and writes them to e (planes of rin rows)
        gbe = replace(ge, n=1, oh=rin)
        text, fns = _pointwise(name + "_e", gbe, nchwc.ConvPlan.of(ge, target, None if gp else plain),
                               {span * ge.w for _, span in spans}, target, False, e_act)
        parts.append(text)
        work.append(_dispatch(fns, "(ih_b - ih_a) * " + str(ge.w),
                              f"x + (n * {ge.cb * ge.h} + ih_a) * {ge.w * ge.bi}, we, e, be, 0, bounds_e", "      "))
    dst = (f"d + (b * {rows} + oh - oh0) * {gd.ow * gd.vw}" if gp is not None
           else f"y + ((n * {gd.ob} + b) * {gd.oh} + oh) * {gd.ow * gd.vw}")
    src = (f"e + (b * {rin} + ih - ih_a) * {gd.w * gd.vw}" if ge is not None
           else f"x + ((n * {gd.cb} + b) * {gd.h} + ih) * {gd.w * gd.vw}")
    work.append(f"""      for (long b = 0; b < {gd.ob}; b++) {{
        const float *wb = wd + b * {gd.kh * gd.kw * gd.vw};
        for (long oh = oh0; oh < oh1; oh++) {{
          const long ih = oh * {gd.sh} - {gd.ph};
          {nchwc._taps_c("kh0", "kh1", "ih", gd.h, gd.dh, gd.kh)}
          {name}_d_dwrow({src}, wb, {dst}, bd + b * {gd.vw}, 0, bounds_d, kh0, kh1);
        }}
      }}""")
    if gp is not None:
        gbp = replace(gp, n=1, h=rows)                  # the project conv's input: the band buffer d
        text, fns = _pointwise(name + "_p", gbp, nchwc.ConvPlan.of(gp, target, plain),
                               {r * gd.ow for r, _ in spans}, target, residual, p_act)
        parts.append(text)
        work.append(f"      float *yb = y + (n * {gp.ob * gp.oh} + oh0) * {gp.ow * gp.vw};\n"
                    f"      const float *rb = res ? res + (n * {gp.ob * gp.oh} + oh0) * {gp.ow * gp.vw} : 0;\n"
                    + _dispatch(fns, f"(oh1 - oh0) * {gd.ow}", "d, wp, yb, bp, rb, bounds_p", "      "))
    units = gd.n * bands
    par = "#pragma omp parallel" + ("" if threads > 1 and units > 1 else " num_threads(1)")
    buffers = ([f"float *e = tf_alloc({ge.ob * rin * ge.w * ge.vw});"] if ge is not None else []) + \
        ([f"float *d = tf_alloc({gd.ob * rows * gd.ow * gd.vw});"] if gp is not None else [])
    frees = "".join(f"\n    free({b});" for b in (["e"] if ge is not None else []) + (["d"] if gp is not None else []))
    convs = "+".join(s for s, g in (("expand", ge), ("depthwise", gd), ("project", gp)) if g is not None)
    entry = f"""
static void {name}(const float *restrict x, const float *restrict we, const float *restrict be,
    const float *restrict wd, const float *restrict bd, const float *restrict wp, const float *restrict bp,
    const float *res, float *y) {{
  /* {convs} in bands of {rows} output rows (nchwc_mbconv.py) */
  {nchwc.bounds_c("bounds_e", e_clip)} {nchwc.bounds_c("bounds_d", d_clip)} {nchwc.bounds_c("bounds_p", p_clip)}
  (void)we; (void)be; (void)wp; (void)bp; (void)res; (void)bounds_e; (void)bounds_p;
  {par}
  {{
    {' '.join(buffers)}
    #pragma omp for schedule(static)
    for (long u = 0; u < {units}; u++) {{
      const long n = u / {bands}, oh0 = u % {bands} * {rows};
      const long oh1 = oh0 + {rows} < {gd.oh} ? oh0 + {rows} : {gd.oh};
      long ih_a = oh0 * {gd.sh} - {gd.ph}, ih_b = (oh1 - 1) * {gd.sh} - {gd.ph} + {(gd.kh - 1) * gd.dh + 1};
      if (ih_a < 0) ih_a = 0;
      if (ih_b > {gd.h}) ih_b = {gd.h};
      (void)ih_b;
{chr(10).join(work)}
    }}{frees}
  }}
}}
"""
    return nchwc._prelude(target) + nchwc._guard(name, "".join(parts) + entry)


def kernel_name(chain: Chain, residual: bool, params: nchwc.BlockedParams | None) -> str:
    """One C function per chain of geometries, epilogues and tuned params."""
    key = repr((chain, residual) + ((params,) if params else ()))
    return "tf_nchwc_mbconv_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def describe(chain: Chain, target: Target, params: nchwc.BlockedParams | None = None) -> str:
    """The fused kernel's schedule for people (``explain``)."""
    threads = max(1, target.cores or 1)
    rows, bands = band_rows(chain, threads, params.band if params else 0)
    gd = chain.dw
    tuned = " (tuned)" if params is not None else ""
    steps = []
    if chain.expand is not None:
        steps.append(f"the 1x1 expand conv on the input rows its windows read into a per-thread buffer "
                     f"({recompute(chain, threads, rows):.0%} of its work recomputed at the bands' edges)")
    steps.append(f"the depthwise {gd.kh}x{gd.kw} conv on them" + (" into a second buffer" if chain.project else ""))
    if chain.project is not None:
        plan = nchwc.ConvPlan.of(chain.project, target, replace(params, band=0) if params else None)
        steps.append(f"the 1x1 project conv on that buffer at once in tiles of {plan.rows} positions x "
                     f"{plan.blocks} output blocks, input blocks in chunks of {plan.chunk}")
    return (f"NCHW{gd.vw}c fused inverted bottleneck: per image {bands} band(s) of {rows} output rows{tuned}, "
            f"each: " + "; ".join(steps))


__all__ = ["BAND_BYTES", "Chain", "EXPAND_BAND_BYTES", "band_rows", "chain_of", "describe", "input_rows",
           "kernel_name", "recompute", "source"]
