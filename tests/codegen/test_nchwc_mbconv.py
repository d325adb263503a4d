"""A depthwise blocked conv fused with the 1x1 blocked convs around it (``graph.mbconv_nchwc``,
``codegen/c/nchwc_mbconv.py``): the layout pass fuses inverted residual blocks (the expand conv, the
depthwise conv, the project conv), the fused kernel gives the separate kernels' bits (same
arithmetic; bands only change where the expanded rows and depthwise outputs wait, and recompute
the expand conv's halo rows exactly), matches the interpreter on the plain graph, propagates NaN
and Inf, and is a tuning task whose band, tile and chunk every candidate measures right and a
database record reaches ``compile`` with."""
import random

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import nchwc, nchwc_mbconv
from tensorforge.codegen.target import Target
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.types import tensor
from tensorforge.passes.pipeline import default_pipeline_text
from tensorforge.tune.measure import Measurer, Result
from tensorforge.tune.space import DEFAULT, BlockedSpace, InvalidCandidate, space_for
from tensorforge.tune.tasks import extract_tasks

LAYOUT = default_pipeline_text(layout=True)
HOST = Target.host()
MARK = "(nchwc_mbconv.py)"


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
    (1, 24, (16, 16), 48, 3, 1, 32, {"expose": True}),       # a padded expand input; no project conv
]
IDS = [f"n{b[0]}_{b[1]}-{b[3]}-{b[6]}_{b[2][0]}x{b[2][1]}_k{b[4]}s{b[5]}" for b in BLOCKS]


@pytest.fixture
def every_expand(monkeypatch):
    """The expand conv joins every chain it can (the cost rule aside), so every case tests it."""
    from tensorforge.passes.graph import layout
    monkeypatch.setattr(layout, "MIN_EXPANDED_BYTES", 0)
    monkeypatch.setattr(layout, "MAX_RECOMPUTE", 1.0)
    monkeypatch.setattr(layout, "EXPAND_ONLY_MIN_IMAGES", 0)


def _fused_ops(model) -> list[tuple[str, bool, bool]]:
    from tensorforge.passes.pipeline import default_pipeline
    default_pipeline("cpu", layout=True).run(model)
    return [(op.name, op.attributes.get("expand"), op.attributes.get("project")) for op in model.main.body
            if "nchwc" in op.name and "transform" not in op.name]


@pytest.mark.parametrize("case", BLOCKS, ids=IDS)
def test_the_fused_chain_gives_the_separate_kernels_bits_and_the_plain_graphs_values(case, monkeypatch,
                                                                                   every_expand):
    n, c, hw, e, k, s, o, extra = case
    model = lambda: _block(n, c, hw, e, k, s, o, **extra)          # noqa: E731
    project = not extra.get("expose")
    apart_project = [] if project else [("graph.conv_nchwc", None, None)]     # reads the returned output
    assert _fused_ops(model()) == [("graph.mbconv_nchwc", True, project)] + apart_project
    fused = tensorforge.compile(model(), target="cpu", passes=LAYOUT)
    monkeypatch.setenv("TENSORFORGE_NCHWC_DW_PW", "0")
    apart = tensorforge.compile(model(), target="cpu", passes=LAYOUT)
    assert MARK in fused.source and MARK not in apart.source
    x = np.random.default_rng(1).standard_normal((n, c) + hw).astype(np.float32)
    x[0, 1, 2, 3] = np.nan                  # NaN and Inf reach the depthwise input through the expansion
    x[-1, 3, 4, 1] = np.inf
    outs = [fused(x), apart(x), tensorforge.compile(model(), target="interpreter", passes=False)(x)]
    for got, separate, want in zip(*[o if isinstance(o, (list, tuple)) else [o] for o in outs]):
        assert np.array_equal(got, separate, equal_nan=True)
        nan = np.isnan(want)
        assert nan.any() and (np.isnan(got) == nan).all()
        scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
        np.testing.assert_allclose(got[~nan], want[~nan], rtol=0, atol=2e-5 * scale)


def test_the_pass_fuses_the_convs_around_a_depthwise_conv_where_it_can():
    """Untuned rules at this size: the project conv joins, the expand conv's 25 KB output stays
    apart (``MIN_EXPANDED_BYTES``); a depthwise output read twice keeps its project conv apart."""
    assert _fused_ops(_block(1, 16, (20, 20), 32, 3, 1, 16)) == [("graph.conv_nchwc", None, None),
                                                                   ("graph.mbconv_nchwc", False, True)]
    assert ("graph.mbconv_nchwc", False, True) not in _fused_ops(_block(1, 16, (20, 20), 32, 3, 1, 16, expose=True))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TENSORFORGE_NCHWC_DW_PW", "0")
        assert all(name == "graph.conv_nchwc" for name, _, _ in _fused_ops(_block(1, 16, (20, 20), 32, 3, 1, 16)))


@pytest.mark.parametrize("n,oh,ob,weights,threads,pays", [
    (8, 7, 60, 960 * 320 * 4, 2, True),            # a batch of at least the threads: units are images
    (1, 112, 2, 32 * 16 * 4, 2, True),             # MobileNetV2's first pair
    (1, 7, 60, 960 * 320 * 4, 2, False),           # 7x7 at batch 1: weights read twice cost more
    (1, 1, 60, 1024, 2, False),                    # one row: nothing to share
])
def test_the_project_conv_joins_by_the_traffic_it_saves(n, oh, ob, weights, threads, pays):
    from tensorforge.passes.graph.layout import dw_pw_pays

    class _T:
        def __init__(self, shape, nbytes=None):
            self.shape, self.nbytes = shape, nbytes or 4 * int(np.prod(shape))

    class _V:
        def __init__(self, shape, nbytes=None):
            self.type = _T(shape, nbytes)

    class _Op:
        def __init__(self, results, operands=()):
            self.results, self.operands = results, list(operands)
    assert dw_pw_pays(_Op([_V((n, ob, oh, oh, 16))]), _Op([], [None, _V((1,), weights)]), threads) is pays


def _chain(n, cb, hw, k, stride, project=True, expand=True) -> nchwc_mbconv.Chain:
    oh = (hw + 2 * (k // 2) - k) // stride + 1
    g = nchwc.ConvGeometry(n, cb, hw, hw, 16, cb, oh, oh, 16, k, k, stride, stride, k // 2, k // 2, 1, 1)
    e = nchwc.ConvGeometry(n, 1, hw, hw, 16, cb, hw, hw, 16, 1, 1, 1, 1, 0, 0, 1, 1)
    return nchwc_mbconv.Chain(e if expand else None, g, g if project else None, ())


def test_bands_fit_the_buffers_share_evenly_and_say_what_they_recompute():
    first = _chain(1, 2, 112, 3, 1, expand=False)                 # MobileNetV2's first pair
    rows, bands = nchwc_mbconv.band_rows(first, 2)
    assert bands % 2 == 0 and rows * bands >= 112 > rows * (bands - 1)
    assert 2 * rows * 112 * 16 * 4 <= nchwc_mbconv.BAND_BYTES
    assert nchwc_mbconv.band_rows(first, 2, rows=10) == (10, 12)
    assert nchwc_mbconv.recompute(first, 2) == 0.0
    # a 14x14 block at batch 1: two bands of 7 rows read 8 input rows each (16 of 14)
    mid = _chain(1, 24, 14, 3, 1)
    assert nchwc_mbconv.band_rows(mid, 2) == (7, 2)
    assert nchwc_mbconv.recompute(mid, 2) == pytest.approx(16 / 14 - 1)
    # at batch 8 a band is a whole image: nothing recomputed
    assert nchwc_mbconv.band_rows(_chain(8, 24, 14, 3, 1), 2) == (14, 1)
    assert nchwc_mbconv.recompute(_chain(8, 24, 14, 3, 1), 2) == 0.0
    # an expand conv's buffer holds the input rows of a band's windows: stride 2 reads 2 rows a row
    big = _chain(1, 6, 112, 3, 2)
    rows, bands = nchwc_mbconv.band_rows(big, 2)
    size = 6 * nchwc_mbconv.input_rows(big.dw, rows) * 112 * 64 + 6 * rows * 56 * 64
    assert size <= nchwc_mbconv.EXPAND_BAND_BYTES and bands % 2 == 0


@pytest.mark.parametrize("chain,pays", [
    (_chain(1, 6, 112, 3, 2), True),           # 4.8 MB expanded, 1 input row in 28 recomputed
    (_chain(1, 24, 14, 3, 1), False),          # 0.3 MB: stays in L2 between two kernels anyway
    (_chain(8, 24, 14, 3, 1), True),           # whole images: nothing recomputed
    (_chain(1, 30, 28, 5, 1), False),          # 5x5 windows over 28 rows: too many halo rows
    (_chain(1, 6, 112, 3, 2, project=False), False),   # no project conv: the dw output is written anyway
    (_chain(8, 6, 112, 3, 2, project=False), True),    # ... but each thread takes whole images
])
def test_the_expand_conv_joins_where_its_output_is_big_and_little_is_recomputed(chain, pays):
    from tensorforge.passes.graph.layout import expand_pays
    assert expand_pays(chain, 2) is pays


@pytest.fixture(scope="module")
def task():
    with pytest.MonkeyPatch.context() as mp:
        from tensorforge.passes.graph import layout
        mp.setattr(layout, "MIN_EXPANDED_BYTES", 0)
        found = [t for t in extract_tasks(_block(1, 16, (20, 20), 32, 3, 1, 16), passes=LAYOUT) if t.kind == "blocked"]
    fused = [t for t in found if t.problem["conv"]["algorithm"] == "mbconv"]
    assert len(fused) == 1, [str(t) for t in found]
    return fused[0]


def test_the_fused_chain_is_a_blocked_task_of_its_own(task):
    p = task.problem
    assert p["conv"]["algorithms"] == ["mbconv"] and p["conv"]["groups"] == 1
    assert (p["M"], p["N"], p["K"], p["batch"]) == (16, 400, 32, 1)           # its project conv
    # the project conv, the depthwise conv and the expand conv (16 -> 32)
    assert task.flops == 2.0 * 16 * 400 * 32 + 2.0 * 32 * 400 * 9 + 2.0 * 32 * 400 * 16
    assert task.name == "mbconv_nchwc"


def test_every_candidate_is_valid_and_measures_right(task):
    rng = random.Random(0)
    space = space_for(task, HOST)
    assert isinstance(space, BlockedSpace) and space.seeds()[0] == DEFAULT
    configs = space.seeds() + [space.sample(rng) for _ in range(40)] + [space.mutate(space.sample(rng), rng)
                                                                        for _ in range(40)]
    checked = {space.check(c) for c in configs[1:]}
    assert all(p.algorithm == "mbconv" for p in checked) and len(checked) > 10
    assert {p.band for p in checked} > {0}
    with pytest.raises(InvalidCandidate, match="does not apply"):
        space.check({"kind": "blocked", "params": {"algorithm": "direct"}})
    with pytest.raises(InvalidCandidate, match="rows"):
        space.check({"kind": "blocked", "params": {"algorithm": "mbconv", "band": 21}})
    with Measurer(HOST, repeats=1, min_repeat_s=0.0, timeout_s=120) as m:
        results = m.measure(task, configs[:3] + [space.sample(rng) for _ in range(3)])
    for r in results:                  # outputs checked against the interpreter by the runner
        assert r.error is None and r.ok, (r.config, r.error)


def test_a_record_reaches_compile_with_the_same_bits(tmp_path, task, every_expand):
    from tensorforge.tune.database import TuningDatabase
    model = lambda: _block(1, 16, (20, 20), 32, 3, 1, 16)          # noqa: E731
    x = np.random.default_rng(2).standard_normal((1, 16, 20, 20)).astype(np.float32)
    untuned = tensorforge.compile(model(), passes=LAYOUT, db=None)
    outs = []
    for i, params in enumerate(({"algorithm": "mbconv", "band": 3, "blocks": 1, "rows": 5, "chunk": 1},
                                {"algorithm": "mbconv", "band": 20})):
        db = TuningDatabase(tmp_path / f"t{i}.sqlite")
        db.add_records([Result({"kind": "blocked", "params": params}, [1e-6] * 3).record(task, HOST.key()),
                        Result(DEFAULT, [2e-6] * 3).record(task, HOST.key())])
        db.close()
        tuned = tensorforge.compile(model(), passes=LAYOUT, db=str(tmp_path / f"t{i}.sqlite"))
        report = "\n".join(tuned.native.layout.schedules.values())
        assert f"band(s) of {params['band']} output rows (tuned)" in report
        outs.append(tuned(x))
    report = "\n".join(untuned.native.layout.schedules.values())
    assert "fused inverted bottleneck" in report and "1x1 expand conv" in report and "1x1 project conv" in report
    assert all(np.array_equal(o, untuned(x)) for o in outs)
