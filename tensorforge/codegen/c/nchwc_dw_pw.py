"""A depthwise blocked conv and the 1x1 blocked conv after it as one kernel (``graph.dw_pw_nchwc``).

An inverted-residual block (MobileNetV2) runs a depthwise 3x3 and then a 1x1 convolution on its
output.  As two kernels, the depthwise layer writes its whole output and the 1x1 layer reads it
back: at batch 8 that is 8 x 1.6 MB for MobileNetV2's first block, through memory.  Fused, a work
unit is one band of output rows of one image: the thread computes the band's depthwise outputs of
every channel block into its own buffer (the band's rows of each block, a plane of
``band x OW x 16`` floats), then runs the 1x1 conv on that buffer while it is in L2, writing the
band of the result.  Nothing is recomputed (a 1x1 conv reads each depthwise output at its own
position only); only the depthwise input's halo rows are read by two bands.  XNNPACK and TVM fuse
inverted residual blocks the same way; ``dw_pw.py`` does it for the plain layout.

The arithmetic is the two kernels' own: the depthwise row routine (``nchwc.dw_row_source``) with
its epilogue, and the 1x1 conv's register tiles (``nchwc._tile_function``) over the band's
positions taken as one flat run (a 1x1 stride-1 conv's positions are contiguous in its input and
its output), input blocks in the same chunks, so the results are bit-identical to the unfused
kernels at any band or thread count.

The untuned band (``band_rows``) holds at most ``BAND_BYTES`` of depthwise outputs and splits the
images' rows into units that share evenly among the threads; ``BlockedParams.band`` (the tuner's
``"dw_pw"`` algorithm) sets it, and ``blocks``, ``rows``, ``chunk`` cut the 1x1 conv's tiles as
they cut a direct blocked conv's.  Within a unit the 1x1 conv sweeps its positions in runs of
about ``nchwc.BAND_POSITIONS`` per chunk of weights, so its partial sums stay in L1 as the direct
kernel's do.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace

from ...errors import CompileError
from ...ir.core import Operation
from ..target import Target
from . import nchwc
from .dw_pw import even_bands

# Depthwise outputs of one band, every channel block (per thread): the 1x1 conv reads them from L2
# right after they are written, next to its weights and the band's output.
BAND_BYTES = 256 << 10


def geometries(kernel: Operation, op: Operation) -> tuple[nchwc.ConvGeometry, nchwc.ConvGeometry]:
    """(the depthwise conv's geometry, the 1x1 conv's) of a ``graph.dw_pw_nchwc`` kernel."""
    x, wd, wp = kernel.operands[0].type, kernel.operands[1].type, kernel.operands[3].type
    y = kernel.results[0].type
    if x.rank != 5 or not all(t.is_static for t in (x, wd, wp, y)):
        raise CompileError(f"dw_pw_nchwc{op.location_str()}: the native kernel takes static 2-D convolutions "
                           f"(x {x.shape}); run the layout pass only on such models")
    at = op.attributes
    n, cb, h, w, bi = x.shape
    _, _, kh, kw, _, vw = wd.shape
    sh, sw = nchwc._ints(at, "dw_strides", 2, 1)
    ph, pw = nchwc._ints(at, "dw_pads", 4, 0)[:2]
    dh, dwd = nchwc._ints(at, "dw_dilations", 2, 1)
    oh = (h + sum(nchwc._ints(at, "dw_pads", 4, 0)[0::2]) - dh * (kh - 1) - 1) // sh + 1
    ow = (w + sum(nchwc._ints(at, "dw_pads", 4, 0)[1::2]) - dwd * (kw - 1) - 1) // sw + 1
    gd = nchwc.ConvGeometry(n, cb, h, w, bi, cb, oh, ow, vw, kh, kw, sh, sw, ph, pw, dh, dwd)
    ob = wp.shape[0]
    gp = nchwc.ConvGeometry(n, cb, oh, ow, vw, ob, oh, ow, vw, 1, 1, 1, 1, 0, 0, 1, 1,
                            int(at.get("in_channels", 0) or 0))
    if tuple(y.shape) != (n, ob, oh, ow, vw):
        raise CompileError(f"dw_pw_nchwc{op.location_str()}: result {y.shape} is not the 1x1 conv's "
                           f"{(n, ob, oh, ow, vw)}")
    return gd, gp


def band_rows(gd: nchwc.ConvGeometry, threads: int, rows: int = 0) -> tuple[int, int]:
    """(rows per band, bands per image): ``rows`` when tuned, else the fewest even bands whose
    depthwise outputs fit ``BAND_BYTES`` and whose units (images x bands) share evenly among
    ``threads`` (or are many: at least four a thread), as few as that allows."""
    if rows:
        return even_bands(gd.oh, rows)
    row_bytes = gd.ob * gd.ow * gd.vw * 4
    fewest = max(1, -(-gd.oh * row_bytes // BAND_BYTES))
    for bands in range(fewest, gd.oh + 1):
        r, b = even_bands(gd.oh, -(-gd.oh // bands))
        units = gd.n * b
        if units % threads == 0 or units >= 4 * threads:
            return r, b
    return even_bands(gd.oh, -(-gd.oh // fewest))


def _band_function(name: str, gb: nchwc.ConvGeometry, plan: nchwc.ConvPlan, positions: int, target: Target
                   ) -> tuple[str, set[tuple[int, int]]]:
    """``{name}_band{positions}(d, w, y, bias, res, lo, hi)``: the 1x1 conv on ``positions``
    consecutive positions of the band buffer ``d`` (block planes ``gb.h * gb.w`` positions apart)
    into ``y`` at the band's first position (block planes ``gb.oh * gb.ow`` apart), group of output
    blocks by group, in runs of about ``BAND_POSITIONS`` positions per chunk of input blocks; and
    the (blocks, positions) tiles it calls."""
    groups = -(-gb.ob // plan.blocks)
    tail = gb.ob - (groups - 1) * plan.blocks
    fmt = {"xcb": gb.h * gb.w * gb.bi, "bi": gb.bi, "wcb": gb.bi * gb.vw, "vw": gb.vw, "chunk": plan.chunk,
           "cb": gb.cb}
    args = ("d + c0 * {xcb} + {p} * {bi}, wg + c0 * {wcb}, yg + {p} * {vw}, bg, rg ? rg + {p} * {vw} : 0, "
            "lo, hi, 0, 1, 0, 1, {chunk}, c0 == 0, c0 + {chunk} == {cb}")
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
    const float *restrict bias, const float *res, tf_vf lo, tf_vf hi) {{
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


def source(name: str, gd: nchwc.ConvGeometry, gp: nchwc.ConvGeometry, target: Target, dw_act: str,
           dw_clip: float | None, residual: bool, act: str, clip_max: float | None, threads: int,
           params: nchwc.BlockedParams | None = None) -> str:
    """The C of ``name(x, wd, bd, wp, bp, res, y)``: the fused kernel, its helpers guarded."""
    if gp.vw != target.vector_width:
        raise CompileError(f"dw_pw_nchwc: the block {gp.vw} is not the target's vector width "
                           f"{target.vector_width}; run the layout pass with block={target.vector_width}")
    rows, bands = band_rows(gd, threads, params.band if params else 0)
    gb = replace(gp, n=1, h=rows)                 # the 1x1 conv's input: the band buffer
    plan = nchwc.ConvPlan.of(gp, target, replace(params, band=0) if params else None)
    dname = name + "_d"
    parts = [nchwc.dw_row_source(dname, gd, target, False, dw_act)]
    last = gd.oh - (bands - 1) * rows
    tiles: set[tuple[int, int]] = set()
    band_text = []
    for positions in sorted({rows * gd.ow, last * gd.ow}):
        text, used = _band_function(name, gb, plan, positions, target)
        band_text.append(text)
        tiles |= used
    parts += [nchwc._tile_function(name, gb, tc, bl, residual, act) for bl, tc in sorted(tiles)]
    parts += band_text
    units = gd.n * bands
    par = "#pragma omp parallel" + ("" if threads > 1 and units > 1 else " num_threads(1)")
    dispatch = (f"{name}_band{rows * gd.ow}(d, wp, yb, bp, rb, lo, hip);" if last == rows else
                f"if (oh1 - oh0 == {rows}) {name}_band{rows * gd.ow}(d, wp, yb, bp, rb, lo, hip);\n"
                f"      else {name}_band{last * gd.ow}(d, wp, yb, bp, rb, lo, hip);")
    entry = f"""
static void {name}(const float *restrict x, const float *restrict wd, const float *restrict bd,
    const float *restrict wp, const float *restrict bp, const float *res, float *y) {{
  /* depthwise + 1x1 in bands of {rows} output rows (nchwc_dw_pw.py) */
  const tf_vf lo = tf_bcast(0.0f), hid = tf_bcast({nchwc.clip_bound(dw_clip)}), hip = tf_bcast({nchwc.clip_bound(clip_max)});
  {par}
  {{
    float *d = tf_alloc({gd.ob * rows * gd.ow * gd.vw});
    #pragma omp for schedule(static)
    for (long u = 0; u < {units}; u++) {{
      const long n = u / {bands}, oh0 = u % {bands} * {rows};
      const long oh1 = oh0 + {rows} < {gd.oh} ? oh0 + {rows} : {gd.oh};
      for (long b = 0; b < {gd.ob}; b++) {{
        const float *wb = wd + b * {gd.kh * gd.kw * gd.vw};
        const tf_vf bv = tf_ld(bd + b * {gd.vw});
        for (long oh = oh0; oh < oh1; oh++) {{
          const long ih = oh * {gd.sh} - {gd.ph};
          {nchwc._taps_c("kh0", "kh1", "ih", gd.h, gd.dh, gd.kh)}
          const float *xr = x + ((n * {gd.cb} + b) * {gd.h} + ih) * {gd.w * gd.bi};
          {dname}_dwrow(xr, wb, d + (b * {rows} + oh - oh0) * {gd.ow * gd.vw}, bv, 0, lo, hid, kh0, kh1);
        }}
      }}
      float *yb = y + (n * {gp.ob * gp.oh} + oh0) * {gp.ow * gp.vw};
      const float *rb = res ? res + (n * {gp.ob * gp.oh} + oh0) * {gp.ow * gp.vw} : 0;
      {dispatch}
    }}
    free(d);
  }}
}}
"""
    return nchwc._prelude(target) + nchwc._guard(name, "".join(parts) + entry)


def kernel_name(gd: nchwc.ConvGeometry, gp: nchwc.ConvGeometry, epilogues: tuple,
                params: nchwc.BlockedParams | None) -> str:
    """One C function per pair of geometries, epilogues and tuned params."""
    key = repr((gd, gp, epilogues) + ((params,) if params else ()))
    return "tf_nchwc_dwpw_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def describe(gd: nchwc.ConvGeometry, gp: nchwc.ConvGeometry, target: Target,
             params: nchwc.BlockedParams | None = None) -> str:
    """The fused kernel's schedule for people (``explain``)."""
    rows, bands = band_rows(gd, max(1, target.cores or 1), params.band if params else 0)
    plan = nchwc.ConvPlan.of(gp, target, replace(params, band=0) if params else None)
    tuned = " (tuned)" if params is not None else ""
    return (f"NCHW{gp.vw}c depthwise {gd.kh}x{gd.kw} + 1x1 fused: per image {bands} band(s) of {rows} output rows, "
            f"each band's depthwise outputs ({gd.ob} blocks x {rows * gd.ow} positions) in a per-thread buffer the "
            f"1x1 conv reads at once in tiles of {plan.rows} positions x {plan.blocks} output blocks, input blocks "
            f"in chunks of {plan.chunk}{tuned}")


__all__ = ["BAND_BYTES", "band_rows", "describe", "geometries", "kernel_name", "source"]
