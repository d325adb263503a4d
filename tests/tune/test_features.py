"""Features of scheduled loop nests and GEMM candidates: fixed length, finite, and moving the way a
schedule change should move them (the cost model can only learn what the features show)."""
import random

import numpy as np
import pytest

from tensorforge.codegen.target import Target
from tensorforge.errors import ScheduleError
from tensorforge.schedule import Schedule
from tensorforge.schedule.default import default_schedule
from tensorforge.tune.features import FEATURE_NAMES, INDEX, estimate_seconds, gemm_features, loop_features

from tests.schedule.kernels import col_sum, conv1d, elementwise_chain, lowered, matmul, softmax, two_stage
from tests.schedule.test_random_schedules import random_step

HOST = Target.host()
# Small caches make footprints matter at test sizes.
TINY = HOST.replace(l1d=4096, l2=32768, l3=262144, cores=2, vector_width=8, vector_registers=16)
KERNELS = {"matmul": lambda: matmul(48, 40, 32), "softmax": lambda: softmax(16, 200),
           "chain": lambda: elementwise_chain(20, 30), "two_stage": lambda: two_stage(12, 50),
           "col_sum": lambda: col_sum(30, 40), "conv1d": lambda: conv1d(64, 5)}
MATMUL_1K = {"M": 1024, "N": 1024, "K": 1024, "batch": 1, "conv": None}


def f(vec: np.ndarray, name: str) -> float:
    return float(vec[INDEX[name]])


def test_names_are_unique():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_loop_features_finite_and_fixed_length(name):
    plain = loop_features(lowered(KERNELS[name]()), TINY)
    tuned = loop_features(default_schedule(lowered(KERNELS[name]()), TINY).fn, TINY)
    for v in (plain, tuned):
        assert v.shape == (len(FEATURE_NAMES),) and np.all(np.isfinite(v))
        assert f(v, "is_gemm") == 0.0 and f(v, "flops") > 0 and f(v, "footprint") > 0
    assert estimate_seconds(tuned)[0] > 0


@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_give_finite_features(seed):
    rnd = random.Random(seed)
    kernel = KERNELS[sorted(KERNELS)[seed % len(KERNELS)]]()
    s = Schedule(lowered(kernel))
    for _ in range(8):
        p, args = random_step(s, rnd)
        try:
            getattr(s, p)(*args)
        except ScheduleError:
            pass
    v = loop_features(s.fn, TINY)
    assert v.shape == (len(FEATURE_NAMES),) and np.all(np.isfinite(v))


def test_vectorizing_sets_vector_features_and_lowers_the_estimate():
    s = Schedule(lowered(elementwise_chain(64, 256)))
    before = loop_features(s.fn, TINY)
    for c in ("0", "1", "2"):
        s.vectorize(f"{c}.1")
    after = loop_features(s.fn, TINY)
    assert f(before, "vec_frac") == 0.0 and f(after, "vec_frac") == 1.0
    assert f(after, "vec_lanes") == pytest.approx(np.log2(1 + 8))      # 8 lanes of the target
    assert f(after, "vec_contiguous_frac") == 1.0
    assert f(after, "est_compute_s") < f(before, "est_compute_s") - 2     # log2: >4x less arithmetic time


def test_parallel_sets_parallel_features():
    s = Schedule(lowered(elementwise_chain(64, 256)))
    before = loop_features(s.fn, TINY)
    s.parallel("0.0")
    after = loop_features(s.fn, TINY)
    assert f(before, "par_frac") == 0.0
    assert f(after, "par_frac") == pytest.approx(1 / 3, abs=0.01)         # one of three equal computes
    assert f(after, "par_forks") == pytest.approx(np.log2(2))             # one fork/join
    assert f(after, "par_balance") == 1.0                                  # 64 rows over 2 threads
    assert f(after, "est_seconds") < f(before, "est_seconds")


def _tiled_matmul(ti: int, tj: int) -> np.ndarray:
    s = Schedule(lowered(matmul(64, 64, 64)))
    s.tile("0.0", "0.1", ti, tj)
    s.cache_write("0", "0.1.o")
    s.reorder("0.2", "0.0.i", "0.1.i")
    s.vectorize("0.1.i")
    s.unroll("0.0.i", ti)           # the whole ti x tj tile is live at once: a register tile
    return loop_features(s.fn, TINY)


def test_bigger_register_tile_raises_footprint_features():
    small, big = _tiled_matmul(4, 16), _tiled_matmul(8, 32)
    assert f(big, "local_bytes") > f(small, "local_bytes")
    assert f(big, "reg_tile_vectors") > f(small, "reg_tile_vectors")
    assert f(big, "reg_occupancy") == pytest.approx(8 * 32 / 8 / 16)      # 32 accumulator vectors of 16 registers


def test_tiling_cuts_cache_traffic_of_a_matmul():
    naive = loop_features(lowered(matmul(64, 64, 64)), TINY)
    tiled = _tiled_matmul(8, 32)
    assert f(tiled, "traffic_l1") < f(naive, "traffic_l1")
    # compulsory traffic is the same: both read A, B and write C once from memory (256 KiB L3 holds them)
    assert f(tiled, "traffic_l3") == pytest.approx(f(naive, "traffic_l3"), abs=0.2)


def test_fusing_softmax_rows_cuts_memory_traffic():
    """Three passes over a 4 MiB input reread it from memory; rows kept in cache (compute_at) read it once."""
    plain = loop_features(lowered(softmax(256, 4096)), TINY)
    fused = loop_features(default_schedule(lowered(softmax(256, 4096)), TINY).fn, TINY)
    assert f(fused, "traffic_l3") < f(plain, "traffic_l3") - 1.0          # log2: under half the bytes
    assert f(fused, "buf0_dram_traffic") == pytest.approx(np.log2(1 + 256 * 4096 * 4), abs=0.01)


def test_gemm_features_finite_and_track_the_knobs():
    base = dict(mr=6, nr=64, kc=256, mc=252, nc=512, unroll=1, threads=2, pack_a=True, loop_order="ir_jr",
                schedule="static")
    v = gemm_features(base, MATMUL_1K, HOST.replace(vector_width=16, vector_registers=32))
    assert v.shape == (len(FEATURE_NAMES),) and np.all(np.isfinite(v))
    assert f(v, "is_gemm") == 1.0 and f(v, "flops") == pytest.approx(np.log2(1 + 2 * 1024 ** 3))
    t = HOST.replace(vector_width=16, vector_registers=32, l1d=32768, l2=1 << 20, l3=1 << 25)
    small_kc = gemm_features({**base, "kc": 128}, MATMUL_1K, t)
    big_kc = gemm_features({**base, "kc": 512}, MATMUL_1K, t)
    assert f(big_kc, "gemm_b_panel_l1") == pytest.approx(4 * f(small_kc, "gemm_b_panel_l1"))
    small_tile = gemm_features({**base, "mr": 4, "nr": 32}, MATMUL_1K, t)
    assert f(small_tile, "reg_tile_vectors") < f(v, "reg_tile_vectors")
    edge = gemm_features({**base, "nr": 48}, {**MATMUL_1K, "N": 1000}, t)
    exact = gemm_features({**base, "mr": 8, "mc": 256}, MATMUL_1K, t)   # 8 and 64 divide 1024
    assert f(exact, "gemm_edge_waste") == 0 < f(v, "gemm_edge_waste") < f(edge, "gemm_edge_waste")
    dyn = gemm_features({**base, "schedule": "dynamic"}, MATMUL_1K, t)
    assert f(dyn, "gemm_dynamic") == 1.0 and f(v, "gemm_dynamic") == 0.0
    conv = gemm_features(base, {**MATMUL_1K, "conv": {"kh": 3, "kw": 3}}, t)
    assert f(conv, "gemm_pack_traffic") > f(v, "gemm_pack_traffic")


def test_gemm_estimate_prefers_a_full_register_tile():
    t = HOST.replace(vector_width=16, vector_registers=32)
    base = dict(mr=6, nr=64, kc=256, mc=252, nc=512, threads=2)
    good = estimate_seconds(gemm_features(base, MATMUL_1K, t))[0]
    tiny_tile = estimate_seconds(gemm_features({**base, "mr": 1, "nr": 16, "mc": 64}, MATMUL_1K, t))[0]
    one_thread = estimate_seconds(gemm_features({**base, "threads": 1}, MATMUL_1K, t))[0]
    assert good < tiny_tile and good < one_thread
    assert 2 * 1024 ** 3 / good < 400e9          # no better than two AVX-512 cores at 2.3 GHz
