"""JAX functions through the StableHLO importer, op family by op family, against jax.jit on
the CPU (XLA) within 1e-5 (float32), NaN and Inf included."""
import numpy as np
import pytest

import tensorforge

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(fn, *args, target="cpu", rtol=1e-5, atol=1e-5):
    cm = tensorforge.compile(fn, args, target=target)
    ref = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    out = jax.tree_util.tree_leaves(cm(*args))
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        r = np.asarray(r)
        assert o.shape == r.shape and o.dtype == r.dtype, (o.shape, r.shape, o.dtype, r.dtype)
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol, equal_nan=True)
    return cm


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.25, 80.0], np.float32)


def test_elementwise_with_nan_and_inf():
    def f(x, y):
        return (jnp.maximum(x, y), jnp.minimum(x, y), jax.nn.relu(x), jnp.exp(x), jnp.tanh(x), x / y,
                jnp.abs(x), jnp.sign(x), jnp.floor(x), jnp.round(x), jax.nn.sigmoid(x), x ** 2, jnp.clip(x, -1.0, 1.0),
                jnp.where(x > y, x, y), jnp.isfinite(x), jnp.log1p(jnp.abs(x)), jnp.expm1(x / 100), jnp.cbrt(x),
                jax.scipy.special.erf(x), jnp.fmod(x, 1.25))
    y = np.roll(SPECIAL, 3)
    check(f, SPECIAL, y, rtol=2e-5, atol=2e-6)


def test_integer_and_boolean_ops():
    def f(a, b):
        return a // b, a % b, lax.rem(a, b), a & b, a | b, a ^ b, ~a, (a > b) & (a != 0), jnp.logical_not(a > 2)
    a = np.array([7, -7, 3, 0, 12, -1], np.int32)
    b = np.array([2, 2, -4, 5, 5, 3], np.int32)
    check(f, a, b)


@pytest.mark.parametrize("spec", ["ij,jk->ik", "bij,bjk->bik", "bqhd,bkhd->bhqk", "i,i->", "ijk,kl->ijl", "ij,j->i"])
def test_dot_general_dimension_numbers(spec):
    shapes = {"i": 3, "j": 4, "k": 5, "l": 2, "b": 2, "q": 3, "h": 2, "d": 4}
    lhs, rhs = spec.split("->")[0].split(",")
    check(lambda a, b: jnp.einsum(spec, a, b), rand(*[shapes[c] for c in lhs]), rand(*[shapes[c] for c in rhs]))


@pytest.mark.parametrize("layout, stride, padding, dilation, groups", [
    (("NCHW", "OIHW", "NCHW"), (1, 1), "SAME", (1, 1), 1),
    (("NHWC", "HWIO", "NHWC"), (2, 2), "VALID", (1, 1), 1),
    (("NHWC", "HWIO", "NCHW"), (2, 1), ((1, 2), (0, 1)), (1, 1), 1),
    (("NCHW", "OIHW", "NCHW"), (1, 1), "SAME", (2, 2), 1),
    (("NHWC", "HWIO", "NHWC"), (1, 1), "SAME", (1, 1), 4),
])
def test_convolution_dimension_numbers(layout, stride, padding, dilation, groups):
    cin, cout = 4, 8
    x = rand(2, cin, 9, 9) if layout[0] == "NCHW" else rand(2, 9, 9, cin)
    w = rand(cout, cin // groups, 3, 3) if layout[1] == "OIHW" else rand(3, 3, cin // groups, cout)

    def f(x, w):
        return lax.conv_general_dilated(x, w, stride, padding, rhs_dilation=dilation, dimension_numbers=layout,
                                        feature_group_count=groups)
    check(f, x, w, rtol=1e-4, atol=1e-4)


def test_conv_1d():
    check(lambda x, w: lax.conv_general_dilated(x, w, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")),
          rand(2, 16, 3), rand(5, 3, 6), rtol=1e-4, atol=1e-4)


def test_reductions_and_arg_reductions():
    def f(x):
        return (x.sum(axis=1), x.max(axis=(0, 2)), x.min(axis=-1), x.prod(axis=2), x.mean(), jnp.argmax(x, axis=1),
                jnp.argmin(x, axis=-1), jnp.any(x > 1.0, axis=0), jnp.all(x > -3.0, axis=2), jax.nn.logsumexp(x, axis=1))
    check(f, rand(3, 5, 4), rtol=1e-5, atol=1e-5)


def test_reduce_with_a_start_value():
    check(lambda x: lax.reduce(x, np.float32(2.5), lax.add, (1,)), rand(3, 4))
    check(lambda x: lax.reduce(x, np.float32(0.25), lax.max, (0,)), rand(3, 4))


@pytest.mark.parametrize("window, strides, padding", [
    ((1, 1, 3, 3), (1, 1, 2, 2), "SAME"), ((1, 2, 2, 1), (1, 2, 2, 1), "VALID"), ((3,), (1,), ((1, 1),)),
])
def test_reduce_window_max_and_sum(window, strides, padding):
    shape = {4: (2, 3, 8, 8), 1: (10,)}[len(window)]
    x = rand(*shape)
    check(lambda x: lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding), x)
    check(lambda x: lax.reduce_window(x, 0.0, lax.add, window, strides, padding), x, rtol=1e-5, atol=1e-5)


def test_shape_ops():
    def f(x, y):
        return (x.T, x.reshape(4, 6), jnp.concatenate([x, y], axis=0), x[1:, ::2], jnp.pad(x, ((1, 0), (2, 3))),
                jnp.flip(x, axis=1), jnp.broadcast_to(x[:, :1], (4, 6)), jnp.arange(6, dtype=jnp.float32) * x,
                x.astype(jnp.int32), jnp.expand_dims(x, 0).transpose(2, 0, 1), jnp.tile(x[0], (2, 1)))
    check(f, rand(4, 6), rand(2, 6))


def test_gather_scatter_and_dynamic_slices_clamp_like_xla():
    def f(tab, ids, x, i):
        return (tab[ids], jnp.take(x, ids, axis=1), x[i], x.at[ids].add(1.0), x.at[ids[:2]].set(-5.0),
                lax.dynamic_slice(x, (i, 2), (2, 3)), lax.dynamic_update_slice(x, jnp.ones((2, 3)), (i, 1)),
                x[ids[:2], ids[1:]], jnp.take_along_axis(x, jnp.argsort(x, axis=1)[:, :3], axis=1),
                jnp.take_along_axis(x, jnp.clip(jnp.argsort(x, axis=0)[:3] + i, 0, 7), axis=0))
    args = (rand(10, 4), np.array([1, 2, 7], np.int32), rand(8, 8))
    cm = tensorforge.compile(f, args + (np.int32(0),))
    for i in (0, 5, 7, -1, 100):           # out-of-range offsets are clamped, as XLA does
        call = args + (np.int32(i),)
        for o, r in zip(cm(*call), jax.jit(f)(*call)):
            np.testing.assert_array_equal(o, np.asarray(r))


def test_while_and_case_become_control_flow():
    def f(x, n):
        y = lax.fori_loop(0, 3, lambda i, c: c * 2.0 + i, x)
        z = lax.cond(n > 0, lambda v: v + 1.0, lambda v: v - 1.0, y)
        w = lax.switch(n, [lambda v: v * 3.0, lambda v: v * 4.0, lambda v: -v], z)
        total, steps = lax.while_loop(lambda c: c[0] < 100.0, lambda c: (c[0] * 2.0 + 1.0, c[1] + 1), (x.sum(), 0))
        return w, total, steps
    x = np.arange(3, dtype=np.float32)
    cm = tensorforge.compile(f, (x, np.int32(1)))
    for n in (-2, 0, 1, 2, 7):
        for o, r in zip(cm(x, np.int32(n)), jax.jit(f)(x, np.int32(n))):
            np.testing.assert_allclose(o, np.asarray(r))


def test_pytrees_in_and_jax_arrays_out():
    params = {"w": rand(8, 4), "b": rand(4)}

    def f(p, x):
        return {"y": x @ p["w"] + p["b"], "n": jnp.linalg.norm(x, axis=-1)}
    x = rand(3, 8)
    cm = check(f, params, x, rtol=1e-5, atol=1e-5)
    out = cm(jax.tree_util.tree_map(jnp.asarray, params), jnp.asarray(x))
    assert isinstance(out["y"], jax.Array) and isinstance(out["n"], jax.Array)
    assert isinstance(cm(params, x)["y"], np.ndarray)


def test_jitted_function_keeps_unused_arguments():
    @jax.jit
    def f(x, unused):
        return x * 2.0
    cm = tensorforge.compile(f, (rand(3), rand(5)))
    np.testing.assert_allclose(cm(np.ones(3, np.float32), np.zeros(5, np.float32)), 2.0)


def test_interpreter_agrees():
    check(lambda x: jax.nn.softmax(x, axis=-1) * jax.nn.gelu(x), rand(2, 7), target="interpreter", rtol=1e-5, atol=1e-6)


def test_a_traced_error_is_a_frontend_error():
    from tensorforge.errors import FrontendError

    def f(x):
        if x.sum() > 0:         # Python control flow on a traced value
            return x
        return -x
    with pytest.raises(FrontendError, match="jax could not lower"):
        tensorforge.compile(f, (rand(3),))


def test_transposed_convolution_and_interior_padding():
    x, w = rand(1, 5, 5, 3), rand(3, 3, 3, 4)
    for strides, padding in (((2, 2), "SAME"), ((2, 2), "VALID"), ((3, 1), ((1, 0), (2, 2)))):
        check(lambda x, w: lax.conv_transpose(x, w, strides, padding, dimension_numbers=("NHWC", "HWIO", "NHWC")),
              x, w, rtol=1e-4, atol=1e-4)
    check(lambda x: lax.pad(x, np.float32(-1.0), ((1, 2, 1), (0, -1, 2))), rand(3, 4))


def test_chlo_ops():
    x = np.array([-3.0, -0.5, 0.0, 0.25, 2.0, np.inf, -np.inf, np.nan], np.float32)
    check(lambda x: (jnp.square(x), jnp.isinf(x), jnp.isposinf(x), jnp.isneginf(x), jnp.arcsinh(x)), x,
          rtol=1e-5, atol=1e-6)
    y = np.array([0.1, 0.5, -0.9, 0.0], np.float32)
    check(lambda y: (jnp.arctanh(y), jnp.arccosh(y + 2.0)), y, rtol=1e-5, atol=1e-6)
    check(lambda z: lax.top_k(z, 3), rand(4, 9))


def test_sort_and_argsort():
    x = rand(4, 6)
    x[1, 2] = x[1, 4]                       # a tie: a stable sort keeps the first one first
    check(lambda x: (jnp.sort(x, axis=-1), jnp.sort(x, axis=0), jnp.argsort(x, axis=1), jnp.argsort(-x, axis=0)), x)


def test_upstream_mlir_backend_runs_a_jax_function():
    from tensorforge.codegen.mlir.toolchain import mlir_tools_available
    if not mlir_tools_available():
        pytest.skip("mlir-opt-19 / mlir-translate-19 / llc-19 are not installed")
    w = rand(3, 3, 3, 8)
    check(lambda x: jax.nn.relu(lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))).mean(axis=(1, 2)),
          rand(2, 8, 8, 3), target="mlir", rtol=1e-5, atol=1e-5)
