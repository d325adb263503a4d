"""int8 GEMMs and convolutions are tuning tasks (``Int8Space``): the VNNI kernel's register tile,
k unroll, K block and L2 block of A (``qgemm.Tiling``).  Every candidate is measured to the exact
int32 result, and a database record reaches ``tensorforge.compile``: a kernel built with its tiling
(its name says which), the outputs unchanged bit for bit.  On a host without VNNI the int8 kernels
run a portable loop without that knob, and there are no int8 tasks."""
import random

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import qgemm
from tensorforge.codegen.target import Target
from tensorforge.tune.measure import Measurer
from tensorforge.tune.space import DEFAULT, Int8Space, InvalidCandidate, space_for
from tensorforge.tune.tasks import extract_tasks

torch = pytest.importorskip("torch")
# The Tiling knob belongs to the VNNI kernel; an AMX host's int8 GEMM has none (no int8 tasks
# there), so these tests tune the VNNI kernel of this host with its AMX features turned off.
pytestmark = pytest.mark.usefixtures("host_without_amx")


def _int8_model():
    """A small CNN + linear head quantized by tensorforge (per-channel int8 weights, uint8
    activations; the first and last layers kept int8 too, so there is a qmatmul).  Its convs run
    on the VNNI GEMM (a strided 3x3 and a 1x1 over 192 channels); a stride-1 3x3 would take the
    direct kernel and a 1x1 over at most ``qconv.SHORT_K_MAX`` channels the short-K one, which have
    no tiling to tune (``test_direct_and_short_k_convs_are_no_int8_tasks``)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 192, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(192, 16, 1), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 6 * 6, 10)).eval()
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 8, 12, 12)).astype(np.float32) for _ in range(4)]
    x = torch.from_numpy(samples[0])
    quantized = tensorforge.quantize(model, samples, (x,), keep_first_last=False)
    return quantized, x


@pytest.fixture(scope="module")
def int8_tasks(host_without_amx):
    if qgemm.isa(Target.host()) == qgemm.SCALAR:
        pytest.skip("no VNNI on this host: its int8 kernels have no Tiling and are no tuning tasks "
                    "(test_no_int8_tasks_without_vnni)")
    quantized, x = _int8_model()
    return quantized, x, [t for t in extract_tasks(quantized) if t.kind == "int8"]


def test_int8_kernels_are_tasks_with_a_tiling_space(int8_tasks):
    _, _, tasks = int8_tasks
    convs = [t for t in tasks if t.problem["conv"]]
    gemms = [t for t in tasks if not t.problem["conv"]]
    assert len(convs) == 2 and len(gemms) == 1, [str(t) for t in tasks]
    first = next(t for t in convs if t.problem["conv"]["channels"] == 192)
    assert (first.problem["M"], first.problem["N"], first.problem["K"]) == (16, 36, 192)     # O x OH*OW x C
    assert first.flops == 2.0 * 16 * 36 * 192
    target = Target.host()
    space = space_for(first, target)
    assert isinstance(space, Int8Space)
    assert DEFAULT in space.seeds()
    rng = random.Random(0)
    sampled = [space.sample(rng) for _ in range(40)] + [space.mutate(space.sample(rng), rng) for _ in range(40)]
    valid = []
    for c in sampled:
        try:
            valid.append(space.check(c))
        except InvalidCandidate:
            pass
    assert len({(t.mr, t.nrv) for t in valid}) > 4
    assert all(isinstance(t, qgemm.Tiling) for t in valid)
    with pytest.raises(InvalidCandidate, match="registers"):            # 12 x 2 spilled under gcc 12
        space.check({"kind": "int8", "params": {"mr": 12, "nrv": 2, "unroll": 4, "kc": 2048, "a_block": 1 << 18}})
    with pytest.raises(InvalidCandidate):
        space.check({"kind": "int8", "params": {"mr": 8, "nrv": 2, "unroll": 4, "kc": 30, "a_block": 1 << 18}})
    with pytest.raises(InvalidCandidate):
        space.check({"kind": "gemm", "params": {}})


def test_every_seed_is_measured_exact(int8_tasks):
    """Every seed and a mutation on the first task; the default and one other seed, in turn, on the
    others (each build is a C compile: all seeds on every task took 78 s of the suite)."""
    _, _, tasks = int8_tasks
    for i, task in enumerate(tasks):
        space = space_for(task, Target.host())
        seeds = space.seeds()
        configs = (seeds + [space.mutate(seeds[1], random.Random(2))] if i == 0
                   else [seeds[0], seeds[1 + (i - 1) % (len(seeds) - 1)]])
        with Measurer(repeats=1, min_repeat_s=0.0, timeout_s=60) as m:
            results = m.measure(task, configs)
        for r in results:       # outputs checked against the interpreter by the runner
            assert r.error is None and r.ok, (task.name, r.config, r.error)


def test_an_int8_record_reaches_compile(tmp_path, int8_tasks):
    from tensorforge.tune.database import TuningDatabase
    from tensorforge.tune.measure import Result

    quantized, x, tasks = int8_tasks
    target_key = Target.host().key()
    tile = {"kind": "int8", "params": {"mr": 4, "nrv": 4, "unroll": 2, "kc": 512, "a_block": 1 << 17}}
    db_path = tmp_path / "int8.sqlite"
    db = TuningDatabase(db_path)
    for task in tasks:
        db.add_records([Result(tile, [1e-6] * 3).record(task, target_key),
                        Result(DEFAULT, [2e-6] * 3).record(task, target_key)])
    db.close()
    untuned = tensorforge.compile(quantized, (x,), db=None)
    tuned = tensorforge.compile(quantized, (x,), db=str(db_path))
    name = qgemm.Tiling(**tile["params"]).key()
    assert name not in untuned.source and f"tf_qconv_u8_{name}" in tuned.source and f"_{name}(" in tuned.source
    assert tuned.native.build["tuned_kernels"] == len(tasks)
    np.testing.assert_array_equal(tuned(x).numpy(), untuned(x).numpy())


def test_no_int8_tasks_without_vnni(host_without_vnni):
    """Without VNNI (here: turned off) the int8 kernels run the portable C loop, which has no
    ``qgemm.Tiling``: no int8 GEMM or convolution is a tuning task (every candidate would build
    the same code)."""
    assert qgemm.isa(Target.host()) == qgemm.SCALAR
    quantized, _ = _int8_model()
    assert not [t for t in extract_tasks(quantized) if t.kind == "int8"]


def test_the_command_line_tunes_every_kind_by_default():
    from tensorforge.cli import build_parser
    from tensorforge.tune.tasks import KINDS
    args = build_parser().parse_args(["tune", "resnet18"])
    assert args.kinds.split(",") == list(KINDS) and "int8" in KINDS


def test_direct_and_short_k_convs_are_no_int8_tasks():
    """A stride-1 3x3 int8 conv runs on the direct kernel (qconv_direct.py) and a 1x1 over at most
    ``qconv.SHORT_K_MAX`` channels on the short-K one (``tf_qconv_short_k``); neither has a
    ``qgemm.Tiling``, so neither is a tuning task.  The GEMM path's 1x1 over 192 channels is."""
    from tensorforge.codegen.c import qconv, qconv_direct
    if qgemm.isa(Target.host()) != qgemm.AVX512_VNNI:
        pytest.skip("the direct and short-K kernels need AVX512-VNNI")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 192, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(192, 8, 1),
                                torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 1)).eval()
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 8, 12, 12)).astype(np.float32) for _ in range(3)]
    quantized = tensorforge.quantize(model, samples, (torch.from_numpy(samples[0]),), keep_first_last=False)
    convs = [t.problem["conv"] for t in extract_tasks(quantized) if t.kind == "int8"]
    assert [c["channels"] for c in convs] == [192] and 8 <= qconv.SHORT_K_MAX < 192
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(qconv_direct.ENV, "0")
        assert sorted(t.problem["conv"]["channels"] for t in extract_tasks(quantized) if t.kind == "int8") == [8, 192]
