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
- onnxruntime 1.31 propagates NaN in Max/Min/Relu/Clip/ReduceMax/ReduceMin/ArgMax on a simple
  single op (older releases did not), but in some larger random graphs its result still drops a
  NaN where onnx.reference keeps it (seen for ReduceMin, ArgMax, Floor after MatMul).
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
    Known("cpu", "nan", "ConvTranspose", "tests/testing/regressions/test_fuzz_7378769401.py",
          "native ConvTranspose spreads a NaN/Inf weight tap to outputs that never read it"),
    Known("*", "inf", "Elu", "tests/testing/regressions/test_fuzz_2d56487759.py",
          "Elu(-0.0) is +0.0 in tensorforge, -0.0 in ONNX"),
    Known("cpu", "value", "Pad", "tests/testing/regressions/test_fuzz_0fcc1738de.py",
          "native constant Pad with negative and positive pads writes 0/stale memory instead of the pad value"),
    Known("*", "error", "MaxPool", "tests/testing/regressions/test_fuzz_7f2f7fdd26.py",
          "MaxPool with a dilated window larger than the input (empty ONNX output) is refused at import"),
    Known("*", "error", "AveragePool", "tests/testing/regressions/test_fuzz_7f2f7fdd26.py",
          "as MaxPool: a window larger than the input (empty ONNX output) is refused at import"),
    Known("*", "nan", "GlobalMaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "as MaxPool: onnxruntime's GlobalMaxPool ignores NaN"),
    Known("*", "inf", "GlobalMaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "onnxruntime's (Global)MaxPool starts from -FLT_MAX: a window of -inf gives -3.4e38, not -inf"),
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
