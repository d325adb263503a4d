"""Mismatches the fuzzer already knows about, each pinned by a strict-xfail regression test.

An entry matches a mismatch by target ("*" for any), kind and an op the case contains.  The CLI
reports known mismatches apart from new ones, and the CI slice (tests/testing/test_fuzz.py)
fails only on new ones.  When a bug is fixed its regression test XPASSes (strict), which fails
the suite until the entry here is removed too.

Matching by op is coarse on purpose (an unminimised random case holds several ops); the
regression test is the precise statement of each issue.

Where ONNX differs from PyTorch (the reference here is ONNX as onnxruntime computes it):
- MaxPool ignores NaN (onnxruntime compares with ``>``; onnx.reference drops NaN before the max;
  a window of only NaN and padding gives -FLT_MAX in onnxruntime); PyTorch's max_pool propagates
  NaN, and so does graph.max_pool (the KNOWN entry below).
- ArgMax/ArgMin with NaN: onnxruntime skips NaN, onnx.reference (numpy) and PyTorch pick it.
- onnxruntime 1.31 propagates NaN in Max/Min/Relu/Clip/ReduceMax/ReduceMin on a single op (older
  releases did not), but some of its fused or multi-threaded kernels still drop NaN.
Where onnxruntime and onnx.reference disagree and tensorforge agrees with onnx.reference, the
fuzzer reports an "ort-deviation" (listed, not counted as open); see fuzz_check.check_outcome.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    target: str       # "cpu" | "interpreter" | "*"
    kind: str         # nan | inf | value | error ...
    op: str           # an ONNX op kind the case must contain
    test: str         # the regression test that pins it
    reason: str


KNOWN: tuple[Known, ...] = (
    Known("*", "nan", "MaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "ONNX MaxPool ignores NaN (onnxruntime; onnx.reference drops NaN), graph.max_pool propagates it"),
    Known("cpu", "value", "LayerNormalization", "tests/testing/regressions/test_fuzz_eb574e6794.py",
          "native: gcc -ffp-contract=fast contracts a rounded product into the centring x - mean "
          "(fma gives x*s - round(x*s) != 0), amplified by 1/sqrt(var+eps); -ffp-contract=off fixes it"),
)


def known(m, entries=KNOWN) -> Known | None:
    """The entry that explains mismatch ``m`` (a ``fuzz_check.Mismatch``), or None."""
    for k in entries:
        if (k.target in ("*", m.target)) and k.kind == m.kind and k.op in m.ops:
            return k
    return None
