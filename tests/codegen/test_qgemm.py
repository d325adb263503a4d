"""The int8 GEMM generator (``codegen/c/qgemm.py``) against an exact int64 NumPy reference.

Every comparison is bit-exact.  Four code paths run on an AMX host (three on an AVX512-VNNI
one): AMX tiles (``qgemm_amx.py``, the host's own path there), the 512-bit VNNI kernel (a target
without the AMX features), the 256-bit AVX-VNNI kernel (forced by a target that only lists
avx_vnni; AVX512-VNNI + VL machines compile its intrinsic too) and the plain C fallback (forced by
a target without VNNI).  Shapes cross every edge: K not a multiple of 4 (the tail quad), M not a
multiple of the row tile (and M = 1), N not a multiple of the panel or the tile, K blocks and row
blocks (a tiny tiling), strided A and C, threads.  Kernels compile once per session (and are cached
on disk by the toolchain).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest

from tensorforge.codegen import Target
from tensorforge.codegen.c import compile_c, qgemm, qgemm_amx

from .guarded_rows import GuardedRows

HOST = Target.host()
NO_AMX = HOST.replace(features=HOST.features - {"amx_tile", "amx_int8", "amx_bf16"})
TARGETS = {
    "amx": HOST,
    "avx512_vnni": NO_AMX,
    "avx_vnni": HOST.replace(features=frozenset({"avx2", "avx_vnni"})),
    "scalar": HOST.replace(features=frozenset({"avx2"})),
}
# The generated text depends only on the features a target lists, not on the host generating it
VNNI512 = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"})
SOURCE_TARGETS = {"amx": HOST.replace(features=VNNI512 | {"amx_tile", "amx_int8"}),
                  "avx512_vnni": HOST.replace(features=VNNI512),
                  "avx_vnni": TARGETS["avx_vnni"], "scalar": TARGETS["scalar"]}
# Tiny blocks: K blocks of 16 (so C accumulates across blocks and only the last has the tail) and
# row blocks of one tile (so the row block loop runs).
TINY = qgemm.Tiling(mr=3, nrv=2, unroll=2, kc=16, a_block=64)
ARGTYPES = [ctypes.c_long] * 3 + [ctypes.c_void_p, ctypes.c_long] + [ctypes.c_void_p] * 3 + [ctypes.c_long]


def runnable(path: str) -> None:
    """Skip unless this host can run the path's instructions."""
    features = HOST.features
    if path == "avx512_vnni" and qgemm.isa(HOST) != "avx512_vnni":
        pytest.skip("host lacks AVX512-VNNI")
    if path == "amx" and not qgemm_amx.available(HOST):
        pytest.skip("host lacks AMX-INT8")
    if path == "avx_vnni" and not ("avx_vnni" in features or {"avx512_vnni", "avx512vl"} <= features):
        pytest.skip("host runs neither AVX-VNNI nor AVX512-VNNI with VL")


@functools.lru_cache(maxsize=None)
def kernel(path: str, signed: bool, threads: int = 1, nr: int = 16, tiling: qgemm.Tiling | None = None):
    """The compiled kernel as a ctypes function."""
    runnable(path)
    target = TARGETS[path]
    assert qgemm.isa(target) == path or (path == "amx" and qgemm_amx.available(target))
    name = f"t_qgemm_{path}_{'s8' if signed else 'u8'}_{threads}t_nr{nr}"
    lib = compile_c(qgemm.source(name, target, signed, threads=threads, nr=nr, tiling=tiling), target, name=name)
    return lib.function(name, ARGTYPES)


def activations(rng, shape, signed: bool) -> np.ndarray:
    return rng.integers(-128, 128, shape).astype(np.int8) if signed else rng.integers(0, 256, shape).astype(np.uint8)


def weights(rng, K: int, N: int) -> np.ndarray:
    return rng.integers(-128, 128, (K, N)).astype(np.int8)


def gemm(fn, a: np.ndarray, b: np.ndarray, za: int, signed: bool, nr: int = 16, bias=None, c_pad: int = 3,
         sentinel: int = -7) -> np.ndarray:
    """C = (a - za) @ b + bias by the kernel; with ``c_pad`` C is a view into wider rows, whose
    extra columns must keep ``sentinel``."""
    M, K = a.shape
    N = b.shape[1]
    packed = qgemm.pack_b(b, nr)
    comp = qgemm.compensation(b, za, signed, bias)
    full = np.full((M, N + c_pad), sentinel, dtype=np.int32)
    fn(M, N, K, a.ctypes.data, a.strides[0], packed.ctypes.data, comp.ctypes.data, full.ctypes.data, N + c_pad)
    assert (full[:, N:] == sentinel).all(), "the kernel wrote outside C"
    return full[:, :N]


def check(fn, a, b, za, signed, **kw):
    bias = kw.get("bias")
    np.testing.assert_array_equal(gemm(fn, a, b, za, signed, **kw), qgemm.reference(a, b, za, bias))


PATHS = list(TARGETS)
# (M, N, K): K not a multiple of 4, M = 1, M past the row tile, N past the panel and the tile.
SHAPES = [(1, 1, 1), (1, 17, 3), (9, 33, 5), (13, 1, 63), (8, 16, 130), (21, 40, 64), (1, 70, 130),
          (17, 33, 257), (64, 48, 8)]
U8_ZERO_POINTS = (0, 3, 128, 255)
S8_ZERO_POINTS = (-5, 0, 7)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_u8_matches_reference(path, threads, M, N, K, rng):
    fn = kernel(path, False, threads)
    a, b = activations(rng, (M, K), False), weights(rng, K, N)
    for za in U8_ZERO_POINTS:
        check(fn, a, b, za, False)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_s8_with_bias_matches_reference(path, threads, M, N, K, rng):
    fn = kernel(path, True, threads)
    a, b = activations(rng, (M, K), True), weights(rng, K, N)
    bias = rng.integers(-(1 << 20), 1 << 20, N).astype(np.int32)
    for za in S8_ZERO_POINTS:
        check(fn, a, b, za, True, bias=bias)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("signed", [False, True])
def test_large_shape_threads_split_rows_and_columns(path, signed, rng):
    """Big enough for the parallel region (and, with N = 20, for splitting rows not columns)."""
    for M, N, K in [(150, 100, 301), (203, 20, 1001)]:
        a, b = activations(rng, (M, K), signed), weights(rng, K, N)
        bias = rng.integers(-1000, 1000, N)
        check(kernel(path, signed, 2), a, b, 7 if signed else 128, signed, bias=bias)


@pytest.mark.parametrize("path", ["avx512_vnni", "avx_vnni"])
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_tiny_blocks_cross_k_and_row_blocks(path, signed, threads, rng):
    fn = kernel(path, signed, threads, 16, TINY)
    for M, N, K in [(1, 5, 1), (7, 33, 17), (10, 50, 63), (31, 20, 130), (64, 64, 67)]:
        a, b = activations(rng, (M, K), signed), weights(rng, K, N)
        check(fn, a, b, -3 if signed else 200, signed, bias=rng.integers(-50, 50, N))


@pytest.mark.parametrize("path,nr", [("avx512_vnni", 32), ("avx512_vnni", 48), ("avx_vnni", 8), ("scalar", 5)])
def test_other_panel_widths(path, nr, rng):
    fn = kernel(path, False, 1, nr)
    for M, N, K in [(9, 1, 7), (17, nr + 1, 130), (3, 3 * nr - 1, 64)]:
        a, b = activations(rng, (M, K), False), weights(rng, K, N)
        check(fn, a, b, 3, False, nr=nr)


@pytest.mark.parametrize("path", PATHS)
def test_extremes_do_not_saturate(path):
    """255 x -128 summed over K = 1024 is -33,423,360: fits int32 but saturates any int16 step
    (vpmaddubsw would); and the signed corners, through the a + 128 flip and its compensation."""
    M, N, K = 9, 33, 1024
    a = np.full((M, K), 255, np.uint8)
    b = np.full((K, N), -128, np.int8)
    out = gemm(kernel(path, False, 1), a, b, 0, False)
    np.testing.assert_array_equal(out, np.full((M, N), 255 * -128 * K, np.int32))
    for a_value, b_value, za in [(-128, -128, 0), (127, -128, -128), (-128, 127, 127)]:
        a = np.full((M, K), a_value, np.int8)
        b = np.full((K, N), b_value, np.int8)
        out = gemm(kernel(path, True, 1), a, b, za, True)
        np.testing.assert_array_equal(out, np.full((M, N), (a_value - za) * b_value * K, np.int32))


@pytest.mark.parametrize("path", PATHS)
def test_strided_a_and_c(path, rng):
    """A as a column slice of a wider matrix (lda > K); C rows wider than N keep their padding."""
    wide = activations(rng, (19, 80), True)
    a = wide[:, 5:5 + 61]
    b = weights(rng, 61, 37)
    check(kernel(path, True, 2), a, b, 7, True, c_pad=11)


@pytest.mark.parametrize("path", PATHS)
def test_rows_never_read_past_their_end(path, rng):
    """The last row of A ends at a page that cannot be read: the K tail must not load 4 bytes."""
    fn = kernel(path, False, 1)
    for M, N, K in [(1, 17, 5), (9, 33, 130), (3, 16, 1)]:
        with GuardedRows(M, K) as a:
            a[:] = activations(rng, (M, K), False)
            check(fn, a, weights(rng, K, N), 3, False)


@pytest.mark.parametrize("path", PATHS)
def test_empty_k_gives_comp_and_empty_m_n_do_nothing(path, rng):
    fn = kernel(path, False, 1)
    b = np.zeros((0, 20), np.int8)
    bias = rng.integers(-9, 9, 20)
    out = gemm(fn, np.zeros((4, 0), np.uint8), b, 3, False, bias=bias)
    np.testing.assert_array_equal(out, np.broadcast_to(bias, (4, 20)))
    c = np.full((2, 3), 5, np.int32)
    fn(0, 3, 4, 0, 4, 0, 0, c.ctypes.data, 3)
    fn(2, 0, 4, 0, 4, 0, 0, c.ctypes.data, 3)
    assert (c == 5).all()


@pytest.mark.parametrize("signed", [False, True], ids=["u8", "s8"])
def test_amx_in_place_copied_chunked_and_k_tails(signed, rng):
    """The AMX block's own edges: A loaded in place (uint8, K a multiple of 64, whole 32-row blocks)
    or copied (int8 flipped to uint8; the short last row block; K ending inside a 64-byte block,
    whose B rows past K come from a zero-padded copy), several column chunks (K = 4096: a chunk of
    B fills half the L2), tiles of 1..31 rows and columns at the edges, and a part of 5 rows, which
    the block hands to the vector kernel (``qgemm_amx.VECTOR_ROWS``)."""
    fn = kernel("amx", signed, 2)
    for M, N, K in [(64, 64, 128), (40, 600, 4096), (33, 47, 200), (96, 17, 68), (5, 300, 64)]:
        za = int(rng.integers(-128, 128) if signed else rng.integers(0, 256))
        check(fn, activations(rng, (M, K), signed), weights(rng, K, N), za, signed,
              bias=rng.integers(-1000, 1000, N))


# -- the NumPy side and the generated text ----------------------------------------------------

@pytest.mark.parametrize("K,N,nr", [(1, 1, 16), (5, 17, 16), (130, 33, 32), (8, 9, 4), (0, 3, 16)])
def test_pack_b_layout(K, N, nr, rng):
    b = weights(rng, K, N)
    packed = qgemm.pack_b(b, nr)
    assert packed.dtype == np.int8 and packed.flags.c_contiguous
    assert packed.nbytes == qgemm.packed_size(K, N, nr)
    flat = packed.reshape(-1)
    quads = -(-K // 4)
    for k in range(-(-K // 4) * 4):
        for n in range(-(-N // nr) * nr):
            expected = b[k, n] if k < K and n < N else 0
            assert flat[((n // nr * quads + k // 4) * nr + n % nr) * 4 + k % 4] == expected


def test_pack_b_rejects_values_outside_int8():
    with pytest.raises(ValueError, match="int8"):
        qgemm.pack_b(np.full((2, 2), 200))
    with pytest.raises(ValueError, match="nr"):
        qgemm.pack_b(np.zeros((2, 2), np.int8), 0)
    np.testing.assert_array_equal(qgemm.pack_b(np.full((4, 16), -3)), np.full((1, 1, 16, 4), -3, np.int8))


@pytest.mark.parametrize("signed,za", [(False, 0), (False, 255), (True, -128), (True, 7)])
def test_compensation_folds_zero_point_and_bias(signed, za, rng):
    """comp + a_u8 @ b, as the kernel computes it, equals (a - za) @ b + bias."""
    a, b = activations(rng, (6, 50), signed), weights(rng, 50, 9)
    bias = rng.integers(-100, 100, 9)
    a_u8 = (a.astype(np.int64) + 128) if signed else a.astype(np.int64)
    kernel_sum = qgemm.compensation(b, za, signed, bias).astype(np.int64) + a_u8 @ b.astype(np.int64)
    np.testing.assert_array_equal(kernel_sum, qgemm.reference(a, b, za, bias))
    assert qgemm.compensation(b, za, signed).dtype == np.int32


def test_isa_follows_features():
    assert qgemm.isa(HOST.replace(features=frozenset({"avx512f", "avx512bw", "avx512_vnni"}))) == "avx512_vnni"
    assert qgemm.isa(HOST.replace(features=frozenset({"avx512f", "avx512_vnni", "avx2"}))) == "scalar"
    assert qgemm.isa(TARGETS["avx_vnni"]) == "avx_vnni"
    assert qgemm.isa(TARGETS["scalar"]) == "scalar"


def test_default_tiling_fits_the_register_file():
    """16 vector registers (AVX2 without AVX-512): a 4 x 2 tile, which gcc keeps in registers."""
    assert qgemm.Tiling.for_target(TARGETS["avx_vnni"].replace(vector_registers=16)).mr == 4
    tiling = qgemm.Tiling.for_target(TARGETS["avx512_vnni"].replace(features=frozenset({"avx512f", "avx512bw",
                                                                                           "avx512_vnni"})))
    assert (tiling.mr, tiling.nrv) == (8, 2) and tiling.a_block == max(16 * 1024, HOST.l2 // 4)
    with pytest.raises(ValueError):
        qgemm.Tiling(kc=30)


def test_source_text_contract():
    """One-line signature (the integrator may prepend ``static``), intrinsics only on VNNI paths,
    and nr the vector ISA cannot load rejected."""
    for path, target in SOURCE_TARGETS.items():
        text = qgemm.source("my_qgemm", target, True, threads=2)
        assert ("void my_qgemm(long M, long N, long K, const uint8_t *A, long lda, const int8_t *Bp, "
                "const int32_t *comp, int32_t *C, long ldc)\n{") in text
        assert ("dpbusd" in text) == (path != "scalar")
        assert ("_mm512" in text) == (path in ("avx512_vnni", "amx"))
        assert ("_tile_dpbusd" in text) == (path == "amx")
    with pytest.raises(ValueError, match="multiple of 16"):
        qgemm.source("k", SOURCE_TARGETS["avx512_vnni"], False, nr=8)


def test_kernels_share_one_translation_unit(rng):
    """Helpers are guarded: two kernels of one configuration and one of another compile together."""
    texts = [qgemm.source("t_qgemm_tu_a", HOST, False), qgemm.source("t_qgemm_tu_b", HOST, False, threads=2),
             qgemm.source("t_qgemm_tu_c", TARGETS["scalar"], True)]
    lib = compile_c("\n".join(texts), HOST, name="t_qgemm_tu")
    a, b = activations(rng, (10, 21), False), weights(rng, 21, 19)
    for name in ("t_qgemm_tu_a", "t_qgemm_tu_b"):
        check(lib.function(name, ARGTYPES), a, b, 128, False)
    check(lib.function("t_qgemm_tu_c", ARGTYPES), activations(rng, (10, 21), True), b, 1, True)


@pytest.mark.parametrize("signed", [False, True])
def test_amx_refused_runs_the_vector_kernel(signed, rng):
    """Where the OS does not grant the tile state (built with ``-DTF_AMX_REFUSED`` to act so), the
    AMX build runs its vector block on every part: still bit-exact."""
    runnable("amx")
    name = f"t_qgemm_amx_refused_{'s8' if signed else 'u8'}"
    lib = compile_c(qgemm.source(name, HOST, signed, threads=2), HOST, name=name, extra_flags=("-DTF_AMX_REFUSED",))
    fn = lib.function(name, ARGTYPES)
    for M, N, K in [(64, 64, 128), (33, 47, 200)]:
        za = int(rng.integers(-128, 128) if signed else rng.integers(0, 256))
        check(fn, activations(rng, (M, K), signed), weights(rng, K, N), za, signed, bias=rng.integers(-1000, 1000, N))
