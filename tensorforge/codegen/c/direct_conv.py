"""Convolutions computed straight from a zero-padded copy of the input (no im2col).

The implicit-GEMM path (``im2col.py``) copies ``kh*kw`` shifted windows of the input into packed
B panels for every image: a copy of 9x the input for a 3x3 conv, whose cost is paid once per
``M`` output channels of arithmetic, so it shows on the 64-channel layers of a ResNet.  With stride
1 there is a cheaper way.  Pad the image once (``Hp x Wp`` per channel, zeros around) and compute
the output on the padded grid: position ``j = oh*Wp + ow`` reads, for input channel ``c`` and
kernel tap ``(a, b)``, the element ``xpad[c*Hp*Wp + j + a*dh*Wp + b*dw]``.  For a fixed ``(c, a, b)``
consecutive ``j`` are consecutive addresses, so the micro-kernel loads its ``nr`` columns of B
directly from the padded image: per ``(c, tap)`` step one unaligned vector load per ``vw``
columns, ``mr`` broadcasts of the weights and ``mr*nr/vw`` FMAs, exactly the GEMM micro-kernel's
step.  The price is ``Wp - OW`` garbage columns per output row (computed, never stored: 3% at
56x56, 22% at 7x7, the same waste the 64-wide GEMM tile has there).

Weights are constant for every model we see, so they are packed at compile time into ``mr``-row
panels over the natural ``K = (c, kh, kw)`` order (``pack_weights``): the micro-kernel walks
channels outer and taps inner, which keeps the few input rows of one channel in L1 while their
taps are read.  A whole tile's reduction (all of K) stays in registers; finished tiles are copied
out row segment by row segment after the fused epilogue (``tf_epi_fn``) has run on them in the
tile buffer, so the output is only written, never read back (the 7x7/2 stem: 1.07x).  A chain of
the GEMM's register form (``TF_EPI_REGS``: bias, residual, clamp) is applied during that copy; a
callback chain that reads nothing per column (``TF_EPI_ROWS``: a bias and SiLU) runs once on the
whole tile, where per row segment it ran a partial vector at each row's end (EfficientNet's stem).

Strided layers (ResNet's 3x3/2 and 1x1/2 downsampling, the 7x7/2 stem) take the same kernel
through a polyphase split of the padded input: with stride ``s`` the padded image is cut into the
``s x s`` phase planes ``x_pq[i, j] = xpad[i*s + p, j*s + q]`` (only the phases some tap reads: a
1x1/2 layer keeps one, the fused subsample), each ``Hq x Wq`` with ``Hq = OH + (kh-1)*dh // s``.
Tap ``(a, b)`` reads phase ``(a*dh % s, b*dw % s)`` shifted by ``(a*dh // s, b*dw // s)``, so output
``(oh, ow)`` at grid column ``oh*Wq + ow`` again reads consecutive addresses for consecutive
columns: the micro-kernel is unchanged, only the tap offsets (``DirectShape.tap_offsets``) and the
padding pass differ.  The split copies the input once, where im2col copies ``kh*kw/s^2`` times
it (2.25x for 3x3/2, 12x for the 7x7/2 stem), and the grid wastes ``(kw-1)*dw // s`` columns a row.

The routines are one translation unit per register tile and kernel-tap count (``source``), shared
by every layer and model; the per-layer driver (padding pass, then work units handed out
over images x column panels x row chunks) is written by ``tensorize.py``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..target import Target
from .im2col import SHAPE_TYPEDEF, Im2colShape
from .microkernels import GemmParams, GemmSpec, _GemmWriter, gemm_prelude


@dataclass(frozen=True)
class DirectShape(Im2colShape):
    """One image of a convolution, with the geometry of its padded grid (one plane per phase a
    tap reads; stride 1 has the one phase (0, 0), the whole padded image)."""

    @property
    def padded_h(self) -> int:
        """Rows of one phase plane (the padded image's rows at stride 1)."""
        return self.out_h + (self.k_h - 1) * self.dil_h // self.stride_h

    @property
    def padded_w(self) -> int:
        """Columns of one phase plane: the grid's row pitch."""
        return self.out_w + (self.k_w - 1) * self.dil_w // self.stride_w

    @property
    def phases(self) -> tuple[tuple[int, int], ...]:
        """The (row, column) phases that some tap reads, in plane order."""
        return tuple(sorted({(a * self.dil_h % self.stride_h, b * self.dil_w % self.stride_w)
                             for a in range(self.k_h) for b in range(self.k_w)}))

    @property
    def phase_plane(self) -> int:
        return self.padded_h * self.padded_w

    @property
    def plane(self) -> int:
        """Floats of one padded channel (all its phase planes)."""
        return len(self.phases) * self.phase_plane

    def tap_offsets(self) -> list[int]:
        """Offset of tap (a, b) (row-major) from a grid column's address in its channel."""
        index = {ph: i for i, ph in enumerate(self.phases)}
        sh, sw, wq = self.stride_h, self.stride_w, self.padded_w
        return [index[(a * self.dil_h % sh, b * self.dil_w % sw)] * self.phase_plane
                + a * self.dil_h // sh * wq + b * self.dil_w // sw
                for a in range(self.k_h) for b in range(self.k_w)]

    @property
    def grid_columns(self) -> int:
        """Columns of the padded output grid that hold outputs (the last row's tail is dropped)."""
        return (self.out_h - 1) * self.padded_w + self.out_w

    @property
    def taps(self) -> int:
        return self.k_h * self.k_w

    def panels(self, nr: int) -> int:
        return -(-self.grid_columns // nr)

    def waste(self, nr: int) -> float:
        """Share of the computed columns that are thrown away (padding columns and the last panel's tail)."""
        computed = self.panels(nr) * nr
        return 1.0 - self.out_h * self.out_w / computed if computed > 0 else 0.0   # empty: none computed

    def padded_floats(self, images: int, nr: int) -> int:
        """Floats of the padded input of ``images`` images, plus the slack the last panel reads past."""
        return images * self.channels * self.plane + nr


SHAPE_TYPE = "tf_conv_shape"        # the im2col routine's shape struct (strides unused here)


def eligible(strides: tuple[int, ...], pads: tuple[int, ...]) -> bool:
    """Leading pads must not crop; strides up to ``MAX_STRIDE`` (at most 16 phase planes)."""
    return all(1 <= s <= MAX_STRIDE for s in strides) and all(p >= 0 for p in pads)


MAX_STRIDE = 4


def pack_weights(w: np.ndarray, rows: int, depth: int, mr: int) -> np.ndarray:
    """Row-major ``W [rows, depth]`` into ``[ceil(rows/mr), depth, mr]`` panels, zero rows past the end."""
    w = np.ascontiguousarray(w, dtype=np.float32).reshape(-1)[:rows * depth].reshape(rows, depth)
    panels = -(-rows // mr)
    out = np.zeros((panels * mr, depth), np.float32)
    out[:rows] = w
    return np.ascontiguousarray(out.reshape(panels, mr, depth).transpose(0, 2, 1))


def packed_size(rows: int, depth: int, mr: int) -> int:
    return -(-rows // mr) * depth * mr


def routine_name(params: GemmParams, target: Target, taps: int) -> str:
    text = f"{params.mr}x{params.nr}/{params.unroll}/{taps}/{target.vector_width}/phases"
    return "tfd_" + hashlib.sha256(text.encode()).hexdigest()[:12]


def _pad_prototype(name: str) -> str:
    return f"TF_API void {name}_pad(const {SHAPE_TYPE} *s, long ph, long pq, const float *restrict x, float *restrict xp);\n"


def prototypes(name: str) -> str:
    """The routines' declarations for the model's C file (their definitions are in ``source``)."""
    return (_pad_prototype(name) +
            f"TF_API void {name}_unit(const {SHAPE_TYPE} *s, const long *restrict toff, long plane, const float *restrict wp,\n"
            f"    const float *restrict xp, float *restrict out, long rows, long ldc, long q, long m0, long m1,\n"
            f"    tf_epi_fn epi, const void *ectx);\n")


def _micro_kernel(params: GemmParams, target: Target, taps: int, name: str, transposed: bool) -> str:
    """``{name}_ukr``, or ``{name}_tukr`` transposed: a register tile over all channels and taps,
    stored to ``ct``.  The usual tile broadcasts mr weights (``a``, [K][mr] panels) against nr
    grid columns loaded at a tap's offset (``b``); the transposed one broadcasts mr positions read
    at the offset (``a``) against nr channels of weights (``b``, [K][nr] panels)."""
    mr, nr, vw = params.mr, params.nr, target.vector_width
    writer = _GemmWriter(GemmParams(mr=mr, nr=nr, mc=mr, nc=nr, pack_a=True), vw, GemmSpec(), name)
    acc = ", ".join(f"c{r}_{v} = {{0}}" for r in range(mr) for v in range(nr // vw))
    stores = "\n".join(f"  tf_st(ct + {r * nr + v * vw}, c{r}_{v});" for r in range(mr) for v in range(nr // vw))
    if transposed:
        what = f"C^T[{mr} positions x {nr} channels] at positions xb (one output row, consecutive)"
        fn, weights, image, walk = f"{name}_tukr", "b", "a", f"b += {nr}"
    else:
        what = f"C[{mr} x {nr}] of the padded grid at columns xb (already offset by the panel's first column)"
        fn, weights, image, walk = f"{name}_ukr", "a", "b", f"a += {mr}"
    return f"""/* {what}: all channels, all {taps} taps, in registers; then stored to ct. */
static __attribute__((noinline)) void {fn}(long C, long plane, const long *restrict toff,
    const float *restrict {weights}, const float *restrict xb, float *restrict ct) {{
  tf_vf {acc};
  for (long c = 0; c < C; c++, xb += plane) {{
    TF_UNROLL({params.unroll})
    for (long t = 0; t < {taps}; t++, {walk}) {{
      const float *{image} = xb + toff[t];
{writer.k_step(mr, prefetch_b=transposed)}
    }}
  }}
{stores}
}}
"""


def _prelude_and_pad(target: Target, name: str) -> str:
    """The unit's prelude and its padding routine ``{name}_pad`` (one phase plane of one channel)."""
    return f"""{gemm_prelude(target, threads=1)}
{SHAPE_TYPEDEF}
/* Phase plane (ph, pq) of one channel plane of an image (x): xp[i][j] = xpad[i*sh + ph][j*sw + pq]
   of the zero-padded plane (leading pads >= 0), Hq x Wq (DirectShape.padded_h/padded_w). */
TF_API void {name}_pad(const {SHAPE_TYPE} *s, long ph, long pq, const float *restrict x, float *restrict xp) {{
  const long sh = s->stride_h, sw = s->stride_w;
  const long hq = s->out_h + (s->k_h - 1) * s->dil_h / sh, wq = s->out_w + (s->k_w - 1) * s->dil_w / sw;
  const long base = pq - s->pad_w;          /* input column of j = 0 */
  const long j0 = tf_min(base >= 0 ? 0 : (-base + sw - 1) / sw, wq);
  const long j1 = tf_min(base >= s->in_w ? 0 : (s->in_w - base + sw - 1) / sw, wq);
  for (long i = 0; i < hq; i++) {{
    float *d = xp + i * wq;
    const long iy = i * sh + ph - s->pad_h;
    if (iy < 0 || iy >= s->in_h || j1 <= j0) {{ memset(d, 0, sizeof(float) * (size_t)wq); continue; }}
    const float *row = x + iy * s->in_w + base;
    if (j0) memset(d, 0, sizeof(float) * (size_t)j0);
    if (sw == 1) memcpy(d + j0, row + j0, sizeof(float) * (size_t)(j1 - j0));
    else if (sw == 2) for (long j = j0; j < j1; j++) d[j] = row[2 * j];   /* vectorised: even lanes */
    else for (long j = j0; j < j1; j++) d[j] = row[j * sw];
    if (j1 < wq) memset(d + j1, 0, sizeof(float) * (size_t)(wq - j1));
  }}
}}

"""


def source(params: GemmParams, target: Target, taps: int, name: str) -> str:
    """The translation unit of ``name``: padding of one channel plane, micro-kernel, one work unit."""
    mr, nr = params.mr, params.nr
    return f"""{_prelude_and_pad(target, name)}{_micro_kernel(params, target, taps, name, transposed=False)}
/* Row tiles [m0, m1) (multiples of {mr}) of column panel q of one image: rows of the output
   ``out`` (row stride ldc, ``rows`` output channels), the fused epilogue on every stored segment.
   toff: the taps' offsets (DirectShape.tap_offsets); plane: floats of one padded channel. */
TF_API void {name}_unit(const {SHAPE_TYPE} *s, const long *restrict toff, long plane, const float *restrict wp,
    const float *restrict xp, float *restrict out, long rows, long ldc, long q, long m0, long m1,
    tf_epi_fn epi, const void *ectx) {{
  const long pw = s->out_w + (s->k_w - 1) * s->dil_w / s->stride_w;
  const long ncols = (s->out_h - 1) * pw + s->out_w, depth = s->channels * {taps};
  const tf_epi_regs *regs = tf_epi_regs_of(epi, ectx);
  const tf_epi_rows *whole = epi == TF_EPI_ROWS ? (const tf_epi_rows *)ectx : 0;
  float ct[{mr * nr}] __attribute__((aligned(64)));
  const long j0 = q * {nr}, j1 = tf_min(j0 + {nr}, ncols);
  for (long i = m0; i < m1; i += {mr}) {{
    {name}_ukr(s->channels, plane, toff, wp + (i / {mr}) * depth * {mr}, xp + j0, ct);
    const long nrow = tf_min({mr}, rows - i);
    if (whole) whole->fn(whole->ctx, ct, {nr}, i, 0, nrow, j1 - j0);
    for (long j = j0; j < j1;) {{
      const long oh = j / pw, ow = j - oh * pw;
      if (ow >= s->out_w) {{ j = (oh + 1) * pw; continue; }}
      const long len = tf_min(s->out_w - ow, j1 - j), p = oh * s->out_w + ow;
      float *src = ct + (j - j0), *dst = out + i * ldc + p;
      if (epi && !regs && !whole) epi(ectx, src, {nr}, i, p, nrow, len);    /* on the tile in L1: dst is only written */
      tf_epi_regs_copy(regs, src, {nr}, dst, ldc, i, p, nrow, len);
      j += len;
    }}
  }}
}}
"""


# -- transposed: output channels in the vector lanes, output positions as the tile's rows ---------
#
# The grid above computes ``Wq - OW`` garbage columns per output row and pads a row's positions
# into nr-wide vectors: 22% of the columns at 7x7 (9-column grid), more where a 64-wide tile
# covers a 7x7 map's 61 grid columns.  Turned around, a tile holds ``mr`` consecutive positions of
# one output row (ImageNet maps are 7 * 2^k wide, so mr = 7 wastes nothing) by ``nr`` output
# channels: per (channel, tap) step it broadcasts the ``mr`` input elements that step reads (from
# the same padded phase planes, consecutive addresses) and loads ``nr/vw`` vectors of packed
# weights (``pack_weights`` with nr-wide panels: [ceil(M/nr), K, nr]), aligned and read in order.
# The tile is written back transposed, ``mr`` floats into each of its ``nr`` channel rows
# (``tf_store_t``: 16 channels at a time through permutes where AVX-512 is there); a
# work unit is one output row of one image for one panel of channels, its fused epilogue called
# on that row segment.

def transposed_routine_name(params: GemmParams, target: Target, taps: int) -> str:
    return routine_name(params, target, taps).replace("tfd_", "tfdt_", 1)


def transposed_prototypes(name: str) -> str:
    return (_pad_prototype(name) +
            f"TF_API void {name}_rows(const {SHAPE_TYPE} *s, const long *restrict toff, long plane, const float *restrict wp,\n"
            f"    const float *restrict xp, float *restrict out, long nrow, long ldc, long oh0, long oh1, long o0,\n"
            f"    tf_epi_fn epi, const void *ectx);\n")


def transposed_source(params: GemmParams, target: Target, taps: int, name: str) -> str:
    """The translation unit of ``name``: the padding pass (as ``source``), the transposed
    micro-kernel and one output row of one channel panel."""
    mr, nr = params.mr, params.nr
    return f"""{_prelude_and_pad(target, name)}{_micro_kernel(params, target, taps, name, transposed=True)}
/* Output rows [oh0, oh1) of one image for the channel panel at wp ([K][{nr}], read once per row
   from L2 when it fits): ``out`` is the panel's first channel row (row stride ldc), nrow (<= {nr})
   its channels; the fused epilogue on every finished row. */
TF_API void {name}_rows(const {SHAPE_TYPE} *s, const long *restrict toff, long plane, const float *restrict wp,
    const float *restrict xp, float *restrict out, long nrow, long ldc, long oh0, long oh1, long o0,
    tf_epi_fn epi, const void *ectx) {{
  const long pw = s->out_w + (s->k_w - 1) * s->dil_w / s->stride_w, ow_n = s->out_w;
  float ct[{mr * nr}] __attribute__((aligned(64)));
  for (long oh = oh0; oh < oh1; oh++) {{
    float *dst = out + oh * ow_n;
    for (long ow0 = 0; ow0 < ow_n; ow0 += {mr}) {{
      {name}_tukr(s->channels, plane, toff, wp, xp + oh * pw + ow0, ct);
      const long n = tf_min({mr}, ow_n - ow0);
      tf_store_t(ct, {nr}, n, nrow, dst + ow0, ldc);
    }}
    if (epi) tf_epi_callable(epi)(ectx, dst, ldc, o0, oh * ow_n, nrow, ow_n);
  }}
}}
"""
