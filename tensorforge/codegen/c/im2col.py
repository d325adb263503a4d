"""The C routine packing a convolution's implicit B operand straight from the input image.

For the implicit GEMM ``out[o, p] = W[o, k] @ col[k, p]`` (k = (c, kh, kw), p = (oh, ow)), the
routine ``tf_im2col`` (``IM2COL_C``; the shape is a ``tf_conv_shape`` argument) writes the GEMM's
packed-B panels ``Bp[q][k][nr]`` (columns ``q*nr .. q*nr+nr-1``; the layout ``microkernels.pack_b``
documents) without ever materialising ``col``: each panel row is a
few runs of one input row (one run per output row the panel crosses), copied with ``memcpy`` at
stride 1 or gathered at larger strides, with zeros where the window reaches into the padding and
past the last output position.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Im2colShape:
    """One group of one image: ``channels`` input channels of ``in_h x in_w``, output ``out_h x out_w``."""

    channels: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    k_h: int
    k_w: int
    stride_h: int
    stride_w: int
    dil_h: int
    dil_w: int
    pad_h: int
    pad_w: int

    @property
    def positions(self) -> int:
        return self.out_h * self.out_w

    @property
    def depth(self) -> int:
        """K of the implicit GEMM."""
        return self.channels * self.k_h * self.k_w


    def c_init(self) -> str:
        """A C initializer of ``tf_conv_shape`` (field order as in ``IM2COL_C``)."""
        return "{ " + ", ".join(str(getattr(self, f)) for f in _FIELDS) + " }"


_FIELDS = ("channels", "in_h", "in_w", "out_h", "out_w", "k_h", "k_w", "stride_h", "stride_w", "dil_h", "dil_w",
           "pad_h", "pad_w")

# One routine for every convolution of a model, the shape a runtime argument: a copy per shape
# made gcc compile dozens of near-identical functions for a ResNet; the runtime divisions cost
# one per run of an input row, next to a memcpy of that run.
SHAPE_TYPEDEF = "typedef struct { long %s; } tf_conv_shape;\n" % ", ".join(_FIELDS)
GUARDED_SHAPE_TYPEDEF = f"#ifndef TF_CONV_SHAPE_DEFINED\n#define TF_CONV_SHAPE_DEFINED\n{SHAPE_TYPEDEF}#endif\n"

IM2COL_C = GUARDED_SHAPE_TYPEDEF + """
#ifndef TF_IM2COL_DEFINED
#define TF_IM2COL_DEFINED
/* Panels [q0, q1) of the packed B (``Bp[q][k][nr]``) of image x (its group's first channel) into bp.
   With images > 1 the columns run on across the images (img_stride floats apart) one after another:
   the batch folded into the GEMM's N, for layers with few output positions. */
static void tf_im2col(const tf_conv_shape *s, long nr, const float *restrict x, float *restrict bp, long q0, long q1,
                      long images, long img_stride) {
  const long K = s->channels * s->k_h * s->k_w, positions = s->out_h * s->out_w, sw = s->stride_w;
  const long total = positions * images;
  for (long q = q0; q < q1; q++) {
    float *dst = bp + (q - q0) * K * nr;
    long k = 0;
    for (long c = 0; c < s->channels; c++)
    for (long kh = 0; kh < s->k_h; kh++)
    for (long kw = 0; kw < s->k_w; kw++, k++) {
      float *d = dst + k * nr;
      long jj = 0, col = q * nr;
      while (jj < nr) {
        if (col >= total) { for (; jj < nr; jj++) d[jj] = 0.0f; break; }
        const long img = col / positions, p = col - img * positions;
        const float *xc = x + img * img_stride + c * s->in_h * s->in_w;
        const long oh = p / s->out_w, ow = p - oh * s->out_w;
        const long len = tf_min(s->out_w - ow, nr - jj);
        const long ih = oh * s->stride_h + kh * s->dil_h - s->pad_h;
        if (ih < 0 || ih >= s->in_h) {
          for (long t = 0; t < len; t++) d[jj + t] = 0.0f;
        } else {
          const float *row = xc + ih * s->in_w;
          const long base = ow * sw + kw * s->dil_w - s->pad_w;   /* input column of t = 0 */
          long t0 = base >= 0 ? 0 : (-base + sw - 1) / sw;
          long t1 = base >= s->in_w ? 0 : (s->in_w - base + sw - 1) / sw;
          if (t0 > len) t0 = len;
          if (t1 > len) t1 = len;
          if (t1 < t0) t1 = t0;
          for (long t = 0; t < t0; t++) d[jj + t] = 0.0f;
          if (sw == 1) memcpy(d + jj + t0, row + base + t0, sizeof(float) * (size_t)(t1 - t0));
          else if (sw == 2) {   /* a constant stride: the compiler vectorises it (even lanes of two loads) */
            const float *src = row + base;
            float *dst = d + jj;
            for (long t = t0; t < t1; t++) dst[t] = src[2 * t];
          } else for (long t = t0; t < t1; t++) d[jj + t] = row[base + t * sw];
          for (long t = t1; t < len; t++) d[jj + t] = 0.0f;
        }
        jj += len;
        col += len;
      }
    }
  }
}
#endif
"""

# The GEMM callback of a batch-folded convolution (``tensorize.KernelPlan._fold``): a finished tile
# of the scratch C (columns = images x positions) goes through each image's fused epilogue
# (contexts ``ctx_size`` bytes apart from ``ctx0``), then to that image's output rows.
FOLD_SCATTER_C = """
#ifndef TF_FOLD_SCATTER_DEFINED
#define TF_FOLD_SCATTER_DEFINED
typedef struct { float *out; long img_stride, positions, ldc, col0; tf_epi_fn epi; const void *ctx0; long ctx_size; } tf_fold_ctx;
static void tf_fold_scatter(const void *vctx, float *c, long ldt, long i0, long j0, long rows, long cols) {
  const tf_fold_ctx *f = (const tf_fold_ctx *)vctx;
  for (long j = f->col0 + j0, end = j + cols, off = 0; j < end;) {
    const long img = j / f->positions, p = j - img * f->positions, len = tf_min(f->positions - p, end - j);
    float *dst = f->out + img * f->img_stride + i0 * f->ldc + p;
    /* the epilogue on the scratch tile (in L1), so the output is only written */
    if (f->epi) f->epi((const char *)f->ctx0 + img * f->ctx_size, c + off, ldt, i0, p, rows, len);
    for (long r = 0; r < rows; r++) memcpy(dst + r * f->ldc, c + r * ldt + off, sizeof(float) * (size_t)len);
    j += len;
    off += len;
  }
}
#endif
"""
