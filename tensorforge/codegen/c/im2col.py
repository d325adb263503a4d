"""C routine packing a convolution's implicit B operand straight from the input image.

For the implicit GEMM ``out[o, p] = W[o, k] @ col[k, p]`` (k = (c, kh, kw), p = (oh, ow)), the
routine writes the GEMM's packed-B panels ``Bp[q][k][nr]`` (columns ``q*nr .. q*nr+nr-1``; the
layout ``microkernels.pack_b`` documents) without ever materialising ``col``: each panel row is a
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


def im2col_pack(s: Im2colShape, nr: int, name: str) -> str:
    """``static void <name>(const float *x, float *bp, long q0, long q1)``: panels [q0, q1) of the
    image ``x`` (its first channel of the group) into ``bp`` (panel q0 first)."""
    K = s.depth
    if s.stride_w == 1:
        copy = "memcpy(d + jj + t0, row + base + t0, sizeof(float) * (size_t)(t1 - t0));"
    else:
        copy = f"for (long t = t0; t < t1; t++) d[jj + t] = row[base + t * {s.stride_w}];"
    return f"""
static void {name}(const float *restrict x, float *restrict bp, long q0, long q1) {{
  for (long q = q0; q < q1; q++) {{
    float *dst = bp + (q - q0) * {K * nr}L;
    long k = 0;
    for (long c = 0; c < {s.channels}; c++)
    for (long kh = 0; kh < {s.k_h}; kh++)
    for (long kw = 0; kw < {s.k_w}; kw++, k++) {{
      const float *xc = x + c * {s.in_h * s.in_w}L;
      float *d = dst + k * {nr};
      long jj = 0, p = q * {nr};
      while (jj < {nr}) {{
        if (p >= {s.positions}) {{ for (; jj < {nr}; jj++) d[jj] = 0.0f; break; }}
        const long oh = p / {s.out_w}, ow = p - oh * {s.out_w};
        const long len = tf_min({s.out_w} - ow, {nr} - jj);
        const long ih = oh * {s.stride_h} + kh * {s.dil_h} - {s.pad_h};
        if (ih < 0 || ih >= {s.in_h}) {{
          for (long t = 0; t < len; t++) d[jj + t] = 0.0f;
        }} else {{
          const float *row = xc + ih * {s.in_w};
          const long base = ow * {s.stride_w} + kw * {s.dil_w} - {s.pad_w};   /* input column of t = 0 */
          long t0 = base >= 0 ? 0 : (-base + {s.stride_w - 1}) / {s.stride_w};
          long t1 = base >= {s.in_w} ? 0 : ({s.in_w} - base + {s.stride_w - 1}) / {s.stride_w};
          if (t0 > len) t0 = len;
          if (t1 > len) t1 = len;
          if (t1 < t0) t1 = t0;
          for (long t = 0; t < t0; t++) d[jj + t] = 0.0f;
          {copy}
          for (long t = t1; t < len; t++) d[jj + t] = 0.0f;
        }}
        jj += len;
        p += len;
      }}
    }}
  }}
}}
"""
