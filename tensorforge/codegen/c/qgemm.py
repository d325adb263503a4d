"""C source of an exact int8 GEMM: ``C[m, n] = comp[n] + sum_k a_u8[m, k] * b[k, n]`` in int32.

Quantized linear layers multiply uint8 (or int8) activations by int8 weights.  x86 has one
instruction for exactly that, ``vpdpbusd`` (AVX-512 VNNI, and AVX-VNNI in 256 bits): per 32-bit
lane it adds the four products of 4 unsigned bytes by 4 signed bytes to an int32 accumulator,
without saturation.  This module generates the C around it:

* **Why u8 x s8 and a compensation vector.**  ``vpdpbusd`` needs its first operand unsigned.
  Activations with a zero point ``za`` give ``sum_k (a - za) * b = sum_k a * b - za * colsum(b)``;
  the second term is a per-column constant, folded (with any bias) into ``comp`` at compile time
  by ``compensation``.  Signed activations are made unsigned in the kernel by ``a ^ 0x80``
  (= ``a + 128``), whose extra ``128 * colsum(b)`` goes into ``comp`` the same way.  Every step is
  integer arithmetic, so the result is bit-exact; sums wrap modulo 2**32 and never saturate.
* **Why B is packed ``[ceil(N/nr)][ceil(K/4)][nr][4]``.**  One 4-k group of ``nr = 16`` columns
  is then one 64-byte zmm load in exactly the byte order ``vpdpbusd`` wants; the weights are
  constant, so ``pack_b`` does it once in NumPy.  K and N are zero padded: padded products are 0,
  so the kernel needs no masks on B, only on the stores of C.
* **The micro-kernel** keeps ``mr`` rows x ``nrv`` vectors of int32 accumulators in registers.
  Per k-quad it loads ``nrv`` vectors of B (from one or several adjacent panels, so the tile can be
  wider than ``nr``), broadcasts 4 bytes of each A row and issues ``mr * nrv`` ``vpdpbusd``.  On
  Zen 4 one zmm ``vpdpbusd`` (two 256-bit halves) completes per cycle (``benchmarks/int8_gemm.py``
  measures it); 8 x 2 = 16 independent accumulators cover its latency with 10 loads per 16
  instructions, and measured as fast as 6 x 3, 6 x 4 or 16 x 1.  Tiles with few accumulators (the last rows, a batch-1 GEMV) split the k loop over
  several accumulator sets, added at the end (exact: integer addition is associative), so they
  are not latency bound.  A is read in place (a packed copy of A measured no faster on 1024^3); the k tail
  (``K % 4``) is read into a zeroed 4-byte word, never past the row end.  Edge tiles load and store C through masks.
* **Blocking.**  Rows are cut into blocks whose A slice (``a_block`` bytes, all of K) stays in
  L2; inside a block each column tile runs K blocks of at most ``kc`` (2048: a B micro-panel of
  ``kc x 32`` bytes streams well from L2, and every extra K block reloads C) over all the block's
  row tiles.  C is the accumulator across K blocks (the first block starts from ``comp``), still
  in L2 when the next K block reloads it.
* **Threads** split the output into row ranges x column ranges, each an independent sub-GEMM (no
  barrier, no shared buffer), by OpenMP; without ``-fopenmp`` the pragma is ignored and one thread
  does every part.
* **Fallback.**  Without VNNI the same packed layout feeds a plain C loop in uint32 arithmetic
  (exact, and defined on overflow), which gcc vectorizes as it can.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...dialects.graph.quant import pack_vnni, vnni_packed_size
from . import qgemm_amx
from .conv_helpers import team

AVX512_VNNI = "avx512_vnni"
AVX_VNNI = "avx_vnni"
SCALAR = "scalar"
# Multiply-adds below which a threaded kernel runs on the calling thread: an OpenMP parallel
# region costs a few microseconds, which a GEMM this small does not win back.
PARALLEL_MIN_MACS = 1 << 20
# Parts of C per thread, handed out dynamically (``grid_driver``).
PARTS_PER_THREAD = 4


# ----------------------------------------------------------------------------- NumPy side

def packed_size(K: int, N: int, nr: int = 16) -> int:
    """Bytes of ``pack_b``'s output: whole panels of ``nr`` columns times whole 4-k groups."""
    _check_nr(nr)
    return vnni_packed_size(K, N, nr)


def pack_b(b: np.ndarray, nr: int = 16) -> np.ndarray:
    """int8 weights (K, N) as ``[ceil(N/nr)][ceil(K/4)][nr][4]`` int8, zero padded, C-contiguous:
    the order in which the kernel loads them, one k-quad of ``nr`` columns after another.  The
    layout is ``graph.qmatmul``'s (``dialects/graph/quant.pack_vnni``), here with its 4-D shape."""
    _check_nr(nr)
    b = _as_int8(b, "b")
    K, N = b.shape
    return pack_vnni(b, nr).reshape(-(-N // nr), -(-K // 4), nr, 4)


def compensation(b: np.ndarray, a_zero_point: int, a_signed: bool, bias=None) -> np.ndarray:
    """int32 (N,) ``comp`` such that the kernel's ``comp[n] + sum_k a_u8 * b`` equals
    ``sum_k (a - za) * b[k, n] + bias[n]``: ``-(za_u8) * colsum(b) + bias``, where the kernel's
    unsigned activation is ``a + 128`` for int8 input, so ``za_u8 = za + 128`` then.  Computed in
    int64 and wrapped to int32 like the kernel's own sums."""
    b = _as_int8(b, "b")
    za_u8 = int(a_zero_point) + (128 if a_signed else 0)
    comp = -za_u8 * b.astype(np.int64).sum(axis=0)
    if bias is not None:
        comp = comp + np.asarray(bias, dtype=np.int64).reshape(-1)
    return _wrap_int32(comp)


def reference(a: np.ndarray, b: np.ndarray, a_zero_point: int, bias=None) -> np.ndarray:
    """``(a - za) @ b (+ bias)`` computed exactly in int64, wrapped to int32 like the kernel (the
    wrap is the identity whenever the true result fits int32)."""
    out = (np.asarray(a).astype(np.int64) - int(a_zero_point)) @ np.asarray(b).astype(np.int64)
    if bias is not None:
        out = out + np.asarray(bias, dtype=np.int64).reshape(-1)
    return _wrap_int32(out)


def _wrap_int32(x: np.ndarray) -> np.ndarray:
    return ((np.asarray(x, dtype=np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)


def _as_int8(x, what: str) -> np.ndarray:
    """``x`` as a 2-D int8 array; other integer dtypes only when every value fits int8."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{what} must be 2-D (K, N), got shape {x.shape}")
    if x.dtype != np.int8:
        if not np.issubdtype(x.dtype, np.integer) or (x.size and (x.min() < -128 or x.max() > 127)):
            raise ValueError(f"{what} must hold int8 values, got dtype {x.dtype}")
        x = x.astype(np.int8)
    return x


def _check_nr(nr: int) -> None:
    if int(nr) != nr or nr < 1:
        raise ValueError(f"nr must be a positive integer, got {nr!r}")


# ----------------------------------------------------------------------------- ISA choice

def isa(target) -> str:
    """The fastest path ``target.features`` allows: ``"avx512_vnni"`` (needs AVX512-BW too, for
    the 512-bit byte operands and masks), ``"avx_vnni"`` (256-bit) or ``"scalar"``."""
    features = target.features or frozenset()
    if {"avx512_vnni", "avx512bw", "avx512f"} <= features:
        return AVX512_VNNI
    if {"avx_vnni", "avx2"} <= features:
        return AVX_VNNI
    return SCALAR


@dataclass(frozen=True)
class _Vec:
    """The intrinsics one vector ISA spells the kernel with; masks differ most: AVX-512 has mask
    registers, AVX2 masked loads and stores take a vector of lane masks."""

    name: str
    lanes: int
    vec: str
    prefix: str
    mask_t: str
    guard: str          # preprocessor condition the text needs
    dpbusd: str

    def mask(self, n: str) -> str:
        return f"tf_qgemm_mask{self.lanes}({n})"

    def load_masked(self, mask: str, ptr: str) -> str:
        if self.lanes == 16:
            return f"_mm512_maskz_loadu_epi32({mask}, {ptr})"
        return f"_mm256_maskload_epi32((const int *)({ptr}), {mask})"

    def store_masked(self, ptr: str, mask: str, value: str) -> str:
        if self.lanes == 16:
            return f"_mm512_mask_storeu_epi32({ptr}, {mask}, {value})"
        return f"_mm256_maskstore_epi32((int *)({ptr}), {mask}, {value})"


_VECS = {
    AVX512_VNNI: _Vec(AVX512_VNNI, 16, "__m512i", "_mm512", "__mmask16",
                      "defined(__AVX512VNNI__) && defined(__AVX512BW__)", "tf_qgemm_dpbusd512"),
    # AVX-VNNI's intrinsic has its own name; AVX512-VNNI with VL encodes the same operation, which
    # lets this path run (and be tested) on AVX-512 machines too.
    AVX_VNNI: _Vec(AVX_VNNI, 8, "__m256i", "_mm256", "__m256i",
                   "defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))", "TF_QGEMM_DPBUSD256"),
}


@dataclass(frozen=True)
class Tiling:
    """How the vector kernel is blocked: ``mr`` rows x ``nrv`` vectors of accumulators, the k loop
    unrolled ``unroll`` times, K blocks of at most ``kc`` (a multiple of 4) and row blocks of A of
    about ``a_block`` bytes (``a_block / K`` rows, a multiple of ``mr``, at least ``mr``).

    Measured on Zen 4 (1 thread, GOP/s relative to the vpdpbusd loop measured alongside): kc of
    256..1024 ran 3-15% below a single K block on 1024^3, 128x768x3072 and 256x256x4096 (a long B
    micro-panel streams well from L2; every extra K block reloads C), hence kc = 2048; 8x2, 6x3,
    4x4 and 16x1 tiles and A blocks of 64 KB..512 KB were within noise of each other; 12x2 (24
    accumulators) ran ~25% slower (gcc 12 spills); unroll 2, 4 and 8 within ~5% (4 ahead)."""

    mr: int = 8
    nrv: int = 2
    unroll: int = 4
    kc: int = 2048
    a_block: int = 256 * 1024

    def __post_init__(self) -> None:
        if min(self.mr, self.nrv, self.unroll, self.kc, self.a_block) < 1 or self.kc % 4:
            raise ValueError(f"invalid tiling {self}")

    def validate(self, target) -> None:
        """That the tile's accumulators, its B vectors and a broadcast fit the target's vector
        registers with two to spare (gcc spills beyond: 12 x 2 with 32 registers did), and that
        the blocks are sane; a ValueError saying which rule broke (the int8 tuner's gate)."""
        regs = getattr(target, "vector_registers", 32)
        need = self.mr * self.nrv + self.nrv + 1
        if need > (regs - 8 if regs >= 32 else regs - 2):
            raise ValueError(f"a {self.mr} x {self.nrv} tile needs {need} vector registers; this target has {regs}")
        if self.kc > 1 << 16 or self.a_block > 16 << 20 or self.unroll > 16:
            raise ValueError(f"tiling {self} is outside the tuner's range (kc <= 65536, a_block <= 16 MiB, unroll <= 16)")

    def key(self) -> str:
        """A C-identifier fragment naming this tiling (kernels of different tilings share a file)."""
        return f"t{self.mr}x{self.nrv}u{self.unroll}k{self.kc}a{self.a_block}"

    @classmethod
    def for_target(cls, target) -> "Tiling":
        """Default tiling; the A block takes a quarter of the target's L2.  Without AVX-512 there
        are 16 vector registers: gcc 12 spilled accumulators of a 6 x 2 tile (12 + 2 B + 1
        broadcast) in the k loop, none of a 4 x 2 tile, so the 256-bit kernel keeps 4 x 2."""
        a_block = max(16 * 1024, target.l2 // 4)
        if isa(target) == AVX_VNNI and target.vector_registers < 32:
            return cls(mr=4, a_block=a_block)
        return cls(a_block=a_block)


# ----------------------------------------------------------------------------- C text

def source(name: str, target, a_signed: bool, threads: int = 1, nr: int = 16, tiling: Tiling | None = None,
           row_comp: bool = False, weights_in_a: bool = False) -> str:
    """Self-contained C text defining ``void NAME(long M, long N, long K, const uint8_t *A, long
    lda, const int8_t *Bp, const int32_t *comp, int32_t *C, long ldc)``; ``Bp`` is ``pack_b(b, nr)``.
    With ``row_comp`` the entry takes ``const int32_t *rcomp, tf_qgemm_epilogue epi, void *ectx``
    after ``comp``: C starts from ``comp[n] + rcomp[m]`` (an int8 convolution's
    weights-times-zero-point term is per row), and ``epi`` (unless NULL) is called on each block
    of C when its sums are final, in cache (the convolution's dequantizing epilogue); that entry
    shares its threads as an ``omp for`` of the caller's parallel region (``grid_driver``).
    ``weights_in_a``: A is the weights and B the activations (a convolution's orientation): on AMX
    tiles the threads' parts then split rows first (``grid_driver``'s ``rows_first``).
    Helpers are named by their configuration and guarded, so several kernels can share a file."""
    _check_nr(nr)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    path = isa(target)
    tiling = tiling or Tiling.for_target(target)
    if path == SCALAR:
        cfg = _Config(None, bool(a_signed), nr, Tiling(mr=1, nrv=1))
    else:
        vec = _VECS[path]
        if nr % vec.lanes:
            raise ValueError(f"nr={nr} must be a multiple of {vec.lanes} for the {path} kernel")
        cfg = _Config(vec, bool(a_signed), nr, tiling, amx=path == AVX512_VNNI and nr == 16 and qgemm_amx.available(target),
                      l2=target.l2)
    return "\n".join([_prelude(cfg), _helpers(cfg), _driver(name, cfg, threads, row_comp, weights_in_a)])


@dataclass(frozen=True)
class _Config:
    vec: _Vec | None       # None: the scalar loop
    signed: bool
    nr: int
    tiling: Tiling
    amx: bool = False      # the block runs on AMX tiles (qgemm_amx.py), the vector kernel as its fallback
    l2: int = 1 << 20

    @property
    def width(self) -> int:
        """Columns one tile covers."""
        return self.tiling.nrv * self.vec.lanes if self.vec else self.nr

    @property
    def prefix(self) -> str:
        t = self.tiling
        kind = f"{self.vec.name}_{t.mr}x{t.nrv}_u{t.unroll}_kc{t.kc}_ab{t.a_block}" if self.vec else "scalar"
        return f"tf_qgemm_{kind}_{'s8' if self.signed else 'u8'}_nr{self.nr}"


# Guarded helpers every int8 kernel text uses, and bf16gemm's too (qconv.py includes them for its
# depthwise-only units, which have no GEMM text).
COMMON = """\
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifndef TF_QGEMM_COMMON_DEFINED
#define TF_QGEMM_COMMON_DEFINED
static inline long tf_qgemm_min(long a, long b) { return a < b ? a : b; }
static inline long tf_qgemm_max(long a, long b) { return a > b ? a : b; }
/* Called on C[i0:i1, j0:j1] once its sums are final, while it is still in cache; C points at
   element (i0, j0), whose rows are ldc apart (a local buffer when the GEMM was given no C). */
typedef void (*tf_qgemm_epilogue)(void *ctx, int32_t *C, long ldc, long i0, long i1, long j0, long j1);
/* 4 bytes of A as one int32, any alignment (memcpy is how C says it; gcc emits one load). */
static inline __attribute__((always_inline)) int32_t tf_qgemm_ld4(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
/* The last n < 4 bytes of a row, zero padded: the row may end right after them. */
static inline int32_t tf_qgemm_ld_tail(const uint8_t *p, int n)
{
  uint8_t b[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; i++) b[i] = p[i];
  return tf_qgemm_ld4(b);
}
#endif
"""

# ``tf_qgemm_dpbusd512``, guarded (qconv.py's register tiles use it too).  acc + u8 a x s8 b, in
# place: with the intrinsic, gcc kept each loop-carried accumulator in two registers and copied it
# back and forth around every vpdpbusd.  Always inlined: gcc's inliner counts the asm as costly, and
# in a large caller (the short-K conv's generic epilogue variant, instantiated by a model quantized
# by tensorforge.quantize) it emitted the wrapper as a function and called it for every
# vpdpbusd, zmm arguments through the stack: MobileNetV2's 1x1 layers ran 2-3x slower.  Needs
# <immintrin.h> and AVX512-VNNI.
DPBUSD512 = """\
#ifndef TF_QGEMM_DPBUSD512_DEFINED
#define TF_QGEMM_DPBUSD512_DEFINED
static inline __attribute__((always_inline)) __m512i tf_qgemm_dpbusd512(__m512i acc, __m512i a, __m512i b)
{
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif
"""

_VEC_PRELUDE = {
    16: """\
#ifndef TF_QGEMM_VEC16_DEFINED
#define TF_QGEMM_VEC16_DEFINED
@DPBUSD512@/* Lanes [0, n) of a 16-lane vector. */
static inline __mmask16 tf_qgemm_mask16(long n)
{
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
#endif
""",
    8: """\
#ifndef TF_QGEMM_VEC8_DEFINED
#define TF_QGEMM_VEC8_DEFINED
#if defined(__AVXVNNI__)
#define TF_QGEMM_DPBUSD256 _mm256_dpbusd_avx_epi32
#else
#define TF_QGEMM_DPBUSD256 _mm256_dpbusd_epi32
#endif
/* Lanes [0, n) of an 8-lane vector, as AVX2 masked loads and stores take them. */
static inline __m256i tf_qgemm_mask8(long n)
{
  const int k = n >= 8 ? 8 : n <= 0 ? 0 : (int)n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif
""",
}
_VEC_PRELUDE[16] = _VEC_PRELUDE[16].replace("@DPBUSD512@", DPBUSD512)


def _prelude(cfg: _Config) -> str:
    """Includes, the ISA check and the helpers every kernel of this ISA shares."""
    if cfg.vec is None:
        return COMMON
    check = (f"#if !({cfg.vec.guard})\n#error \"tensorforge int8 GEMM generated for {cfg.vec.name}, "
             f"which this compiler's -march does not enable\"\n#endif\n")
    amx = qgemm_amx.COMMON if cfg.amx else ""
    return f"#include <immintrin.h>\n{COMMON}{check}{_VEC_PRELUDE[cfg.vec.lanes]}{amx}"


def _guarded(cfg: _Config, body: str) -> str:
    macro = cfg.prefix.upper() + "_DEFINED"
    return f"#ifndef {macro}\n#define {macro}\n{body}#endif\n"


def _helpers(cfg: _Config) -> str:
    """The serial kernel over one (row range, column range) of C, with its tiles."""
    if cfg.vec is None:
        return _guarded(cfg, _scalar_block(cfg))
    t = cfg.tiling
    tiles = [_tile(cfg, rows, vecs) for rows in range(1, t.mr + 1) for vecs in range(1, t.nrv + 1)]
    amx = qgemm_amx.block(cfg.prefix, _BLOCK_PARAMS, cfg.signed, cfg.l2) if cfg.amx else ""
    return _guarded(cfg, "".join(tiles) + _tile_table(cfg) + _vector_block(cfg)) + amx


_TILE_PARAMS = ("long kq, int tail, const uint8_t *A, long lda, const int8_t *const *bv, "
                "const int32_t *init, long ldi, const int32_t *rinit, int32_t *C, long ldc, long nvalid")


def _splits(rows: int, vecs: int, unroll: int) -> int:
    """Accumulator sets for a rows x vecs tile: enough independent chains (about 8) to cover the
    vpdpbusd latency at one per cycle, at most one per unrolled k step."""
    return max(1, min(unroll, 8 // (rows * vecs)))


def _acc(s: int, r: int, j: int) -> str:
    """Accumulator of set ``s``, row ``r``, vector ``j``."""
    return f"c{s}_{r}_{j}"


def _tile(cfg: _Config, rows: int, vecs: int) -> str:
    """``rows`` x ``vecs`` tile: C[rows, vecs*lanes] (masked to nvalid columns) = init (comp with
    ldi = 0, or C itself for a later K block) + kq full k-quads + a tail quad of ``tail`` bytes."""
    splits = _splits(rows, vecs, cfg.tiling.unroll)
    body = (_tile_setup(cfg, rows, vecs, splits) + _tile_loop(cfg, rows, vecs, splits)
            + _tile_finish(cfg, rows, vecs, splits))
    return f"static void {cfg.prefix}_tile{rows}x{vecs}({_TILE_PARAMS})\n{{\n" + "\n".join(body) + "\n}\n"


def _masks(cfg: _Config, vecs: int) -> list[str]:
    """Column masks k0.. for the vectors of a tile.  Defined twice, in the scopes of the loads of
    init and of the stores, so none is live across the k loop (AVX2 masks are vector registers,
    and the 256-bit kernel has only 16)."""
    v = cfg.vec
    return [f"    const {v.mask_t} k{j} = {v.mask(f'nvalid - {j * v.lanes}')};" for j in range(vecs)]


def _tile_setup(cfg: _Config, rows: int, vecs: int, splits: int) -> list[str]:
    """Row and B pointers, C prefetches, accumulators: set 0 from init, the other sets zero."""
    v, R, V = cfg.vec, range(rows), range(vecs)
    lines = [f"  const uint8_t *a{r} = A + {r} * lda;" for r in R]
    lines += [f"  const int8_t *b{j} = bv[{j}];" for j in V]
    # Own the tile's C lines long before the stores at the end, which otherwise miss together at
    # every tile's end (a diagnostic run with all of C in L1, ldc = 0, was ~15% faster on 1024^3;
    # the prefetch measured 0..5% faster, within this machine's noise).  Only lines holding valid
    # columns: a prefetch does not fault, but C does not say what lies past its end.
    lines += [f"  __builtin_prefetch(C + {r} * ldc + {j * v.lanes}, 1, 3);" if j == 0 else
              f"  if (nvalid > {j * v.lanes}) __builtin_prefetch(C + {r} * ldc + {j * v.lanes}, 1, 3);"
              for r in R for j in V]
    lines.append(f"  {v.vec} " + ", ".join(_acc(s, r, j) for s in range(splits) for r in R for j in V) + ";")
    lines += ["  {"] + _masks(cfg, vecs)
    lines += [f"    {_acc(0, r, j)} = {v.load_masked(f'k{j}', f'init + {r} * ldi + {j * v.lanes}')};"
              for r in R for j in V]
    lines.append("  }")
    lines += ["  if (rinit) {"] + [f"    {_acc(0, r, j)} = {v.prefix}_add_epi32({_acc(0, r, j)}, {v.prefix}_set1_epi32(rinit[{r}]));"
                                   for r in R for j in V] + ["  }"]
    lines += [f"  {_acc(s, r, j)} = {v.prefix}_setzero_si{v.lanes * 32}();"
              for s in range(1, splits) for r in R for j in V]
    if cfg.signed:
        lines.append(f"  const {v.vec} flip = {v.prefix}_set1_epi32((int)0x80808080u);")
    return lines


def _tile_loop(cfg: _Config, rows: int, vecs: int, splits: int) -> list[str]:
    """The k loop unrolled ``unroll`` times (step u feeds accumulator set u % splits), its
    remainder, and the zero-padded tail quad."""
    unroll = cfg.tiling.unroll
    lines = [f"  long q = 0;\n  for (; q + {unroll} <= kq; q += {unroll}) {{"]
    lines += [_quad_step(cfg, rows, vecs, f"q + {u}", u % splits, f"tf_qgemm_ld4(a{{r}} + 4 * (q + {u}))")
              for u in range(unroll)]
    lines += ["  }\n  for (; q < kq; q++) {", _quad_step(cfg, rows, vecs, "q", 0, "tf_qgemm_ld4(a{r} + 4 * q)")]
    lines += ["  }\n  if (tail) {", _quad_step(cfg, rows, vecs, "q", 0, "tf_qgemm_ld_tail(a{r} + 4 * q, tail)"), "  }"]
    return lines


def _tile_finish(cfg: _Config, rows: int, vecs: int, splits: int) -> list[str]:
    """Add the accumulator sets into set 0 and store it through the column masks."""
    v, R, V = cfg.vec, range(rows), range(vecs)
    lines = [f"  {_acc(0, r, j)} = {v.prefix}_add_epi32({_acc(0, r, j)}, {_acc(s, r, j)});"
             for s in range(1, splits) for r in R for j in V]
    lines += ["  {"] + _masks(cfg, vecs)
    lines += [f"    {v.store_masked(f'C + {r} * ldc + {j * v.lanes}', f'k{j}', _acc(0, r, j))};" for r in R for j in V]
    return lines + ["  }"]


def _quad_step(cfg: _Config, rows: int, vecs: int, quad: str, s: int, a_load: str) -> str:
    """One k-quad into accumulator set ``s``: load ``vecs`` B vectors, then per row broadcast 4 A
    bytes (``a_load`` with ``{r}`` for the row; flipped to unsigned for int8 A) and multiply-add."""
    v, bits = cfg.vec, cfg.vec.lanes * 32
    out = ["    {"] + [f"      const {v.vec} w{j} = {v.prefix}_loadu_si{bits}((const void *)(b{j} + ({quad}) * {cfg.nr * 4}));"
                      for j in range(vecs)]
    for r in range(rows):
        bcast = f"{v.prefix}_set1_epi32({a_load.format(r=r)})"
        if cfg.signed:
            bcast = f"{v.prefix}_xor_si{bits}({bcast}, flip)"
        out.append(f"      const {v.vec} x{r} = {bcast};")
        out += [f"      {_acc(s, r, j)} = {v.dpbusd}({_acc(s, r, j)}, x{r}, w{j});" for j in range(vecs)]
    return "\n".join(out) + "\n    }"


def _tile_table(cfg: _Config) -> str:
    """Function pointers indexed by [rows - 1][vecs - 1], so edge tiles get exact-size code."""
    t = cfg.tiling
    rows = ",\n  ".join("{" + ", ".join(f"{cfg.prefix}_tile{r}x{j}" for j in range(1, t.nrv + 1)) + "}"
                        for r in range(1, t.mr + 1))
    return f"static void (*const {cfg.prefix}_tiles[{t.mr}][{t.nrv}])({_TILE_PARAMS}) = {{\n  {rows}}};\n"


_BLOCK_PARAMS = ("long m0, long m1, long n0, long n1, long N, long K, const uint8_t *A, long lda, "
                 "const int8_t *Bp, const int32_t *comp, const int32_t *rcomp, tf_qgemm_epilogue epi, void *ectx, "
                 "int32_t *C, long ldc")


def _vector_block(cfg: _Config) -> str:
    """Rows [m0, m1) x columns [n0, n1) of C: row blocks of A (``a_block`` bytes over all of K),
    column tiles, K blocks (balanced, at most kc), row tiles.  A K block of a column tile (the B
    micro-panel, kc x tile width bytes) is reused from L1 by every row tile of the row block; the
    block's C tiles, reloaded by the next K block, are still in L2.  The first K block starts
    from comp (ldi = 0), later ones from C.

    ``C == NULL`` (the sums are wanted only by the epilogue, which writes the real output): a row
    block's column tile is summed in a local buffer, reused for every tile, instead of an M x N
    int32 matrix.  That matrix was written and read back once per call: for MobileNetV2's 16->96
    1x1 at 112x112 (K 16) 4.8 MB of int32 through memory, for 1.2 MB of uint8 output."""
    t, lanes, nr = cfg.tiling, cfg.vec.lanes, cfg.nr
    w = t.nrv * lanes
    return f"""\
static void {cfg.prefix}_block({_BLOCK_PARAMS})
{{
  const long kq_all = (K + 3) / 4, npad = (N + {nr - 1}) / {nr} * {nr}, pstride = kq_all * {nr * 4};
  const long nkb = kq_all > {t.kc // 4} ? (kq_all + {t.kc // 4 - 1}) / {t.kc // 4} : 1;
  const long kcq = (kq_all + nkb - 1) / nkb;
  const long mc = tf_qgemm_max({t.mr}, {t.a_block} / (K + 1) / {t.mr} * {t.mr});
  int32_t *local = C ? 0 : (int32_t *)malloc(sizeof(int32_t) * (size_t)(tf_qgemm_min(mc, m1 - m0) * {w}));
  if (!C && !local) return;
  const long cl = local ? {w} : ldc;          /* row stride of the sums */
  for (long ic = m0; ic < m1; ic += mc) {{
    const long ic1 = tf_qgemm_min(ic + mc, m1), r0 = local ? ic : 0;
    for (long j = n0; j < n1; j += {w}) {{
      int32_t *cb = local ? local : C + j;     /* row i of the tile's sums at cb + (i - r0) * cl */
      long boff[{t.nrv}];
      int vecs = 0;
      for (int v = 0; v < {t.nrv}; v++) {{
        const long c = j + v * {lanes};
        boff[v] = c < npad ? (c / {nr}) * pstride + (c % {nr}) * 4 : 0;
        vecs += c < npad;
      }}
      for (long kb = 0; kb < nkb; kb++) {{
        const long q0 = kb * kcq, q1 = tf_qgemm_min(q0 + kcq, kq_all);
        const int tail = (q1 == kq_all) ? (int)(K % 4) : 0;
        const long kq = q1 - q0 - (tail != 0);
        const int8_t *bv[{t.nrv}];
        for (int v = 0; v < {t.nrv}; v++) bv[v] = Bp + boff[v] + q0 * {nr * 4};
        for (long i = ic; i < ic1; i += {t.mr}) {{
          const int rows = (int)tf_qgemm_min({t.mr}, ic1 - i);
          {cfg.prefix}_tiles[rows - 1][vecs - 1](kq, tail, A + i * lda + 4 * q0, lda, bv,
              kb ? cb + (i - r0) * cl : comp + j, kb ? cl : 0, kb || !rcomp ? 0 : rcomp + i,
              cb + (i - r0) * cl, cl, n1 - j);
        }}
      }}
      if (epi) epi(ectx, cb + (ic - r0) * cl, cl, ic, ic1, j, tf_qgemm_min(j + {w}, n1));
    }}
  }}
  free(local);
}}
"""


def _scalar_block(cfg: _Config) -> str:
    """The exact fallback over the same packed B: one row x one panel at a time, in uint32 so the
    wrap-around is defined C.  Products are summed per byte of the packed quad (``acc[4 * nr]``,
    contiguous like B, so gcc vectorizes the loop: u8 * s8 fits int16) and the 4 partial sums of
    each column are added at the end (integer addition: any order gives the same result)."""
    nr, p = cfg.nr, cfg.prefix
    flip = " ^ 0x80808080u" if cfg.signed else ""
    return f"""\
static inline void {p}_quad(uint32_t *restrict acc, uint32_t a4, const int8_t *restrict b)
{{
  uint8_t x[{4 * nr}];
  for (int j = 0; j < {4 * nr}; j += 4) memcpy(x + j, &a4, 4);
  for (int j = 0; j < {4 * nr}; j++) acc[j] += (uint32_t)((int)x[j] * (int)b[j]);
}}

static void {p}_block({_BLOCK_PARAMS})
{{
  const long kq = K / 4, pstride = (K + 3) / 4 * {nr * 4};
  (void)N;
  int32_t *local = C ? 0 : (int32_t *)malloc(sizeof(int32_t) * (size_t)((m1 - m0) * {nr}));
  if (!C && !local) return;
  const long cl = local ? {nr} : ldc, r0 = local ? m0 : 0;
  for (long j = n0; j < n1; j += {nr}) {{
    const int8_t *bp = Bp + (j / {nr}) * pstride;
    const long cols = tf_qgemm_min({nr}, n1 - j);
    int32_t *cb = local ? local : C + j;       /* row i's sums at cb + (i - r0) * cl */
    for (long i = m0; i < m1; i++) {{
      const uint8_t *a = A + i * lda;
      const uint32_t r0i = rcomp ? (uint32_t)rcomp[i] : 0u;
      uint32_t acc[{4 * nr}] = {{0}};
      for (long q = 0; q < kq; q++) {p}_quad(acc, (uint32_t)tf_qgemm_ld4(a + 4 * q){flip}, bp + q * {nr * 4});
      if (K % 4) {p}_quad(acc, (uint32_t)tf_qgemm_ld_tail(a + 4 * kq, (int)(K % 4)){flip}, bp + kq * {nr * 4});
      for (long c = 0; c < cols; c++)
        cb[(i - r0) * cl + c] = (int32_t)(acc[4 * c] + acc[4 * c + 1] + acc[4 * c + 2] + acc[4 * c + 3] + (uint32_t)comp[j + c] + r0i);
    }}
    if (epi) epi(ectx, cb + (m0 - r0) * cl, cl, m0, m1, j, j + cols);
  }}
  free(local);
}}
"""


def _driver(name: str, cfg: _Config, threads: int, row_comp: bool, weights_in_a: bool = False) -> str:
    """The public entry of the int8 kernel (``grid_driver``); with ``row_comp``, a per-row term
    ``rcomp`` and an epilogue ``epi(ectx, ...)`` (NULL: none) applied to each finished part of C."""
    rows = "const int32_t *rcomp, tf_qgemm_epilogue epi, void *ectx, " if row_comp else ""
    head = (f"void {name}(long M, long N, long K, const uint8_t *A, long lda, const int8_t *Bp, "
            f"const int32_t *comp, {rows}int32_t *C, long ldc)")
    extra = "comp, rcomp, epi, ectx" if row_comp else "comp, (const int32_t *)0, (tf_qgemm_epilogue)0, (void *)0"
    if cfg.amx:
        return grid_driver(head, f"{cfg.prefix}_amx_block", extra, qgemm_amx.BLOCK, qgemm_amx.BLOCK, threads, orphaned=row_comp,
                           rows_first=weights_in_a)
    return grid_driver(head, f"{cfg.prefix}_block", extra, cfg.tiling.mr, cfg.width, threads, orphaned=row_comp)


def part_split(want: int, rows_first: bool = False) -> str:
    """C declaring ``tm`` x ``tn``, about ``want`` parts of a grid of ``mtiles`` x ``ntiles``
    tiles: as many column parts as there are tiles up to ``want``, then rows for the rest, or
    (``rows_first``) the other way round (``grid_driver``; the bf16 convolution's per-image grid)."""
    first, other = ("tm", "tn") if rows_first else ("tn", "tm")
    tiles = {"tm": "mtiles", "tn": "ntiles"}
    return (f"  const long {first} = {tiles[first]} < {want} ? {tiles[first]} : {want};\n"
            f"  const long {other} = tf_qgemm_min({tiles[other]}, ({want} + {first} - 1) / {first});")


def grid_driver(signature: str, block: str, extra: str, mr: int, width: int, threads: int,
                orphaned: bool = False, rows_first: bool = False) -> str:
    """A kernel entry that splits C into a grid of row x column parts, about ``PARTS_PER_THREAD``
    per thread (column parts first: they share no B; rows when N has too few column tiles), each
    a multiple of the ``mr x width`` tile so the tiles inside line up with the packed panels, and
    hands them out dynamically: on a machine whose cores do not all run at the same pace (a
    shared VM's vCPU, hybrid cores, another process) an even static split waits for the slowest
    core at every kernel's end (measured with a busy loop on one of 2 cores: ResNet-50 int8 3.2x
    slower, onnxruntime's self-balancing pool 2.2x).  ``block(i0, i1, j0, j1, N, K, A, lda, Bp,
    <extra>, C, ldc)`` computes one part.  ``orphaned``: the parts are an ``omp for`` of the
    caller's parallel region (one fork per convolution, not one for its packing and one for its
    GEMM); called outside a region, they run in turn.  ``rows_first``: row parts first instead,
    where A is a convolution's weights and B its activations on AMX tiles: a part's tile block
    reuses its rows of weights across all its columns, while column parts each read all the
    weights again (ResNet-50 int8 b1 9.06 -> 8.75 ms, MobileNetV2 2.44 -> 2.41; a matmul, whose
    B is the weights, went the other way: BERT-base int8 b1 20.2 -> 21.8 ms; one process each)."""
    head = f"{signature}\n{{\n  if (M <= 0 || N <= 0) return;\n"
    if threads == 1:
        return f"{head}  {block}(0, M, 0, N, N, K, A, lda, Bp, {extra}, C, ldc);\n}}\n"
    pragma = ("#pragma omp for schedule(dynamic, 1)" if orphaned else
              f"#pragma omp parallel for {team(threads)} schedule(dynamic, 1) if (M * N * (K + 1) >= {PARALLEL_MIN_MACS})")
    return f"""{head}\
  const long ntiles = (N + {width - 1}) / {width}, mtiles = (M + {mr - 1}) / {mr};
{part_split(threads * PARTS_PER_THREAD, rows_first)}
  {pragma}
  for (long part = 0; part < tm * tn; part++) {{
    const long pm = part / tn, pn = part % tn;
    const long i0 = mtiles * pm / tm * {mr}, i1 = tf_qgemm_min(M, mtiles * (pm + 1) / tm * {mr});
    const long j0 = ntiles * pn / tn * {width}, j1 = tf_qgemm_min(N, ntiles * (pn + 1) / tn * {width});
    if (i0 < i1 && j0 < j1) {block}(i0, i1, j0, j1, N, K, A, lda, Bp, {extra}, C, ldc);
  }}
}}
"""
