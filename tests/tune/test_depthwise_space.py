"""A depthwise convolution is a tuning task of its own (``DepthwiseSpace``): its kernel (row vectors
or channels in the lanes), the outputs of a work unit and of a handed-out group; every candidate
is measured to the right output, and a database record of it reaches ``tensorforge.compile``."""
import random

import numpy as np
import pytest

from tensorforge.codegen.target import Target
from tensorforge.tune.measure import Measurer
from tensorforge.tune.space import DEFAULT, DepthwiseSpace, InvalidCandidate, space_for
from tensorforge.tune.tasks import extract_tasks

torch = pytest.importorskip("torch")


def _layer(channels: int, size: int, k: int = 3, stride: int = 1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(channels, channels, k, stride, k // 2, groups=channels),
                                torch.nn.ReLU6()).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, channels, size, size), dtype=np.float32))
    return model, x


def _task(channels: int, size: int, **kw):
    model, x = _layer(channels, size, **kw)
    return next(t for t in extract_tasks(model, (x,)) if t.kind == "depthwise")


def test_depthwise_task_and_space():
    wide, narrow = _task(32, 28), _task(64, 7)
    assert wide.problem["conv"]["algorithm"] == "depthwise" and wide.problem["conv"]["kernel"] == [3, 3]
    assert not wide.problem["conv"]["lanes"] and narrow.problem["conv"]["lanes"]   # 7-wide planes: lanes
    target = Target.host()
    space = space_for(wide, target)
    assert isinstance(space, DepthwiseSpace)
    with pytest.raises(InvalidCandidate, match="does not apply"):
        space.check({"kind": "depthwise", "params": {"mode": "lanes"}})
    with pytest.raises(InvalidCandidate):
        space.check({"kind": "depthwise", "params": {"mode": "columns"}})
    with pytest.raises(InvalidCandidate):
        space.check({"kind": "gemm", "params": {}})
    rng = random.Random(0)
    sampled = [space.sample(rng) for _ in range(30)] + [space.mutate(space.sample(rng), rng) for _ in range(30)]
    assert all(space.check(c).mode == "rows" for c in sampled)
    assert len({c["params"]["chunk_outputs"] for c in sampled}) > 2
    narrow_space = space_for(narrow, target)
    modes = {narrow_space.sample(rng)["params"]["mode"] for _ in range(30)}
    assert modes == {"rows", "lanes"}
    lanes = narrow_space.check({"kind": "depthwise", "params": {"mode": "lanes", "chunk_outputs": 0}})
    assert lanes.mode == "lanes"
    # the narrow layer's default runs channels in the lanes, so the row kernel is a seed
    assert {"kind": "depthwise", "params": {"mode": "rows", "chunk_outputs": 0, "group_outputs": 0}} in narrow_space.seeds()


def test_every_seed_is_measured_correct():
    for task in (_task(32, 28), _task(64, 7), _task(24, 15, k=5, stride=2)):
        space = space_for(task, Target.host())
        configs = space.seeds() + [space.sample(random.Random(1))]
        with Measurer(repeats=1, min_repeat_s=0.0, timeout_s=60) as m:
            results = m.measure(task, configs)
        for r in results:       # outputs checked against the interpreter by the runner
            assert r.error is None and r.ok, (r.config, r.error)


def test_a_depthwise_record_reaches_compile(tmp_path):
    """A record that asks the 7x7 layer for the row-vector kernel changes what compile emits, and
    the output stays right."""
    import tensorforge
    from tensorforge.tune.database import TuningDatabase
    from tensorforge.tune.measure import Result

    model, x = _layer(64, 7)
    task = next(t for t in extract_tasks(model, (x,)) if t.kind == "depthwise")
    db_path = tmp_path / "dw.sqlite"
    target_key = Target.host().key()
    rows = {"kind": "depthwise", "params": {"mode": "rows", "chunk_outputs": 0, "group_outputs": 0}}
    db = TuningDatabase(db_path)
    db.add_records([Result(rows, [1e-6] * 3).record(task, target_key),
                    Result(DEFAULT, [2e-6] * 3).record(task, target_key)])
    db.close()
    with torch.no_grad():
        ref = model(x)
    untuned = tensorforge.compile(model, (x,), db=None)
    tuned = tensorforge.compile(model, (x,), db=str(db_path))
    assert "channels in the vector lanes" in untuned.source
    assert "channels in the vector lanes" not in tuned.source
    np.testing.assert_allclose(tuned(x).numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
