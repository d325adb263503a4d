"""C source of the int8 GEMM block on AMX tiles (Intel AMX-INT8: Sapphire Rapids and later).

``qgemm.py``'s kernels issue ``vpdpbusd``: 64 multiply-adds per instruction.  AMX's ``tdpbusd``
multiplies a 16 x 64 tile of unsigned bytes by a 16-quad x 16-column tile of signed bytes into a
16 x 16 int32 tile: 16384 multiply-adds per instruction, at one per 16 cycles per core, 8x the
VNNI peak.  Measured on this machine's 2 vCPUs (one thread, a bare test program, C = A x B on
1024 x 3072 x 768): ~1.35-1.5 T multiply-adds/s against ~0.3 T for the VNNI kernel.  This module
writes a drop-in replacement for ``qgemm``'s serial block (same signature, same packed B, same
``comp``/``rcomp``/epilogue contract), so the threaded driver, the convolutions' packing and
their epilogues stay as they are:

* **B needs no new layout.**  ``pack_b``'s ``[N/16][K/4][16][4]`` panel is, 16 k-quads at a
  time, exactly a B tile: 16 rows (k-quads) of 64 bytes (16 columns x 4 bytes), rows 64 bytes
  apart.
* **A is loaded in place** when its rows are whole 64-byte K blocks, 64-byte aligned, and
  unsigned: a tile is 16 rows of 64 bytes ``lda`` apart (tile rows that straddle two cache lines
  load at about half speed: an int8 GEMM 1024^3 took 1.93 ms from 16-byte aligned operands, 0.99
  ms from 64-byte aligned ones, so B should be aligned too: the model's weights and arena and the
  convolutions' scratch are).  Otherwise (int8 activations, made unsigned by ``^ 0x80``; K
  not a multiple of 64; the last, short row block) the 32 rows of a row block are copied into a
  per-thread buffer, zero padded to whole K blocks: the zeros make the B rows read past K (the
  next panel, or a copy for the partial block) contribute nothing, so no tile needs a different
  shape and the tile configuration is loaded once per block call.
* **Register tiles**: 2 x 2 accumulators (32 rows x 32 columns of C; tiles 0-3), two A tiles
  (4, 5) and two B tiles (6, 7); per 64-byte K block four tile loads feed four ``tdpbusd``.
* **Blocking**: column chunks whose B slice (K x chunk bytes) takes about half the L2, row blocks
  of 32 inside, column tiles of 32 innermost, so the B slice is reused from L2 by every row block
  and the row block's A (at most 32 x K bytes) from L1/L2 by every column tile.
* **The epilogue** sees C exactly as from the vector block.  A whole 32 x 32 tile of a GEMM with
  no per-row term (``qmatmul``) starts its accumulators from ``comp`` (a stride-0 tile load: the
  row broadcast down the tile; tile additions wrap like the vector kernel's) and is stored
  straight to C.  Otherwise the tiles are stored to a 32 x 32 int32 buffer, ``comp[n] +
  rcomp[m]`` added in uint32, written to C (or kept in the buffer when the GEMM has no C) and
  handed to ``epi`` while in L1.
* **Permission, configuration, the 2 x 2 tile step**: ``amx.py`` (shared with the bf16 block).
"""
from __future__ import annotations

from . import amx

# Rows and columns of C a block computes: 2 x 2 tiles of 16 x 16 (a tile row is 64 bytes: 64 K
# values of A, 16 int32 of C, or one k-quad of 16 B columns).
BLOCK = amx.BLOCK
# Parts of at most this many rows run on the vector kernel: a tile computes 16 rows whatever the
# rows it has.  Measured N = 1000, K = 2048, 2 threads, AMX against VNNI: M = 1 0.33x (a batch-1
# classifier head), M = 4 0.53x, M = 8 0.9x, M = 16 1.4x, M = 24 2.0x.
VECTOR_ROWS = 8


def available(target=None) -> bool:
    """Whether code for ``target`` (default: this host) may use AMX-INT8 (the CPU flags
    ``amx_tile`` and ``amx_int8``, which gcc's -march=native then enables); the run-time
    permission is asked by the code."""
    return amx.available("dpbusd", target)


# The guarded helpers the block needs (``amx.common``).
COMMON = amx.common("dpbusd")


def block(prefix: str, params: str, signed: bool, l2: int) -> str:
    """``static void PREFIX_amx_block(PARAMS)``: ``qgemm``'s block contract on AMX tiles, handing
    the part to ``PREFIX_block`` (the vector kernel, same arguments) when it has at most
    ``VECTOR_ROWS`` rows or the OS refuses the tiles."""
    flip = " ^ 0x80" if signed else ""
    direct = "0" if signed else "K % 64 == 0 && lda % 64 == 0 && (uintptr_t)A % 64 == 0"
    chunk = max(BLOCK, (l2 // 2) // 64 // BLOCK * BLOCK)   # columns per chunk for K = 64; scaled below
    return f"""\
#ifndef {prefix.upper()}_AMX_DEFINED
#define {prefix.upper()}_AMX_DEFINED
static void {prefix}_amx_block({params})
{{
  if (m1 - m0 <= {VECTOR_ROWS} || !tf_amx_ready()) {{
    {prefix}_block(m0, m1, n0, n1, N, K, A, lda, Bp, comp, rcomp, epi, ectx, C, ldc);
    return;
  }}
  const long kq_all = (K + 3) / 4, nkb = (kq_all + 15) / 16, kpad = nkb * 64;
  const long npanels = (N + 15) / 16, pstride = kq_all * 64;
  /* columns whose B slice (kpad bytes each) fills about half the L2 */
  const long nc = tf_qgemm_max({BLOCK}, {chunk} / tf_qgemm_max(nkb, 1) / {BLOCK} * {BLOCK});
  const int direct = {direct};
  uint8_t *ap = (uint8_t *)tf_amx_scratch(0, (size_t)(32 * kpad));
  if (!ap) {{
    {prefix}_block(m0, m1, n0, n1, N, K, A, lda, Bp, comp, rcomp, epi, ectx, C, ldc);
    return;
  }}
  int32_t cb[32 * 32] __attribute__((aligned(64)));
  tf_amx_configure();
  for (long jc = n0; jc < n1; jc += nc) {{
    const long jc1 = tf_qgemm_min(jc + nc, n1);
    for (long i = m0; i < m1; i += 32) {{
      const long rows = tf_qgemm_min(32, m1 - i);
      const uint8_t *a = A + i * lda;
      long as = lda;
      if (!direct || rows < 32) {{
        for (long r = 0; r < 32; r++) {{
          uint8_t *d = ap + r * kpad;
          long k = 0;
          if (r < rows)
            for (; k < K; k++) d[k] = (uint8_t)(a[r * lda + k]{flip});
          for (; k < kpad; k++) d[k] = 0;
        }}
        a = ap;
        as = kpad;
      }}
      for (long j = jc; j < jc1; j += 32) {{
        const long cols = tf_qgemm_min(32, jc1 - j), p = j / 16;
        const int8_t *b0 = Bp + p * pstride, *b1 = p + 1 < npanels ? b0 + pstride : b0;
        if (C && !rcomp && rows == 32 && cols == 32) {{
          /* a whole tile with no per-row term: the sums start from comp and go straight to C */
          tf_amx_tile32_dpbusd(a, as, b0, b1, nkb, kq_all, comp + j, C + i * ldc + j, ldc * 4);
          if (epi) epi(ectx, C + i * ldc + j, ldc, i, i + 32, j, j + 32);
          continue;
        }}
        tf_amx_tile32_dpbusd(a, as, b0, b1, nkb, kq_all, 0, cb, 128);
        int32_t *dst = C ? C + i * ldc + j : cb;
        const long dl = C ? ldc : 32;
        for (long r = 0; r < rows; r++) {{
          const uint32_t rc = rcomp ? (uint32_t)rcomp[i + r] : 0u;
          for (long c = 0; c < cols; c++)
            dst[r * dl + c] = (int32_t)((uint32_t)cb[r * 32 + c] + (uint32_t)comp[j + c] + rc);
        }}
        if (epi) epi(ectx, dst, dl, i, i + rows, j, j + cols);
      }}
    }}
  }}
  _tile_release();
}}
#endif
"""
