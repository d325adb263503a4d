"""A convolution task's space includes how the convolution feeds the GEMM (``conv_algorithm``): only
the algorithms that apply, each seeded, each measured to the right output by the isolated runner."""
import random

import numpy as np
import pytest

from tensorforge.codegen.target import Target
from tensorforge.tune.measure import Measurer
from tensorforge.tune.space import DEFAULT, GemmSpace, InvalidCandidate, space_for
from tensorforge.tune.tasks import extract_tasks

from tests.codegen.test_conv_algorithms import AVX2, AVX512

torch = pytest.importorskip("torch")


def _conv_task(batch: int, stride: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, stride=stride, padding=1), torch.nn.ReLU()).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((batch, 8, 10, 10), dtype=np.float32))
    return next(t for t in extract_tasks(model, (x,)) if t.kind == "conv")


def test_algorithms_that_apply():
    winograd = ["winograd", "winograd4"]          # F(2x2, 3x3) and F(4x4, 3x3)
    direct = ["direct", "direct_t"]               # the direct kernel, usual and transposed
    assert _conv_task(2, 1).problem["conv"]["algorithms"] == ["im2col", "fold", *direct, *winograd]
    assert _conv_task(1, 1).problem["conv"]["algorithms"] == ["im2col", *direct, *winograd]  # nothing to fold
    # stride 2: the direct kernel through its polyphase split, Winograd is for stride 1
    assert _conv_task(2, 2).problem["conv"]["algorithms"] == ["im2col", "fold", *direct]
    assert _conv_task(1, 1).problem["conv"]["algorithm"] == "direct"      # untuned: 25 tiles, too few for Winograd


def test_untuned_algorithm_names_the_transposed_direct_kernel():
    """A 7x7 map of one image runs the direct kernel transposed by default on AVX-512's register
    shape (16 lanes, 32 registers; with AVX2's 16 registers the usual one): the task says so, so
    that the space's default and the cost model's features describe what runs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 64, 7, 7), dtype=np.float32))
    for target, algorithm in ((AVX512, "direct_t"), (AVX2, "direct")):
        task = next(t for t in extract_tasks(model, (x,), target=target) if t.kind == "conv")
        assert task.problem["conv"]["algorithm"] == algorithm


def test_space_seeds_samples_and_rejects_algorithms():
    task = _conv_task(1, 2)
    space = GemmSpace(task, Target.host())
    seeded = {c["params"].get("conv_algorithm", "") for c in space.seeds() if c["kind"] == "gemm"}
    assert seeded == {"", "im2col", "direct", "direct_t"}   # stride 2, one image: neither Winograd nor folding
    rng = random.Random(0)
    sampled = {space.sample(rng)["params"]["conv_algorithm"] for _ in range(40)}
    assert sampled == {"im2col", "direct", "direct_t"}
    good = space.seeds()[1]
    with pytest.raises(InvalidCandidate, match="does not apply"):
        space.check({"kind": "gemm", "params": {**good["params"], "conv_algorithm": "fold"}})
    with pytest.raises(InvalidCandidate):
        space.check({"kind": "gemm", "params": {**good["params"], "conv_algorithm": "winograd"}})


def test_every_algorithm_is_measured_correct():
    task = _conv_task(2, 1)
    space = space_for(task, Target.host())
    configs = [c for c in space.seeds() if c["kind"] == "gemm" and c["params"].get("conv_algorithm")]
    assert {c["params"]["conv_algorithm"] for c in configs} == {"im2col", "fold", "direct", "direct_t", "winograd",
                                                                "winograd4"}
    with Measurer(repeats=1, min_repeat_s=0.0, timeout_s=60) as m:
        results = m.measure(task, [DEFAULT] + configs)
    for r in results:        # outputs checked against the interpreter by the runner (rtol 1e-3)
        assert r.error is None and r.ok, (r.config, r.error)
