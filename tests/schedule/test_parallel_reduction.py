"""Max/min reductions to a scalar on threads (``Schedule.parallel`` of a reduction loop): only
max/min into scalar accumulators declared outside the loop are legal, the emitter gives each thread
its own copy and combines them with NaN-propagating ``tf_fmax``/``tf_fmin``, and the default
schedule takes it for large whole-tensor reductions (a dynamic quantization's range)."""
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tensorforge
from tensorforge.dialects.structured.builder import KernelBuilder
from tensorforge.ir.types import TensorType
from tensorforge.schedule import Schedule

from tests.schedule.kernels import F32, _close, build, lowered, matmul
from tests.schedule.test_legality import rejects


def whole(m: int, n: int, combiner: str):
    """y = combiner over every x[i, j] (one scalar)."""
    kb = KernelBuilder(f"whole_{combiner}", [TensorType((m, n), F32)])
    (x,) = kb.inputs
    y = kb.compute((m, n), "rr", F32, lambda i, j: x[i, j], combiner=combiner)
    return _close(kb, [y])


def test_only_max_and_min_into_scalars_run_on_threads():
    rejects(Schedule(lowered(whole(8, 32, "add"))), lambda s: s.parallel("0.0"),
            "parallel: loop '0.0'", "only max/min reductions run on threads")
    rejects(Schedule(lowered(matmul(6, 10, 4))), lambda s: s.parallel("0.2"),
            "parallel: loop '0.2'", "adds into buffer '0.acc': only max/min reductions run on threads")
    cached = Schedule(lowered(matmul(6, 10, 4)))
    cached.cache_write("0", "0.0")
    rejects(cached, lambda s: s.parallel("0.2"), "parallel: loop '0.2'",
            r"updates buffer '0.cw' \(rank 1\); only a scalar accumulator can be reduced on threads")
    s = Schedule(lowered(whole(8, 32, "max")))
    s.parallel("0.0")
    assert s.loop("0.0").attributes["kind"] == "parallel"


@pytest.mark.parametrize("combiner", ["max", "min"])
def test_threads_combine_with_ieee_semantics(combiner):
    """Every thread's partial result is combined: NaN anywhere wins, all-infinite inputs give the
    infinity (OpenMP's own max/min would start from -FLT_MAX/FLT_MAX and could return those)."""
    kernel = whole(64, 512, combiner)
    s = Schedule(lowered(kernel))
    s.parallel("0.0")
    s.vectorize("0.1")
    fn = build(s.fn, f"whole_{combiner}_threads")
    assert f"reduction(tf_f{combiner}:" in fn.source
    ref = np.max if combiner == "max" else np.min
    rng = np.random.default_rng(7)
    cases = [rng.standard_normal((64, 512)).astype(np.float32) for _ in range(4)]
    cases[1][50, 300] = np.nan                               # in the second thread's rows
    cases[2][:] = np.inf
    cases[3][:] = -np.inf
    cases.append(np.where(np.arange(64)[:, None] < 32, np.inf, -np.inf).astype(np.float32) + np.zeros((64, 512), np.float32))
    for x in cases:
        got = fn(x)[0]
        np.testing.assert_array_equal(got, np.asarray(ref(x), np.float32))


def test_default_schedule_reduces_a_large_tensor_on_threads():
    """A ReduceMax and a ReduceMin over a whole 256 x 1024 tensor, compiled for 2 threads: both
    loops run in chunks on threads, each chunk vectorized, and the results equal NumPy's (NaN
    included)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 1024])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in ("mx", "mn")]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("ReduceMax", ["r"], ["mx"], keepdims=0),
             helper.make_node("ReduceMin", ["r"], ["mn"], keepdims=0)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs), opset_imports=[helper.make_opsetid("", 17)])
    cm = tensorforge.compile(onnx.load_from_string(model.SerializeToString()), threads=2)
    for op in ("max", "min"):       # chunks on threads, each chunk one vector loop
        assert re.search(rf"reduction\(tf_f{op}:(\w+)\)[^#]*#pragma omp simd reduction\({op}:\1\)", cm.source), op
    rng = np.random.default_rng(3)
    for nan in (False, True):
        xs = rng.standard_normal((256, 1024)).astype(np.float32)
        if nan:
            xs[255, 1023] = np.nan
        r = np.maximum(xs, 0)
        got = [np.asarray(v) for v in cm(xs)]
        np.testing.assert_array_equal(got[0], np.max(r))
        np.testing.assert_array_equal(got[1], np.min(r))
