"""3x3 stride-1 blocked convolutions by Winograd's F(m x m, 3x3), m = 2 or 4 (``winograd.py`` has
the algebra), in NCHW[16]c: with 16 channels in the lanes, both transforms are plain vector
arithmetic (``B^T d B`` on an a x a patch of vectors, ``A^T M A`` back, a = m + 2), and each of the
a*a products is a 1x1 blocked convolution over the tiles (``nchwc.py``'s register tiles:
``M_e[ob, t] = sum_cb V_e[cb, t] U_e[ob, cb]``), so no transposes or packing anywhere.

Work goes by chunks of whole tile rows (spanning images) whose transformed input V and products M
fit ``CHUNK_BYTES``; in one parallel region the threads transform the chunk's input (units: input
block x tile row), run the a*a products (units: point x group of output blocks) and transform back
with the epilogue (bias, residual, relu/ReLU6; units: output block x tile row), each phase ended by
the loop's barrier.  The transformed weights U ``[a*a][OB][CB][16][16]`` are made at compile time
(``transform_weights``).  Numerics as the plain Winograd kernels (docs/numerics.md).
"""
from __future__ import annotations

import os

import numpy as np

from ...dialects.graph.layout import unpack_weight
from ..target import Target
from . import nchwc
from .winograd import TRANSFORMS, combination

# V and M of one chunk take at most one core's L2 (CHUNK_BYTES where the target does not say): they
# stay in the cores' L2 between phases.  Measured here (2 MB L2, one process, interleaved against
# 1 MB chunks): ResNet-18 b1 1.031x, ResNet-50 b1 1.032x and 1.020x, ResNet-50 b8 1.013x; 512 KB
# chunks 0.950x; 4 and 8 MB as 2 MB.
CHUNK_BYTES = 1 << 20
# F(4x4) where it has at least this many tiles (all images) and computes at most this share of
# outputs over the real ones; else F(2x2) on its terms; else the direct kernel.  Measured in
# ResNet-18 b1 (kernel timers): F(2x2) at 14x14 0.51-0.55 ms against F(4x4)'s 0.67-0.71 (16 tiles,
# share 1.31); at 7x7 (16 tiles, share 1.31) 0.86-0.93 against the direct kernel's 0.97-1.02.
MIN_TILES = {4: 40, 2: 16}
MAX_SHARE = {4: 1.15, 2: 1.35}


ENV = "TENSORFORGE_NCHWC_WINOGRAD"     # "0": every blocked 3x3 conv takes the direct kernel


def eligible(g: nchwc.ConvGeometry) -> bool:
    """Whether the blocked conv ``g`` may run by Winograd: 3x3, stride 1, no dilation, whole input
    blocks, and not switched off by ``TENSORFORGE_NCHWC_WINOGRAD=0``."""
    return ((g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1) and g.bi == g.vw and not g.ci
            and os.environ.get("TENSORFORGE_NCHWC_WINOGRAD", "1") != "0")


def tile_size(g: nchwc.ConvGeometry) -> int:
    """m of F(m x m, 3x3) for a blocked conv (untuned), or 0 when it takes the direct kernel."""
    if not eligible(g):
        return 0
    for m in (4, 2):
        th, tw = -(-g.oh // m), -(-g.ow // m)
        if g.n * th * tw >= MIN_TILES[m] and th * tw * m * m <= MAX_SHARE[m] * g.oh * g.ow:
            return m
    return 0


def transform_weights(w_packed: np.ndarray, m: int) -> np.ndarray:
    """The blocked weight (OB, CB, 3, 3, 16, 16) as ``U [a*a][OB][CB][16 in][16 out]``, float32."""
    w = unpack_weight(np.asarray(w_packed)).astype(np.float64)          # (O, C, 3, 3)
    o, c = w.shape[:2]
    bo, bi = w_packed.shape[-1], w_packed.shape[-2]
    G = TRANSFORMS[m][0]
    u = np.einsum("xi,ocij,yj->xyoc", G, w, G).reshape((m + 2) ** 2, o // bo, bo, c // bi, bi)
    return np.ascontiguousarray(u.transpose(0, 1, 3, 4, 2), dtype=np.float32)


def _sandwich(t: np.ndarray, src: str, mid: str, dst: str, dst_decl: str = "const tf_vf") -> str:
    """C computing ``dst<i*r+j>`` = (T X T^T)[i][j] for ``X`` the a x a vectors ``src<k*a+l>`` and
    T r x a, through the r x a products ``mid`` = T X: B^T d B on the way in, A^T M A on the way out."""
    r, a = t.shape
    lines = [f"const tf_vf {mid}{i * a + j} = {combination(t[i], [f'{src}{k * a + j}' for k in range(a)])};"
             for i in range(r) for j in range(a)]
    lines += [f"{dst_decl} {dst}{i * r + j} = {combination(t[j], [f'{mid}{i * a + k}' for k in range(a)])};"
              for i in range(r) for j in range(r)]
    return "\n          ".join(lines)


def source(name: str, g: nchwc.ConvGeometry, m: int, target: Target, residual: bool, act: str,
           clip_max: float | None, threads: int, params: nchwc.BlockedParams | None = None) -> str:
    """The C of ``name(x, u, bias, residual, y)``: the blocked conv ``g`` by F(m x m, 3x3).  Tuned
    ``params``: ``band`` tile rows a chunk (else as many as fit the L2), ``blocks``/``rows``/``chunk``
    the products' register tile and input chunk."""
    a = m + 2
    a2 = a * a
    vw, cb, ob = g.vw, g.cb, g.ob
    th, tw = -(-g.oh // m), -(-g.ow // m)
    per_row = (cb + ob) * vw * a2 * 4 * tw
    rows = max(1, min(g.n * th, (params.band if params and params.band else
                                 (target.l2 or CHUNK_BYTES) // per_row)))
    tmax = rows * tw                                   # tiles of a full chunk
    # the a*a products: a 1x1 blocked conv over a 1 x tmax map of tiles
    gg = nchwc.ConvGeometry(1, cb, 1, tmax, vw, ob, 1, tmax, vw, 1, 1, 1, 1, 0, 0, 1, 1)
    plan = nchwc.ConvPlan.of(gg, target, params)
    blocks = plan.blocks
    groups = -(-ob // blocks)
    tail = ob - (groups - 1) * blocks
    rt = {bl: plan.rows_for(bl, target) for bl in {blocks, tail}}
    gname = f"{name}_g"
    tiles = "".join(nchwc._tile_function(gname, gg, r, bl, False, "")
                    for bl in sorted(rt) for r in range(1, rt[bl] + 1))
    sweeps = []

    def tile_call(r: int, bl: int) -> str:
        """r tiles (positions) x bl output blocks from tile t, the chunk's input blocks, no epilogue."""
        return (f"{nchwc._tile_name(gname, 1, r, bl)}(vp + t * {vw}, up, mp + t * {vw}, 0, 0, 0, 0, 1, 0, 1, "
                f"{plan.chunk}, c0 == 0, 0);")
    for bl in sorted(rt):
        cases = "\n".join(f"      case {r}: {tile_call(r, bl)} break;" for r in range(1, rt[bl]))
        sweeps.append(f"""
static void {gname}_sweep{bl}(const float *restrict v, const float *restrict u, float *m, long tc) {{
  for (long c0 = 0; c0 < {cb}; c0 += {plan.chunk}) {{
    const float *vp = v + c0 * {tmax * vw}, *up = u + c0 * {vw * vw};
    float *mp = m;
    long t = 0;
    for (; t + {rt[bl]} <= tc; t += {rt[bl]})
      {tile_call(rt[bl], bl)}
    switch (tc - t) {{
{cases}
      default: break;
    }}
  }}
}}
""")
    hi = nchwc.clip_bound(clip_max)
    dload = "\n          ".join(
        f"const tf_vf d{i * a + j} = inside || (ih0 + {i} >= 0 && ih0 + {i} < {g.h} && iw0 + {j} >= 0 && "
        f"iw0 + {j} < {g.w}) ? tf_ld(xp + ({i} * {g.w} + {j}) * {vw}) : zero;" for i in range(a) for j in range(a))
    vstore = " ".join(f"tf_st(vt + {e * cb * tmax * vw}, v{e});" for e in range(a2))
    pload = " ".join(f"const tf_vf p{e} = tf_ld(mt + {e * ob * tmax * vw});" for e in range(a2))
    epi = []
    for i in range(m):
        for j in range(m):
            st = nchwc.epilogue(f"o{i * m + j}", "bv", f"({i} * {g.ow} + {j}) * {vw}", residual, act, "yp", "rp")
            guard = f"if (full || (oh0 + {i} < {g.oh} && ow0 + {j} < {g.ow})) " if (g.oh % m or g.ow % m) else ""
            epi.append(guard + "{ " + st + " }")
    gemm_dispatch = (f"{gname}_sweep{blocks}(v + e * {cb * tmax * vw}, u + (e * {ob} + ob0) * {cb * vw * vw}, "
                     f"mm + (e * {ob} + ob0) * {tmax * vw}, tc);")
    if tail != blocks:
        gemm_dispatch = (f"if (og < {groups - 1}) {gemm_dispatch}\n        else "
                         + gemm_dispatch.replace(f"_sweep{blocks}(", f"_sweep{tail}("))
    res_at = f"res + ((n * {ob} + b) * {g.oh} + oh0) * {g.ow * vw} + ow0 * {vw}"
    body = f"""{tiles}{''.join(sweeps)}
static void {name}(const float *restrict x, const float *restrict u, const float *restrict bias, const float *res,
    float *y) {{
  float *v = tf_alloc({a2 * cb * tmax * vw}), *mm = tf_alloc({a2 * ob * tmax * vw});
  const tf_vf zero = tf_bcast(0.0f), lo = zero, hi = tf_bcast({hi});
  (void)lo; (void)hi;
  for (long r0 = 0; r0 < {g.n * th}; r0 += {rows}) {{
    const long nr = r0 + {rows} <= {g.n * th} ? {rows} : {g.n * th} - r0, tc = nr * {tw};
    #pragma omp parallel num_threads({threads}) if ({threads} > 1 && {g.macs}L >= {nchwc.PARALLEL_MIN_MACS}L)
    {{
      #pragma omp for schedule(static)
      for (long q = 0; q < {cb} * nr; q++) {{          /* input transform: (input block, tile row) */
        const long c = q / nr, rr = r0 + q % nr, n = rr / {th}, ih0 = rr % {th} * {m} - {g.ph};
        for (long j = 0; j < {tw}; j++) {{
          const long iw0 = j * {m} - {g.pw};
          const int inside = ih0 >= 0 && ih0 + {a} <= {g.h} && iw0 >= 0 && iw0 + {a} <= {g.w};
          const float *xp = x + ((n * {cb} + c) * {g.h} + ih0) * {g.w * vw} + iw0 * {vw};
          {dload}
          {_sandwich(TRANSFORMS[m][1], "d", "s", "v")}
          float *vt = v + (c * {tmax} + (q % nr) * {tw} + j) * {vw};
          {vstore}
        }}
      }}
      #pragma omp for schedule(static)
      for (long q = 0; q < {a2 * groups}; q++) {{        /* the a*a products: (point, output group) */
        const long e = q / {groups}, og = q % {groups}, ob0 = og * {blocks};
        {gemm_dispatch}
      }}
      #pragma omp for schedule(static)
      for (long q = 0; q < {ob} * nr; q++) {{           /* output transform and epilogue */
        const long b = q / nr, rr = r0 + q % nr, n = rr / {th}, oh0 = rr % {th} * {m};
        const tf_vf bv = tf_ld(bias + b * {vw});
        for (long j = 0; j < {tw}; j++) {{
          const long ow0 = j * {m};
          const int full = oh0 + {m} <= {g.oh} && ow0 + {m} <= {g.ow};
          (void)full;
          const float *mt = mm + (b * {tmax} + (q % nr) * {tw} + j) * {vw};
          float *yp = y + ((n * {ob} + b) * {g.oh} + oh0) * {g.ow * vw} + ow0 * {vw};
          const float *rp = res ? {res_at} : 0;
          (void)rp;
          {pload}
          {_sandwich(TRANSFORMS[m][2], "p", "q", "o", "tf_vf")}
          {chr(10).join("          " + e for e in epi)}
        }}
      }}
    }}
  }}
  free(v);
  free(mm);
}}
"""
    return nchwc._prelude(target) + nchwc._guard(name, body)


__all__ = ["CHUNK_BYTES", "ENV", "MAX_SHARE", "MIN_TILES", "eligible", "source", "tile_size", "transform_weights"]
