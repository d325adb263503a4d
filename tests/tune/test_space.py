"""The schedule space: sampled and mutated candidates pass the checks and compute the right output;
illegal ones are rejected before any build."""
import random

import pytest

from tensorforge.codegen.target import Target
from tensorforge.tune.measure import Measurer
from tensorforge.tune.space import DEFAULT, GemmSpace, InvalidCandidate, LoopSpace, canonical, space_for

from tests.tune.tune_util import conv_model, stack_model, task_of


@pytest.fixture(scope="module")
def measurer():
    with Measurer(repeats=1, min_repeat_s=0.0, timeout_s=60) as m:
        yield m


def _valid_samples(space, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out, seen = [], set()
    for _ in range(50 * n):
        c = space.mutate(space.sample(rng), rng) if len(out) % 2 else space.sample(rng)
        try:
            space.check(c)
        except InvalidCandidate:
            continue
        if canonical(c) not in seen:
            seen.add(canonical(c))
            out.append(c)
        if len(out) == n:
            break
    return out


@pytest.mark.parametrize("case", ["matmul", "conv", "softmax"])
def test_sampled_candidates_compute_the_right_output(case, measurer):
    if case == "conv":
        task = task_of(*conv_model(), "conv")
    else:
        task = task_of(*stack_model(rows=64, width=64), "gemm" if case == "matmul" else "loop")
    space = space_for(task, measurer.target)
    assert isinstance(space, LoopSpace if case == "softmax" else GemmSpace)
    configs = _valid_samples(space, 6 if case == "softmax" else 3, seed=len(case))
    assert len(configs) >= 3
    results = measurer.measure(task, [DEFAULT] + configs)
    for r in results:        # the runner compares every output with the NumPy interpreter's (rtol 1e-3)
        assert r.error is None, (r.config, r.error)
        assert r.ok and r.median_s > 0 and r.code_size > 0
    if case != "softmax":    # the configs were applied (different code), not silently dropped
        assert all(r.config["kind"] == "gemm" for r in results[1:])


def test_gemm_space_rejects_illegal_params():
    task = task_of(*stack_model(rows=64, width=64), "gemm")
    target = Target.host()
    space = GemmSpace(task, target)
    good = space.seeds()[1]
    space.check(good)
    vw = target.vector_width
    for bad in ({"nr": vw + 1}, {"mc": good["params"]["mr"] * 3 + 1}, {"mr": 40, "nr": 4 * vw},
                {"loop_order": "sideways"}, {"threads": target.cores + 1}, {"no_such_knob": 1}):
        cfg = {"kind": "gemm", "params": {**good["params"], **bad}}
        with pytest.raises(InvalidCandidate):
            space.check(cfg)
    with pytest.raises(InvalidCandidate):
        space.check({"kind": "loop", "trace": {"version": 1, "steps": []}})


def test_loop_space_rejects_traces_that_do_not_replay():
    task = task_of(*stack_model(rows=64, width=64), "loop")
    space = LoopSpace(task, Target.host())
    default = space.seeds()[1]
    assert space.check(default) is not None            # the default trace replays
    for steps in ([["split", ["no.such.loop"], [4]]], [["vectorize", ["0.0"], []]] * 2,
                  [["frobnicate", [], []]]):
        with pytest.raises(InvalidCandidate):
            space.check({"kind": "loop", "trace": {"version": 1, "steps": steps}})


def test_mutations_stay_in_the_space_and_are_deterministic():
    task = task_of(*stack_model(rows=64, width=64), "gemm")
    space = GemmSpace(task, Target.host())
    a = [canonical(space.mutate(space.sample(random.Random(3)), random.Random(4))) for _ in range(2)]
    assert a[0] == a[1]
    rng = random.Random(5)
    valid = 0
    for _ in range(40):
        c = space.mutate(space.sample(rng), rng)
        assert set(c["params"]) <= set(space.fields)
        try:
            space.check(c)
            valid += 1
        except InvalidCandidate:
            pass
    assert valid >= 30          # most moves are legal: the space is built from legal choices
