"""C source of the bf16 GEMM sweep on AMX tiles (Intel AMX-BF16: Sapphire Rapids and later).

``bf16gemm.py``'s kernels issue ``vdpbf16ps``: 32 multiply-adds per instruction, measured no
faster here than float32's two FMA ports (a bf16 ResNet-50 ran at 0.7x of the float32 build).
AMX's ``tdpbf16ps`` multiplies a 16 x 32 tile of bf16 (16 rows of 16 k-pairs) by a 16-pair x
16-column tile into a 16 x 16 float32 tile: 8192 multiply-adds per instruction.  This module
writes ``PREFIX_amx_sweep``, which takes the place of the vector sweep over a part of C for the
GEMM (``bf16gemm``), the convolution (``bf16conv``) and the Winograd GEMMs (``bf16_winograd``):
same operands, so none of them packs anything new.

* **Operands as they are.**  B is the packed ``[N/16][K/2][16][2]`` panels (16 k-pairs of a
  panel are one B tile, rows 64 bytes apart).  A is rows of bf16 pairs ``astride`` pairs apart,
  which every caller already pads with zeros to a multiple of 16 pairs (64-byte rows: the weights
  of ``bf16_conv_weights`` and the Winograd transform, and the GEMM's rounded A buffer), so a row
  block of 32 is two A tiles per K block, loaded in place; only a last, short row block is copied,
  zero padded to 32 rows, once per call.  A partial last K block takes its B rows from a
  zero-padded copy (``amx.py``).
* **Blocking** as the int8 AMX block: column chunks whose B slice takes about half the L2, row
  blocks of 32, column tiles of 32 innermost, all of K accumulated in the tiles.  A whole 32 x 32
  block starts from the bias (a stride-0 tile load) or zeros and is stored straight to C; edge
  blocks go through a 32 x 32 buffer.
* **Numerics.**  The products of two bf16 are exact in float32 and the sums are float32, with
  every input denormal read as zero and tiny results flushed, as ``vdpbf16ps``.  But Intel does
  not specify the order or the intermediate rounding of the 32 products one ``tdpbf16ps`` adds
  into a lane, and on this machine they are not the vector kernel's chain of fused steps
  (``bf16gemm.reference``): most outputs differ from it in the last bits.  So this path is held
  to an error bound instead of bits: ``tests/codegen/test_bf16gemm.py`` checks it against the
  exact sum of the same bf16 products, within the float32 error of a K-term sum.  NaN and
  infinities propagate as in any float32 sum.  ``TENSORFORGE_CPU_FEATURES_OFF=amx_bf16`` builds the
  vector kernels, whose bits ``bf16gemm.reference`` states.
* Parts of at most ``VECTOR_ROWS`` rows (a batch-1 GEMV) run on the vector sweep, which wastes no
  rows; so does everything when the OS refuses the tile state (``amx.py``).
"""
from __future__ import annotations

from . import amx

# Parts of at most this many rows run on the vector kernel (a tile computes 16 rows whatever the
# rows it has; as qgemm_amx.VECTOR_ROWS).
VECTOR_ROWS = 8

PARAMS = ("long i0, long i1, long n0, long n1, long K, const uint32_t *Ab, long astride, const uint16_t *Bp, "
          "const float *bias, float *C, long ldc")


def available(target=None) -> bool:
    """Whether code for ``target`` (default: this host) may use AMX-BF16 (``amx.available``)."""
    return amx.available("dpbf16ps", target)


def sweep(prefix: str, l2: int) -> str:
    """``static int PREFIX_amx_sweep(PARAMS)``: C[i0:i1, n0:n1] = bias + A[i0:i1] @ B on AMX tiles;
    ``Ab`` points at row i0, ``n0`` is a multiple of 16.  Returns 0, having done nothing, where the
    tiles are refused, ``astride`` is not padded to whole K blocks or scratch cannot be had: the
    caller then runs the vector sweep."""
    chunk = max(amx.BLOCK, (l2 // 2) // 64 // amx.BLOCK * amx.BLOCK)   # columns per chunk for one K block
    return f"""\
static int {prefix}_amx_sweep({PARAMS})
{{
  const long kp_all = (K + 1) / 2, nkb = (kp_all + 15) / 16, pstride = kp_all * 32;
  if (i1 - i0 <= {VECTOR_ROWS} || astride < nkb * 16 || !tf_amx_ready()) return 0;
  /* columns whose B slice (nkb * 64 bytes each) fills about half the L2 */
  const long nc = tf_qgemm_max(32, {chunk} / tf_qgemm_max(nkb, 1) / 32 * 32);
  const long tail = i0 + (i1 - i0) / 32 * 32;
  uint32_t *ap = 0;
  if (tail < i1) {{
    const size_t row = (size_t)astride * 4;
    ap = (uint32_t *)tf_amx_scratch(0, 32 * row);
    if (!ap) return 0;
    memcpy(ap, Ab + (tail - i0) * astride, (size_t)(i1 - tail) * row);
    memset((char *)ap + (i1 - tail) * row, 0, (size_t)(32 - (i1 - tail)) * row);
  }}
  float cb[32 * 32] __attribute__((aligned(64))), tb[32] __attribute__((aligned(64)));
  tf_amx_configure();
  for (long jc = n0; jc < n1; jc += nc) {{
    const long jc1 = tf_qgemm_min(jc + nc, n1);
    for (long i = i0; i < i1; i += 32) {{
      const long rows = tf_qgemm_min(32, i1 - i);
      const uint32_t *a = i < tail ? Ab + (i - i0) * astride : ap;
      for (long j = jc; j < jc1; j += 32) {{
        const long cols = tf_qgemm_min(32, jc1 - j);
        const uint16_t *b0 = Bp + (j / 16) * pstride, *b1 = cols > 16 ? b0 + pstride : b0;
        const float *init = bias ? bias + j : 0;
        if (bias && cols < 32) {{
          for (long c = 0; c < 32; c++) tb[c] = c < cols ? bias[j + c] : 0.0f;
          init = tb;
        }}
        if (rows == 32 && cols == 32) {{
          tf_amx_tile32_dpbf16ps(a, astride * 4, b0, b1, nkb, kp_all, init, C + i * ldc + j, ldc * 4);
          continue;
        }}
        tf_amx_tile32_dpbf16ps(a, astride * 4, b0, b1, nkb, kp_all, init, cb, 128);
        for (long r = 0; r < rows; r++) memcpy(C + (i + r) * ldc + j, cb + r * 32, (size_t)cols * 4);
      }}
    }}
  }}
  _tile_release();
  return 1;
}}
"""


__all__ = ["PARAMS", "VECTOR_ROWS", "available", "sweep"]
