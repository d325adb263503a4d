"""3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3).

Each 2x2 block of outputs (a *tile*) is computed from a 4x4 patch of the padded input with 16
multiplications per (input, output channel) pair instead of 36: the patch is transformed
(``V = B^T d B``), multiplied elementwise with the transformed filter (``U = G g G^T``, done once at
compile time) and summed over input channels, which for each of the 16 positions of the 4x4
transform domain is one GEMM ``M_e[o, tile] = U_e[o, c] @ V_e[c, tile]``; the inverse transform
(``Y = A^T M A``) gives the 2x2 outputs.  2.25x fewer multiply-adds than direct convolution, paid
for by the two transforms (adds only) and the V and M buffers.  F(2x2, 3x3) keeps float32 error at
the level of the direct computation (the transforms' constants are 0, +-1 and 1/2).

The work goes by *chunks* of whole tile rows (possibly spanning images) sized so that one chunk's
V and M stay in L2; all threads work on every chunk: the input transform split by channel, the 16
GEMMs handed out one by one (each single-threaded, on the shared packed-B layout the input transform
writes directly), the output transform split by output channel, and the fused epilogue applied to
each image's finished rows while they are in cache.

With a symbolic batch the image count is a runtime C expression: the chunk size, the buffers' sizes
and strides are then computed in C by the same formulas (``_runtime_sizes``), so every batch size
runs the chunking a static build for that size would.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])

# A chunk's transformed input (16 x C x tiles floats) is sized to about this many bytes (a part of
# L3), with at least MIN_TILES tiles: the 16 GEMMs stream the transformed weights once per chunk,
# so their N (the chunk's tiles) must be wide enough to hide that.
CHUNK_BYTES = 2 << 20
MIN_TILES = 256


def transform_weights(w: np.ndarray, rows: int, channels: int) -> np.ndarray:
    """``W [O, C, 3, 3]`` into ``U [16, O, C]`` (``U_e = (G g G^T)[e // 4, e % 4]``), float32."""
    g = np.asarray(w, dtype=np.float64).reshape(-1)[:rows * channels * 9].reshape(rows, channels, 3, 3)
    u = np.einsum("xi,ocij,yj->xyoc", _G, g, _G)
    return np.ascontiguousarray(u.reshape(16, rows, channels), dtype=np.float32)


@dataclass(frozen=True)
class WinogradShape:
    """One image: ``channels`` inputs of ``in_h x in_w`` with leading pads, ``rows`` output channels of
    ``out_h x out_w``; images ``count`` in a row, ``x_image``/``out_image`` floats apart."""

    channels: int
    rows: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    pad_h: int
    pad_w: int

    @property
    def tiles_h(self) -> int:
        return -(-self.out_h // 2)

    @property
    def tiles_w(self) -> int:
        return -(-self.out_w // 2)

    def rows_per_chunk(self, images: int) -> int:
        """Tile rows per chunk: V of a chunk about CHUNK_BYTES, at least MIN_TILES tiles (or all)."""
        return max(1, min(images * self.tiles_h, self.max_rows_per_chunk))

    @property
    def max_rows_per_chunk(self) -> int:
        """Tile rows per chunk when the images have more: about CHUNK_BYTES of V, MIN_TILES tiles."""
        want = max(MIN_TILES, CHUNK_BYTES // (16 * 4 * self.channels))
        return -(-want // self.tiles_w)


def eligible(kernel: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...]) -> bool:
    return tuple(kernel) == (3, 3) and all(s == 1 for s in strides) and all(d == 1 for d in dilations)


def _static_sizes(s: WinogradShape, images: int, nr: int) -> tuple[str, dict]:
    """The chunk geometry for a known image count, as numbers in the text."""
    rpc = s.rows_per_chunk(images)
    total_rows = images * s.tiles_h
    cap = rpc * s.tiles_w                           # tiles per chunk at most
    panels = -(-cap // nr)
    vstride = panels * s.channels * nr              # floats of one transformed-input matrix (packed B)
    mstride = s.rows * cap                          # floats of one product matrix
    return "", {"rows": total_rows, "rpc": rpc, "cap": cap, "v16": 16 * vstride, "m16": 16 * mstride,
                "capL": f"{cap}L", "vsL": f"{vstride}L", "msL": f"{mstride}L"}


def _runtime_sizes(s: WinogradShape, images: str, nr: int) -> tuple[str, dict]:
    """The same geometry for ``images`` known only at run time (a C expression): declarations, names."""
    most = s.max_rows_per_chunk
    decls = (f"  const long wg_rows = {images} * {s.tiles_h}L;\n"
             f"  const long wg_rpc = wg_rows < 1 ? 1 : wg_rows < {most} ? wg_rows : {most};\n"
             f"  const long wg_cap = wg_rpc * {s.tiles_w};\n"
             f"  const long wg_vs = (wg_cap + {nr - 1}) / {nr} * {s.channels * nr}L, wg_ms = {s.rows}L * wg_cap;\n")
    return decls, {"rows": "wg_rows", "rpc": "wg_rpc", "cap": "wg_cap", "v16": "16 * wg_vs", "m16": "16 * wg_ms",
                   "capL": "wg_cap", "vsL": "wg_vs", "msL": "wg_ms"}


def kernel_body(s: WinogradShape, images: int | str, nr: int, gemm: str, x: str, u: str, out: str,
                x_image: int, out_image: int, ldc: int, epi: str, contexts: str, ctx_size: str) -> str:
    """The C statements of one convolution kernel (inside its function): buffers, then the chunks.

    ``images``: the image count, or a C expression of it (a symbolic batch);
    ``gemm``: a generated GEMM (``<gemm>_prepacked``, packed-B panels of ``nr`` columns) on one thread;
    ``x``/``u``/``out``: C expressions of the input, the transformed weights and the output;
    ``epi``/``contexts``/``ctx_size``: the fused epilogue callback (or ``0``) and its per-image contexts."""
    C, O, tw = s.channels, s.rows, s.tiles_w
    decls, z = _static_sizes(s, images, nr) if isinstance(images, int) else _runtime_sizes(s, images, nr)
    wb = 2 * tw + 2                                 # padded width of the rows a tile row reads
    lo, hi = max(0, s.pad_w), min(wb, s.pad_w + s.in_w)   # columns of those rows inside the image
    return f"""{decls}  float *vbuf = tf_alloc({z["v16"]}), *mbuf = tf_alloc({z["m16"]});
  #pragma omp parallel
  for (long r0 = 0; r0 < {z["rows"]}; r0 += {z["rpc"]}) {{
    const long r1 = tf_min(r0 + {z["rpc"]}, {z["rows"]}), ntiles = (r1 - r0) * {tw};
    /* input transform V = B^T d B of every tile, written into the GEMMs' packed-B panels: per tile
       row, the 4 input rows (zero padded) combined down the columns, then across in pairs */
    #pragma omp for schedule(static)
    for (long c = 0; c < {C}; c++) {{
      for (long r = r0; r < r1; r++) {{
        const long n = r / {s.tiles_h}, ty = r - n * {s.tiles_h};
        const float *xc = {x} + n * {x_image}L + c * {s.in_h * s.in_w}L;
        float d[4][{wb}] __attribute__((aligned(64))), t[4][{wb}] __attribute__((aligned(64)));
        for (int i = 0; i < 4; i++) {{
          const long iy = 2 * ty + i - {s.pad_h};
          memset(d[i], 0, sizeof d[i]);
          if (iy >= 0 && iy < {s.in_h}) memcpy(d[i] + {lo}, xc + iy * {s.in_w} + {lo - s.pad_w}, sizeof(float) * {max(hi - lo, 0)});
        }}
        for (int k = 0; k < {wb}; k++) {{
          t[0][k] = d[0][k] - d[2][k]; t[1][k] = d[1][k] + d[2][k];
          t[2][k] = d[2][k] - d[1][k]; t[3][k] = d[1][k] - d[3][k];
        }}
        for (long tx0 = 0; tx0 < {tw};) {{      /* runs of tiles inside one packed panel */
          const long tile = (r - r0) * {tw} + tx0, k0 = tile % {nr}, len = tf_min({nr} - k0, {tw} - tx0);
          float *v = vbuf + (tile / {nr}) * {C * nr}L + c * {nr} + k0;
          for (int i = 0; i < 4; i++) {{
            const float *ti = t[i] + 2 * tx0;
            float *v0 = v + (i * 4) * {z["vsL"]}, *v1 = v0 + {z["vsL"]}, *v2 = v1 + {z["vsL"]}, *v3 = v2 + {z["vsL"]};
            for (long q = 0; q < len; q++) {{
              const float a = ti[2 * q], b = ti[2 * q + 1], cc = ti[2 * q + 2], dd = ti[2 * q + 3];
              v0[q] = a - cc; v1[q] = b + cc; v2[q] = cc - b; v3[q] = b - dd;
            }}
          }}
          tx0 += len;
        }}
      }}
      /* zero the padding columns of the last panel (the GEMM reads whole panels) */
      for (long tile = ntiles; tile < (ntiles + {nr - 1}) / {nr} * {nr}; tile++)
        for (int e = 0; e < 16; e++) vbuf[e * {z["vsL"]} + (tile / {nr}) * {C * nr}L + c * {nr} + tile % {nr}] = 0.0f;
    }}
    /* the 16 products M_e = U_e @ V_e, one GEMM per thread at a time */
    #pragma omp for schedule(dynamic, 1)
    for (int e = 0; e < 16; e++)
      {gemm}_prepacked({O}, ntiles, {C}, {u} + e * {O * C}L, {C}, vbuf + e * {z["vsL"]}, mbuf + e * {z["msL"]}, {z["cap"]}, 0, 0, 0);
    /* output transform Y = A^T M A: per output channel and tile row, down then across */
    #pragma omp for schedule(static)
    for (long o = 0; o < {O}; o++) {{
      for (long r = r0; r < r1; r++) {{
        const long n = r / {s.tiles_h}, ty = r - n * {s.tiles_h};
        const float *m = mbuf + o * {z["capL"]} + (r - r0) * {tw};
        float y0[{2 * tw}] __attribute__((aligned(64))), y1[{2 * tw}] __attribute__((aligned(64)));
        for (long q = 0; q < {tw}; q++) {{
          float s0[4], s1[4];
          for (int j = 0; j < 4; j++) {{
            const float m0 = m[j * {z["msL"]} + q], m1 = m[(4 + j) * {z["msL"]} + q];
            const float m2 = m[(8 + j) * {z["msL"]} + q], m3 = m[(12 + j) * {z["msL"]} + q];
            s0[j] = m0 + m1 + m2; s1[j] = m1 - m2 - m3;
          }}
          y0[2 * q] = s0[0] + s0[1] + s0[2]; y0[2 * q + 1] = s0[1] - s0[2] - s0[3];
          y1[2 * q] = s1[0] + s1[1] + s1[2]; y1[2 * q + 1] = s1[1] - s1[2] - s1[3];
        }}
        float *yo = {out} + n * {out_image}L + o * {ldc}L + 2 * ty * {s.out_w};
        memcpy(yo, y0, sizeof(float) * {s.out_w});
        if (2 * ty + 1 < {s.out_h}) memcpy(yo + {s.out_w}, y1, sizeof(float) * {s.out_w});
      }}
    }}
    {_epilogue_loop(s, epi, contexts, ctx_size, out, out_image, ldc)}
  }}
  free(vbuf);
  free(mbuf);"""


def _epilogue_loop(s: WinogradShape, epi: str, contexts: str, ctx_size: str, out: str, out_image: int,
                   ldc: int) -> str:
    """The fused epilogue over the chunk's rows of each image, output channels split between threads
    (after the output transform's barrier)."""
    if epi == "0":
        return ""
    th = s.tiles_h
    return f"""#pragma omp for schedule(static)
    for (long o = 0; o < {s.rows}; o += 8) {{
      const long o1 = tf_min(o + 8, {s.rows});
      for (long r = r0; r < r1;) {{
        const long n = r / {th}, ty0 = r - n * {th}, ty1 = tf_min({th}, ty0 + (r1 - r));
        const long p0 = 2 * ty0 * {s.out_w}, p1 = tf_min(2 * ty1, {s.out_h}) * {s.out_w};
        {epi}((const char *){contexts} + n * {ctx_size}, {out} + n * {out_image}L + o * {ldc}L + p0, {ldc}, o, p0, o1 - o, p1 - p0);
        r += ty1 - ty0;
      }}
    }}"""
