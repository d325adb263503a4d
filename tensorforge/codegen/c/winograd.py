"""3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3) and F(4x4, 3x3).

Each m x m block of outputs (a *tile*; m = 2 or 4) is computed from an a x a patch of the padded
input (a = m + 2) with a*a multiplications per (input, output channel) pair instead of 9*m*m: the
patch is transformed (``V = B^T d B``), multiplied elementwise with the transformed filter
(``U = G g G^T``, done once at compile time) and summed over input channels, which for each of the
a*a positions of the transform domain is one GEMM ``M_e[o, tile] = U_e[o, c] @ V_e[c, tile]``; the
inverse transform (``Y = A^T M A``) gives the m x m outputs.  F(2x2, 3x3) does 2.25x fewer
multiply-adds than direct convolution, F(4x4, 3x3) 4x fewer, paid for by the two transforms and the
V and M buffers.  F(2x2, 3x3) keeps float32 error at the level of the direct computation (the
transforms' constants are 0, +-1 and 1/2); F(4x4, 3x3)'s constants (up to 8 in A, 5 in B, 1/24 in
G) cost a few more bits (about 1e-5 of a layer's output scale; whole ResNets within 1.1e-6 of
torch), and it needs larger images to fill its GEMMs (4x fewer tiles): the tensorizer takes it
where it measured faster.

The work goes by *chunks* of whole tile rows (possibly spanning images) sized so that one chunk's
V and M stay in L2; all threads work on every chunk: the input transform split by channel, the a*a
GEMMs handed out one by one (each single-threaded, on the shared packed-B layout the input transform
writes directly), the output transform split by output channel, and the fused epilogue applied to
each image's finished rows while they are in cache.  The transforms are written out from the
matrices below (``combination``): constant multiply-adds, with +-1 as adds and 0 skipped.

With a symbolic batch the image count is a runtime C expression: the chunk size, the buffers' sizes
and strides are then computed in C by the same formulas (``_runtime_sizes``), so every batch size
runs the chunking a static build for that size would.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# (G, B^T, A^T) of F(m x m, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks")
TRANSFORMS = {
    2: (np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]),
        np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)),
    4: (np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype=np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
                 dtype=np.float64)),
}

# A chunk's transformed input (a*a x C x tiles floats) is sized to about this many bytes (a part of
# L3), with at least MIN_TILES tiles: the a*a GEMMs stream the transformed weights once per chunk,
# so their N (the chunk's tiles) must be wide enough to hide that.
CHUNK_BYTES = 2 << 20
MIN_TILES = 256


def transform_weights(w: np.ndarray, rows: int, channels: int, m: int = 2) -> np.ndarray:
    """``W [O, C, 3, 3]`` into ``U [a*a, O, C]`` (``U_e = (G g G^T)[e // a, e % a]``, a = m + 2), float32."""
    g = np.asarray(w, dtype=np.float64).reshape(-1)[:rows * channels * 9].reshape(rows, channels, 3, 3)
    G = TRANSFORMS[m][0]
    u = np.einsum("xi,ocij,yj->xyoc", G, g, G)
    return np.ascontiguousarray(u.reshape((m + 2) ** 2, rows, channels), dtype=np.float32)


def combination(coeffs, terms) -> str:
    """``sum coeffs[j] * terms[j]`` as C: positive terms first, +-1 as a plain add or subtract,
    zeros skipped (an all-zero row is 0.0f)."""
    parts = sorted(((float(c), t) for c, t in zip(coeffs, terms) if c != 0), key=lambda ct: ct[0] < 0)
    text = ""
    for c, t in parts:
        mag = abs(c)
        factor = t if mag == 1 else f"{mag!r}f * {t}"
        text += (factor if not text and c > 0 else f"-{factor}" if not text else
                 f" + {factor}" if c > 0 else f" - {factor}")
    return text or "0.0f"


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
    m: int = 2          # output tile: F(m x m, 3x3)

    @property
    def alpha(self) -> int:
        """Side of the input patch and of the transform domain (a*a GEMMs)."""
        return self.m + 2

    @property
    def tiles_h(self) -> int:
        return -(-self.out_h // self.m)

    @property
    def tiles_w(self) -> int:
        return -(-self.out_w // self.m)

    def computed_share(self) -> float:
        """Outputs computed (whole tiles) per output needed: the padding of the last tile row and column."""
        return self.tiles_h * self.tiles_w * self.m * self.m / (self.out_h * self.out_w)

    def rows_per_chunk(self, images: int) -> int:
        """Tile rows per chunk: V of a chunk about CHUNK_BYTES, at least MIN_TILES tiles (or all)."""
        return max(1, min(images * self.tiles_h, self.max_rows_per_chunk))

    @property
    def max_rows_per_chunk(self) -> int:
        """Tile rows per chunk when the images have more: about CHUNK_BYTES of V, MIN_TILES tiles."""
        want = max(MIN_TILES, CHUNK_BYTES // (self.alpha ** 2 * 4 * self.channels))
        return -(-want // self.tiles_w)


def eligible(kernel: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...]) -> bool:
    return tuple(kernel) == (3, 3) and all(s == 1 for s in strides) and all(d == 1 for d in dilations)


def _static_sizes(s: WinogradShape, images: int, nr: int) -> tuple[str, dict]:
    """The chunk geometry for a known image count, as numbers in the text."""
    rpc = s.rows_per_chunk(images)
    total_rows = images * s.tiles_h
    cap = rpc * s.tiles_w                           # tiles per chunk at most
    panels = -(-cap // nr)
    # floats of one transformed-input matrix (packed B), plus one cache line: the input transform
    # writes the 16 (36) matrices at once, and at a multiple of 4 KiB apart (ResNet's 64-channel
    # layers: 147456 bytes) those streams share L1 sets (the stage alone at batch 8: 1.05x)
    vstride = panels * s.channels * nr + 16
    mstride = s.rows * cap                          # floats of one product matrix
    e = s.alpha ** 2
    return "", {"rows": total_rows, "rpc": rpc, "cap": cap, "v16": e * vstride, "m16": e * mstride,
                "capL": f"{cap}L", "vsL": f"{vstride}L", "msL": f"{mstride}L"}


def _runtime_sizes(s: WinogradShape, images: str, nr: int) -> tuple[str, dict]:
    """The same geometry for ``images`` known only at run time (a C expression): declarations, names."""
    most = s.max_rows_per_chunk
    decls = (f"  const long wg_rows = {images} * {s.tiles_h}L;\n"
             f"  const long wg_rpc = wg_rows < 1 ? 1 : wg_rows < {most} ? wg_rows : {most};\n"
             f"  const long wg_cap = wg_rpc * {s.tiles_w};\n"
             f"  const long wg_vs = (wg_cap + {nr - 1}) / {nr} * {s.channels * nr}L, wg_ms = {s.rows}L * wg_cap;\n")
    e = s.alpha ** 2
    return decls, {"rows": "wg_rows", "rpc": "wg_rpc", "cap": "wg_cap", "v16": f"{e} * wg_vs", "m16": f"{e} * wg_ms",
                   "capL": "wg_cap", "vsL": "wg_vs", "msL": "wg_ms"}


def kernel_body(s: WinogradShape, images: int | str, nr: int, gemm: str, x: str, u: str, out: str,
                x_image: int, out_image: int, ldc: int, epi: str, contexts: str, ctx_size: str,
                own_images: bool = False) -> str:
    """The C statements of one convolution kernel (inside its function): buffers, then the chunks.

    ``images``: the image count, or a C expression of it (a symbolic batch);
    ``gemm``: a generated GEMM (``<gemm>_prepacked``, packed-B panels of ``nr`` columns) on one thread;
    ``x``/``u``/``out``: C expressions of the input, the transformed weights and the output;
    ``epi``/``contexts``/``ctx_size``: the fused epilogue callback (or ``0``) and its per-image contexts.

    The threads share each chunk (the transforms split by channels, the products one GEMM each),
    or, with ``own_images`` (a static count that gives every thread whole images), each thread
    takes a contiguous share of the images and runs every step of their chunks alone, in its own
    buffers, as every other kernel of the model splits such a batch: shared, the transforms handed
    each thread half of every image, whose input and output the kernels around it keep on the
    other core (ResNet-50's 64-channel 3x3 at 56x56, batch 8: 7 ms alone, 13 ms inside the model)."""
    C, O, tw, m, a = s.channels, s.rows, s.tiles_w, s.m, s.alpha
    _, BT, AT = TRANSFORMS[m]
    E = a * a
    own = own_images and isinstance(images, int)
    if own:
        decls, z = _static_sizes(s, 1, nr)
    else:
        decls, z = _static_sizes(s, images, nr) if isinstance(images, int) else _runtime_sizes(s, images, nr)
    split, split_dyn = ("", "") if own else ("#pragma omp for schedule(static)", "#pragma omp for schedule(dynamic, 1)")
    buffers = f'float *vbuf = tf_alloc({z["v16"]}), *mbuf = tf_alloc({z["m16"]});'
    if own:
        th = s.tiles_h
        z["rpc"] = -(-th // -(-th // z["rpc"]))          # even chunks of an image's tile rows
        head = f"""  #pragma omp parallel
  {{
  {buffers}
  #pragma omp for schedule(static)
  for (long img = 0; img < {images}; img++)
  for (long r0 = img * {th}L; r0 < (img + 1) * {th}L; r0 += {z["rpc"]}) {{
    const long r1 = tf_min(r0 + {z["rpc"]}, (img + 1) * {th}L), ntiles = (r1 - r0) * {tw};"""
        tail = """  free(vbuf);
  free(mbuf);
  }"""
    else:
        head = f"""  {buffers}
  #pragma omp parallel
  for (long r0 = 0; r0 < {z["rows"]}; r0 += {z["rpc"]}) {{
    const long r1 = tf_min(r0 + {z["rpc"]}, {z["rows"]}), ntiles = (r1 - r0) * {tw};"""
        tail = """  free(vbuf);
  free(mbuf);"""
    wb = m * tw + 2                                 # padded width of the rows a tile row reads
    lo, hi = max(0, s.pad_w), min(wb, s.pad_w + s.in_w)   # columns of those rows inside the image
    down = "\n".join(f"          t[{i}][k] = {combination(BT[i], [f'd[{j}][k]' for j in range(a)])};"
                     for i in range(a))
    patch = " ".join(f"const float p{j} = ti[{m} * q + {j}];" for j in range(a))
    across = " ".join(f"v{i}[q] = {combination(BT[i], [f'p{j}' for j in range(a)])};" for i in range(a))
    vptrs = ", ".join(f"*v{i} = v + ({a} * i + {i}) * {z['vsL']}" for i in range(a))
    mloads = " ".join(f"const float m{i} = m[({i * a} + j) * {z['msL']} + q];" for i in range(a))
    down_m = " ".join(f"s{r}[j] = {combination(AT[r], [f'm{i}' for i in range(a)])};" for r in range(m))
    across_m = " ".join(f"y{r}[{m} * q + {c}] = {combination(AT[c], [f's{r}[{j}]' for j in range(a)])};"
                        for r in range(m) for c in range(m))
    ybufs = ", ".join(f"y{r}[{m * tw}] __attribute__((aligned(64)))" for r in range(m))
    stores = "\n".join(f"        {'' if r == 0 else f'if ({m} * ty + {r} < {s.out_h}) '}"
                       f"memcpy(yo + {r * s.out_w}, y{r}, sizeof(float) * {s.out_w});" for r in range(m))
    return f"""{decls}{head}
    /* input transform V = B^T d B of every tile, written into the GEMMs' packed-B panels: per tile
       row, the {a} input rows (zero padded) combined down the columns, then across per tile */
    {split}
    for (long c = 0; c < {C}; c++) {{
      for (long r = r0; r < r1; r++) {{
        const long n = r / {s.tiles_h}, ty = r - n * {s.tiles_h};
        const float *xc = {x} + n * {x_image}L + c * {s.in_h * s.in_w}L;
        float d[{a}][{wb}] __attribute__((aligned(64))), t[{a}][{wb}] __attribute__((aligned(64)));
        for (int i = 0; i < {a}; i++) {{
          const long iy = {m} * ty + i - {s.pad_h};
          memset(d[i], 0, sizeof d[i]);
          if (iy >= 0 && iy < {s.in_h}) memcpy(d[i] + {lo}, xc + iy * {s.in_w} + {lo - s.pad_w}, sizeof(float) * {max(hi - lo, 0)});
        }}
        for (int k = 0; k < {wb}; k++) {{
{down}
        }}
        for (long tx0 = 0; tx0 < {tw};) {{      /* runs of tiles inside one packed panel */
          const long tile = (r - r0) * {tw} + tx0, k0 = tile % {nr}, len = tf_min({nr} - k0, {tw} - tx0);
          float *v = vbuf + (tile / {nr}) * {C * nr}L + c * {nr} + k0;
          for (int i = 0; i < {a}; i++) {{
            const float *ti = t[i] + {m} * tx0;
            float {vptrs};
            for (long q = 0; q < len; q++) {{
              {patch}
              {across}
            }}
          }}
          tx0 += len;
        }}
      }}
      /* zero the padding columns of the last panel (the GEMM reads whole panels) */
      for (long tile = ntiles; tile < (ntiles + {nr - 1}) / {nr} * {nr}; tile++)
        for (int e = 0; e < {E}; e++) vbuf[e * {z["vsL"]} + (tile / {nr}) * {C * nr}L + c * {nr} + tile % {nr}] = 0.0f;
    }}
    /* the {E} products M_e = U_e @ V_e, one GEMM per thread at a time */
    {split_dyn}
    for (int e = 0; e < {E}; e++)
      {gemm}_prepacked({O}, ntiles, {C}, {u} + e * {O * C}L, {C}, vbuf + e * {z["vsL"]}, mbuf + e * {z["msL"]}, {z["cap"]}, 0, 0, 0);
    /* output transform Y = A^T M A: per output channel and tile row, down then across */
    {split}
    for (long o = 0; o < {O}; o++) {{
      for (long r = r0; r < r1; r++) {{
        const long n = r / {s.tiles_h}, ty = r - n * {s.tiles_h};
        const float *m = mbuf + o * {z["capL"]} + (r - r0) * {tw};
        float {ybufs};
        for (long q = 0; q < {tw}; q++) {{
          float {", ".join(f"s{r}[{a}]" for r in range(m))};
          for (int j = 0; j < {a}; j++) {{
            {mloads}
            {down_m}
          }}
          {across_m}
        }}
        float *yo = {out} + n * {out_image}L + o * {ldc}L + {m} * ty * {s.out_w};
{stores}
      }}
    }}
    {_epilogue_loop(s, epi, contexts, ctx_size, out, out_image, ldc, split)}
  }}
{tail}"""


def _epilogue_loop(s: WinogradShape, epi: str, contexts: str, ctx_size: str, out: str, out_image: int,
                   ldc: int, split: str) -> str:
    """The fused epilogue over the chunk's rows of each image, output channels split between threads
    by ``split`` (after the output transform's barrier), or all on the thread that owns the image."""
    if epi == "0":
        return ""
    th = s.tiles_h
    return f"""{split}
    for (long o = 0; o < {s.rows}; o += 8) {{
      const long o1 = tf_min(o + 8, {s.rows});
      for (long r = r0; r < r1;) {{
        const long n = r / {th}, ty0 = r - n * {th}, ty1 = tf_min({th}, ty0 + (r1 - r));
        const long p0 = {s.m} * ty0 * {s.out_w}, p1 = tf_min({s.m} * ty1, {s.out_h}) * {s.out_w};
        {epi}((const char *){contexts} + n * {ctx_size}, {out} + n * {out_image}L + o * {ldc}L + p0, {ldc}, o, p0, o1 - o, p1 - p0);
        r += ty1 - ty0;
      }}
    }}"""
