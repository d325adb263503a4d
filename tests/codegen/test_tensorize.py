"""Tensorization: contractions of compiled models on the GEMM micro-kernels.

Every case compiles through ``tensorforge.compile`` (fusion off, so each graph op is its own
kernel) and checks the native result against the reference interpreter with rtol 1e-4 (atol
1e-4 * sqrt(K) for sums that cancel), and that the contraction really took the micro-kernel
path (``tfg_`` GEMM, ``tf_im2col`` packer in the generated C).  Cases are grouped into few
modules so that the file compiles a handful of libraries (cached on disk afterwards).
Hand-built kernels (a contraction followed by bias, ReLU and a residual add) test the fused
epilogue path, which the fusion engine produces.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c.contraction import match_contraction, plan_conv, plan_gemm
from tensorforge.codegen.c import narrow_conv
from tensorforge.codegen.c.model import generate_model_c
from tensorforge.codegen.c.tensorize import Tensorizer
from tensorforge.dialects.structured.builder import KernelBuilder
from tensorforge.ir import DType, Module, interpret, tensor, verify
from tensorforge.passes.lower.graph_to_kernels import fusion_default, lower_ops

RTOL = 1e-4


def _module(args, build):
    """A module whose main takes ``args`` (arrays; their shapes) and returns ``build(b, *args)``."""
    m = Module()
    f = m.add_function("main", [tensor(a.shape, DType.from_np(a.dtype)) for a in args])
    b = f.builder()
    outs = build(b, *f.args)
    f.set_return(list(outs))
    verify(m)
    return m


def _compile(m, **kw):
    with fusion_default(None):
        return tensorforge.compile(m, passes=False, **kw)


def _check(m, args, k_max=1024):
    """Native vs interpreter on every output; returns the compiled model."""
    cm = _compile(m)
    ref = interpret(m, *args)
    got = cm.run(*args)
    for n, (r, g) in enumerate(zip(ref, got)):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=1e-4 * np.sqrt(k_max), err_msg=f"output {n}")
    return cm


def _kernel_sources(cm):
    """C text of each emitted kernel function, by name."""
    src = cm.source
    out = {}
    for part in src.split("\nstatic void ")[1:]:
        name = part.split("(", 1)[0]
        out[name] = part
    return out


def _rand(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


# ---- GEMM-like -----------------------------------------------------------------------------------


def test_matmuls_gemms_and_batches(rng):
    """2-d (runtime and constant B), batched, broadcast batch (both sides), 1-d promoted, gemm
    with transposes, alpha/beta and bias, attention's q @ k^T and p @ v as batch_matmuls."""
    a = _rand(rng, 37, 70)
    b = _rand(rng, 70, 45)
    w = _rand(rng, 70, 45)
    x3 = _rand(rng, 3, 20, 70)
    w3 = _rand(rng, 3, 70, 45)
    x4 = _rand(rng, 2, 1, 20, 70)
    v = _rand(rng, 70)
    at = _rand(rng, 70, 37)
    bt = _rand(rng, 45, 70)
    c = _rand(rng, 45)
    q = _rand(rng, 4, 24, 16)
    kt = _rand(rng, 4, 16, 24)
    pv = _rand(rng, 4, 24, 16)
    wc = w.copy()

    def build(bd, a_, b_, x3_, w3_, x4_, v_, at_, bt_, q_, kt_, pv_):
        g = bd.graph
        W, C, W3 = g.constant(wc), g.constant(c), g.constant(w3)
        s = bd.create("graph.batch_matmul", [q_, kt_]).results[0]
        return [bd.create("graph.matmul", [a_, b_]).results[0],
                bd.create("graph.matmul", [a_, W]).results[0],
                bd.create("graph.batch_matmul", [x3_, w3_]).results[0],
                bd.create("graph.matmul", [x4_, W3]).results[0],                      # (2,3,20,45)
                bd.create("graph.matmul", [x3_, W]).results[0],                       # batch folded into M
                bd.create("graph.matmul", [v_, b_]).results[0],                       # 1-d promoted: M = 1
                bd.create("graph.gemm", [at_, bt_, C], {"trans_a": True, "trans_b": True,
                                                        "alpha": 0.5, "beta": 2.0}).results[0],
                s,
                bd.create("graph.batch_matmul", [s, pv_]).results[0]]

    args = [a, b, x3, w3, x4, v, at, bt, q, kt, pv]
    m = _module(args, build)
    cm = _check(m, args)
    kernels = _kernel_sources(cm)
    contractions = [k for k in kernels if "matmul" in k or "gemm" in k]
    assert len(contractions) >= 8
    for name in contractions:
        assert "tfg_" in kernels[name], f"{name} was not tensorized"


def test_threads_setting_is_respected_and_results_agree(rng):
    a, w = _rand(rng, 300, 200), _rand(rng, 200, 150)
    m = _module([a], lambda bd, x: [bd.create("graph.matmul", [x, bd.graph.constant(w)]).results[0]])
    cm = _compile(m)
    two = cm.run(a)[0]
    cm.set_threads(1)
    one = cm.run(a)[0]
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(two, a.astype(np.float64) @ w, rtol=RTOL, atol=1e-3)


def test_shared_constant_is_packed_once_and_raw_copy_dropped(rng):
    x, x2, w = _rand(rng, 16, 64), _rand(rng, 24, 64), _rand(rng, 64, 96)

    def build(bd, x_, x2_):
        W = bd.graph.constant(w)
        return [bd.create("graph.matmul", [x_, W]).results[0], bd.create("graph.matmul", [x2_, W]).results[0]]

    m = _module([x, x2], build)
    f = m.clone().main
    lower_ops(f)
    prepared = Tensorizer().prepare(f)
    assert len(prepared.plans) == 2 and len(prepared.weights) == 1
    (const,) = [op for op in f.body if op.name == "graph.constant"]
    assert id(const.results[0]) in prepared.replaced
    _, layout = generate_model_c(f, None, Tensorizer())
    assert layout.weights.nbytes < w.nbytes + prepared.weights[0].nbytes   # the raw constant is not in the blob
    cm = _check(m, [x, x2])
    np.testing.assert_allclose(cm.run(x, x2)[1], x2.astype(np.float64) @ w, rtol=RTOL, atol=1e-3)


def test_constant_a_is_packed_at_compile_time(rng):
    """A 1x1 convolution's weights are the GEMM's A (output channels are M): they are packed into
    mr-row panels once, at compile time (``pack_a``), for every M (a partial last panel, and M no
    bigger than the GEMV path's rows, which reads A unpacked and so is off here) and batch size;
    im2col convolutions read their weights from such panels too."""
    from tensorforge.codegen.c.microkernels import pack_a
    cases = [((2, 24, 20, 20), (13, 24, 1, 1), {}), ((1, 40, 20, 20), (3, 40, 1, 1), {}),
             ((1, 8, 17, 17), (20, 8, 3, 3), {"strides": (2, 2), "pads": (1, 1, 1, 1)})]
    xs = [_rand(rng, *x) for x, _, _ in cases]
    ws = [_rand(rng, *w) for _, w, _ in cases]

    def build(bd, *args):
        return [bd.create("graph.conv", [x_, bd.graph.constant(w)], attrs).results[0]
                for x_, w, (_, _, attrs) in zip(args, ws, cases)]

    m = _module(xs, build)
    f = m.clone().main
    lower_ops(f)
    prepared = Tensorizer().prepare(f)
    assert len(prepared.plans) == 3 and len(prepared.weights) == 3
    for plan, w, packed in zip(prepared.plans.values(), ws, prepared.weights):
        mr = packed.shape[2]
        assert packed.shape == (-(-w.shape[0] // mr), int(np.prod(w.shape[1:])), mr)
        np.testing.assert_array_equal(packed, pack_a(w.reshape(w.shape[0], -1), mr))
    assert len(prepared.replaced) == 3          # no raw copy of the weights in the blob
    cm = _check(m, xs)
    assert cm.source.count("a_packed=True") >= 2


def test_pack_a_layout():
    a = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    from tensorforge.codegen.c.microkernels import pack_a
    p = pack_a(a[:, ::1], 3)
    assert p.shape == (3, 5, 3) and p.ctypes.data % 64 == 0
    for i in range(7):
        np.testing.assert_array_equal(p[i // 3, :, i % 3], a[i])
    assert not p[2, :, 1:].any()                 # rows past M are zeros
    np.testing.assert_array_equal(pack_a(a.T.T[:, :], 7)[0].T, a)


def test_small_or_vector_contractions_stay_on_the_loop_path(rng):
    a, b = _rand(rng, 64, 32), _rand(rng, 32, 1)          # GEMV: N = 1
    m = _module([a, b], lambda bd, x, y: [bd.create("graph.matmul", [x, y]).results[0]])
    cm = _check(m, [a, b])
    assert "tfg_" not in cm.source


# ---- convolutions ----------------------------------------------------------------------------------

CONVS = [  # (x shape, w shape, attrs)
    ((2, 8, 15, 15), (16, 8, 3, 3), dict(pads=(1, 1, 1, 1))),
    ((2, 8, 15, 15), (16, 8, 3, 3), dict(strides=(2, 2), pads=(1, 0, 2, 1))),
    ((2, 8, 15, 15), (16, 8, 1, 1), dict()),                                # 1x1: a plain GEMM on x
    ((1, 16, 15, 15), (16, 16, 1, 1), dict(strides=(2, 2))),                # strided 1x1: implicit GEMM
    ((1, 3, 32, 32), (16, 3, 7, 7), dict(strides=(2, 2), pads=(3, 3, 3, 3))),
    ((2, 8, 15, 15), (16, 4, 3, 3), dict(groups=2, dilations=(2, 2), pads=(2, 2, 2, 2))),
    ((1, 16, 9, 9), (32, 4, 3, 3), dict(groups=4, pads=(1, 1, 1, 1))),
    ((2, 8, 64), (16, 8, 5), dict(strides=(2,), pads=(2, 1))),             # 1-d
]


def test_convolutions_through_compile(rng):
    xs = [_rand(rng, *xs) for xs, _, _ in CONVS]
    ws = [_rand(rng, *w) for _, w, _ in CONVS]
    bias = [_rand(rng, w[0]) for _, w, _ in CONVS]

    def build(bd, *args):
        outs = []
        for n, (x_, (_, _, attrs)) in enumerate(zip(args, CONVS)):
            ops = [x_, bd.graph.constant(ws[n])] + ([bd.graph.constant(bias[n])] if n % 2 == 0 else [])
            outs.append(bd.create("graph.conv", ops, attrs).results[0])
        return outs

    m = _module(xs, build)
    cm = _check(m, xs)
    kernels = [v for k, v in _kernel_sources(cm).items() if "conv" in k]
    assert len(kernels) == len(CONVS)
    wino = [k for k in kernels if "A^T M A" in k]        # 3x3 stride 1, no groups: winograd.py
    narrow = [k for k in kernels if narrow_conv.MARKER in k]    # 3 input channels: narrow_conv.py
    assert len(wino) == 1 and len(narrow) == 1 and all("tfg_" in k or "tfd_" in k for k in kernels if k not in narrow)
    # the strided 3x3 (K 72) and 1x1 (K 16) take the direct kernel's polyphase split (direct_conv.py)
    assert sum("_unit(&shape, toff" in k for k in kernels) == 2
    assert sum("tf_im2col(&" in k for k in kernels) == len(CONVS) - 5      # all but the 1x1, Winograd, narrow and direct
    # compile time: convolutions share GEMM translation units (one per tiling and thread count),
    # and the im2col routine (guarded: compiled once), instead of one specialised copy per shape
    from tensorforge.codegen.c.toolchain import split_units
    main, units = split_units(cm.source)
    assert len(units) <= 6 < len(CONVS) and all("_prepacked(" in u or "_unit(" in u for u in units)


def test_depthwise_conv_stays_off_the_gemm_path(rng):
    """Depthwise convolutions run on their own kernel (``depthwise.py``, tests/codegen/test_depthwise.py)."""
    x, w = _rand(rng, 1, 16, 12, 12), _rand(rng, 16, 1, 3, 3)
    m = _module([x], lambda bd, x_: [bd.create("graph.conv", [x_, bd.graph.constant(w)],
                                                {"groups": 16, "pads": (1, 1, 1, 1)}).results[0]])
    cm = _check(m, [x])
    assert "tfg_" not in cm.source and "tf_im2col(&shape" not in cm.source
    assert "depthwise direct kernel (depthwise.py)" in cm.source


# ---- fused epilogues (hand-built kernels, as the fusion engine makes them) ----------------------


def _epilogue_kernel_module(shape_x, shape_w, contraction, bias_index, relu_clip: float, clip_last: bool = False):
    """main(x, residual) = min(relu(contraction(x, W) + bias[bias_index]), clip) + residual, as ONE kernel;
    ``clip_last``: clip(contraction(x, W) + bias[bias_index] + residual, 0, clip) instead."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal(shape_w, dtype=np.float32)
    m = Module()
    x_t = tensor(shape_x, DType.f32)
    f = None
    out_shape, domain, its, body = contraction
    bias = rng.standard_normal(out_shape[bias_index], dtype=np.float32)
    res_t = tensor(out_shape, DType.f32)
    f = m.add_function("main", [x_t, res_t])
    b = f.builder()
    W, B = b.graph.constant(w), b.graph.constant(bias)
    kb = KernelBuilder("fused_contraction", [x_t, W.type, B.type, res_t])
    xr, wr, br, rr = kb.inputs
    acc = kb.compute(domain, its, DType.f32, lambda *ax: body(xr, wr, *ax), combiner="add")
    e1 = kb.compute(out_shape, "p" * len(out_shape), DType.f32, lambda *i: acc[i] + br[i[bias_index]])
    if clip_last:
        e2 = kb.compute(out_shape, "p" * len(out_shape), DType.f32, lambda *i: e1[i] + rr[i])
        e3 = kb.compute(out_shape, "p" * len(out_shape), DType.f32,
                        lambda *i: e2[i].apply("clip", min=0.0, max=relu_clip))
    else:
        e2 = kb.compute(out_shape, "p" * len(out_shape), DType.f32,
                        lambda *i: e1[i].apply("relu").min(kb.const(relu_clip, DType.f32)))
        e3 = kb.compute(out_shape, "p" * len(out_shape), DType.f32, lambda *i: e2[i] + rr[i])
    op = kb.ret([e3], [f.args[0], W, B, f.args[1]])
    b.insert(op)
    f.set_return([op.results[0]])
    verify(m)
    return m, w, bias


def test_gemm_epilogue_bias_relu_residual():
    M, K, N = 50, 70, 100
    contraction = ((M, N), (M, N, K), "ppr", lambda x, w, i, j, k: x[i, k] * w[k, j])
    m, w, bias = _epilogue_kernel_module((M, K), (K, N), contraction, 1, 1.5)
    rng = np.random.default_rng(2)
    x, res = _rand(rng, M, K), _rand(rng, M, N)
    cm = _compile(m)
    assert "tfg_" in cm.source and "tfe_" in cm.source
    want = np.minimum(np.maximum(x.astype(np.float64) @ w + bias, 0), 1.5) + res
    np.testing.assert_allclose(cm.run(x, res)[0], want, rtol=RTOL, atol=1e-3)


@pytest.mark.parametrize("x_shape, O", [((2, 24, 20, 20), 40), ((1, 16, 9, 9), 13)])
def test_pointwise_conv_epilogue_in_registers(rng, x_shape, O):
    """A 1x1 convolution's bias, residual and clip, in that order (MobileNet's and ResNet's chains),
    go to the GEMM as a ``tf_epi_regs`` (``TF_EPI_REGS``: applied to the accumulators before the one
    store) instead of a callback; NaN and Inf propagate as in the loop arithmetic.  A chain of
    another shape (ReLU, then a min) keeps its callback (test_gemm_epilogue_bias_relu_residual)."""
    C, out = x_shape[1], (x_shape[0], O) + x_shape[2:]

    def body(x, w, n, o, h, w_, c):
        return x[n, c, h, w_] * w[o, c, 0, 0]

    m, w, bias = _epilogue_kernel_module(x_shape, (O, C, 1, 1), (out, out + (C,), "ppppr", body), 1, 6.0,
                                         clip_last=True)
    x, res = _rand(rng, *x_shape), _rand(rng, *out)
    x[0, :, 1, 2] = np.nan
    res[0, 0, 3, :] = np.inf
    res[0, 1, 3, :] = -np.inf
    cm = _compile(m)
    assert "TF_EPI_REGS, &ectx" in cm.source and "tfe_" not in cm.source
    conv = np.einsum("nchw,oc->nohw", x.astype(np.float64), w.reshape(O, C).astype(np.float64))
    want = np.clip(conv + bias[None, :, None, None] + res, 0, 6.0)
    got = cm.run(x, res)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, :, 1, 2]).all() and (got[0, 0, 3, 3:] == 6.0).all() and (got[0, 1, 3, 3:] == 0.0).all()
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-3)


def test_conv_epilogue_bias_relu_residual():
    N, C, H, O = 2, 6, 11, 8
    x_shape, w_shape, out = (N, C, H, H), (O, C, 3, 3), (N, O, H, H)

    def body(x, w, n, o, oh, ow, c, kh, kw):
        return x.read([n, c, oh + kh - 1, ow + kw - 1], pad=0.0) * w[o, c, kh, kw]

    contraction = (out, out + (C, 3, 3), "pppprrr", body)
    m, w, bias = _epilogue_kernel_module(x_shape, w_shape, contraction, 1, 2.0)
    rng = np.random.default_rng(3)
    x, res = _rand(rng, *x_shape), _rand(rng, *out)
    cm = _compile(m)
    assert "A^T M A" in cm.source and "tfe_" in cm.source      # 3x3 stride 1: Winograd (test_conv_algorithms.py)
    import torch
    conv = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=1).numpy()
    want = np.minimum(np.maximum(conv + bias[None, :, None, None], 0), 2.0) + res
    np.testing.assert_allclose(cm.run(x, res)[0], want, rtol=RTOL, atol=1e-3)


# ---- analysis ------------------------------------------------------------------------------------


def _kernel_of(name, inputs, const=(), **attrs):
    from tests.lowering.harness import one_op_module
    from tensorforge.passes.lower.to_structured import lower_op_to_kernel
    _, op, _ = one_op_module(name, inputs, const, **attrs)
    return lower_op_to_kernel(op)


def _contraction(kernel):
    body = kernel.regions[0].blocks[0]
    comp = next(o for o in body if o.name == "structured.compute")
    return match_contraction(comp, body.args)


def test_analysis_classifies_axes():
    z = np.zeros
    c = _contraction(_kernel_of("graph.matmul", [z((2, 5, 7, 3), np.float32), z((3, 9), np.float32)]))
    p = plan_gemm(c)
    assert (p.roles.M, p.roles.N, p.roles.K, p.roles.batch_count) == (70, 9, 3, 1)   # batch folded into M
    c = _contraction(_kernel_of("graph.gemm", [z((4, 6), np.float32), z((8, 4), np.float32)],
                                trans_a=True, trans_b=True))
    p = plan_gemm(c)
    assert (p.roles.M, p.roles.N, p.roles.K) == (6, 8, 4) and (p.a.rs, p.a.cs, p.b.rs, p.b.cs) == (1, 6, 1, 4)
    c = _contraction(_kernel_of("graph.conv", [z((2, 8, 9, 9), np.float32), z((6, 4, 3, 3), np.float32)],
                                groups=2, strides=(2, 2)))
    assert plan_gemm(c) is None
    p = plan_conv(c)
    assert [a.extent for a in p.roles.batch] == [2, 2] and (p.roles.M, p.roles.N, p.roles.K) == (3, 16, 36)
    assert p.strides == (2, 2) and p.channels == 4
    softmax = _kernel_of("graph.reduce_sum", [z((4, 5), np.float32)], axes=(1,))
    assert _contraction(softmax) is None


def test_compiled_libraries_leave_denormals_alone(tmp_path):
    """gcc links crtfastmath.o (FTZ/DAZ for the whole process) when -ffast-math is on the link
    command; the toolchain links without it. Checked in a fresh process with a fresh cache."""
    code = textwrap.dedent("""
        import numpy as np
        import tensorforge
        from tensorforge.codegen.c.toolchain import compile_c
        from tensorforge.ir import DType, Module, tensor
        assert np.array([1e-310])[0] * 1.0 != 0.0
        lib = compile_c("float tf_twice(float x) { return x * 2.0f; }\\n", name="denormal_probe")
        assert np.array([1e-310])[0] * 1.0 != 0.0, "loading a library flushed denormals"
        m = Module()
        f = m.add_function("main", [tensor((16, 16), DType.f32)])
        b = f.builder()
        f.set_return([b.create("graph.matmul", [f.args[0], f.args[0]]).results[0]])
        cm = tensorforge.compile(m, passes=False)
        cm.run(np.ones((16, 16), np.float32))
        tiny = np.float32(1e-40)
        assert tiny * np.float32(1.0) != 0 and np.array([1e-310])[0] * 1.0 != 0.0
        print("denormals ok")
    """)
    env = dict(os.environ, TENSORFORGE_CACHE=str(tmp_path / "cache"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root,
                          timeout=300)
    assert proc.returncode == 0 and "denormals ok" in proc.stdout, proc.stderr[-2000:]


def test_reads_through_a_fused_reshape_stay_affine():
    """A matmul whose A is read through a reshape, as fusion produces it: a[(i*K + k) // 4, (i*K + k) % 4]
    splits k into (k // 4, k % 4) and is still one strided K; a[(i*K + k) // K] simplifies to i."""
    M, K, N = 20, 48, 40
    rng = np.random.default_rng(4)
    a = _rand(rng, M * K // 4, 4)
    w = _rand(rng, K, N)
    m = Module()
    f = m.add_function("main", [tensor(a.shape, DType.f32)])
    b = f.builder()
    W = b.graph.constant(w)
    kb = KernelBuilder("reshaped_matmul", [f.args[0].type, W.type])
    ar, wr = kb.inputs

    def body(i, j, k):
        flat = i * K + k
        return ar[flat // 4, flat % 4] * wr[(flat // K) * 0 + k, j]

    acc = kb.compute((M, N, K), "ppr", DType.f32, body, combiner="add")
    op = kb.ret([acc], [f.args[0], W])
    b.insert(op)
    f.set_return([op.results[0]])
    verify(m)
    plan = Tensorizer().plan(op, {1})
    assert plan is not None and (plan.roles.M, plan.roles.N, plan.roles.K) == (M, N, K)
    cm = _compile(m)
    assert "tfg_" in cm.source
    np.testing.assert_allclose(cm.run(a)[0], a.reshape(M, K).astype(np.float64) @ w, rtol=RTOL, atol=1e-3)


def test_threaded_gemms_split_their_blocks_evenly():
    """Many (mc x nc) blocks per thread or few: the even static split, so that consecutive layers
    give the same columns to the same thread (a GEMM whose output does not fit L2 has its own
    blocks, test_gemms_with_a_large_output_take_k_in_one_block)."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c.tensorize import _gemm_params
    host = Target.host().replace(l2=1024 * 1024, vector_width=16, vector_registers=32)
    for n, threads, m in [(3136, 2, 256), (768, 2, 128), (1024, 1, 1024)]:   # ResNet's 64 -> 256 at 56x56, BERT
        params = _gemm_params(host, n, threads, m)
        assert params.schedule == "static" and params.mc % params.mr == 0


def test_pointwise_convs_with_few_positions_run_transposed(rng):
    """A 1x1 convolution whose positions pad the register tile (7x7: 49 of 64 columns) computes
    C^T = x^T W^T with its output channels in the vector lanes and C written back transposed
    (``KernelPlan.transposed``), bias + ReLU + residual fused, for one image and for a batch; at
    56x56 with 24 output channels (which would pad the transposed tile instead) it stays as it was,
    and so it does with 64 (padded by 3% in 6-row tiles: less than ``TRANSPOSED_MARGIN``).  160
    channels at 7x7 run transposed in tiles of 7 x 2 vectors, which they fill (7 x 64 tiles padded
    them to 192 on AVX-512), where the usual tile pads 23% (AVX-512) or 12.5% (AVX2's 8 lanes)."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c.tensorize import _transposed_tile
    nr = _transposed_tile(Target.host(), 49, 160, gemm=True)[1]
    assert nr == 2 * Target.host().vector_width and 160 % nr == 0
    cases = [((1, 96, 7, 7), 128), ((3, 40, 7, 7), 64), ((2, 64, 7, 7), 160), ((1, 16, 56, 56), 24),
             ((1, 32, 56, 56), 64)]
    for x_shape, O in cases:
        C = x_shape[1]
        out = (x_shape[0], O) + x_shape[2:]

        def body(x, w, n, o, h, w_, c):
            return x[n, c, h, w_] * w[o, c, 0, 0]

        contraction = (out, out + (C,), "ppppr", body)
        m, w, bias = _epilogue_kernel_module(x_shape, (O, C, 1, 1), contraction, 1, 3.0)
        x, res = _rand(rng, *x_shape), _rand(rng, *out)
        cm = _compile(m)
        transposed = "trans_c=True" in cm.source
        assert transposed == (x_shape[2] == 7), x_shape
        if O == 160:
            assert f"(N + {nr - 1}) / {nr}" in cm.source
        conv = np.einsum("nchw,oc->nohw", x.astype(np.float64), w.reshape(O, C).astype(np.float64))
        want = np.minimum(np.maximum(conv + bias[None, :, None, None], 0), 3.0) + res
        np.testing.assert_allclose(cm.run(x, res)[0], want, rtol=RTOL, atol=1e-3)


@pytest.mark.parametrize("x_shape, O, marker", [
    # 600 input channels: all of K in one block (the tile is transposed on every block boundary,
    # ``_transposed_kc``)
    ((1, 600, 7, 7), 128, "tf_min(600, K - pc)"),
    ((1, 2048, 7, 7), 128, "tf_min(2048, K - pc)"),
    # 36 positions (a last tile of fewer rows for 7- and 8-row tiles) and 144 channels (two
    # 64-wide panels, then 16): the tile shapes ``tf_store_t`` writes back
    ((1, 48, 6, 6), 144, ()),
])
def test_transposed_pointwise_convs_deep_k_and_partial_tiles(rng, x_shape, O, marker):
    """Transposed 1x1 convolutions with bias + ReLU + residual fused, against float64 einsum.  A
    deep K block narrows the column block, so the B block (kc x nc) stays in half of L2.  Built for
    AVX-512's register shape (16 lanes, 32 registers), whose 64-wide panels these cases are about,
    on any host: without AVX-512 the C's vectors are generic and run all the same (AVX2's 8-lane
    transposed tiles: ``test_pointwise_convs_with_few_positions_run_transposed``)."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c.build import build_native
    from tensorforge.codegen.c.microkernels import _round_down
    from tensorforge.codegen.c.tensorize import _transposed_tile
    target = Target.host().replace(vector_width=16, vector_registers=32)
    C, out = x_shape[1], (1, O) + x_shape[2:]
    nr = _transposed_tile(target, x_shape[2] * x_shape[3], O, gemm=True)[1]
    if marker and C * nr * 4 > target.l2 // 2:        # an L2 too small for all of K in one block
        marker = ()
    elif marker:
        marker = (marker, f"jc += {_round_down(target.l2 // 2 // (C * 4), nr)})")

    def body(x, w, n, o, h, w_, c):
        return x[n, c, h, w_] * w[o, c, 0, 0]

    m, w, bias = _epilogue_kernel_module(x_shape, (O, C, 1, 1), (out, out + (C,), "ppppr", body), 1, 3.0)
    x, res = _rand(rng, *x_shape), _rand(rng, *out)
    with fusion_default(None):
        model, src = build_native(m, target=target)
    assert "trans_c=True" in src and all(m in src for m in marker)
    conv = np.einsum("nchw,oc->nohw", x.astype(np.float64), w.reshape(O, C).astype(np.float64))
    want = np.minimum(np.maximum(conv + bias[None, :, None, None], 0), 3.0) + res
    np.testing.assert_allclose(model.run([x, res])[0], want, rtol=RTOL, atol=1e-3)


def test_gemms_with_a_large_output_take_k_in_one_block(rng):
    """An output past L2 (GPT-2's head: 128 x 50257 floats; BERT's FFN: 128 x 3072) gets all of a
    moderate K in one block (each further block would read and write the whole output again), the
    6 x 64 tile, A in place and blocks on demand; other GEMMs deeper than the usual block take K in
    as few blocks as fit L1's share, A in place.  End to end on
    a target whose small L2 makes a small GEMM large: the packed weights agree with that tile."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c.build import build_native
    from tensorforge.codegen.c.tensorize import DEEP_KC_L1_SHARE, _gemm_params
    zen = Target.host().replace(l1d=48 * 1024, l2=1 << 20, l3=32 << 20, vector_width=16, vector_registers=32)
    head = _gemm_params(zen, 50257, 2, 128, 768)
    assert (head.kc, head.pack_a, head.schedule, head.mr, head.nr) == (768, False, "dynamic", 6, 64)
    assert head.kc * head.nc * 4 <= zen.l2
    assert _gemm_params(zen, 3072, 2, 128, 768).kc == 768       # BERT's FFN: 1.5 MB of output
    # its projections (384 KB of output): K deeper than the usual block in one block too, A in
    # place, and the 8 x 48 tile whose rows split 128 evenly (``_deep_kc``)
    proj = _gemm_params(zen, 768, 2, 128, 768)
    assert (proj.kc, proj.pack_a, proj.schedule, proj.mr, proj.nr) == (768, False, "static", 8, 48)
    # a K whose micro-panel would pass L1's share: even blocks that keep it there
    deep = _gemm_params(zen, 50257, 2, 128, 4096)
    assert deep.kc * deep.mr * 4 <= zen.l1d * DEEP_KC_L1_SHARE and -(-4096 // deep.kc) * deep.kc - 4096 < 8 * 6
    # AVX2 with a 32 KB L1 and 512 KB L2 (Zen 3): BERT's and GPT-2's K = 768 in one block (a 6 x 768
    # micro-panel is 18 KB; two 384-deep blocks measured 1.08-1.16x slower), K = 3072 in four; an A
    # past L2 packed per block, row tiles inner (GotoBLAS's order), one within L2 read in place
    avx2 = Target.host().replace(l1d=32 * 1024, l2=512 * 1024, l3=32 << 20, vector_width=8, vector_registers=16)
    for m, n, k, packed in [(128, 3072, 768, False), (128, 768, 768, False), (128, 768, 3072, True),
                            (1024, 3072, 768, True), (1024, 768, 3072, True)]:
        p = _gemm_params(avx2, n, 2, m, k)
        order = "jr_ir" if packed else "ir_jr"
        assert (p.kc, p.pack_a, p.loop_order, p.mr, p.nr) == (768, packed, order, 6, 16), (m, n, k, p)
    shallow = _gemm_params(zen, 768, 2, 128, 256)                # K within the usual block
    assert (shallow.kc, shallow.pack_a) == (256, True)
    x, w = _rand(rng, 20, 300), _rand(rng, 300, 3000)
    m = _module([x], lambda bd, x_: [bd.create("graph.matmul", [x_, bd.graph.constant(w)]).results[0]])
    model, src = build_native(m, target=Target.host().replace(l2=128 * 1024))
    assert "tf_min(300, K - pc)" in src
    np.testing.assert_allclose(model.run([x])[0], x.astype(np.float64) @ w, rtol=RTOL, atol=1e-3)


@pytest.mark.parametrize("batch", [1, 4])
def test_batched_conv_kernels_give_each_thread_its_own_images(rng, batch, monkeypatch):
    """With at least as many images as threads (evenly), every kernel splits the batch the same
    way: a 1x1 convolution runs one single-threaded GEMM per image under ``schedule(static)``, and
    the depthwise and direct (strided) kernels give each thread a contiguous share of their
    image-major work units (the direct kernel whole images, each padded and computed in turn), so
    each core reads the images it wrote.  At batch 1 the threads share
    each image: the GEMM is threaded, the units still go out in contiguous shares.  (The 1x1 and
    depthwise kernels are kept apart: at batch 4 ``pw_dw`` would fuse them.)"""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TENSORFORGE_PW_DW", "0")
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 96, 1), torch.nn.ReLU6(),
                                torch.nn.Conv2d(96, 96, 3, padding=1, groups=96), torch.nn.ReLU6(),
                                torch.nn.Conv2d(96, 64, 3, stride=2, padding=1)).eval()
    x = torch.tensor(_rand(rng, batch, 16, 56, 56))
    cm = tensorforge.compile(model, (x,), threads=2)
    np.testing.assert_allclose(np.asarray(cm(x)), model(x).detach().numpy(), rtol=RTOL, atol=1e-4)
    kernels = list(_kernel_sources(cm).items())
    pointwise = next(src for name, src in kernels if name.startswith("k0_"))
    depthwise = next(src for name, src in kernels if "depthwise direct kernel" in src)
    direct = next(src for name, src in kernels if "(&shape, toff" in src)
    assert ("#pragma omp for schedule(static)\n    for (long t = 0;" in pointwise) == (batch > 1)
    assert "schedule(static)\n    for (long u" in depthwise and "dynamic" not in depthwise
    # the direct kernel at such a batch pads and computes one image at a time per thread
    loop = "for (long im = 0" if batch > 1 else "for (long u"
    assert f"schedule(static)\n    {loop}" in direct and "dynamic" not in direct
