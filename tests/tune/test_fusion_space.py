"""The band of a fused pair of kernels is a tuning task of its own (``FusionSpace``, kind "fusion"):
a depthwise convolution with the 1x1 after it (``dw_pw``) and a 1x1 with the depthwise after it
(``pw_dw``) are found as the code generator finds them, every candidate band is measured to the
right output, and a database record of one reaches ``tensorforge.compile``, which emits that
band with outputs bit-identical to the untuned build's."""
import dataclasses
import random
import re

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import dw_pw
from tensorforge.codegen.target import Target
from tensorforge.tune.apply import Tuning
from tensorforge.tune.measure import Measurer, Result
from tensorforge.tune.space import DEFAULT, FusionSpace, InvalidCandidate, space_for
from tensorforge.tune.tasks import extract_tasks, pair_key

torch = pytest.importorskip("torch")

from ..codegen.test_dw_pw import Block  # noqa: E402
from ..codegen.test_pw_dw import Half  # noqa: E402

TWO = dataclasses.replace(Target.host(), cores=2)     # a batch of 2 gives both threads whole images
BANDS = re.compile(r"in bands of (\d+) output rows \((\w+)\.py\)")


def _model(kind: str):
    torch.manual_seed(0)
    if kind == "dw_pw":
        model, shape = Block(8, 48, 16, 3, 1, "relu6"), (2, 8, 56, 56)     # 48 x 56 x 56 floats: 3 bands
    else:
        model, shape = Half(8, 96, 3, 1, "relu6"), (2, 8, 56, 56)          # 1.2 MB expanded per image
    x = torch.from_numpy(np.random.default_rng(0).standard_normal(shape, dtype=np.float32))
    return model.eval(), x


def _fusion_task(kind: str):
    model, x = _model(kind)
    tasks = extract_tasks(model, (x,), target=TWO)
    fused = [t for t in tasks if t.kind == "fusion"]
    assert len(fused) == 1, [str(t) for t in tasks]
    return model, x, tasks, fused[0]


@pytest.mark.parametrize("kind", ["dw_pw", "pw_dw"])
def test_a_fused_pair_is_a_task_with_its_bands(kind):
    model, x, tasks, task = _fusion_task(kind)
    p = task.problem
    assert p["fusion"] == kind and p["out"] == [56, 56]
    # the untuned band is one of the choices, every choice an even split of the 56 rows
    assert p["band_rows"] in p["choices"] and p["choices"] == dw_pw.band_choices(56)
    assert all(dw_pw.even_bands(56, r) == (r, -(-56 // r)) for r in p["choices"])
    assert p["choices"][0] == 1 and p["choices"][-1] == 56
    # the two kernels are a function of their own; each is still a task of its own too
    kernels = [op for op in task.func.body if op.name == "structured.kernel"]
    assert len(kernels) == 2 and task.key == pair_key(*kernels)
    assert {"depthwise", "gemm"} <= {t.kind for t in tasks}
    assert task.flops > 0 and f"bands of {p['band_rows']} rows" in task.shape_text()
    # without the kind, no fusion task
    assert not [t for t in extract_tasks(model, (x,), target=TWO, kinds=("gemm", "depthwise")) if t.kind == "fusion"]


def test_one_image_for_two_threads_has_no_fusion_task():
    model, x = _model("dw_pw")
    assert not [t for t in extract_tasks(model, (x[:1],), target=TWO) if t.kind == "fusion"]


def test_the_space_takes_only_even_bands():
    _, _, _, task = _fusion_task("dw_pw")
    space = space_for(task, TWO)
    assert isinstance(space, FusionSpace)
    default = task.problem["band_rows"]
    seeds = space.seeds()
    assert seeds[0] == DEFAULT and len(seeds) == 3
    assert {s["params"]["band_rows"] for s in seeds[1:]} < set(space.choices) - {default}
    rng = random.Random(0)
    sampled = [space.sample(rng) for _ in range(40)] + [space.mutate(space.sample(rng), rng) for _ in range(40)]
    assert all(space.check(c) in space.choices for c in sampled)
    assert len({c["params"]["band_rows"] for c in sampled}) > 5
    for bad in ({"kind": "fusion", "params": {"band_rows": 9}},            # 56 rows: 9 is no even split
                {"kind": "fusion", "params": {"band_rows": 0}},
                {"kind": "fusion", "params": {"band_rows": 4, "mode": "rows"}},
                {"kind": "depthwise", "params": {}}):
        with pytest.raises(InvalidCandidate):
            space.check(bad)


@pytest.mark.parametrize("kind", ["dw_pw", "pw_dw"])
def test_every_band_measured_is_right(kind):
    _, _, _, task = _fusion_task(kind)
    space = space_for(task, TWO)
    configs = space.seeds() + [space._config(1), space._config(56)]
    with Measurer(TWO, repeats=1, min_repeat_s=0.0, timeout_s=120) as m:
        results = m.measure(task, configs)
    for r in results:       # outputs checked against the interpreter by the runner
        assert r.error is None and r.ok, (r.config, r.error)


@pytest.mark.parametrize("kind", ["dw_pw", "pw_dw"])
def test_a_band_record_reaches_compile(tmp_path, kind):
    from tensorforge.tune.database import TuningDatabase
    model, x, _, task = _fusion_task(kind)
    rows = next(r for r in task.problem["choices"] if r not in (task.problem["band_rows"], 56) and r > 2)
    db_path = tmp_path / "fusion.sqlite"
    target_key = TWO.key()
    db = TuningDatabase(db_path)
    db.add_records([Result({"kind": "fusion", "params": {"band_rows": rows}}, [1e-6] * 3).record(task, target_key),
                    Result(DEFAULT, [2e-6] * 3).record(task, target_key)])
    db.close()
    untuned = tensorforge.compile(model, (x,), threads=2, db=None)
    tuned = tensorforge.compile(model, (x,), threads=2, db=str(db_path))
    assert BANDS.findall(untuned.source) == [(str(task.problem["band_rows"]), kind)]
    assert BANDS.findall(tuned.source) == [(str(rows), kind)]
    a, b = untuned(x), tuned(x)
    a, b = (a[0] if isinstance(a, tuple) else a).numpy(), (b[0] if isinstance(b, tuple) else b).numpy()
    assert np.array_equal(a, b)         # the same arithmetic in the same order, whatever the band
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(b, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_a_band_record_that_no_longer_applies_warns():
    _, _, _, task = _fusion_task("dw_pw")
    first, second = [op for op in task.func.body if op.name == "structured.kernel"]
    tuning = Tuning.fixed({task.key: {"kind": "fusion", "params": {"band_rows": "wide"}}})
    with pytest.warns(UserWarning, match="no longer applies"):
        assert tuning.fusion_for(first, second) is None
    assert Tuning.fixed({}).fusion_for(first, second) is None
    assert Tuning.fixed({task.key: {"kind": "fusion", "params": {"band_rows": 7}}}).fusion_for(first, second) == 7
