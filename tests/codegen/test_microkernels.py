"""Generated fp32 GEMM against NumPy: odd shapes, several tilings, epilogues, transposes, threads.

Kernels compile once per session (and are cached on disk by the toolchain); tolerances: rtol 1e-4
against a float64 reference, with an absolute floor of 1e-4 * sqrt(K) for sums that cancel to ~0.
"""
import functools
import platform

import numpy as np
import pytest

from tensorforge.codegen import Target
from tensorforge.codegen.c import (Epilogue, EpilogueParam, GemmKernel, GemmParams, GemmSpec, bias_add,
                                   generate_gemm, pack_b, packed_b_size, relu, residual_add)
from tensorforge.errors import ShapeError

HOST = Target.host()
VW = HOST.vector_width
SHAPES = [(1, 1, 1), (7, 13, 5), (100, 37, 129), (64, 64, 64), (3, 200, 40), (1, 300, 17), (50, 2 * VW + 3, 70)]
FUSED = (bias_add(), relu(), residual_add())

# name -> (params, spec): each exercises a different code path of the generator.
KERNELS = {
    "default-1t": (GemmParams.for_target(HOST, threads=1), GemmSpec()),
    "default-2t-fused": (GemmParams.for_target(HOST, threads=2), GemmSpec(epilogues=FUSED)),
    # Tiny blocks so that every shape crosses K, M and N block edges; packed A, rows inner.
    "blocks-packA-transA-2t": (GemmParams(mr=5, nr=2 * VW, kc=16, mc=10, nc=4 * VW, unroll=2, threads=2,
                                          pack_a=True, loop_order="jr_ir"), GemmSpec(trans_a=True)),
    # A read in place, columns inner, B given transposed, bias + ReLU fused.
    # Blocks handed out on demand.
    "blocks-dynamic-2t-fused": (GemmParams(mr=4, nr=VW, kc=32, mc=8, nc=2 * VW, threads=2, schedule="dynamic"),
                                GemmSpec(epilogues=FUSED)),
    # Static splits forced each way: N panels (each thread packs its own) and M tiles (shared packed B).
    "blocks-staticN-2t-fused": (GemmParams(mr=4, nr=VW, kc=32, mc=8, nc=2 * VW, threads=2, schedule="static_n"),
                                GemmSpec(epilogues=FUSED)),
    "blocks-staticM-2t": (GemmParams(mr=4, nr=VW, kc=32, mc=8, nc=2 * VW, threads=2, schedule="static_m",
                                     pack_a=False), GemmSpec()),
    # B read in place by the full entry (GemmSpec.b_direct; the partial last panel packed), both splits.
    "directB-dynamic-2t-fused": (GemmParams(mr=4, nr=VW, kc=32, mc=8, nc=2 * VW, threads=2, schedule="dynamic"),
                                 GemmSpec(epilogues=FUSED, b_direct=True)),
    "directB-staticM-2t": (GemmParams(mr=5, nr=2 * VW, kc=24, mc=10, nc=2 * VW, threads=2, schedule="static_m"),
                           GemmSpec(b_direct=True)),
    "blocks-directA-transB-fused": (GemmParams(mr=3, nr=VW, kc=24, mc=6, nc=3 * VW, unroll=3, threads=1,
                                               pack_a=False, loop_order="ir_jr"),
                                    GemmSpec(trans_b=True, epilogues=(bias_add(), relu()))),
}


@functools.lru_cache(maxsize=None)
def kernel(name: str) -> GemmKernel:
    params, spec = KERNELS[name]
    return GemmKernel(params, spec=spec, name=f"t_{name.replace('-', '_')}")


def operands(rng, M, N, K):
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    bias = rng.standard_normal(N, dtype=np.float32)
    residual = rng.standard_normal((M, N), dtype=np.float32)
    return A, B, bias, residual


def reference(A, B, spec, bias=None, residual=None, C0=None):
    out = A.astype(np.float64) @ B.astype(np.float64)
    if C0 is not None:
        out += C0
    for epi in spec.epilogues:
        out = {"bias_add": lambda x: x + bias, "relu": lambda x: np.maximum(x, 0),
               "residual_add": lambda x: x + residual}[epi.name](out)
    return out


def check(actual, expected, K):
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * max(1.0, np.sqrt(K)))


def call(k, A, B, bias, residual, packed=False, **kw):
    spec = k.spec
    a = np.ascontiguousarray(A.T) if spec.trans_a else A
    b = np.ascontiguousarray(B.T) if spec.trans_b else B
    names = {p.name for p in spec.params}
    extra = {n: v for n, v in (("bias", bias), ("residual", residual)) if n in names}
    if packed:
        return k.prepacked(a, k.pack_b(b), B.shape[1], **extra, **kw)
    return k(a, b, **extra, **kw)


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_gemm_matches_numpy(name, M, N, K, rng):
    k = kernel(name)
    A, B, bias, residual = operands(rng, M, N, K)
    expected = reference(A, B, k.spec, bias, residual)
    check(call(k, A, B, bias, residual), expected, K)
    check(call(k, A, B, bias, residual, packed=True), expected, K)


@pytest.mark.parametrize("name", ["default-1t", "blocks-packA-transA-2t", "directB-staticM-2t"])
def test_accumulate_adds_into_c(name, rng):
    k = kernel(name)
    A, B, _, _ = operands(rng, 37, 45, 300)
    C0 = rng.standard_normal((37, 45), dtype=np.float32)
    out = call(k, A, B, None, None, C=C0.copy(), accumulate=True)
    check(out, reference(A, B, k.spec, C0=C0), 300)


def test_workspace_is_reused_and_checked(rng):
    k = kernel("default-2t-fused")
    ws = np.full(packed_b_size(70, 90, k.params.nr), np.nan, dtype=np.float32)
    for M, N, K in [(33, 90, 70), (5, 17, 3)]:       # the second call reuses a dirty, larger workspace
        A, B, bias, residual = operands(rng, M, N, K)
        check(k(A, B, bias=bias, residual=residual, workspace=ws), reference(A, B, k.spec, bias, residual), K)
    with pytest.raises(ShapeError, match="workspace"):
        k(A, B, bias=bias, residual=residual, workspace=ws[:10])


def test_empty_k_gives_epilogue_of_zero(rng):
    k = kernel("default-2t-fused")
    _, _, bias, residual = operands(rng, 4, 9, 0)
    out = k(np.zeros((4, 0), np.float32), np.zeros((0, 9), np.float32), bias=bias, residual=residual)
    np.testing.assert_array_equal(out, np.maximum(bias, 0) + residual)


def test_relu_is_exact_and_uses_compare_select(rng):
    k = kernel("default-2t-fused")
    A, B, bias, residual = operands(rng, 33, 70, 20)
    zero = np.zeros_like(residual)
    out = k(A, B, bias=bias, residual=zero)
    assert (out >= 0).all() and ((A.astype(np.float64) @ B + bias < 0) == (out == 0)).mean() > 0.99
    assert "fmaxf" not in k.source and "tf_relu" in k.source


def test_custom_epilogue_snippet(rng):
    scale = Epilogue("scale_rows", "x = x * tf_bcast(row_scale[i]);", (EpilogueParam("row_scale", extent="row"),))
    spec = GemmSpec(epilogues=(scale,))
    k = GemmKernel(GemmParams(mr=4, nr=VW, kc=32, mc=8, nc=2 * VW, unroll=1, threads=1), spec=spec, name="t_scale")
    A, B, _, _ = operands(rng, 9, 2 * VW + 1, 40)
    s = rng.standard_normal(9, dtype=np.float32)
    out = k(A, B, row_scale=s)
    check(out, (A.astype(np.float64) @ B) * s[:, None], 40)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 -march levels run on this x86 host")
@pytest.mark.parametrize("march, width", [("x86-64-v3", 8), ("x86-64", 4)])
def test_narrower_vector_targets(march, width, rng):
    """The same generator for AVX2 (8 lanes, 16 registers) and SSE2 (4 lanes), run on this host."""
    target = Target(march=march)
    params = GemmParams.for_target(target, threads=2)
    assert target.vector_width == width and params.nr == 2 * width
    k = GemmKernel(params, target, GemmSpec(epilogues=(bias_add(), relu())), name=f"t_{march.replace('-', '_')}")
    for M, N, K in [(7, 13, 5), (100, 37, 129), (20, 3 * width + 1, 300)]:
        A, B, bias, _ = operands(rng, M, N, K)
        check(k(A, B, bias=bias), reference(A, B, k.spec, bias), K)


def test_pack_b_layout_and_c_packer_agree(rng):
    B = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
    Bp = pack_b(B, 4)
    assert Bp.shape == (2, 3, 4) and Bp.ctypes.data % 64 == 0
    np.testing.assert_array_equal(Bp[0], B[:, :4])
    np.testing.assert_array_equal(Bp[1], np.pad(B[:, 4:], ((0, 0), (0, 3))))
    np.testing.assert_array_equal(pack_b(B.T, 4, trans=True), Bp)
    for name in ("default-1t", "blocks-directA-transB-fused"):
        k = kernel(name)
        B = rng.standard_normal((19, 3 * VW + 5), dtype=np.float32)
        b = np.ascontiguousarray(B.T) if k.spec.trans_b else B
        np.testing.assert_array_equal(k.pack_b(b), k.pack_b_native(b))


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="multiple of the vector width"):
        generate_gemm(GemmParams(nr=VW + 1, nc=(VW + 1) * 4), HOST)
    with pytest.raises(ValueError, match="mc"):
        generate_gemm(GemmParams(mr=6, mc=100), HOST)
    with pytest.raises(ValueError, match="loop_order"):
        generate_gemm(GemmParams(loop_order="kji"), HOST)


def test_bad_operands_raise_shape_error(rng):
    k = kernel("default-1t")
    with pytest.raises(ShapeError, match="K="):
        k(np.zeros((3, 4), np.float32), np.zeros((5, 6), np.float32))
    with pytest.raises(ShapeError, match="packed B"):
        k.prepacked(np.zeros((3, 4), np.float32), np.zeros((1, 4, 3), np.float32), 6)
    fused = kernel("default-2t-fused")
    with pytest.raises(ShapeError, match="bias"):
        fused(np.zeros((3, 4), np.float32), np.zeros((4, 6), np.float32), bias=np.zeros(5), residual=np.zeros((3, 6)))


def test_generated_text_is_parameterised():
    src = generate_gemm(GemmParams(mr=5, nr=2 * VW, kc=48, mc=10, nc=4 * VW, threads=2), HOST, name="g")
    assert "void g(" in src and "void g_prepacked(" in src and "void g_pack_b(" in src
    # a micro-kernel per row count (edge tiles use the one for theirs, into a local tile)
    assert "g_ukr5(" in src and "g_ukr1(" in src and "g_ukr6(" not in src and "g_edge(" in src
    assert "#pragma omp parallel num_threads(nth)" in src and "tf_min(48, K - pc)" in src
    single = generate_gemm(GemmParams(mr=5, nr=2 * VW, kc=48, mc=10, nc=4 * VW, threads=1), HOST, name="g")
    # threads=1: the blocked GEMM opens no parallel region; only the small-M GEMV path (gemv.py)
    # may, sized by B's bytes and never inside another parallel region.
    blocked, _, rest = single.partition("tensorforge gemv path")
    assert "#pragma omp" not in blocked and "omp.h" not in blocked
    assert rest.count("#pragma omp") == 1 and "!omp_in_parallel()" in rest


_CALLBACK_C = """
typedef struct { const float *bias; float scale; } ctx_t;
void twice_plus_bias(const void *ctx, float *c, long ldc, long i0, long j0, long rows, long cols) {
  const ctx_t *e = ctx;
  for (long r = 0; r < rows; r++)
    for (long l = 0; l < cols; l++) c[r * ldc + l] = c[r * ldc + l] * e->scale + e->bias[j0 + l] + (float)(i0 + r);
}
"""


@pytest.mark.parametrize("pack_a, trans_a, schedule", [(True, False, "static"), (False, False, "static"),
                                                       (False, True, "static"), (True, False, "dynamic"),
                                                       (False, False, "static_n"), (True, False, "static_m")])
def test_callback_epilogue_sees_every_tile_once(pack_a, trans_a, schedule, rng):
    """The callback form (what compiled models use): called once per finished tile, with its row
    and column offsets, after the last K block; A packed, read in place, or given transposed."""
    import ctypes

    from tensorforge.codegen.c import compile_c
    lib = compile_c(_CALLBACK_C, name="t_callback_epi")
    fn = ctypes.cast(lib.lib.twice_plus_bias, ctypes.c_void_p).value
    k = GemmKernel(GemmParams(mr=5, nr=2 * VW, kc=16, mc=10, nc=4 * VW, threads=2, pack_a=pack_a, schedule=schedule),
                   spec=GemmSpec(trans_a=trans_a, callback=True), name=f"t_cb_{int(pack_a)}{int(trans_a)}_{schedule}")

    class Ctx(ctypes.Structure):
        _fields_ = [("bias", ctypes.c_void_p), ("scale", ctypes.c_float)]

    for M, N, K in [(23, 3 * VW + 5, 37), (5, 2 * VW, 16), (1, 1, 1)]:
        A, B, bias, _ = operands(rng, M, N, K)
        ctx = Ctx(bias.ctypes.data, 2.0)
        a = np.ascontiguousarray(A.T) if trans_a else A
        expected = 2.0 * (A.astype(np.float64) @ B) + bias + np.arange(M)[:, None]
        check(k(a, B, epi=fn, epi_ctx=ctypes.addressof(ctx)), expected, K)
        check(k.prepacked(a, k.pack_b(B), N, epi=fn, epi_ctx=ctypes.addressof(ctx)), expected, K)
        check(k(a, B), A.astype(np.float64) @ B, K)       # no callback: the plain product


def _epi_regs(terms, clamp):
    """A ctypes ``tf_epi_regs`` (the prelude's struct) of ``terms`` ((array, cm, cn) each) and
    ``clamp`` ((lo, hi) or None); the arrays must outlive its use."""
    import ctypes

    class Regs(ctypes.Structure):
        _fields_ = [("p", ctypes.c_void_p * 2), ("cm", ctypes.c_long * 2), ("cn", ctypes.c_int * 2),
                    ("terms", ctypes.c_int), ("clamp", ctypes.c_int), ("lo", ctypes.c_float),
                    ("hi", ctypes.c_float)]
    regs = Regs()
    for t, (arr, cm, cn) in enumerate(terms):
        regs.p[t], regs.cm[t], regs.cn[t] = arr.ctypes.data, cm, cn
    regs.terms = len(terms)
    regs.clamp, (regs.lo, regs.hi) = int(clamp is not None), clamp or (0.0, 0.0)
    return regs


@pytest.mark.parametrize("trans_c", [False, True])
def test_register_epilogue_is_the_callback_arithmetic(trans_c, rng):
    """``TF_EPI_REGS``: full tiles add the terms and clamp in the micro-kernel's registers, edge tiles,
    the GEMV path and a transposed C in memory (``tf_epi_regs_tile``); either way each element is
    ``clamp((c + t0) + t1)`` in float32, bit for bit, NaN and signed zeros included, also on top of
    ``accumulate`` and several K blocks."""
    import ctypes

    k = GemmKernel(GemmParams(mr=5, nr=2 * VW, kc=16, mc=10, nc=4 * VW, threads=2, pack_a=not trans_c),
                   spec=GemmSpec(trans_a=trans_c, callback=True, trans_c=trans_c), name=f"t_regs_{int(trans_c)}")
    for M, N, K in [(23, 3 * VW + 5, 37), (10, 4 * VW, 16), (2, VW + 3, 20), (1, 1, 1)]:
        A, B, _, _ = operands(rng, M, N, K)
        a = np.ascontiguousarray(A.T) if trans_c else A
        rows, cols = (N, M) if trans_c else (M, N)     # C as stored
        row_bias = rng.standard_normal(rows, dtype=np.float32)
        row_bias[rows // 2] = np.nan
        col_bias = rng.standard_normal(cols, dtype=np.float32)
        residual = rng.standard_normal((rows, cols + 3), dtype=np.float32)    # row stride cols + 3
        c0 = rng.standard_normal((rows, cols), dtype=np.float32)
        cases = [([(row_bias, 1, 0)], (0.0, 6.0)), ([(col_bias, 0, 1), (residual, cols + 3, 1)], None),
                 ([(row_bias, 1, 0), (residual, cols + 3, 1)], (0.0, np.inf)), ([], (-0.5, 0.5))]
        for terms, clamp in cases:
            regs = _epi_regs(terms, clamp)
            for accumulate in (False, True):
                # the prepacked entry (its GEMV path for few rows) and the packing one sum differently
                entries = [lambda **kw: k.prepacked(a, k.pack_b(B), N, C=c0.copy(), accumulate=accumulate, **kw)]
                if not trans_c:
                    entries.append(lambda **kw: k(a, B, C=c0.copy(), accumulate=accumulate, **kw))
                for entry in entries:
                    want = entry()
                    for arr, cm, cn in terms:
                        want = want + (arr[:rows, None] if cn == 0 else arr[:rows, :cols] if arr.ndim == 2
                                       else arr[None, :cols])
                    if clamp is not None:     # x < lo ? lo : x, then x > hi ? hi : x
                        want = np.where(want < clamp[0], np.float32(clamp[0]), want)
                        want = np.where(want > clamp[1], np.float32(clamp[1]), want)
                    got = entry(epi=1, epi_ctx=ctypes.addressof(regs))
                    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_callback_and_inline_epilogues_exclude_each_other():
    with pytest.raises(ValueError, match="callback"):
        GemmSpec(epilogues=(relu(),), callback=True)


def test_static_schedule_splits_the_larger_operand():
    """"static" hands out N panels when B (K x N) is the larger operand to share, M tiles otherwise;
    too few tiles on one side force the other."""
    from tensorforge.codegen.c.microkernels import splits_n
    assert splits_n("static", 16, 12544, 6, 64, 2)          # a 1x1 conv with few output channels
    assert not splits_n("static", 2048, 49, 6, 64, 2)       # a late 1x1 conv: one N panel
    assert splits_n("static", 4, 4096, 6, 64, 2)            # one M tile
    assert not splits_n("static_m", 16, 12544, 6, 64, 2)
    assert splits_n("static_n", 2048, 256, 6, 64, 2)


@pytest.mark.parametrize("schedule", ["static", "dynamic"])
def test_transposed_c_is_written_in_place_and_called_back_per_block(schedule, rng):
    """``GemmSpec(trans_c=True)`` stores C = A @ B as its transpose (what a 1x1 convolution computed as
    C^T = B^T A^T needs) for partial tiles, several K blocks and ``accumulate``; its callback sees
    each (mc x nc) block once, in the stored array's own coordinates."""
    import ctypes

    from tensorforge.codegen.c import compile_c
    lib = compile_c(_CALLBACK_C, name="t_callback_epi")
    fn = ctypes.cast(lib.lib.twice_plus_bias, ctypes.c_void_p).value
    k = GemmKernel(GemmParams(mr=7, nr=2 * VW, kc=16, mc=14, nc=4 * VW, threads=2, pack_a=False, schedule=schedule),
                   spec=GemmSpec(trans_a=True, callback=True, trans_c=True), name=f"t_tc_{schedule}")

    class Ctx(ctypes.Structure):
        _fields_ = [("bias", ctypes.c_void_p), ("scale", ctypes.c_float)]

    for M, N, K in [(49, 3 * VW + 5, 37), (7, 2 * VW, 16), (1, 1, 1), (30, 5, 70)]:
        A, B, _, _ = operands(rng, M, N, K)
        a = np.ascontiguousarray(A.T)
        product = (A.astype(np.float64) @ B).T             # stored [N, M]
        check(k.prepacked(a, k.pack_b(B), N), product, K)
        c0 = rng.standard_normal((N, M), dtype=np.float32)
        check(k.prepacked(a, k.pack_b(B), N, C=c0.copy(), accumulate=True), product + c0, K)
        bias = rng.standard_normal(M, dtype=np.float32)     # per stored column
        ctx = Ctx(bias.ctypes.data, 2.0)
        expected = 2.0 * product + bias + np.arange(N)[:, None]
        check(k.prepacked(a, k.pack_b(B), N, epi=fn, epi_ctx=ctypes.addressof(ctx)), expected, K)
    with pytest.raises(ValueError, match="transposed"):
        GemmSpec(trans_c=True, epilogues=(relu(),))


def test_packed_b_panels_are_prefetched_ahead_and_b_read_in_place_is_not():
    """A GEMM walking packed B panels prefetches each 64-byte line of B ``PREFETCH_B_BYTES`` ahead
    (whole panel rows), once: AVX2's 16-float row is one line (two prefetches of it ran GPT-2's
    MLP GEMMs 1.2-1.3x slower on Zen 3), AVX-512's 32 are two; a GEMM reading B in place from an
    activation (rows far apart) does not prefetch; the transposed direct conv kernel (weights as B
    panels) does, the usual one (image as B) does not."""
    import re

    from tensorforge.codegen.c import direct_conv
    from tensorforge.codegen.c.microkernels import PREFETCH_B_BYTES
    nr = 2 * VW
    ahead = PREFETCH_B_BYTES // 4 // nr * nr
    params = GemmParams(mr=4, nr=nr, kc=48, mc=8, nc=4 * nr)
    packed = generate_gemm(params, HOST, name="g")
    step = packed[packed.index("for (long k = 0; k < kc; k++"):]
    step = step[:step.index("}")]
    assert re.findall(r"__builtin_prefetch\(b \+ (\d+)\);", step) == [str(ahead + f) for f in range(0, nr, 16)]
    in_place = generate_gemm(params, HOST, GemmSpec(b_direct=True, callback=True), name="g")
    assert "__builtin_prefetch(b + " not in in_place          # (the GEMV path's own prefetch is b0, b1, ...)
    conv = GemmParams(mr=4, nr=nr, mc=4, nc=nr)
    assert f"__builtin_prefetch(b + {ahead});" in direct_conv.transposed_source(conv, HOST, 9, "d")
    assert "__builtin_prefetch(b + " not in direct_conv.source(conv, HOST, 9, "d")
