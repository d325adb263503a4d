"""C source generator for fp32 GEMM: ``C[M,N] (+)= A[M,K] @ B[K,N]``, then an optional epilogue.

The generated code follows the packed-panel scheme of high-performance BLAS:

* B is packed into panels of ``nr`` columns, each panel holding all K rows contiguously
  (``Bp[N/nr][K][nr]``, zero padded at the right edge). The layout does not depend on the cache
  blocking, so constant weights are packed once, at compile time, by ``pack_b`` (NumPy) or by the
  generated ``<name>_pack_b`` (C), and every later call skips the copy.
* A is either packed per (MC x KC) block into ``mr``-row panels (``Ap[mc/mr][kc][mr]``) or read in
  place; the tuner picks by measurement (``GemmParams.pack_a``).
* The micro-kernel keeps an ``mr x nr`` tile of C in ``mr*nr/vw`` vector registers (GCC vector
  extensions, so one generator serves AVX-512, AVX2 and NEON) and, per k, loads ``nr/vw`` vectors
  of B and broadcasts ``mr`` scalars of A.
* Loops: ``jc`` (NC columns) > ``pc`` (KC of K) > ``ic`` (MC rows) > ``jr``/``ir`` micro-tiles in the
  order ``loop_order`` names. Micro-kernels exist for every row count ``1..mr`` (a GEMV-like
  M = 1 must not pay for mr rows); an edge tile (fewer rows or columns) runs the one for its row
  count into a local ``mr x nr`` tile and copies the valid columns out, so any M, N, K is
  correct and only whole vectors are stored inside the micro-kernels.
* OpenMP splits the M tiles evenly and statically between threads (the N panels when there are
  fewer M tiles than threads), one contiguous range per thread; or, with ``schedule="dynamic"``,
  hands out (mc x nc) blocks on demand.
* Epilogues (``epilogues.Epilogue``) are C snippets applied to every finished output vector
  before its store, so the fusion engine can fuse bias, activations and residual adds; or, with
  ``GemmSpec(callback=True)``, a function pointer called on every finished tile of C while it
  is still in L1. The callback form keeps the GEMM's text independent of the epilogue, so every
  layer of a model shares one compiled GEMM per tiling (see ``tensorize.py`` and the
  translation units of ``toolchain.py``).

All tuning parameters are explicit (``GemmParams``) so the auto-tuner can search them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..target import Target
from . import gemv
from .epilogues import Epilogue, EpilogueParam

LOOP_ORDERS = ("jr_ir", "ir_jr")
SCHEDULES = ("static", "dynamic", "static_m", "static_n")
# Per static schedule, when the team splits N panels rather than M tiles (mt, nt: M tiles and N
# panels; T: threads), written once in Python syntax: ``splits_n`` evaluates it, the generated
# C (``range_function``) prints it.  "static" splits the operand that is larger to share: with M
# split every thread streams all of the packed B, with N split all of A, so splitting N when
# N > M keeps the runtime-packed B private to the thread that packed it.
_SPLIT_N = {"static": "mt < T or (nt >= T and N > M)", "static_m": "mt < T", "static_n": "nt >= T or mt < T"}


def splits_n(schedule: str, M: int, N: int, mr: int, nr: int, threads: int) -> bool:
    """Whether a static ``schedule`` gives the threads N panels rather than M tiles (``_SPLIT_N``)."""
    return bool(eval(_SPLIT_N[schedule], {}, {"mt": -(-M // mr), "nt": -(-N // nr), "T": threads, "M": M, "N": N}))


def _split_n_c(schedule: str) -> str:
    """``_SPLIT_N[schedule]`` as a C condition."""
    return _SPLIT_N[schedule].replace(" or ", " || ").replace(" and ", " && ")


CONV_ALGORITHMS = ("", "im2col", "fold", "direct", "direct_t", "winograd", "winograd4")


@dataclass(frozen=True)
class GemmParams:
    """The knobs of a generated GEMM.

    mr, nr: register tile (nr a multiple of the vector width); kc: K block; mc, nc: M and N
    blocks (multiples of mr and nr); unroll: how far the compiler unrolls the micro-kernel's k
    loop (a pragma: see the prelude); threads: OpenMP threads of the blocked GEMM (1 emits no
    OpenMP there; the small-M GEMV path of the prepacked entry, ``gemv.py``, sizes its own team from
    the bytes of B and never nests); pack_a: copy A
    into mr-row panels per block; loop_order: which micro-tile loop is inner ("jr_ir": rows
    inner, a B micro-panel stays in L1; "ir_jr": columns inner, an A micro-panel stays in L1);
    schedule: "static" gives each thread one even, contiguous share of the M tiles or of the N
    panels, whichever operand is larger to share (``_SPLIT_N``; "static_m" / "static_n" force M
    or N where there are enough tiles); "dynamic" hands out (mc x nc) blocks on demand, which costs some B reuse
    but keeps going when another tenant takes a core.  conv_algorithm: how a convolution feeds
    the GEMM (``tensorize.py``): im2col per image, im2col with the batch folded into N, or the
    direct kernel of ``direct_conv.py``; empty lets the tensorizer pick.
    """

    mr: int = 6
    nr: int = 64
    kc: int = 256
    mc: int = 252
    nc: int = 512
    unroll: int = 1
    threads: int = 1
    pack_a: bool = True
    loop_order: str = "ir_jr"
    schedule: str = "static"
    conv_algorithm: str = ""     # convolutions only: "im2col", "fold", "direct"; "" = the tensorizer decides

    def validate(self, vector_width: int) -> None:
        """Raise ValueError for parameters that cannot produce correct code."""
        for name in ("mr", "nr", "kc", "mc", "nc", "unroll", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"GemmParams.{name} must be >= 1, got {getattr(self, name)}")
        if self.nr % vector_width:
            raise ValueError(f"GemmParams.nr={self.nr} must be a multiple of the vector width {vector_width}")
        if self.mc % self.mr:
            raise ValueError(f"GemmParams.mc={self.mc} must be a multiple of mr={self.mr}")
        if self.nc % self.nr:
            raise ValueError(f"GemmParams.nc={self.nc} must be a multiple of nr={self.nr}")
        if self.loop_order not in LOOP_ORDERS:
            raise ValueError(f"GemmParams.loop_order must be one of {LOOP_ORDERS}, got {self.loop_order!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"GemmParams.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.conv_algorithm not in CONV_ALGORITHMS:
            raise ValueError(f"GemmParams.conv_algorithm must be one of {CONV_ALGORITHMS}, got {self.conv_algorithm!r}")

    def accumulators(self, vector_width: int) -> int:
        return self.mr * self.nr // vector_width

    @classmethod
    def for_target(cls, target: Target, threads: int | None = None, **overrides) -> "GemmParams":
        """Good defaults without tuning; ``overrides`` fix some knobs and the rest follow from them.

        Register tile: 6 rows by 4 vectors where there are 32 vector registers (AVX-512: 6x64,
        24 accumulators + 4 B vectors + 1 broadcast), 6 by 2 vectors with 16 (AVX2: 6x16).
        Blocks from the caches, for the default "ir_jr" order: an A micro-panel (mr x kc) stays in
        L1 while the B block (kc x nc) is streamed from half of L2; mc bounds the packed A block to
        a quarter of L2. For "jr_ir" the B micro-panel (kc x nr) must fit half of L1 instead.
        """
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown GemmParams fields {sorted(unknown)}")
        vw, regs = target.vector_width, target.vector_registers
        knobs = dict(mr=6, nr=(4 if regs >= 32 else 2) * vw, unroll=1, pack_a=True, loop_order="ir_jr",
                     threads=threads if threads is not None else target.cores)
        knobs.update({k: v for k, v in overrides.items() if k in ("mr", "nr", "unroll", "pack_a", "loop_order", "schedule", "conv_algorithm")})
        mr, nr = knobs["mr"], knobs["nr"]
        if "kc" in overrides:
            kc = overrides["kc"]
        elif knobs["loop_order"] == "jr_ir":     # the B micro-panel in half of L1, but not too short
            kc = max(128, _round_down(target.l1d // 2 // (nr * 4), 8))
        else:   # the A micro-panel in half of L1; past 256 longer K blocks measured no faster
            kc = min(256, _round_down(target.l1d // 2 // (mr * 4), 8))
        mc = overrides.get("mc") or _round_down(target.l2 // 4 // (kc * 4), mr)
        if knobs["loop_order"] == "ir_jr":
            nc = overrides.get("nc") or _round_down(target.l2 // 2 // (kc * 4), nr)
        else:
            nc = overrides.get("nc") or _round_down(target.l3 // 4 // (kc * 4), nr)
        return cls(kc=kc, mc=_round_down(mc, mr), nc=_round_down(nc, nr), **knobs)


# How far ahead (bytes) a micro-kernel prefetches the B panel it walks, when B is a packed panel
# read front to back (a GEMM's packed B, the transposed direct kernel's weights): batch-1 layers
# stream their weights from memory once, and the hardware prefetcher alone left the 4-9 MB weight
# panels of ResNet-50's last stage latency-bound (ResNet-50 b1 whole model, one process,
# interleaved: 4 KiB ahead 1.04x, 8 KiB 1.05x, 16 KiB 1.07x, 32 KiB 1.05x, 64 KiB 1.02x over none).
# B read in place from an activation (``b_direct``, rows far apart) is not prefetched: 0.99-1.02x.
PREFETCH_B_BYTES = 16384
# A k step prefetches each 64-byte line of its B row once: AVX2's 16-wide row is one line, which two
# prefetches (one per vector) fetched twice.
CACHE_LINE_FLOATS = 16


@dataclass(frozen=True)
class GemmSpec:
    """What is computed (as opposed to how fast): operand layouts and the epilogue chain."""

    trans_a: bool = False   # A given as A^T, i.e. stored [K, M]
    trans_b: bool = False   # B given as B^T, i.e. stored [N, K]
    epilogues: tuple[Epilogue, ...] = ()
    callback: bool = False  # entries take (tf_epi_fn epi, const void *epi_ctx) instead of epilogues
    # A arrives packed at compile time (``pack_a``: [ceil(M/mr), K, mr]): a constant A (a 1x1
    # convolution's weights) is then neither copied per call nor per thread; lda and trans_a are unused
    a_packed: bool = False
    # The full entry reads B [K, N] in place, ldb apart per k, instead of packing it into panels (an
    # activation used once: a 1x1 convolution's input); only a partial last panel is packed
    b_direct: bool = False
    # C is stored transposed: element (i, j) at C[j * ldc + i].  A caller computes a layer's
    # ``C = A @ B`` as ``C^T = B^T @ A^T`` this way when its output's columns are few and its rows
    # many (a 1x1 convolution at 7x7: 49 positions waste a quarter of 64-wide register tiles, while
    # its output channels fill them); every tile goes through a local buffer and is written out
    # transposed, and an epilogue callback is given the tile in C's own coordinates.
    trans_c: bool = False

    def __post_init__(self) -> None:
        if self.callback and self.epilogues:
            raise ValueError("GemmSpec: an epilogue callback and inline epilogues exclude each other")
        if self.trans_c and (self.epilogues or self.b_direct):
            raise ValueError("GemmSpec: a transposed C takes its epilogue as a callback and a packed B")

    @property
    def params(self) -> tuple[EpilogueParam, ...]:
        seen: dict[str, EpilogueParam] = {}
        for epi in self.epilogues:
            for p in epi.params:
                if p.name in seen and seen[p.name] != p:
                    raise ValueError(f"epilogue parameter {p.name!r} declared twice with different kinds")
                seen[p.name] = p
        return tuple(seen.values())


def pack_b(B: np.ndarray, nr: int, trans: bool = False) -> np.ndarray:
    """B [K, N] (or B^T [N, K] with ``trans``) into panels ``[ceil(N/nr), K, nr]``, zero padded,
    64-byte aligned: the layout the generated ``*_prepacked`` entry and ``*_pack_b`` use."""
    B = np.asarray(B, dtype=np.float32)
    if B.ndim != 2:
        raise ValueError(f"pack_b expects a 2-D matrix, got shape {B.shape}")
    if trans:
        B = B.T
    K, N = B.shape
    out = _aligned_empty((-(-N // nr) if N else 0, K, nr))
    pack_b_into(out, B, nr)
    return out


def pack_a(A: np.ndarray, mr: int) -> np.ndarray:
    """A [M, K] (any strides) into row panels ``[ceil(M/mr), K, mr]``, zero padded, 64-byte aligned:
    the layout a ``GemmSpec(a_packed=True)`` GEMM reads (the per-block copy of ``GemmParams.pack_a``,
    made once for the whole matrix)."""
    M, K = A.shape
    full, rest = divmod(M, mr)
    out = _aligned_empty((full + (1 if rest else 0), K, mr))
    if full:
        out[:full] = np.asarray(A[:full * mr], np.float32).reshape(full, mr, K).transpose(0, 2, 1)
    if rest:
        out[full, :, :rest] = np.asarray(A[full * mr:], np.float32).T
        out[full, :, rest:] = 0.0
    return out


def pack_b_into(out: np.ndarray, B: np.ndarray, nr: int) -> None:
    """``pack_b`` of B [K, N] (any strides: a view of a model's weight) into ``out``
    [ceil(N/nr), K, nr], one copy: compile time of large linear layers is this copy."""
    K, N = B.shape
    full, rest = divmod(N, nr)
    if full:
        out[:full] = B[:, :full * nr].reshape(K, full, nr).transpose(1, 0, 2)
    if rest:
        out[full, :, :rest] = B[:, full * nr:]
        out[full, :, rest:] = 0.0


def packed_b_size(K: int, N: int, nr: int) -> int:
    """Floats in a packed B (what a caller allocates for ``*_pack_b`` or the workspace)."""
    return -(-N // nr) * K * nr


def _aligned_empty(shape: tuple[int, ...], alignment: int = 64) -> np.ndarray:
    count = math.prod(shape)
    raw = np.empty(count * 4 + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset:offset + count * 4].view(np.float32).reshape(shape)


def _round_down(value: int, multiple: int) -> int:
    return max(multiple, value // multiple * multiple)


# ----------------------------------------------------------------------------------------------
# C generation


def generate_gemm(params: GemmParams, target: Target, spec: GemmSpec = GemmSpec(), name: str = "tf_gemm",
                  prelude: bool = True) -> str:
    """C source defining ``<name>``, ``<name>_prepacked`` and ``<name>_pack_b`` (see ``signatures``).

    ``prelude=False`` leaves out the shared helpers (``gemm_prelude``), so that one C file can hold
    several GEMMs after a single prelude.
    """
    params.validate(target.vector_width)
    return _GemmWriter(params, target.vector_width, spec, name, target.vector_registers).source(prelude)


def gemm_prelude(target: Target, threads: int = 1) -> str:
    """The helpers (vector type, loads, stores, allocation) every generated GEMM uses."""
    omp = "#include <omp.h>" if threads > 1 else ""
    return _PRELUDE.format(omp_include=omp, vw=target.vector_width, vbytes=target.vector_width * 4)


def signatures(spec: GemmSpec, name: str = "tf_gemm") -> dict[str, list[str]]:
    """C parameter lists of the generated entry points, for callers that bind them (ctypes, C)."""
    epi = ["tf_epi_fn epi", "const void *epi_ctx"] if spec.callback else [p.c_decl for p in spec.params]
    return {
        name: ["long M", "long N", "long K", "const float *A", "long lda", "const float *B", "long ldb",
               "float *C", "long ldc", "int accumulate", *epi, "float *workspace"],
        f"{name}_prepacked": ["long M", "long N", "long K", "const float *A", "long lda", "const float *Bp",
                              "float *C", "long ldc", "int accumulate", *epi],
        f"{name}_pack_b": ["long N", "long K", "const float *B", "long ldb", "float *Bp"],
    }


_PRELUDE = """\
#include <stdlib.h>
#include <string.h>
{omp_include}
#define TF_VW {vw}
#ifndef TF_API   /* a translation unit linked into a model sets it to hidden visibility */
#define TF_API
#endif
/* Called on each finished tile of C (rows x cols at c, row stride ldc; i0, j0: its first row and
   column in the GEMM) before the tile leaves L1: the fused epilogue of a model's layer. */
typedef void (*tf_epi_fn)(const void *ctx, float *c, long ldc, long i0, long j0, long rows, long cols);
/* The fused epilogues that the micro-kernel applies to its accumulators before the one store, where
   a callback would load, change and store the tile again: up to two added terms (t: p[t] at row i,
   column j is p[t][i * cm[t] + j * cn[t]], cn 0 or 1: a bias per row or per column, a residual),
   then optionally a clamp to [lo, hi] (a ReLU is lo 0, hi +inf).  A caller passes TF_EPI_REGS as
   the callback and a tf_epi_regs as its context; tiles that cannot take it in registers (edges,
   a transposed C, the GEMV path) get the same arithmetic from tf_epi_regs_tile. */
typedef struct {{ const float *p[2]; long cm[2]; int cn[2]; int terms, clamp; float lo, hi; }} tf_epi_regs;
#define TF_EPI_REGS ((tf_epi_fn)1)
/* A callback epilogue that reads nothing per column (a bias per row, activations such as SiLU) as
   a direct convolution may take it: once on a whole tile in L1, the garbage columns of its padded
   grid included, where on each output row segment it ran one partial vector at every row's end.
   A caller passes TF_EPI_ROWS as the callback and a tf_epi_rows as its context. */
typedef struct {{ tf_epi_fn fn; const void *ctx; }} tf_epi_rows;
#define TF_EPI_ROWS ((tf_epi_fn)2)
/* The k loop is unrolled by the compiler, not in the text: unrolled text gives -ffast-math's
   reassociation chains of adds to rebuild, which breaks the FMAs and spills the accumulators. */
#define TF_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define TF_UNROLL(n) TF_PRAGMA(unroll n)
#elif defined(__GNUC__)
#define TF_UNROLL(n) TF_PRAGMA(GCC unroll n)
#else
#define TF_UNROLL(n)
#endif
typedef float tf_vf __attribute__((vector_size({vbytes})));
typedef int tf_vi __attribute__((vector_size({vbytes})));
typedef float tf_vfu __attribute__((vector_size({vbytes}), aligned(4), may_alias));
static inline tf_vf tf_ld(const float *p) {{ return *(const tf_vfu *)p; }}
static inline void tf_st(float *p, tf_vf v) {{ *(tf_vfu *)p = v; }}
/* s in every lane: s - 0 is s for every s (-0 included, where 0 + s is +0), and folds to a broadcast */
static inline tf_vf tf_bcast(float s) {{ return s - (tf_vf){{0}}; }}
/* Partial loads and stores: masked where the ISA has them (a masked-off lane neither faults nor
   is written), else through a buffer.  Byte-wise copies through a buffer make the following vector
   load wait for the small stores to drain (no store forwarding), tens of cycles a call, which
   showed on every row segment of a fused epilogue.  Indexing a vector variable by a runtime lane
   instead would make it addressable and push a micro-kernel's accumulators out to the stack. */
#if defined(__AVX512F__) && TF_VW == 16
#include <immintrin.h>
static inline tf_vf tf_ld_n(const float *p, int n) {{
  if (n >= TF_VW) return tf_ld(p);
  return (tf_vf)_mm512_maskz_loadu_ps((__mmask16)((1u << (n > 0 ? n : 0)) - 1u), p);
}}
static inline void tf_st_n(float *p, tf_vf v, int n) {{
  if (n >= TF_VW) {{ tf_st(p, v); return; }}
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << (n > 0 ? n : 0)) - 1u), (__m512)v);
}}
#else
static inline tf_vf tf_ld_n(const float *p, int n) {{
  if (n >= TF_VW) return tf_ld(p);
  float buf[TF_VW] = {{0}};
  memcpy(buf, p, sizeof(float) * (size_t)(n > 0 ? n : 0));
  return tf_ld(buf);
}}
static inline void tf_st_n(float *p, tf_vf v, int n) {{
  if (n >= TF_VW) {{ tf_st(p, v); return; }}
  float buf[TF_VW];
  tf_st(buf, v);
  memcpy(p, buf, sizeof(float) * (size_t)(n > 0 ? n : 0));
}}
#endif
static inline long tf_min(long a, long b) {{ return a < b ? a : b; }}
/* x < lo ? lo : x, then x > hi ? hi : x, lane by lane: NaN and -0.0 pass as in the scalar clip. */
static inline tf_vf tf_clamp(tf_vf x, tf_vf lo, tf_vf hi) {{
  tf_vi m = x < lo;
  x = (tf_vf)(((tf_vi)lo & m) | ((tf_vi)x & ~m));
  m = x > hi;
  return (tf_vf)(((tf_vi)hi & m) | ((tf_vi)x & ~m));
}}
/* A tile (rows x cols, row strides lds and ldd) copied from src to dst (the same place allowed)
   through the tf_epi_regs q (none: a plain copy); i0, j0: the tile's first row and column in C.
   Whole vectors and one masked tail a row: a memcpy a row segment cost a call each. */
static inline void tf_epi_regs_copy(const tf_epi_regs *q, const float *src, long lds, float *dst, long ldd,
                                    long i0, long j0, long rows, long cols) {{
  const int terms = q ? q->terms : 0, clamp = q ? q->clamp : 0;
  const tf_vf lo = tf_bcast(q ? q->lo : 0.0f), hi = tf_bcast(q ? q->hi : 0.0f);
  for (long r = 0; r < rows; r++)
    for (long l = 0; l < cols; l += TF_VW) {{
      const int n = (int)tf_min(TF_VW, cols - l);
      tf_vf x = tf_ld_n(src + r * lds + l, n);
      for (int t = 0; t < terms; t++) {{
        const float *pt = q->p[t] + (i0 + r) * q->cm[t];
        x += q->cn[t] ? tf_ld_n(pt + j0 + l, n) : tf_bcast(pt[0]);
      }}
      if (clamp) x = tf_clamp(x, lo, hi);
      tf_st_n(dst + r * ldd + l, x, n);
    }}
}}
/* tf_epi_regs applied in place to a tile of C in memory (a tf_epi_fn). */
static inline void tf_epi_regs_tile(const void *ctx, float *c, long ldc, long i0, long j0, long rows, long cols) {{
  tf_epi_regs_copy((const tf_epi_regs *)ctx, c, ldc, c, ldc, i0, j0, rows, cols);
}}
/* A caller's (epi, ctx) pair read both ways: the tf_epi_regs it names (TF_EPI_REGS) or none, and
   the tf_epi_fn that applies it to a tile in memory (tf_epi_regs_tile for TF_EPI_REGS). */
static inline const tf_epi_regs *tf_epi_regs_of(tf_epi_fn epi, const void *ctx) {{
  return epi == TF_EPI_REGS ? (const tf_epi_regs *)ctx : 0;
}}
static inline tf_epi_fn tf_epi_callable(tf_epi_fn epi) {{ return epi == TF_EPI_REGS ? tf_epi_regs_tile : epi; }}
/* relu against a zero the caller holds (a blocked conv's epilogue loads it where it runs, so that
   no constant stays live across its register tile's loop): NaN passes through, as torch's relu */
static inline tf_vf tf_relu_lo(tf_vf x, tf_vf zero) {{
  tf_vi keep = ~(x < zero);
  return (tf_vf)((tf_vi)x & keep);
}}
static inline tf_vf tf_relu(tf_vf x) {{ return tf_relu_lo(x, (tf_vf){{0}}); }}
/* Writes the tile ct (rows x cols, row stride ts) transposed: column v's rows values to dst + v*ldc
   (a transposed GEMM's or direct kernel's tile into the layer's layout).  With AVX-512 and at most
   8 rows, 16 columns at a time: an 8 x 16 -> 16 x 8 transpose in 24 two-source permutes and one
   masked 8-lane store per column, where element by element each value took two scalar memory
   operations (a 7 x 64 tile: 896 against 96 permutes and 64 stores). */
static inline void tf_store_t(const float *restrict ct, long ts, long rows, long cols, float *restrict dst, long ldc) {{
  long v0 = 0;
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && TF_VW == 16
  if (rows <= 8) {{
    const tf_vi p1a = {{0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23}};
    const tf_vi p1b = {{8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31}};
    const tf_vi p2a = {{0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23}};
    const tf_vi p2b = {{8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31}};
    const tf_vi p3a = {{0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23}};
    const tf_vi p3b = {{8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}};
    const __mmask8 m = (__mmask8)((1u << rows) - 1u);
    const tf_vf z = {{0}};
    for (; v0 + 16 <= cols; v0 += 16) {{
      const float *c = ct + v0;
#define TF_ROW(i) ((i) < rows ? tf_ld(c + (i) * ts) : z)
      const tf_vf r0 = TF_ROW(0), r1 = TF_ROW(1), r2 = TF_ROW(2), r3 = TF_ROW(3);
      const tf_vf r4 = TF_ROW(4), r5 = TF_ROW(5), r6 = TF_ROW(6), r7 = TF_ROW(7);
#undef TF_ROW
      /* pairs of rows per column, then quads, then all 8 rows of two columns per vector */
      const tf_vf a0 = __builtin_shuffle(r0, r1, p1a), a1 = __builtin_shuffle(r0, r1, p1b);
      const tf_vf a2 = __builtin_shuffle(r2, r3, p1a), a3 = __builtin_shuffle(r2, r3, p1b);
      const tf_vf a4 = __builtin_shuffle(r4, r5, p1a), a5 = __builtin_shuffle(r4, r5, p1b);
      const tf_vf a6 = __builtin_shuffle(r6, r7, p1a), a7 = __builtin_shuffle(r6, r7, p1b);
      const tf_vf q[8] = {{__builtin_shuffle(a0, a2, p2a), __builtin_shuffle(a0, a2, p2b),
                          __builtin_shuffle(a1, a3, p2a), __builtin_shuffle(a1, a3, p2b),
                          __builtin_shuffle(a4, a6, p2a), __builtin_shuffle(a4, a6, p2b),
                          __builtin_shuffle(a5, a7, p2a), __builtin_shuffle(a5, a7, p2b)}};
      float *d = dst + v0 * ldc;
      for (int g = 0; g < 4; g++, d += 4 * ldc) {{
        const __m512 lo = (__m512)__builtin_shuffle(q[g], q[g + 4], p3a);
        const __m512 hi = (__m512)__builtin_shuffle(q[g], q[g + 4], p3b);
        _mm256_mask_storeu_ps(d, m, _mm512_castps512_ps256(lo));
        _mm256_mask_storeu_ps(d + ldc, m, _mm512_extractf32x8_ps(lo, 1));
        _mm256_mask_storeu_ps(d + 2 * ldc, m, _mm512_castps512_ps256(hi));
        _mm256_mask_storeu_ps(d + 3 * ldc, m, _mm512_extractf32x8_ps(hi, 1));
      }}
    }}
  }}
#endif
  for (long v = v0; v < cols; v++)
    for (long i = 0; i < rows; i++) dst[v * ldc + i] = ct[i * ts + v];
}}
static inline float *tf_alloc(long n) {{  /* aligned_alloc wants a multiple of the alignment */
  const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
  return (float *)aligned_alloc(64, bytes);
}}
"""


class _GemmWriter:
    """Writes the C text for one (params, vector width, spec, name)."""

    def __init__(self, params: GemmParams, vw: int, spec: GemmSpec, name: str, registers: int = 16):
        self.p, self.vw, self.spec, self.name = params, vw, spec, name
        self.nv = params.nr // vw
        self.epi_params = spec.params
        self.registers = registers
        # prepacked calls with M <= this take the GEMV path (gemv.py), which reads A unpacked
        self.gemv_rows = 0 if spec.a_packed or spec.trans_c else gemv.max_m()

    # -- pieces -------------------------------------------------------------------------------

    def source(self, prelude: bool = True) -> str:
        p = self.p
        omp = "#include <omp.h>" if p.threads > 1 else ""
        parts = [
            f"/* generated by tensorforge.codegen.c.microkernels: {p} trans_a={self.spec.trans_a}"
            f" trans_b={self.spec.trans_b} epilogues={[e.name for e in self.spec.epilogues]}"
            f" callback={self.spec.callback} a_packed={self.spec.a_packed} b_direct={self.spec.b_direct}"
            f"{' trans_c=True' if self.spec.trans_c else ''} */",
            _PRELUDE.format(omp_include=omp, vw=self.vw, vbytes=self.vw * 4) if prelude else omp,
            self.epilogue_struct(),
            self.epilogue_function(),
            *[self.micro_kernel(rows) for rows in range(p.mr, 0, -1)],
            self.pack_a(), self.edge_tile(), self.transposed_tile(), self.block_function(), self.pack_b_share(),
            self.share_function(), self.gemv(), self.entries(),
        ]
        return "\n".join(x for x in parts if x)

    @property
    def has_epilogue(self) -> bool:
        return bool(self.spec.epilogues)

    def epilogue_struct(self) -> str:
        if self.spec.callback:
            return f"typedef struct {{ tf_epi_fn fn; const void *ctx; const tf_epi_regs *regs; }} {self.name}_epi_t;\n"
        fields = "".join(f"  {p.c_decl.replace('restrict ', '')};\n" for p in self.epi_params) or "  int unused;\n"
        return f"typedef struct {{\n{fields}}} {self.name}_epi_t;\n"

    def epilogue_function(self) -> str:
        if not self.has_epilogue:
            return ""
        unpack = "".join(f"  {p.c_decl} = e->{p.name};\n" for p in self.epi_params)
        bodies = "".join(f"  {{ /* {epi.name} */ {epi.body} }}\n" for epi in self.spec.epilogues)
        return (f"static inline tf_vf {self.name}_epi(tf_vf x, long i, long j, int nv, const {self.name}_epi_t *e) {{\n"
                f"  (void)i; (void)j; (void)nv;\n{unpack}{bodies}  return x;\n}}\n")

    def a_elem(self, r: int) -> str:
        """The A value of tile row r at the current k (``a`` points at row 0, column k): rows are
        adjacent in a packed panel and in A^T, lda apart in A itself."""
        return f"a[{r}]" if self.panels_a or self.spec.trans_a else f"a[{r} * lda]"

    @property
    def panels_a(self) -> bool:
        """The micro-kernel reads A as mr-row panels: packed per block, or at compile time."""
        return self.p.pack_a or self.spec.a_packed

    @property
    def packs_a(self) -> bool:
        """Blocks copy A into panels at run time (into a per-thread buffer)."""
        return self.p.pack_a and not self.spec.a_packed

    def a_step(self) -> str:
        """How far ``a`` advances per k."""
        if self.panels_a:
            return str(self.p.mr)
        return "lda" if self.spec.trans_a else "1"

    def k_step(self, rows: int, prefetch_b: bool | None = None) -> str:
        """One rank-1 update of the register tile: nr/vw loads of B, ``rows`` broadcasts of A, and
        (``prefetch_b``, by default where B is a packed panel) a prefetch of B
        ``PREFETCH_B_BYTES`` ahead."""
        lines = [f"    const tf_vf b{v} = tf_ld(b + {v * self.vw});" for v in range(self.nv)]
        if (not self.spec.b_direct if prefetch_b is None else prefetch_b) and PREFETCH_B_BYTES:
            ahead = PREFETCH_B_BYTES // 4 // self.p.nr * self.p.nr      # whole panel rows, in floats
            lines += [f"    __builtin_prefetch(b + {ahead + f});" for f in range(0, self.p.nr, CACHE_LINE_FLOATS)]
        for r in range(rows):
            lines.append(f"    {{ const float ar = {self.a_elem(r)};")
            lines.append("      " + " ".join(f"c{r}_{v} += b{v} * ar;" for v in range(self.nv)) + " }")
        return "\n".join(lines)

    def store(self, rows: int) -> str:
        """The tile's stores of whole vectors (the inline epilogue on the last K block; with a
        callback, a ``tf_epi_regs`` epilogue applied to the accumulators first)."""
        vw, lines = self.vw, []
        if self.spec.callback and rows == self.p.mr:   # only full tiles finish in registers
            lines.append(self.register_epilogue(rows))
        for r in range(rows):
            for v in range(self.nv):
                body = [f"float *cp = c + {r} * ldc + {v * vw};", f"tf_vf x = c{r}_{v};", "if (load_c) x += tf_ld(cp);"]
                if self.has_epilogue:
                    body.append(f"if (last) x = {self.name}_epi(x, i0 + {r}, j0 + {v * vw}, TF_VW, e);")
                body.append("tf_st(cp, x);")
                lines.append(f"    {{ {' '.join(body)} }}")
        return "\n".join(lines)

    def register_epilogue(self, rows: int) -> str:
        """On the last K block of a callback GEMM given a ``tf_epi_regs`` (``e->regs``): C's old
        values (``load_c``), each term, the clamp, all on the accumulators; the stores that follow
        then skip ``load_c``, and the block calls no callback for this tile."""
        vw, nv = self.vw, self.nv
        acc = [(r, v) for r in range(rows) for v in range(nv)]
        old = " ".join(f"c{r}_{v} += tf_ld(c + {r} * ldc + {v * vw});" for r, v in acc)
        vec = " ".join(f"c{r}_{v} += tf_ld(pt + {r} * cm + {v * vw});" for r, v in acc)
        bcast = " ".join(f"{{ const tf_vf s = tf_bcast(pt[{r} * cm]); "
                         + " ".join(f"c{r}_{v} += s;" for v in range(nv)) + " }" for r in range(rows))
        clamp = " ".join(f"c{r}_{v} = tf_clamp(c{r}_{v}, lo, hi);" for r, v in acc)
        return f"""    if (last && e->regs) {{
      const tf_epi_regs *q = e->regs;
      if (load_c) {{ {old} }}
      load_c = 0;
      for (int t = 0; t < q->terms; t++) {{
        const long cm = q->cm[t];
        const float *pt = q->p[t] + i0 * cm;
        if (q->cn[t]) {{ pt += j0; {vec} }}
        else {{ {bcast} }}
      }}
      if (q->clamp) {{ const tf_vf lo = tf_bcast(q->lo), hi = tf_bcast(q->hi); {clamp} }}
    }}"""

    def micro_kernel(self, rows: int) -> str:
        """C[rows x nr] (+)= A-panel @ B-panel over kc, whole vectors stored at ``c``."""
        p = self.p
        acc = ", ".join(f"c{r}_{v} = {{0}}" for r in range(rows) for v in range(self.nv))
        return f"""
static __attribute__((noinline)) void {self.name}_ukr{rows}(long kc, const float *restrict a, long lda, const float *restrict b,
    long bk, float *restrict c, long ldc, int load_c, int last, long i0, long j0, const {self.name}_epi_t *e) {{
  (void)lda; (void)bk; (void)last; (void)i0; (void)j0; (void)e;
  tf_vf {acc};
  TF_UNROLL({p.unroll})
  for (long k = 0; k < kc; k++, a += {self.a_step()}, b += {"bk" if self.spec.b_direct else p.nr}) {{
{self.k_step(rows)}
  }}
{self.store(rows)}
}}
"""

    def pack_a(self) -> str:
        """Copy A[ic:ic+mc, pc:pc+kc] into mr-row panels [mc/mr][kc][mr], zero padded past mc."""
        if not self.packs_a:
            return ""
        mr = self.p.mr
        src = "A[(pc + k) * lda + row]" if self.spec.trans_a else "A[row * lda + pc + k]"
        return f"""
static void {self.name}_pack_a(float *restrict ap, const float *restrict A, long lda, long ic, long pc, long mc, long kc) {{
  for (long q = 0; q < mc; q += {mr}) {{
    const long rows = tf_min({mr}, mc - q);
    float *dst = ap + q * kc;
    if (rows == {mr}) {{
      for (long k = 0; k < kc; k++)
        for (long r = 0; r < {mr}; r++) {{ const long row = ic + q + r; dst[k * {mr} + r] = {src}; }}
    }} else {{
      for (long k = 0; k < kc; k++)
        for (long r = 0; r < {mr}; r++) {{ const long row = ic + q + r; dst[k * {mr} + r] = r < rows ? {src} : 0.0f; }}
    }}
  }}
}}
"""

    def edge_tile(self) -> str:
        """A tile with fewer than mr rows or nr columns: the micro-kernel for its row count into a
        local tile (B panels are zero padded to nr columns), then the valid columns (through the
        inline epilogue) into C."""
        if self.spec.trans_c:       # every tile takes ``transposed_tile``
            return ""
        p, vw = self.p, self.vw
        epi = f"if (last) x = {self.name}_epi(x, i + r, j + v * TF_VW, nv, e); " if self.has_epilogue else ""
        return f"""
static __attribute__((noinline)) void {self.name}_edge(long mr, long kc, const float *ap, long lda, const float *bp,
    long bk, float *cp, long ldc, long nr, int load_c, int last, long i, long j, const {self.name}_epi_t *e) {{
  float ct[{p.mr * p.nr}] __attribute__((aligned(64)));
  if (load_c) {{
    memset(ct, 0, sizeof ct);
    for (long r = 0; r < mr; r++) memcpy(ct + r * {p.nr}, cp + r * ldc, sizeof(float) * (size_t)nr);
  }}
{self.local_tile_call()}
  for (long r = 0; r < mr; r++)
    for (long v = 0; v < {self.nv}; v++) {{
      const int nv = (int)tf_min({vw}, nr - v * {vw});
      if (nv <= 0) break;
      tf_vf x = tf_ld(ct + r * {p.nr} + v * {vw});
      {epi}tf_st_n(cp + r * ldc + v * {vw}, x, nv);
    }}
}}
"""

    def local_tile_call(self) -> str:
        """The C switch running the micro-kernel for ``mr`` rows into the local tile ``ct`` (row
        stride nr, never the last K block: the caller applies what follows itself)."""
        cases = "\n".join(f"    case {rows}: {self.name}_ukr{rows}(kc, ap, lda, bp, bk, ct, {self.p.nr}, load_c, 0, i, j, e);"
                          f" break;" for rows in range(self.p.mr, 0, -1))
        return f"  switch (mr) {{\n{cases}\n    default: break;\n  }}"

    def transposed_tile(self) -> str:
        """Every tile of a transposed C (``GemmSpec.trans_c``): the micro-kernel for its row count into
        a local tile, then written out column by column, each tile column one contiguous run of C."""
        if not self.spec.trans_c:
            return ""
        p = self.p
        return f"""
static __attribute__((noinline)) void {self.name}_tile_t(long mr, long kc, const float *ap, long lda, const float *bp,
    long bk, float *cp, long ldc, long nr, int load_c, long i, long j, const {self.name}_epi_t *e) {{
  float ct[{p.mr * p.nr}] __attribute__((aligned(64)));
  if (load_c) {{
    memset(ct, 0, sizeof ct);
    for (long c = 0; c < nr; c++)
      for (long r = 0; r < mr; r++) ct[r * {p.nr} + c] = cp[c * ldc + r];
  }}
{self.local_tile_call()}
  tf_store_t(ct, {p.nr}, mr, nr, cp, ldc);
}}
"""

    def block_function(self) -> str:
        p = self.p
        if self.spec.a_packed:    # panel (ic + ir) / mr of the whole packed A, at column pc
            a_ptr = f"A + (ic + ir) / {p.mr} * K * {p.mr} + pc * {p.mr}"
        elif p.pack_a:
            a_ptr = "abuf + ir * kc"
        elif self.spec.trans_a:
            a_ptr = "A + pc * lda + ic + ir"
        else:
            a_ptr = "A + (ic + ir) * lda + pc"
        pack = f"        {self.name}_pack_a(abuf, A, lda, ic, pc, mc, kc);\n" if self.packs_a else ""
        trans_c = self.spec.trans_c
        callback = (f"    if (last && e->fn && !(e->regs && mr == {p.mr} && nr == {p.nr})) e->fn(e->ctx, cp, ldc, i, j, mr, nr);\n"
                    if self.spec.callback and not trans_c else "")
        # A transposed C calls back once per finished (mc x nc) block, in C's coordinates (rows and
        # columns swap): a micro-tile's rows of C would be only mr columns long.
        block_callback = ("        if (last && e->fn) e->fn(e->ctx, C + jc * ldc + ic, ldc, jc, ic, nc, mc);\n"
                          if self.spec.callback and trans_c else "")
        if self.spec.b_direct:   # panels bstride apart, rows bk apart; a partial panel from `edge`
            b_ptr = f"""const int part = j + {p.nr} > nall;
            const float *bp = part ? edge + pc * {p.nr} : Bp + (j / {p.nr}) * bstride + pc * bk;
            const long ks = part ? {p.nr} : bk;"""
        else:
            b_ptr = f"""const float *bp = Bp + (j / {p.nr}) * bstride + pc * {p.nr};
            const long ks = {p.nr};"""
        tile = f"""{{
            const long mr = tf_min({p.mr}, mc - ir), nr = tf_min({p.nr}, nc - jr);
            const long i = ic + ir, j = jc + jr;
            const float *ap = {a_ptr};
            {b_ptr}
            {self.name}_tile(mr, kc, ap, lda, bp, ks, C + {"j * ldc + i" if trans_c else "i * ldc + j"}, ldc, nr, load_c, last, i, j, e);
          }}"""
        loops = {
            "jr_ir": (f"for (long jr = 0; jr < nc; jr += {p.nr})", f"for (long ir = 0; ir < mc; ir += {p.mr})"),
            "ir_jr": (f"for (long ir = 0; ir < mc; ir += {p.mr})", f"for (long jr = 0; jr < nc; jr += {p.nr})"),
        }[p.loop_order]
        tile_call = (f"(void)last; {self.name}_tile_t(mr, kc, ap, lda, bp, bk, cp, ldc, nr, load_c, i, j, e);" if trans_c else
                     f"if (mr == {p.mr} && nr == {p.nr}) {self.name}_ukr{p.mr}(kc, ap, lda, bp, bk, cp, ldc, load_c, last, i, j, e);\n"
                     f"  else {self.name}_edge(mr, kc, ap, lda, bp, bk, cp, ldc, nr, load_c, last, i, j, e);")
        return f"""
static inline void {self.name}_tile(long mr, long kc, const float *ap, long lda, const float *bp, long bk, float *cp,
    long ldc, long nr, int load_c, int last, long i, long j, const {self.name}_epi_t *e) {{
  {tile_call}
{callback}}}

/* Rows [m0, m1) and columns [n0, n1) of C; n0 is a multiple of nr. */
static void {self.name}_block(long m0, long m1, long n0, long n1, long K, const float *A, long lda,
    const float *Bp, long bstride, long bk, const float *edge, long nall, float *C, long ldc, int accumulate,
    const {self.name}_epi_t *e, float *abuf) {{
  (void)abuf; (void)bk; (void)edge; (void)nall;
  for (long jc = n0; jc < n1; jc += {p.nc}) {{
    const long nc = tf_min({p.nc}, n1 - jc);
    long pc = 0;
    do {{
      const long kc = tf_min({p.kc}, K - pc);
      const int load_c = accumulate || pc > 0, last = pc + kc >= K;
      for (long ic = m0; ic < m1; ic += {p.mc}) {{
        const long mc = tf_min({p.mc}, m1 - ic);
{pack}        {loops[0]}
          {loops[1]} {tile}
{block_callback}      }}
      pc += kc;
    }} while (pc < K);
  }}
}}
"""

    def team_size(self) -> str:
        """C statements setting ``nth``: no more threads than there are blocks of work."""
        p = self.p
        if p.schedule == "dynamic":
            units = f"((M + {p.mc - 1}) / {p.mc}) * ((N + {p.nc - 1}) / {p.nc})"
        else:
            units = f"((M + {p.mr - 1}) / {p.mr}) * ((N + {p.nr - 1}) / {p.nr})"
        # Never more than OpenMP's current thread count, so a caller's omp_set_num_threads holds.
        return (f"  const long units = {units};\n  const int cap = tf_min({p.threads}, omp_get_max_threads());\n"
                f"  const int nth = units < cap ? (int)units : cap;\n")

    def share_function(self) -> str:
        """The part of C that the calling thread computes; every thread of the team calls it (one
        thread without OpenMP). Static: one even, contiguous range of M tiles or N panels
        (``range_function``). Dynamic: (mc x nc) blocks from an orphaned ``omp for``.  With ``B``
        given, the thread packs the panels of its own columns first: callers pass it only where
        no other thread reads those panels (``private_pack_function``)."""
        p, name = self.p, self.name
        # Sized to the problem, not to mc x kc: small GEMMs then stay clear of mmap-sized mallocs.
        alloc = (f"  float *abuf = tf_alloc(tf_min({p.mc}, (M + {p.mr - 1}) / {p.mr} * {p.mr}) * tf_min({p.kc}, K));\n"
                 if self.packs_a else "  float *abuf = NULL;\n")
        release = "  free(abuf);\n" if self.packs_a else ""
        # packed panels are whole (zero padded): no column is past a partial panel's end
        packed = (f"{name}_block(m0, m1, n0, n1, K, A, lda, Bp, K * {p.nr}, {p.nr}, NULL, (long)1 << 62, C, ldc, "
                  f"accumulate, e, abuf);")
        if self.spec.b_direct:   # B given: read in place (Bp holds its partial last panel); else packed
            call = (f"if (B) {name}_block(m0, m1, n0, n1, K, A, lda, B, {p.nr}, ldb, Bp, N, C, ldc, accumulate, e, abuf);\n"
                    f"      else {packed}")
        else:
            call = (f"if (B) {name}_pack_b_panels(n0 / {p.nr}, (n1 + {p.nr - 1}) / {p.nr}, N, K, B, ldb, Bp);\n"
                    f"      {packed}")
        if p.threads == 1:
            body = f"  const long m0 = 0, m1 = M, n0 = 0, n1 = N;\n  {call}\n"
        elif p.schedule == "dynamic":
            body = f"""  const long mb = (M + {p.mc - 1}) / {p.mc}, nb = (N + {p.nc - 1}) / {p.nc};
  #pragma omp for schedule(dynamic, 1) collapse(2) nowait
  for (long ib = 0; ib < mb; ib++)
    for (long jb = 0; jb < nb; jb++) {{
      const long m0 = ib * {p.mc}, m1 = tf_min(m0 + {p.mc}, M), n0 = jb * {p.nc}, n1 = tf_min(n0 + {p.nc}, N);
      {call}
    }}
"""
        else:
            body = f"""  long m0 = 0, m1 = M, n0 = 0, n1 = N;
  {name}_range(M, N, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1, &n0, &n1);
  if (m0 < m1 && n0 < n1) {{
      {call}
  }}
"""
        return f"""{self.range_function()}{self.private_pack_function()}
static void {name}_share(long M, long N, long K, const float *A, long lda, const float *B, long ldb, float *Bp,
    float *C, long ldc, int accumulate, const {name}_epi_t *e) {{
{alloc}{body}{release}}}
"""

    def private_pack_function(self) -> str:
        """Whether each thread may pack its own B panels in the fused entry: no other thread reads
        them when the static split hands out N panels, or when dynamic blocks span all of M."""
        p = self.p
        if p.threads == 1:
            return ""
        if p.schedule == "dynamic":
            body = f"  (void)N; (void)T;\n  return (M + {p.mc - 1}) / {p.mc} == 1;"
        else:
            body = f"  long m0, m1, n0, n1;\n  return {self.name}_range(M, N, 0, T, &m0, &m1, &n0, &n1);"
        return f"""
static int {self.name}_private_pack(long M, long N, long T) {{
{body}
}}
"""

    def range_function(self) -> str:
        """A static schedule's split: thread ``t`` of ``T`` computes rows [m0, m1) and columns
        [n0, n1); returns whether the N panels were split (each thread then packs its own)."""
        p = self.p
        if p.threads == 1 or p.schedule == "dynamic":
            return ""
        return f"""
static int {self.name}_range(long M, long N, long t, long T, long *m0, long *m1, long *n0, long *n1) {{
  const long mt = (M + {p.mr - 1}) / {p.mr}, nt = (N + {p.nr - 1}) / {p.nr};
  if ({_split_n_c(p.schedule)}) {{
    *n0 = nt * t / T * {p.nr}; *n1 = tf_min(nt * (t + 1) / T * {p.nr}, N);
    return 1;
  }}
  *m0 = mt * t / T * {p.mr}; *m1 = tf_min(mt * (t + 1) / T * {p.mr}, M);
  return 0;
}}
"""

    def pack_b_share(self) -> str:
        """Packs B's panels; inside a parallel region the team splits them (orphaned ``omp for``,
        whose closing barrier also makes the packed B visible to every thread)."""
        nr = self.p.nr
        if self.spec.trans_b:   # B stored [N, K]: read each column's K values contiguously
            inner = f"""    for (long jj = 0; jj < {nr}; jj++) {{
      const long col = q * {nr} + jj;
      if (col < N) for (long k = 0; k < K; k++) dst[k * {nr} + jj] = B[col * ldb + k];
      else for (long k = 0; k < K; k++) dst[k * {nr} + jj] = 0.0f;
    }}"""
        else:   # whole panels as vector copies; the last, partial one zero padded
            inner = f"""    const long cols = tf_min({nr}, N - q * {nr});
    if (cols == {nr}) {{
      for (long k = 0; k < K; k++) memcpy(dst + k * {nr}, B + k * ldb + q * {nr}, sizeof(float) * {nr});
    }} else {{
      for (long k = 0; k < K; k++) {{
        const float *src = B + k * ldb + q * {nr};
        for (long jj = 0; jj < {nr}; jj++) dst[k * {nr} + jj] = jj < cols ? src[jj] : 0.0f;
      }}
    }}"""
        pragma = "  #pragma omp for schedule(static)\n" if self.p.threads > 1 else ""
        return f"""
/* Panel q of B into dst (K x {nr}, zero padded past N). */
static void {self.name}_pack_b_panel(long q, long N, long K, const float *B, long ldb, float *restrict dst) {{
{inner}
}}

static void {self.name}_pack_b_panels(long q0, long q1, long N, long K, const float *B, long ldb, float *Bp) {{
  for (long q = q0; q < q1; q++) {self.name}_pack_b_panel(q, N, K, B, ldb, Bp + q * K * {nr});
}}

static void {self.name}_pack_b_share(long N, long K, const float *B, long ldb, float *Bp) {{
  const long panels = (N + {nr - 1}) / {nr};
{pragma}  for (long q = 0; q < panels; q++) {self.name}_pack_b_panels(q, q + 1, N, K, B, ldb, Bp);
}}
"""

    def gemv(self) -> str:
        """The small-M path of the prepacked entry (``gemv.py``)."""
        if not self.gemv_rows:
            return ""
        mode = "callback" if self.spec.callback else ("inline" if self.has_epilogue else "")
        return gemv.source(self.name, self.p.nr, self.vw, self.registers, self.spec.trans_a, mode, self.gemv_rows)

    def parallel(self, statements: str) -> str:
        """``statements`` run by a team of ``nth`` threads (or directly without OpenMP)."""
        if self.p.threads == 1:
            return f"  {{\n{statements}  }}\n"
        return f"{self.team_size()}  #pragma omp parallel num_threads(nth)\n  {{\n{statements}  }}\n"

    def share_call(self, b_args: str) -> str:
        """The statement calling ``_share``; ``b_args``: ``"B, ldb, Bp"`` (the thread packs its own
        panels) or ``"NULL, 0, Bp"`` (B is packed already)."""
        return f"    {self.name}_share(M, N, K, A, lda, {b_args}, C, ldc, accumulate, &tf_e);\n"

    def pack_then_share(self, pack: str) -> str:
        """The fused entry's team body: where each thread's B panels are its own
        (``private_pack_function``) it packs them itself, with no barrier and no packed B crossing
        cores; otherwise the team packs all panels, then multiplies."""
        own = self.share_call("B, ldb, Bp")
        if self.p.threads == 1:
            return own
        return (f"    if ({self.name}_private_pack(M, N, omp_get_num_threads())) {{\n  {own}    }} else {{\n"
                f"  {pack}  {self.share_call('NULL, 0, Bp')}    }}\n")

    def full_entry(self, signature: str, epi: str, pack: str) -> str:
        """``{name}(..., B, ldb, ..., workspace)``: B packed into ``workspace`` (packed_b_size floats, or
        NULL to allocate) and multiplied in one parallel region (the packing loop's barrier is the only
        synchronisation); with ``b_direct``, B read in place and only its partial last panel packed."""
        p, name = self.p, self.name
        if not self.spec.b_direct:
            return f"""
TF_API void {name}({signature}) {{
  if (M <= 0 || N <= 0) return;
  float *Bp = workspace ? workspace : tf_alloc((N + {p.nr - 1}) / {p.nr} * K * {p.nr});
{epi}{self.parallel(self.pack_then_share(pack))}  if (!workspace) free(Bp);
}}
"""
        return f"""
TF_API void {name}({signature}) {{
  if (M <= 0 || N <= 0) return;
  float *Bp = workspace ? workspace : tf_alloc(K * {p.nr});
  if (N % {p.nr}) {name}_pack_b_panel(N / {p.nr}, N, K, B, ldb, Bp);
{epi}{self.parallel(self.share_call("B, ldb, Bp"))}  if (!workspace) free(Bp);
}}
"""

    def entries(self) -> str:
        p, name = self.p, self.name
        sigs = {k: ", ".join(v) for k, v in signatures(self.spec, name).items()}
        epi_values = ("tf_epi_callable(epi), epi_ctx, tf_epi_regs_of(epi, epi_ctx)" if self.spec.callback
                      else (", ".join(q.name for q in self.epi_params) or "0"))
        epi = f"  const {name}_epi_t tf_e = {{ {epi_values} }};\n"
        prepacked_share = self.share_call("NULL, 0, (float *)Bp")
        pack = f"    {name}_pack_b_share(N, K, B, ldb, Bp);\n"
        pack_team = (f"  const long panels = (N + {p.nr - 1}) / {p.nr};\n"
                     f"  const int cap = tf_min({p.threads}, omp_get_max_threads());\n"
                     f"  const int nth = panels < cap ? (int)panels : cap;\n"
                     f"  #pragma omp parallel num_threads(nth)\n  {pack.strip()}\n" if p.threads > 1
                     else f"  {pack.strip()}\n")
        gemv_call = (f"  if (M <= {self.gemv_rows}) {{  /* {gemv.MARKER} */\n"
                     f"    {name}_gemv(M, N, K, A, lda, Bp, C, ldc, accumulate, &tf_e);\n    return;\n  }}\n"
                     if self.gemv_rows else "")
        return f"""
TF_API void {name}_prepacked({sigs[f"{name}_prepacked"]}) {{
  if (M <= 0 || N <= 0) return;
{epi}{gemv_call}{self.parallel(prepacked_share)}}}

TF_API void {name}_pack_b({sigs[f"{name}_pack_b"]}) {{
  if (N <= 0) return;
{pack_team}}}

{self.full_entry(sigs[name], epi, pack)}"""
