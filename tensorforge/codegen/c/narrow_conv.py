"""Direct convolution over few input channels: the stems of image networks (3 -> 64 7x7/2 in ResNet,
3 -> 32 3x3/2 in MobileNetV2).

With three input channels a convolution's implicit GEMM is short in K (27 or 147) and narrow in M,
so im2col writes many times more than the layer outputs and the GEMM cannot pay for it (ResNet's
stem: 7.4 MB of columns per image for 3.2 MB of output).  This kernel reads the input instead:

* every input row is split once per call into ``stride`` zero-padded phase rows (phase q holds
  padded columns q, q + s, q + 2s, ...), so the taps of a strided window are contiguous vector
  loads (the tap at window column kx is phase ``kx*d % s`` from ``kx*d // s``);
* a register tile of ``ob`` output channels by ``nv`` vectors of output columns accumulates every
  (channel, window row, window column) tap: one vector load, ``ob`` FMAs with broadcast weights;
* weights are packed at compile time as ``[O/ob][C][kh][kw][ob]``;
* the fused epilogue (bias, activation, residual) is called back per finished tile of an output
  row, in the output's own coordinates, while it is in L1;
* work units are (image, channel block, output-row chunk), handed out dynamically.

Border taps read zeros from the phase rows' padding; rows of the window outside the input are
skipped, so every output sums exactly the taps the reference does, in channel-row-column order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..target import Target
from .conv_helpers import team

MAX_CHANNELS = 4            # input channels (per group) up to which convolutions take this kernel
# ... and output columns: on wide rows the shifted tap loads mostly straddle cache lines and the
# GEMM on im2col's aligned panels wins (ResNet's 7x7/2 stem at 112 columns: 0.73x, MobileNetV2's
# 3x3/2 one: 0.68x); on the 16-column rows of 32x32 networks this kernel is 1.7x faster
MAX_OUT_WIDTH = 32
MARKER = "narrow-channel direct convolution (narrow_conv.py)"


@dataclass(frozen=True)
class NarrowShape:
    channels: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    out_channels: int
    k_h: int
    k_w: int
    s_h: int
    s_w: int
    d_h: int
    d_w: int
    p_h: int
    p_w: int

    def tile(self, vw: int) -> tuple[int, int]:
        """(ob, nv): output channels and column vectors of the register tile (at most 24
        accumulators; a row wider than 8 vectors goes in chunks of ``nv``)."""
        nv = min(8, -(-self.out_w // vw))
        ob = max(1, min(self.out_channels, 24 // nv))
        return ob, nv

    @property
    def phase_len(self) -> int:
        """Floats of one phase row: every output column plus the window's reach past it."""
        return self.out_w + ((self.k_w - 1) * self.d_w) // self.s_w + 1


def pack_weights(w: np.ndarray, shape: NarrowShape, ob: int) -> np.ndarray:
    """[O, C, kh, kw] -> [ceil(O/ob), C, kh, kw, ob], zero padded past O."""
    O = shape.out_channels
    w = np.asarray(w, np.float32).reshape(O, shape.channels, shape.k_h, shape.k_w)
    blocks = -(-O // ob)
    out = np.zeros((blocks * ob, shape.channels, shape.k_h, shape.k_w), np.float32)
    out[:O] = w
    return np.ascontiguousarray(out.reshape(blocks, ob, shape.channels, shape.k_h, shape.k_w).transpose(0, 2, 3, 4, 1))


def phase_floats(shape: NarrowShape, vw: int) -> int:
    """Floats of one image's phase rows (``kernel_body``'s scratch)."""
    return shape.channels * shape.in_h * shape.s_w * _phase_stride(shape, vw)


def _phase_stride(shape: NarrowShape, vw: int) -> int:
    """Floats between phase rows: every output column, the window's reach and one register tile's
    overhang (a partial last chunk loads whole vectors), rounded to whole vectors."""
    _, nv = shape.tile(vw)
    return -(-(shape.phase_len + nv * vw) // vw) * vw


def kernel_body(shape: NarrowShape, target: Target, threads: int, x: str, w: str, y: str, images: str,
                epilogue: tuple[str, str, list[str]]) -> str:
    """C statements computing ``y`` (NCHW) from ``x`` (NCHW) and the packed weights ``w`` for
    ``images`` images; ``epilogue``: (callback, context, declarations that define the context
    from the image index ``bt``), or ("0", "0", []).  First every input row of every image is
    split into its phase rows (zero padded), then the work units read only those."""
    s = shape
    vw = target.vector_width
    ob, nv = s.tile(vw)
    blocks = -(-s.out_channels // ob)
    stride = _phase_stride(s, vw)
    rows_per_unit = max(1, min(s.out_h, 8))
    row_units = -(-s.out_h // rows_per_unit)
    fn, ctx, decl = epilogue
    plane_out = s.out_h * s.out_w
    per_image = phase_floats(s, vw)
    taps = s.channels * s.k_h * s.k_w
    acc = ", ".join(f"a{o}_{v} = {{0}}" for o in range(ob) for v in range(nv))
    fma = "\n".join(
        f"              {{ const tf_vf xv = tf_ld(src + {v * vw}); "
        + " ".join(f"a{o}_{v} += xv * wt[{o}];" for o in range(ob)) + " }"
        for v in range(nv))
    store = "\n".join(
        f"        if ({o} < nob) {{ float *yr = yb + {o} * {plane_out}L + oy * {s.out_w} + c0; "
        + " ".join(f"if ({v * vw} < cols) tf_st_n(yr + {v * vw}, a{o}_{v}, (int)(cols - {v * vw}));" for v in range(nv))
        + " }"
        for o in range(ob))
    par = "#pragma omp for schedule(dynamic, 1)" if threads > 1 else ""
    region = f"#pragma omp parallel {team(threads)}" if threads > 1 else ""
    split = "#pragma omp for schedule(static)" if threads > 1 else ""
    decls = "\n      ".join(decl)
    callback = (f"{fn}({ctx}, yb + oy * {s.out_w} + c0, {plane_out}, o0, oy * {s.out_w} + c0, nob, cols);"
                if fn != "0" else "")
    return f"""  /* {MARKER}: {s.channels} channels {s.in_h}x{s.in_w} -> {s.out_channels} x {s.out_h}x{s.out_w},
     window {s.k_h}x{s.k_w} stride {s.s_h}x{s.s_w} dilation {s.d_h}x{s.d_w}; tile {ob} channels x {nv} vectors */
  float *tf_ph = tf_alloc({images} * {per_image}L);
  {region}
  {{
    {split}
    for (long r = 0; r < {images} * {s.channels * s.in_h}L; r++) {{   /* input row r: its {s.s_w} phase rows */
      const float *row = {x} + r * {s.in_w};
      float *dst = tf_ph + r * {s.s_w * stride}L;
      for (long q = 0; q < {s.s_w}; q++)
        for (long i = 0; i < {stride}; i++) {{
          const long ix = i * {s.s_w} + q - {s.p_w};
          dst[q * {stride} + i] = ix >= 0 && ix < {s.in_w} ? row[ix] : 0.0f;
        }}
    }}
    {par}
    for (long u = 0; u < {images} * {blocks * row_units}L; u++) {{
      const long bt = u / {blocks * row_units}, rest = u - bt * {blocks * row_units};
      const long blk = rest / {row_units}, oy0 = (rest - blk * {row_units}) * {rows_per_unit};
      const long o0 = blk * {ob}, nob = tf_min({ob}, {s.out_channels} - o0);
      const long oy1 = tf_min(oy0 + {rows_per_unit}, {s.out_h});
      {decls}
      const float *pb = tf_ph + bt * {per_image}L;
      float *yb = {y} + (bt * {s.out_channels} + o0) * {plane_out}L;
      const float *wb = {w} + blk * {taps * ob}L;
      for (long oy = oy0; oy < oy1; oy++)
      for (long c0 = 0; c0 < {s.out_w}; c0 += {nv * vw}) {{
        const long cols = tf_min({nv * vw}, {s.out_w} - c0);
        tf_vf {acc};
        for (long c = 0; c < {s.channels}; c++)
          for (long ky = 0; ky < {s.k_h}; ky++) {{
            const long iy = oy * {s.s_h} + ky * {s.d_h} - {s.p_h};
            if (iy < 0 || iy >= {s.in_h}) continue;
            const float *base = pb + (c * {s.in_h} + iy) * {s.s_w * stride}L + c0;
            const float *wr = wb + (c * {s.k_h} + ky) * {s.k_w * ob};
            for (long kx = 0; kx < {s.k_w}; kx++) {{
              const float *wt = wr + kx * {ob};
              const float *src = base + ((kx * {s.d_w}) % {s.s_w}) * {stride} + (kx * {s.d_w}) / {s.s_w};
{fma}
            }}
          }}
{store}
        {callback}
      }}
    }}
  }}
  free(tf_ph);"""
