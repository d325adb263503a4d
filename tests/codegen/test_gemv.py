"""The GEMV path of the generated GEMM (``codegen/c/gemv.py``): prepacked calls with M <= 4.

Whole models (torch Linear / MLP at batch 1..5 and a dynamic batch) against torch within 1e-4
relative, NaN/Inf propagation as torch's, the fused bias/ReLU epilogues, the marker in the model's
source; and the kernel alone (``GemmKernel``): every row count, transposed A, accumulate, inline
epilogues, edge panels, K = 0 and K not a multiple of the partial sums, the threaded split for a
large B, and no nested parallel region when called from inside one.
"""
from __future__ import annotations

import copy
import ctypes
import functools

import numpy as np
import pytest

from tensorforge.codegen import Target
from tensorforge.codegen.c import GemmKernel, GemmParams, GemmSpec, bias_add, generate_gemm, relu
from tensorforge.codegen.c import gemv
from tensorforge.codegen.c.toolchain import compile_c

torch = pytest.importorskip("torch")

HOST = Target.host()
VW = HOST.vector_width


def check(actual, expected, K):
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * max(1.0, np.sqrt(K)))


# -- whole models ------------------------------------------------------------------------------

class MLP(torch.nn.Module):
    def __init__(self, sizes=(300, 200, 37)):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


@functools.lru_cache(maxsize=None)
def _model(sizes=(300, 200, 37)):
    torch.manual_seed(0)
    return MLP(sizes).eval()


@functools.lru_cache(maxsize=None)
def _compiled(batch, sizes=(300, 200, 37)):
    import tensorforge
    return tensorforge.compile(_model(sizes), (torch.randn(batch, sizes[0]),))


def _torch(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 5])
def test_mlp_matches_torch(batch, rng):
    cm, model = _compiled(batch), _model()
    x = rng.standard_normal((batch, 300), dtype=np.float32)
    check(cm(x), _torch(copy.deepcopy(model).double(), x.astype(np.float64)), 300)


def test_source_calls_the_gemv_for_batch_1():
    src = _compiled(1).source
    assert gemv.MARKER in src
    assert "_prepacked(1, 200, 300," in src          # the layer's GEMM, M = 1 at compile time
    assert "_gemv(M, N, K, A, lda, Bp, C, ldc, accumulate, &tf_e)" in src


def test_large_layer_threads_match_torch(rng):
    """1024 x 512 weights (2 MB: the threaded split of the panels) at batch 1, bias and ReLU fused."""
    import tensorforge
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 520), torch.nn.ReLU()).eval()
    cm = tensorforge.compile(model, (torch.randn(1, 1024),))
    x = rng.standard_normal((1, 1024), dtype=np.float32)
    expected = _torch(model.double(), x.astype(np.float64))
    for threads in (1, 2):
        cm.set_threads(threads)
        out = cm(x)
        check(out, expected, 1024)
        assert (out >= 0).all() and ((expected <= 0) == (out == 0)).mean() > 0.99


def test_dynamic_batch(rng):
    """One compile, the GEMM called with the runtime M: GEMV for small batches, blocked otherwise."""
    import tensorforge
    model = _model()
    batch = torch.export.Dim("batch", min=1, max=64)
    cm = tensorforge.compile(model, (torch.randn(2, 300),), dynamic_shapes=({0: batch},))
    assert gemv.MARKER in cm.source
    with torch.no_grad():
        for b in (1, 2, 3, 4, 5, 17):
            x = rng.standard_normal((b, 300), dtype=np.float32)
            check(cm(x), model(torch.from_numpy(x)).numpy(), 300)


@pytest.mark.parametrize("batch", [1, 3])
def test_nan_and_inf_propagate_like_torch(batch, rng):
    cm, model = _compiled(batch), _model()
    x = rng.standard_normal((batch, 300), dtype=np.float32)
    x[0, 7] = np.nan
    if batch > 1:
        x[1, 11] = np.inf
        x[2, 5], x[2, 99] = np.inf, -np.inf
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    out = cm(x)
    assert np.isnan(out[0]).all()                      # a NaN in x: every output of its row
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(expected))
    np.testing.assert_array_equal(np.signbit(out[np.isinf(out)]), np.signbit(expected[np.isinf(expected)]))
    finite = np.isfinite(expected)
    check(out[finite], expected[finite], 300)


# -- the kernel alone --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _kernel(trans_a: bool, fused: bool) -> GemmKernel:
    spec = GemmSpec(trans_a=trans_a, epilogues=(bias_add(), relu()) if fused else ())
    params = GemmParams.for_target(HOST, threads=1, mr=12 if VW == 8 else 6, nr=2 * VW)
    return GemmKernel(params, spec=spec, name=f"t_gemv_{int(trans_a)}{int(fused)}")


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_kernel_rows_edges_and_k(trans_a, fused, rng):
    k = _kernel(trans_a, fused)
    assert gemv.MARKER in k.source
    for M in range(1, gemv.GEMV_MAX_M + 2):
        for N, K in [(1, 1), (2 * VW + 3, 7), (5 * VW, 33), (VW - 1, 0), (70, 130)]:
            A = rng.standard_normal((M, K), dtype=np.float32)
            B = rng.standard_normal((K, N), dtype=np.float32)
            bias = rng.standard_normal(N, dtype=np.float32)
            a = np.ascontiguousarray(A.T) if trans_a else A
            extra = {"bias": bias} if fused else {}
            expected = A.astype(np.float64) @ B
            if fused:
                expected = np.maximum(expected + bias, 0)
            check(k.prepacked(a, k.pack_b(B), N, **extra), expected, K)
            if not fused:   # accumulate: C += A @ B
                C0 = rng.standard_normal((M, N), dtype=np.float32)
                check(k.prepacked(a, k.pack_b(B), N, C=C0.copy(), accumulate=True), expected + C0, K)


def test_disabled_by_environment(monkeypatch):
    params = GemmParams.for_target(HOST, threads=1)
    assert gemv.MARKER in generate_gemm(params, HOST, GemmSpec(callback=True), name="g")
    monkeypatch.setenv("TENSORFORGE_GEMV_MAX_M", "0")
    text = generate_gemm(params, HOST, GemmSpec(callback=True), name="g")
    assert gemv.MARKER not in text and "_gemv(" not in text


_DRIVER = r"""
#include <omp.h>
typedef struct { int level; int team; int calls; } seen_t;
static void note(const void *ctx, float *c, long ldc, long i0, long j0, long rows, long cols) {
  (void)c; (void)ldc; (void)i0; (void)j0; (void)rows; (void)cols;
  seen_t *s = (seen_t *)ctx;
  #pragma omp critical
  { if (omp_get_level() > s->level) s->level = omp_get_level();
    if (omp_get_num_threads() > s->team) s->team = omp_get_num_threads(); s->calls++; }
}
/* The GEMV on its own (outside), or once per thread inside a parallel region of 2 (inside). */
void drive(int inside, long N, long K, const float *A, const float *Bp, float *C, int *out) {
  seen_t s = {0, 0, 0};
  if (inside) {
    #pragma omp parallel num_threads(2)
    G_prepacked(1, N, K, A, K, Bp, C + omp_get_thread_num() * N, N, 0, note, &s);
  } else {
    G_prepacked(1, N, K, A, K, Bp, C, N, 0, note, &s);
  }
  out[0] = s.level; out[1] = s.team; out[2] = s.calls; out[3] = omp_get_max_threads();
}
"""


def test_threads_split_a_large_b_and_never_nest(rng):
    params = GemmParams.for_target(HOST, threads=1, mr=12 if VW == 8 else 6, nr=2 * VW)
    lib = compile_c(generate_gemm(params, HOST, GemmSpec(callback=True), name="G") + _DRIVER, name="t_gemv_nest")
    drive = lib.lib.drive
    drive.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long] + [ctypes.c_void_p] * 4
    K, N = 512, 1024          # 2 MB of B: above GEMV_PARALLEL_MIN_BYTES
    assert K * N * 4 >= gemv.GEMV_PARALLEL_MIN_BYTES
    A = rng.standard_normal((1, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    from tensorforge.codegen.c.microkernels import pack_b
    Bp = pack_b(B, params.nr)
    expected = A.astype(np.float64) @ B
    # outside: two serial calls (warm-up, then the serial speed the threaded calls must beat),
    # then a threaded one; inside: every call on its own thread's single-threaded GEMV
    for call, inside in enumerate((0, 0, 0, 1)):
        C = np.zeros((2, N), np.float32)
        seen = np.zeros(4, np.int32)
        drive(inside, N, K, A.ctypes.data, Bp.ctypes.data, C.ctypes.data, seen.ctypes.data)
        level, team, calls, max_threads = seen.tolist()
        panels = -(-N // params.nr)
        assert calls == panels * (2 if inside else 1)      # the epilogue once per panel (and call)
        assert level == (1 if inside or team > 1 else 0)   # at most one parallel level: never nested
        if inside:
            check(C, np.vstack([expected, expected]), K)
        else:
            check(C[:1], expected, K)
            if max_threads >= 2:                           # split between threads on the third call
                assert team == (2 if call == 2 else 1)
