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
  NaN, and so does graph.max_pool.  The ONNX spec does not say; tensorforge keeps PyTorch's
  semantics (docs/numerics.md), so these are ``DOCUMENTED`` deviations, not open mismatches:
  ``fuzz_check.check_outcome`` reports them with kind ``DOCUMENTED_KIND``.
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
)


# Documented deviations: tensorforge deliberately differs from onnxruntime where the ONNX spec is
# silent and it follows PyTorch (docs/numerics.md).  Each is pinned by a regression test that
# asserts tensorforge's own behaviour (not an xfail).  They match only cases where NaN or -inf
# flows (in an input or a tensor computed from them), the only way these deviations show.
DOCUMENTED_KIND = "documented-deviation"
ORDER_KIND = "order-dependent"
"""NaN against +-inf where a contraction sums products that overflow float32 next to infinities:
``inf + (1e30 * -1e30)`` is NaN, ``fma(1e30, -1e30, inf)`` is inf (the exact product is finite),
and which one a runtime gives depends on FMA contraction and summation order, which ONNX leaves
open (``fuzz_check.order_dependent``)."""
ILL_KIND = "ill-conditioned"
"""A finite value mismatch that the float32 rounding of the values flowing in explains: the output
moves by as much when the graph's float inputs move by an ulp or two (fmod of 1e30 by a computed
divisor, a LayerNorm of nearly equal values), or it is a Floor/Ceil/Round/Sign of a value that lies
within its own tolerance of the step (``fuzz_check.ill_conditioned``)."""
DEVIATION_KINDS = ("ort-deviation", DOCUMENTED_KIND, ORDER_KIND, ILL_KIND)   # reported, never counted as open

DOCUMENTED: tuple[Known, ...] = (
    Known("*", "nan", "MaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "follows PyTorch: max pooling propagates NaN (onnxruntime and onnx.reference ignore it)"),
    Known("*", "nan", "GlobalMaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "follows PyTorch: global max pooling propagates NaN (onnxruntime ignores it)"),
    Known("*", "inf", "MaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "follows PyTorch: a window of -inf (and padding) gives -inf; onnxruntime starts from -FLT_MAX"),
    Known("*", "inf", "GlobalMaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "follows PyTorch: a window of -inf gives -inf; onnxruntime starts from -FLT_MAX"),
    # the same NaN / -inf flowing on into a comparison or a cast (e.g. MaxPool -> LessOrEqual)
    Known("*", "value", "MaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "follows PyTorch: a NaN/-inf max-pool result, compared or converted downstream"),
    Known("*", "value", "GlobalMaxPool", "tests/testing/regressions/test_fuzz_557ab0fe5e.py",
          "follows PyTorch: a NaN/-inf global max-pool result, compared or converted downstream"),
)


def documented(m, entries=DOCUMENTED, flowing=()) -> Known | None:
    """The documented deviation (follows PyTorch) that explains mismatch ``m``, or None.

    ``flowing``: the special values of the tensors computed inside the graph (onnxruntime's), as
    a NaN or -inf made upstream (``inf - x``, an overflow) shows these deviations just as well as
    one among the inputs."""
    if not {"nan", "-inf"} & (set(m.specials) | set(flowing)):
        return None
    return known(m, entries)


def known(m, entries=KNOWN) -> Known | None:
    """The entry that explains mismatch ``m`` (a ``fuzz_check.Mismatch``), or None."""
    for k in entries:
        if (k.target in ("*", m.target)) and k.kind == m.kind and k.op in m.ops:
            return k
    return None
