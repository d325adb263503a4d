"""C helpers shared by the GEMM blocks on Intel AMX tiles (``qgemm_amx.py`` for int8,
``bf16gemm_amx.py`` for bf16).

Both instructions have the same geometry in bytes, so one text serves both with the instruction
swapped: an A tile is 16 rows of 64 bytes (64 uint8 k, or 32 bf16 k = 16 k-pairs), a B tile 16
rows of 64 bytes (16 k-quads or k-pairs of 16 columns: one row of the packed B panels
``[N/16][K/4][16][4]`` int8 and ``[N/16][K/2][16][2]`` bf16 alike), an accumulator 16 x 16 32-bit
lanes (int32 for ``tdpbusd``, float32 for ``tdpbf16ps``).

* **Permission**: Linux hands AMX's 8 KB of tile state to a process only after
  ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; ``tf_amx_ready`` asks once per library.
  Refused (an old kernel, a hypervisor that hides it), the callers run their vector kernels
  (compiled with ``-DTF_AMX_REFUSED``, the code acts as if refused: the tests of that path).
* **Configuration**: palette 1, tiles 0-7 all 16 x 64 bytes, loaded per block call (it zeroes the
  tiles), released at its end.
* **The 32 x 32 step**: 2 x 2 accumulators (tiles 0-3), two A tiles (4, 5), two B tiles (6, 7):
  per 64-byte K block four tile loads feed four dot products.  ``tf_amx_tile32_OP`` runs the K
  blocks of one 32 x 32 block of C from zeros or from a row broadcast down the tile (stride-0
  loads), and takes the B rows of a partial last K block from a zero-padded copy (so the rows
  past K, the next panel's or past the end of the packing, are never multiplied).
"""
from __future__ import annotations

from .conv_helpers import scratch

# Rows and columns of C a block computes: 2 x 2 tiles of 16 x 16.
BLOCK = 32

# Per instruction: its feature macro, and the CPU flags it needs with those of its blocks' vector
# fallback (``vpdpbusd`` / ``vdpbf16ps`` on 512-bit registers).
_OPS = {"dpbusd": ("__AMX_INT8__", {"amx_tile", "amx_int8", "avx512_vnni", "avx512bw", "avx512f"}),
        "dpbf16ps": ("__AMX_BF16__", {"amx_tile", "amx_bf16", "avx512_bf16", "avx512bw", "avx512f"})}


def available(op: str, target=None) -> bool:
    """Whether code for ``target`` (default: this host) may use the AMX instruction ``op``
    (``"dpbusd"`` or ``"dpbf16ps"``): the CPU flags ``amx_tile`` and its type's, with the AVX-512
    its vector fallback needs (gcc's -march=native then enables them); the run-time permission
    is asked by the code."""
    if target is None:
        from ..target import Target
        target = Target.host()
    features = target.features or frozenset()
    return _OPS[op][1] <= features


_BASE = """\
#if !defined(__AMX_TILE__)
#error "tensorforge AMX kernel generated for a target without AMX"
#endif
#ifndef TF_AMX_COMMON_DEFINED
#define TF_AMX_COMMON_DEFINED
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
/* 0: not asked yet, 1: the kernel granted this process the tile state, -1: refused. */
static int tf_amx_state;
static int tf_amx_ready(void)
{
  int s = __atomic_load_n(&tf_amx_state, __ATOMIC_ACQUIRE);
  if (!s) {
#ifdef TF_AMX_REFUSED
    s = -1;        /* built to act as if the OS refused (the tests of the fallback) */
#else
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): per process, idempotent */
    s = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
#endif
    __atomic_store_n(&tf_amx_state, s, __ATOMIC_RELEASE);
  }
  return s > 0;
}
typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } tf_amx_config;
/* Palette 1, tiles 0-7 all 16 rows x 64 bytes (a thread's tile state; zeroes every tile). */
static void tf_amx_configure(void)
{
  tf_amx_config c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 8; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
  _tile_loadconfig(&c);
}
@SCRATCH@#endif
""".replace("@SCRATCH@", "/* A per-thread buffer of at least n bytes, 64-byte aligned, only grown (slot 0). */\n"
            + scratch("tf_amx_scratch", 1))

_KERNELS = """\
#if !defined(@MACRO@)
#error "tensorforge AMX kernel generated for a target without t@OP@"
#endif
#ifndef TF_AMX_@OP@_DEFINED
#define TF_AMX_@OP@_DEFINED
/* One 64-byte K block into the 2 x 2 accumulators: A rows from a (16 more at a + 16 as bytes), B
   tiles of 16 rows from b0 and b1. */
static inline __attribute__((always_inline)) void tf_amx_step_@OP@(const char *a, long as, const char *b0, const char *b1)
{
  _tile_loadd(4, a, as);
  _tile_loadd(6, b0, 64);
  _tile_loadd(7, b1, 64);
  _tile_loadd(5, a + 16 * as, as);
  _tile_@OP@(0, 4, 6);
  _tile_@OP@(1, 4, 7);
  _tile_@OP@(2, 5, 6);
  _tile_@OP@(3, 5, 7);
}
/* 32 x 32 sums of A (32 rows ``as`` bytes apart) by two B panels over nkb K blocks, stored at out
   (rows ``ld`` bytes apart), starting from 0 or, given ``init``, from init[0:32] on every row (two
   tile loads of stride 0 each: a row vector broadcast down the tile).  The last block's B rows come
   from a zero-padded copy when the panels end inside it (brows % 16; brows: B rows of a panel). */
static inline void tf_amx_tile32_@OP@(const void *av, long as, const void *b0v, const void *b1v, long nkb, long brows,
                                      const void *init, void *outv, long ld)
{
  const char *a = (const char *)av, *b0 = (const char *)b0v, *b1 = (const char *)b1v;
  char *out = (char *)outv;
  if (init) {
    const char *i0 = (const char *)init;
    _tile_loadd(0, i0, 0); _tile_loadd(1, i0 + 64, 0); _tile_loadd(2, i0, 0); _tile_loadd(3, i0 + 64, 0);
  } else {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  }
  const long rq = brows % 16, full = rq ? nkb - 1 : nkb;
  for (long kb = 0; kb < full; kb++) tf_amx_step_@OP@(a + kb * 64, as, b0 + kb * 1024, b1 + kb * 1024);
  if (rq) {
    char t0[1024] __attribute__((aligned(64))), t1[1024] __attribute__((aligned(64)));
    memcpy(t0, b0 + full * 1024, (size_t)rq * 64);
    memset(t0 + rq * 64, 0, (size_t)(16 - rq) * 64);
    memcpy(t1, b1 + full * 1024, (size_t)rq * 64);
    memset(t1 + rq * 64, 0, (size_t)(16 - rq) * 64);
    tf_amx_step_@OP@(a + full * 64, as, t0, t1);
  }
  _tile_stored(0, out, ld);
  _tile_stored(1, out + 64, ld);
  _tile_stored(2, out + 16 * ld, ld);
  _tile_stored(3, out + 16 * ld + 64, ld);
}
#endif
"""


def common(op: str) -> str:
    """The guarded C helpers for blocks on ``t<op>`` (``"dpbusd"`` or ``"dpbf16ps"``): permission,
    configuration, per-thread scratch, ``tf_amx_step_<op>`` and ``tf_amx_tile32_<op>``.  Needs
    ``<immintrin.h>``, ``<stdint.h>`` and ``<string.h>`` before it."""
    macro = _OPS[op][0]
    return _BASE + _KERNELS.replace("@MACRO@", macro).replace("@OP@", op)


__all__ = ["BLOCK", "available", "common"]
