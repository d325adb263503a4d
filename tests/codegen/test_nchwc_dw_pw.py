"""A depthwise blocked conv fused with the 1x1 blocked conv after it (``graph.dw_pw_nchwc``,
``codegen/c/nchwc_dw_pw.py``): the layout pass fuses inverted-residual pairs, the fused kernel gives
the unfused kernels' bits (same arithmetic, bands only change where the depthwise outputs wait),
matches the interpreter on the plain graph, propagates NaN and Inf, and is a tuning task whose band,
tile and chunk every candidate measures right and a database record reaches ``compile`` with."""
import random

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import nchwc, nchwc_dw_pw
from tensorforge.codegen.target import Target
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.types import tensor
from tensorforge.passes.pipeline import default_pipeline_text
from tensorforge.tune.measure import Measurer, Result
from tensorforge.tune.space import DEFAULT, BlockedSpace, InvalidCandidate, space_for
from tensorforge.tune.tasks import extract_tasks

LAYOUT = default_pipeline_text(layout=True)
HOST = Target.host()
MARK = "(nchwc_dw_pw.py)"


def _block(n, c, hw, e, k, stride, o, pad=None, dilation=1, dw_act="relu6", act="", seed=0,
           expose=False) -> ModuleOp:
    """An inverted-residual block: 1x1 c -> e (relu6), depthwise k x k (``dw_act``), 1x1 e -> o
    (``act``), plus x when the shapes allow (a residual in the 1x1 conv's epilogue); ``expose``:
    the depthwise output is returned too."""
    rng = np.random.default_rng(seed)
    h, w = hw
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((n, c, h, w))], arg_names=["x"])
    g = f.builder().graph

    def const(*shape, fan_in):
        return g.constant((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))
    pad = (k // 2) * dilation if pad is None else pad
    y = g.clip(g.conv(f.args[0], const(e, c, 1, 1, fan_in=c), const(e, fan_in=1)), min=0.0, max=6.0)
    y = g.conv(y, const(e, 1, k, k, fan_in=k * k), const(e, fan_in=1), strides=(stride, stride), pads=(pad,) * 4,
               dilations=(dilation, dilation), groups=e)
    y = g.clip(y, min=0.0, max=6.0) if dw_act == "relu6" else g.mul(y, g.sigmoid(y)) if dw_act == "silu" else y
    d = y
    y = g.conv(y, const(o, e, 1, 1, fan_in=e), const(o, fan_in=1))
    if y.type == f.args[0].type:
        y = g.add(y, f.args[0])
    y = g.relu(y) if act == "relu" else g.mul(y, g.sigmoid(y)) if act == "silu" else y
    f.set_return([y, d] if expose else [y])
    return m


BLOCKS = [
    # n, c, (h, w), e, k, stride, o, extra
    (1, 16, (20, 20), 32, 3, 1, 16, {}),                     # residual in the 1x1 epilogue
    (2, 16, (15, 17), 48, 5, 2, 24, {"dw_act": "silu"}),     # stride 2, odd sizes, padded output block
    (1, 32, (12, 11), 64, 3, 1, 80, {"dilation": 2, "act": "relu"}),   # 5 output blocks: a tail group
    (3, 16, (7, 7), 32, 3, 1, 48, {"dw_act": "", "act": "silu"}),      # small maps, a batch
    (1, 16, (9, 9), 32, 7, 1, 16, {"pad": 1}),               # windows wider than the padding
]
IDS = [f"n{b[0]}_{b[1]}-{b[3]}-{b[6]}_{b[2][0]}x{b[2][1]}_k{b[4]}s{b[5]}" for b in BLOCKS]


def _fused_and_unfused(case, monkeypatch):
    n, c, hw, e, k, s, o, extra = case
    fused = tensorforge.compile(_block(n, c, hw, e, k, s, o, **extra), target="cpu", passes=LAYOUT)
    monkeypatch.setenv("TENSORFORGE_NCHWC_DW_PW", "0")
    unfused = tensorforge.compile(_block(n, c, hw, e, k, s, o, **extra), target="cpu", passes=LAYOUT)
    monkeypatch.delenv("TENSORFORGE_NCHWC_DW_PW")
    return fused, unfused


@pytest.mark.parametrize("case", BLOCKS, ids=IDS)
def test_the_fused_pair_gives_the_unfused_bits_and_the_plain_graphs_values(case, monkeypatch):
    n, c, hw, e, k, s, o, extra = case
    fused, unfused = _fused_and_unfused(case, monkeypatch)
    assert MARK in fused.source and MARK not in unfused.source
    x = np.random.default_rng(1).standard_normal((n, c) + hw).astype(np.float32)
    x[0, 1, 2, 3] = np.nan                  # NaN and Inf reach the depthwise input through the expansion
    x[-1, 3, 4, 1] = np.inf
    got = fused(x)
    assert np.array_equal(got, unfused(x), equal_nan=True)
    want = tensorforge.compile(_block(n, c, hw, e, k, s, o, **extra), target="interpreter", passes=False)(x)
    nan = np.isnan(want)
    assert nan.any() and (np.isnan(got) == nan).all()
    scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
    np.testing.assert_allclose(got[~nan], want[~nan], rtol=0, atol=2e-5 * scale)


def test_the_pass_fuses_only_a_depthwise_conv_read_by_one_1x1_stride_1_conv():
    from tensorforge.passes.pipeline import default_pipeline

    def ops(model) -> list[str]:
        default_pipeline("cpu", layout=True).run(model)
        return [op.name for op in model.main.body if "nchwc" in op.name and "transform" not in op.name]
    assert ops(_block(1, 16, (20, 20), 32, 3, 1, 16)) == ["graph.conv_nchwc", "graph.dw_pw_nchwc"]
    assert "graph.dw_pw_nchwc" not in ops(_block(1, 16, (20, 20), 32, 3, 1, 16, expose=True))   # read twice
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TENSORFORGE_NCHWC_DW_PW", "0")
        assert "graph.dw_pw_nchwc" not in ops(_block(1, 16, (20, 20), 32, 3, 1, 16))


@pytest.mark.parametrize("n,oh,ob,weights,threads,pays", [
    (8, 7, 60, 960 * 320 * 4, 2, True),            # a batch of at least the threads: units are images
    (1, 112, 2, 32 * 16 * 4, 2, True),             # MobileNetV2's first pair
    (1, 7, 60, 960 * 320 * 4, 2, False),           # 7x7 at batch 1: weights read twice cost more
    (1, 1, 60, 1024, 2, False),                    # one row: nothing to share
])
def test_fusion_pays_by_the_traffic_it_saves(n, oh, ob, weights, threads, pays):
    from tensorforge.passes.graph.layout import dw_pw_pays

    class _T:
        def __init__(self, shape):
            self.shape, self.nbytes = shape, 4 * int(np.prod(shape))

    class _V:
        def __init__(self, shape, nbytes=None):
            self.type = _T(shape)
            if nbytes is not None:
                self.type.nbytes = nbytes

    class _Op:
        def __init__(self, results, operands=()):
            self.results, self.operands = results, list(operands)
    dw = _Op([_V((n, ob, oh, oh, 16))])
    pw = _Op([], [None, _V((1,), weights)])
    assert dw_pw_pays(dw, pw, threads) is pays


def test_bands_fit_the_buffer_and_share_evenly():
    g = nchwc.ConvGeometry(1, 2, 112, 112, 16, 2, 112, 112, 16, 3, 3, 1, 1, 1, 1, 1, 1)
    rows, bands = nchwc_dw_pw.band_rows(g, 2)
    assert bands % 2 == 0 and rows * bands >= 112 > rows * (bands - 1)
    assert 2 * rows * 112 * 16 * 4 <= nchwc_dw_pw.BAND_BYTES
    assert nchwc_dw_pw.band_rows(g, 2, rows=10) == (10, 12)
    eight = nchwc.ConvGeometry(8, 60, 7, 7, 16, 60, 7, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1)
    assert nchwc_dw_pw.band_rows(eight, 2) == (7, 1)          # 8 images: whole maps


@pytest.fixture(scope="module")
def task():
    found = [t for t in extract_tasks(_block(1, 16, (20, 20), 32, 3, 1, 16), passes=LAYOUT) if t.kind == "blocked"]
    fused = [t for t in found if t.problem["conv"]["algorithm"] == "dw_pw"]
    assert len(fused) == 1, [str(t) for t in found]
    return fused[0]


def test_the_fused_pair_is_a_blocked_task_of_its_own(task):
    p = task.problem
    assert p["conv"]["algorithms"] == ["dw_pw"] and p["conv"]["groups"] == 1
    assert (p["M"], p["N"], p["K"], p["batch"]) == (16, 400, 32, 1)
    assert task.flops == 2.0 * 16 * 400 * 32 + 2.0 * 32 * 400 * 9      # the 1x1 and the depthwise
    assert task.name == "dw_pw_nchwc"


def test_every_candidate_is_valid_and_measures_right(task):
    rng = random.Random(0)
    space = space_for(task, HOST)
    assert isinstance(space, BlockedSpace) and space.seeds()[0] == DEFAULT
    configs = space.seeds() + [space.sample(rng) for _ in range(40)] + [space.mutate(space.sample(rng), rng)
                                                                        for _ in range(40)]
    checked = {space.check(c) for c in configs[1:]}
    assert all(p.algorithm == "dw_pw" for p in checked) and len(checked) > 10
    assert {p.band for p in checked} > {0}
    with pytest.raises(InvalidCandidate, match="does not apply"):
        space.check({"kind": "blocked", "params": {"algorithm": "direct"}})
    with pytest.raises(InvalidCandidate, match="rows"):
        space.check({"kind": "blocked", "params": {"algorithm": "dw_pw", "band": 21}})
    with Measurer(HOST, repeats=1, min_repeat_s=0.0, timeout_s=120) as m:
        results = m.measure(task, configs[:3] + [space.sample(rng) for _ in range(3)])
    for r in results:                  # outputs checked against the interpreter by the runner
        assert r.error is None and r.ok, (r.config, r.error)


def test_a_record_reaches_compile_with_the_same_bits(tmp_path, task):
    from tensorforge.tune.database import TuningDatabase
    model = lambda: _block(1, 16, (20, 20), 32, 3, 1, 16)          # noqa: E731
    x = np.random.default_rng(2).standard_normal((1, 16, 20, 20)).astype(np.float32)
    untuned = tensorforge.compile(model(), passes=LAYOUT, db=None)
    outs = []
    for i, params in enumerate(({"algorithm": "dw_pw", "band": 3, "blocks": 1, "rows": 5, "chunk": 1},
                                {"algorithm": "dw_pw", "band": 20})):
        db = TuningDatabase(tmp_path / f"t{i}.sqlite")
        db.add_records([Result({"kind": "blocked", "params": params}, [1e-6] * 3).record(task, HOST.key()),
                        Result(DEFAULT, [2e-6] * 3).record(task, HOST.key())])
        db.close()
        tuned = tensorforge.compile(model(), passes=LAYOUT, db=str(tmp_path / f"t{i}.sqlite"))
        report = "\n".join(tuned.native.layout.schedules.values())
        assert f"band(s) of {params['band']} output rows" in report and "(tuned)" in report
        outs.append(tuned(x))
    assert "depthwise 3x3 + 1x1 fused" in "\n".join(untuned.native.layout.schedules.values())
    assert all(np.array_equal(o, untuned(x)) for o in outs)
