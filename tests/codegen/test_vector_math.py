"""The inline float32 exp/erf of codegen/c/vmath.py, compiled as every model compiles them, against
float64 references (math.erf, math.exp) on dense grids including the tails and the limits."""
import ctypes
import math
import platform
import shutil
import subprocess

import numpy as np
import pytest

from tensorforge.codegen.c.emit_loop import PRELUDE
from tensorforge.codegen.c.toolchain import compile_c
from tensorforge.codegen.target import Target

_APPLY = """
void tf_test_{fn}(const float* restrict x, float* restrict y, long n) {{
  #pragma omp simd
  for (long i = 0; i < n; i++) y[i] = {fn}(x[i]);
}}
"""
F32P = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
FUNCTIONS = ("tf_erff", "tf_expf", "tf_geluf", "tf_sigmoidf")


def _compiled(fast_math: bool):
    lib = compile_c(PRELUDE + "".join(_APPLY.format(fn=f) for f in FUNCTIONS),
                    Target.host().with_fast_math(fast_math), name="vmath_test")

    def run(fn: str, x) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        y = np.empty_like(x)
        lib.function(f"tf_test_{fn}", [F32P, F32P, ctypes.c_long])(x, y, x.size)
        return y
    return run


@pytest.fixture(scope="module")
def apply():
    """The functions as the default (IEEE) build compiles them."""
    return _compiled(fast_math=False)


@pytest.fixture(scope="module")
def apply_fast():
    return _compiled(fast_math=True)


def _ref(f, x: np.ndarray) -> np.ndarray:
    return np.array([f(float(v)) for v in x])


def test_erf_max_abs_error_over_a_dense_range(apply):
    x = np.linspace(-8, 8, 400_001, dtype=np.float32)
    x = np.concatenate([x, np.float32(1e-3) * x])                 # and densely near 0
    err = np.abs(apply("tf_erff", x).astype(np.float64) - _ref(math.erf, x))
    assert err.max() <= 5e-7, f"max abs error {err.max():.2e} at x = {x[err.argmax()]}"


def test_erf_relative_error_near_zero(apply):
    x = np.geomspace(1e-30, 0.5, 20_001).astype(np.float32)
    got = apply("tf_erff", x).astype(np.float64)
    rel = np.abs(got / _ref(math.erf, x) - 1)
    assert rel.max() <= 5e-7


def test_erf_limits_and_symmetry(apply):
    x = np.array([0.0, 3.92, 4.0, 10.0, 1e30, np.inf], np.float32)
    pos, neg = apply("tf_erff", x), apply("tf_erff", -x)
    np.testing.assert_array_equal(pos, -neg)                           # odd, exactly
    assert pos[0] == 0.0
    np.testing.assert_array_equal(pos[2:], 1.0)                        # saturates at exactly 1
    grid = apply("tf_erff", np.linspace(-6, 6, 100_001, dtype=np.float32))
    assert np.abs(grid).max() <= 1.0


def test_gelu_error_relative_to_max_1_x(apply):
    """tf_geluf is the erf rational with the GELU's scalings folded in: as accurate as
    0.5 x (1 + erf(x / sqrt 2)) evaluated with tf_erff, relative to max(1, |x|)."""
    x = np.concatenate([np.linspace(-12, 12, 400_001), [-1e30, -100, 100, 1e30]]).astype(np.float32)
    xd = x.astype(np.float64)
    want = 0.5 * xd * (1 + _ref(math.erf, xd / math.sqrt(2)))
    err = np.abs(apply("tf_geluf", x) - want) / np.maximum(1, np.abs(xd))
    assert err.max() <= 5e-7, f"error {err.max():.2e} at x = {x[err.argmax()]}"
    tail = apply("tf_geluf", np.array([-1e30, -100, -10, 10, 100], np.float32))
    np.testing.assert_array_equal(tail, [0, 0, 0, 10, 100])            # exact where erf saturates


def test_exp_relative_error_over_the_float_range(apply):
    x = np.linspace(-87, 88.7, 600_001, dtype=np.float32)
    x = np.concatenate([x, np.linspace(-1, 1, 200_001, dtype=np.float32)])
    ref = np.exp(x.astype(np.float64))
    rel = np.abs(apply("tf_expf", x).astype(np.float64) / ref - 1)
    assert rel.max() <= 4e-7, f"max relative error {rel.max():.2e} at x = {x[rel.argmax()]}"


def test_exp_limits(apply):
    x = np.array([-np.inf, -1e30, -200, -104.0, 0.0, 1.0, 89.0, 200, 1e30, np.inf], np.float32)
    y = apply("tf_expf", x)
    np.testing.assert_array_equal(y[:4], 0.0)                          # exp(-inf) = 0: masked softmax
    assert y[4] == 1.0 and abs(y[5] - math.e) <= 3e-7 * math.e
    np.testing.assert_array_equal(y[6:], np.inf)                        # overflows as libm's expf
    assert np.all(apply("tf_expf", np.linspace(-87, 0, 10_001, dtype=np.float32)) > 0)


def test_exp_gives_denormals_below_the_normal_range(apply):
    """exp(-88) .. exp(-103.9) are float32 denormals, not 0 (softplus(-100) = exp(-100) = 3.7e-44,
    whose log is -99.98, not -inf; fuzzer seed 8181): within one denormal step plus the relative
    error of the normal range."""
    x = np.linspace(-103.9, -87.0, 200_001, dtype=np.float32)
    ref = np.exp(x.astype(np.float64))
    y = apply("tf_expf", x).astype(np.float64)
    err = np.abs(y - ref)
    assert np.all(err <= 2.0 ** -149 + 4e-7 * ref), f"error {err.max():.2e} at x = {x[err.argmax()]}"
    assert np.all(y[x >= -103.0] > 0)


def test_exp_saturates_under_fast_math(apply_fast):
    """-ffast-math's reciprocal makes 1 / inf NaN, so there exp stops just under FLT_MAX (vmath.py)."""
    y = apply_fast("tf_expf", np.array([89.0, 200, 1e30, np.inf, -np.inf, 0.0], np.float32))
    assert np.all(np.isfinite(y[:4])) and np.all(y[:4] >= 3.39e38)
    assert y[4] == 0.0 and y[5] == 1.0


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_nan_in_nan_out(apply, fn):
    x = np.array([np.nan, -np.nan, 1.0, np.nan] * 4, np.float32)       # vector lanes and the tail
    y = apply(fn, x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(x))


def test_special_values_follow_the_references(apply):
    x = np.array([np.inf, -np.inf, -0.0, 0.0], np.float32)
    np.testing.assert_array_equal(apply("tf_erff", x), [1, -1, -0.0, 0])
    assert np.signbit(apply("tf_erff", x)[2])                          # erf(-0) = -0
    np.testing.assert_array_equal(apply("tf_expf", x), [np.inf, 0, 1, 1])
    g = apply("tf_geluf", x)                                           # torch: gelu(inf) = inf, gelu(-inf) = nan
    assert g[0] == np.inf and np.isnan(g[1]) and g[2] == 0 and g[3] == 0


def _ulps(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.abs(y.astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("fast", [False, True])
def test_sigmoid_within_3_ulps_and_its_limits(apply, apply_fast, fast):
    """tf_sigmoidf (exp(-|x|) with no overflow path) against float64 over the float range (torch's
    own is within 2.4 ulps); denormal results stay denormals; limits and signed zeros as torch.
    With -ffast-math gcc divides by a reciprocal estimate and one Newton step: 2.4 ulps at most on
    Zen 4, 3.28 on a Sapphire Rapids-class Xeon (its vrcp14ps rounds differently), hence 3.5, and
    denormal results within 3 of their last bits there (1.5 measured) instead of 1, and sigmoid(0)
    and sigmoid(inf) an ulp below 0.5 and 1 there."""
    run = apply_fast if fast else apply
    x = np.concatenate([np.linspace(-104, 104, 400_001), np.geomspace(1e-30, 20, 20_001)]).astype(np.float32)
    x = np.concatenate([x, -x])
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    y = run("tf_sigmoidf", x)
    normal = ref > 1.2e-38
    assert _ulps(y[normal], ref[normal]).max() <= (3.5 if fast else 3.0)
    assert np.abs(y[~normal] - ref[~normal]).max() <= (4.3e-45 if fast else 1.5e-45)   # a denormal's last bit(s)
    special = run("tf_sigmoidf", np.array([np.inf, -np.inf, 0.0, -0.0, -100.0, 17.0], np.float32))
    if fast:        # the reciprocal estimate may end an ulp short: 1 / (1 + 1) = 0.49999997 there
        np.testing.assert_allclose(special[:4], [1, 0, 0.5, 0.5], rtol=2.0**-23, atol=0)
    else:
        np.testing.assert_array_equal(special[:4], [1, 0, 0.5, 0.5])
    assert 3.7e-44 < special[4] < 3.9e-44 and special[5] == 1.0


def test_gelu_and_sigmoid_through_the_compiler():
    import tensorforge
    from tensorforge.ir import Module, tensor
    x = np.concatenate([np.linspace(-12, 12, 4093), [-100, 0, 100]]).astype(np.float32).reshape(1, -1)
    m = Module()
    f = m.add_function("main", [tensor(x.shape)])
    g = f.builder().graph
    f.set_return([g.gelu(f.args[0]), g.sigmoid(f.args[0])])
    gelu, sig = tensorforge.compile(m, passes=False)(x)
    xd = x.astype(np.float64).ravel()
    want_gelu = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in xd])
    np.testing.assert_allclose(gelu.ravel(), want_gelu, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sig.ravel(), 1 / (1 + np.exp(-xd)), rtol=1e-6, atol=1e-7)


def test_tanh_gelu_is_x_times_the_inline_sigmoid_of_2u():
    """GPT-2's GELU, 0.5 x (1 + tanh(u)), emitted as x * sigmoid(2u): within 3e-7 of float64 scaled by
    max(1, |x|) (no cancellation in the negative tail), and the same special values as torch's float32
    formula (+inf, NaN for -inf and NaN, -0.0 for large negative x)."""
    import tensorforge
    from tensorforge.ir import Module, tensor
    x = np.concatenate([np.linspace(-30, 30, 60001), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e20, -1e20, -3e38, 1e-40]])
    x = x.astype(np.float32).reshape(1, -1)
    m = Module()
    f = m.add_function("main", [tensor(x.shape)])
    f.set_return([f.builder().graph.gelu(f.args[0], approximate="tanh")])
    cm = tensorforge.compile(m, passes=False)
    assert "tf_sigmoidf" in cm.native.source
    got = cm(x).ravel()
    xd = x.astype(np.float64).ravel()
    with np.errstate(all="ignore"):
        want = 0.5 * xd * (1 + np.tanh(0.7978845608028654 * (xd + 0.044715 * xd ** 3)))
    fin = np.isfinite(xd)
    assert (np.abs(got[fin] - want[fin]) / np.maximum(1, np.abs(xd[fin]))).max() < 3e-7
    np.testing.assert_array_equal(got[~fin], [np.inf, np.nan, np.nan])
    assert got[-3] == 0 and np.signbit(got[-3]) and got[-2] == 0 and np.signbit(got[-2])
    assert 4e-41 < got[-1] < 6e-41 and got[-4] == np.float32(1e20)


# gcc's inliner declining every optional inlining, as it does once a file has used up its growth
# budget (a whole model's kernels inlined into tf_run): a helper not forced inline is then called
# out of line, one lane at a time (``-fno-inline`` keeps only the always_inline ones)
INLINER_DECLINES = ("-fno-inline",)


@pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() not in ("x86_64", "AMD64")
                    or "avx2" not in Target.host().features, reason="checks gcc's x86 vectorizer report")
@pytest.mark.parametrize("inliner", [(), INLINER_DECLINES], ids=["default", "inliner_declines"])
def test_loops_calling_them_vectorize_without_calls(tmp_path, inliner):
    src = tmp_path / "v.c"
    src.write_text(PRELUDE + "".join(_APPLY.format(fn=f) for f in FUNCTIONS))
    flags = [f for f in Target.host().cflags if f != "-shared"]
    out = subprocess.run(["gcc", *flags, *inliner, "-march=native", "-fopt-info-vec-optimized", "-c", str(src),
                          "-o", str(tmp_path / "v.o")], capture_output=True, text=True, check=True)
    loops = [i + 1 for i, line in enumerate(src.read_text().splitlines()) if line.startswith("  for (long i")]
    for line in loops:
        assert f"v.c:{line}:" in out.stderr and "loop vectorized" in out.stderr, out.stderr
    syms = subprocess.run(["nm", "-u", str(tmp_path / "v.o")], capture_output=True, text=True).stdout
    assert "erff" not in syms and "expf" not in syms, syms
    defined = subprocess.run(["nm", str(tmp_path / "v.o")], capture_output=True, text=True).stdout
    assert not any(line.split()[-1] in FUNCTIONS for line in defined.splitlines()), defined


def test_libm_math_switches_the_emitter_back_to_the_c_library():
    from tensorforge.codegen.c.emit_loop import _gelu, _math_fn
    from tensorforge.codegen.c.vmath import libm_math
    from tensorforge.ir.types import DType
    from tensorforge.codegen.c.emit_loop import _sigmoid
    assert _math_fn("exp", "x", DType.f32) == "tf_expf(x)"
    assert _math_fn("exp", "x", DType.f64) == "exp(x)"           # double keeps libm
    assert _sigmoid("x", DType.f32) == "tf_sigmoidf(x)"
    assert _sigmoid("x", DType.f64) == "(1.0 / (1.0 + exp(-x)))"
    with libm_math():
        assert _sigmoid("x", DType.f32) == "(1.0f / (1.0f + expf(-x)))"
        assert _math_fn("exp", "x", DType.f32) == "expf(x)"
        assert _math_fn("erf", "x", DType.f32) == "erff(x)"
        assert "erff(x * 0.7071067811865476f)" in _gelu(["x"], DType.f32, {})
    assert _math_fn("erf", "x", DType.f32) == "tf_erff(x)"
    assert _gelu(["x"], DType.f32, {}) == "tf_geluf(x)"
    assert "erf(x * 0.7071067811865476)" in _gelu(["x"], DType.f64, {})


def test_the_fits_reach_the_shipped_accuracy():
    """The fits in vmath.py reach the documented float64 errors, and so do the shipped coefficients
    (a rational's coefficients are not unique enough to compare one by one; the exp polynomial's are)."""
    from tensorforge.codegen.c import vmath
    x = np.linspace(1e-4, vmath.ERF_CLAMP, 4001)
    ref = np.array([math.erf(t) for t in x])
    err, _, _ = vmath.fit_rational(lambda v: ref / v, x, 6, 4, iters=40)
    assert err < 1e-7
    t = x * x
    shipped = x * np.polyval(vmath.ERF_P[::-1], t) / np.polyval(vmath.ERF_Q[::-1], t)
    assert np.abs(shipped - ref).max() < 1e-7
    err, e = vmath.fit_exp(-math.log(2) / 2, math.log(2), 5, iters=30, points=4001)
    assert err < 2e-9
    np.testing.assert_allclose(e, vmath.EXP_E, rtol=1e-4)
