"""The ONNX backend conformance suite (node tests) through ``TensorforgeBackend``.

onnx 1.23 builds the per-operator node cases in memory from ``onnx.backend.test.case.node``;
``BackendTest`` turns each into a unittest method.  Only the node cases on CPU are collected
(the ``*_expanded`` function-body variants run too: they are cheap).  A model tensorforge
rejects with ``UnsupportedOpError`` becomes a skip whose reason is the error, never a silent
drop.  Measured: ~3 s to run the ~1,900 CPU node cases, plus ~6 s to build them.
"""
from __future__ import annotations

import unittest

import pytest

onnx = pytest.importorskip("onnx")

from onnx.backend.base import BackendRep  # noqa: E402
from onnx.backend.test import BackendTest  # noqa: E402
from onnx.backend.test.loader import load_model_tests  # noqa: E402

from tensorforge.errors import UnsupportedOpError  # noqa: E402
from tensorforge.frontends.onnx_backend import TensorforgeBackend, check_node_case  # noqa: E402

# Non-expanded node cases that must pass (1,026 of 1,404 did in the interpreter when this floor was
# set; the two KNOWN_FLOAT32_FFT_NOISE cases fail).
MIN_NODE_PASSES = 1020


class _SkippingRep(BackendRep):
    def __init__(self, rep):
        self.rep = rep

    def run(self, inputs, **kwargs):
        try:
            return self.rep.run(inputs, **kwargs)
        except UnsupportedOpError as e:
            raise unittest.SkipTest(f"unsupported: {e}") from None


class SkippingBackend(TensorforgeBackend):
    """Reports models tensorforge rejects as skipped tests, with the reason."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        try:
            return _SkippingRep(super().prepare(model, device, **kwargs))
        except UnsupportedOpError as e:
            raise unittest.SkipTest(f"unsupported: {e}") from None


# Expanded (function-body) cases whose reference outputs come from a different fp16 evaluation
# order: graph.softmax / graph.matmul in f16 land 2 ulps away (rtol 1e-3 is ~1 f16 ulp).
KNOWN_FP16_ORDER = [r"^test_attention_4d_causal_fp16_expanded_"]

# Inverse DFTs whose exact outputs are 0: the float32 DFT-matrix products leave ~1.9e-7 of
# rounding noise there, against the runner's atol of 1e-7 (rtol cannot help at 0).
KNOWN_FLOAT32_FFT_NOISE = {"test_dft_inverse": "f32 DFT-matrix rounding ~1.9e-7 on zero outputs vs atol 1e-7",
                           "test_dft_inverse_opset19": "f32 DFT-matrix rounding ~1.9e-7 on zero outputs vs atol 1e-7"}


# The runner's own comparison of sequence outputs recurses into the elements as if each were a list
# of outputs, and len() of the 0-d first element fails (any backend's correct result does);
# check_node_case compares sequences element by element instead, and this case passes there.
KNOWN_RUNNER_SEQUENCE_BUG = {"test_loop16_seq_none": "onnx runner: len() of a 0-d sequence element"}


def _node_test_case():
    backend_test = BackendTest(SkippingBackend, __name__)
    for pattern in KNOWN_FP16_ORDER + [f"^{name}_" for name in {**KNOWN_FLOAT32_FFT_NOISE,
                                                                **KNOWN_RUNNER_SEQUENCE_BUG}]:
        backend_test.exclude(pattern)
    cases = backend_test.test_cases["OnnxBackendNodeModelTest"]
    for name in [n for n in vars(cases) if n.startswith("test_") and not n.endswith("_cpu")]:
        delattr(cases, name)  # CUDA variants: the backend is CPU-only
    return cases


OnnxBackendNodeModelTest = _node_test_case()


def test_node_conformance_floor():
    """At least MIN_NODE_PASSES non-expanded node cases pass and none fails outright (the known
    float32 FFT noise aside)."""
    results = {c.name: check_node_case(c) for c in load_model_tests(kind="node") if "_expanded" not in c.name}
    passed = sum(status == "pass" for status, _ in results.values())
    failed = {name: detail for name, (status, detail) in results.items()
              if status == "fail" and name not in KNOWN_FLOAT32_FFT_NOISE}
    assert not failed, f"{len(failed)} node cases fail: {dict(list(failed.items())[:5])}"
    assert passed >= MIN_NODE_PASSES, f"only {passed} of {len(results)} node cases pass"


def test_backend_api():
    assert TensorforgeBackend.supports_device("CPU")
    assert not TensorforgeBackend.supports_device("CUDA")
    node = onnx.helper.make_node("Add", ["a", "b"], ["c"])
    import numpy as np
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    (c,) = TensorforgeBackend.run_node(node, [a, np.float32(2.5)])
    np.testing.assert_array_equal(c, a + np.float32(2.5))


def test_run_node_cases_in_processes_matches_one_process():
    """``jobs=2`` (forked workers, as the conformance report runs natively) gives the same results
    in the same order as running the cases here."""
    from tensorforge.frontends.onnx_backend import run_node_cases

    cases = sorted((c for c in load_model_tests(kind="node") if c.name.startswith(("test_abs", "test_add", "test_cast_"))),
                   key=lambda c: c.name)[:12]
    here = run_node_cases(cases, jobs=1, target="interpreter")
    pooled = run_node_cases(cases, jobs=2, target="interpreter")
    assert pooled == here
    assert [name for name, _, _ in here] == [c.name for c in cases]
    assert sum(status == "pass" for _, status, _ in here) >= 5
