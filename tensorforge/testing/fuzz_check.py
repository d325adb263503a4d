"""Run random cases in onnxruntime, the reference interpreter and native code, and compare.

The reference is ONNX semantics as onnxruntime computes them (``reference``), run with every
intermediate tensor as an extra output, so the magnitudes flowing through each node are known:
the tolerance of an output (``tolerances``) is ``rtol`` relative plus an absolute part that grows
with the reduction length and the magnitude of every inexact node upstream of it (a sum of L
terms of size M legitimately differs by about L*M*eps between two summation orders).
``compare`` then requires: the same shape and dtype; NaN at exactly the same positions; the same
infinities; integers and booleans exactly equal; finite floats within the tolerance.

``run_tensorforge`` compiles many cases as one model (a batch) and splits the outputs per case;
when the batch does not compile or run, it bisects to find the cases at fault, so an error is
attributed to one case.  An ``UnsupportedOpError`` naming an op that tensorforge does not import
at all is "unsupported" (reported apart); every other exception is a bug ("error").

Where onnxruntime and the ONNX reference implementation (``onnx.reference``) disagree with each
other, the reference implementation breaks the tie (``tiebreak``): a tensorforge result that
agrees with it is reported as an onnxruntime deviation, not as a mismatch.  Where tensorforge
deliberately follows PyTorch because the ONNX spec is silent (``fuzz_known.DOCUMENTED``, e.g.
NaN in MaxPool), the mismatch is reported as a documented deviation (kind
``documented-deviation``), not as open.  ``DEVIATION_KINDS`` lists both kinds.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .fuzz_graphs import EXACT_OPS, Case, to_model
from .fuzz_known import DEVIATION_KINDS, DOCUMENTED_KIND, ILL_KIND, ORDER_KIND, documented
from .fuzz_values import specials_in

EPS32 = float(np.finfo(np.float32).eps)
BASE_RTOL = 1e-4
BASE_ATOL = 1e-5
TARGETS = ("cpu", "interpreter")


class InvalidCase(Exception):
    """onnx.checker or onnxruntime refuses the case: regenerate, it is not a finding."""


@dataclass
class Reference:
    outputs: dict[str, np.ndarray]       # every tensor onnxruntime computed, by name
    mags: dict[str, float]               # largest finite |x| of every tensor


@dataclass
class Mismatch:
    case: str
    target: str                 # "cpu" | "interpreter"
    output: str                 # tensor name ("" for errors)
    kind: str                   # nan | inf | value | shape | dtype | error | unsupported
    detail: str
    ops: list[str] = field(default_factory=list)
    specials: list[str] = field(default_factory=list)   # special values in the inputs
    count: int = 0              # elements that differ

    @property
    def nan_inf_related(self) -> bool:
        return self.kind in ("nan", "inf")

    def signature(self) -> tuple:
        return (self.target, self.kind, tuple(self.ops))

    def line(self) -> str:
        return (f"{self.case} [{self.target}] {self.kind} {self.output}: {self.detail} "
                f"(ops {','.join(self.ops)}; specials {','.join(self.specials) or '-'})")


_SESSION_OPTS = None


def _ort_session(model_bytes: bytes):
    import onnxruntime as ort
    global _SESSION_OPTS
    if _SESSION_OPTS is None:
        ort.set_default_logger_severity(4)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 4
        _SESSION_OPTS = so
    return ort.InferenceSession(model_bytes, _SESSION_OPTS, providers=["CPUExecutionProvider"])


def reference(case: Case, check: bool = True) -> Reference:
    """onnxruntime's value of every tensor of ``case``; raises InvalidCase when it is refused."""
    import onnx
    produced = [o for n in case.nodes for o in n.outputs if o in case.types]
    model = to_model(case, extra_outputs=produced)
    try:
        if check:
            onnx.checker.check_model(model)
        sess = _ort_session(model.SerializeToString())
        names = [o.name for o in sess.get_outputs()]
        with np.errstate(all="ignore"):
            values = sess.run(None, dict(case.inputs))
    except Exception as exc:  # noqa: BLE001
        raise InvalidCase(f"{type(exc).__name__}: {str(exc)[:300]}") from None
    outs = dict(zip(names, values))
    for o in case.outputs:
        want = case.types[o]
        got = outs[o]
        if tuple(got.shape) != tuple(want[1]) or str(got.dtype) != want[0]:
            raise InvalidCase(f"onnxruntime's {o} is {got.dtype}{list(got.shape)}, ONNX shape inference says "
                              f"{want[0]}{list(want[1])}")
    everything = {**case.inputs, **case.inits, **outs}
    return Reference(outs, {k: _mag(v) for k, v in everything.items()})


def _mag(x: np.ndarray) -> float:
    x = np.asarray(x)
    if x.size == 0 or x.dtype.kind not in "fiu":
        return 0.0
    with np.errstate(all="ignore"):
        a = np.abs(x.astype(np.float64))
        a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def ancestors(case: Case, name: str) -> list:
    """The nodes that tensor ``name`` depends on (its producer and theirs), each once."""
    producer = {o: n for n in case.nodes for o in n.outputs}
    seen, stack, found = set(), [name], []
    while stack:
        n = producer.get(stack.pop())
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        found.append(n)
        stack.extend(i for i in n.inputs if i)
    return found


def tolerances(case: Case, ref: Reference) -> dict[str, tuple[float, float]]:
    """(rtol, atol) of every output (see the module docstring)."""
    result = {}
    for out in case.outputs:
        anc = ancestors(case, out)
        atol = BASE_ATOL
        rtol = BASE_RTOL
        for n in anc:
            if n.op == "Cast" and n.attrs.get("to") == 10:          # float16 rounding
                rtol = max(rtol, 2e-3)
            if n.op in EXACT_OPS and n.red_len <= 1:
                continue
            mag = max([ref.mags.get(t, 0.0) for t in list(n.inputs) + list(n.outputs) if t] or [0.0])
            atol += 8 * EPS32 * max(1, n.red_len) * mag
        result[out] = (rtol, atol)
    return result


def compare(got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> tuple[str, str, int] | None:
    """None when ``got`` matches ``ref``; else (kind, detail, count)."""
    got, ref = np.asarray(got), np.asarray(ref)
    if tuple(got.shape) != tuple(ref.shape):
        return "shape", f"shape {list(got.shape)} != {list(ref.shape)}", 0
    if got.dtype != ref.dtype:
        return "dtype", f"dtype {got.dtype} != {ref.dtype}", 0
    if ref.size == 0:
        return None
    if ref.dtype.kind in "biu":
        bad = got != ref
        if bad.any():
            return "value", _example(got, ref, bad), int(bad.sum())
        return None
    g, r = got.astype(np.float64), ref.astype(np.float64)
    gn, rn = np.isnan(g), np.isnan(r)
    if (gn != rn).any():
        bad = gn != rn
        return "nan", _example(got, ref, bad), int(bad.sum())
    inf = (np.isinf(g) | np.isinf(r)) & ~rn
    if inf.any():
        bad = inf & (g != r)
        if bad.any():
            return "inf", _example(got, ref, bad), int(bad.sum())
    fin = ~(rn | inf)
    with np.errstate(all="ignore"):
        bad = fin & (np.abs(g - r) > atol + rtol * np.abs(r))
    if bad.any():
        return "value", _example(got, ref, bad) + f" (rtol {rtol:.1e}, atol {atol:.2e})", int(bad.sum())
    return None


def _example(got, ref, bad) -> str:
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())}/{bad.size} differ, e.g. at {list(idx)}: got {got[idx]!r}, expected {ref[idx]!r}"


# ---- tensorforge ----------------------------------------------------------------------------
@dataclass
class Outcome:
    outputs: list[np.ndarray] | None = None
    error: str | None = None
    kind: str = ""             # "" | "unsupported" | "error"


def _classify_error(exc: BaseException) -> str:
    """"unsupported" for an UnsupportedOpError on an op kind the ONNX importer does not handle
    at all; "unsupported-attr" for one on an op it handles (a valid graph it refuses: a finding);
    "error" for everything else."""
    from ..errors import UnsupportedOpError
    if isinstance(exc, UnsupportedOpError):
        import re
        from ..frontends.onnx import supported_ops
        found = re.search(r"\((\w+), opset \d+\)", str(exc))
        if found and found.group(1) not in set(supported_ops()):
            return "unsupported"
        return "unsupported-attr"
    return "error"


def _describe(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {tb[-1].filename.split('tensorforge/')[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}{where}"


def run_tensorforge(cases: Sequence[Case], target: str) -> dict[str, Outcome]:
    """Compile ``cases`` as one model for ``target`` and run it; bisect on failure."""
    import tensorforge
    cases = list(cases)
    if not cases:
        return {}
    try:
        model = to_model(cases)
        cm = tensorforge.compile(model, target=target, threads=1) if target != "interpreter" else \
            tensorforge.compile(model, target=target)
        feeds = [v for c in cases for v in c.feeds()]
        with np.errstate(all="ignore"):
            outs = cm.run(*feeds)
        outs = [np.asarray(o) for o in outs]
        n_expected = sum(len(c.outputs) for c in cases)
        if len(outs) != n_expected:
            raise RuntimeError(f"the compiled model returned {len(outs)} outputs, the graph has {n_expected}")
    except Exception as exc:  # noqa: BLE001 - every failure is a finding or is bisected
        if len(cases) == 1:
            return {cases[0].name: Outcome(error=_describe(exc), kind=_classify_error(exc))}
        mid = len(cases) // 2
        return {**run_tensorforge(cases[:mid], target), **run_tensorforge(cases[mid:], target)}
    result, pos = {}, 0
    for c in cases:
        result[c.name] = Outcome(outputs=outs[pos:pos + len(c.outputs)])
        pos += len(c.outputs)
    return result


def check_outcome(case: Case, ref: Reference, target: str, outcome: Outcome, tiebreak: bool = True) -> list[Mismatch]:
    """The mismatches of one case's outcome on one target against the reference."""
    specials = sorted(set().union(*[specials_in(v) for v in case.inputs.values()])) if case.inputs else []
    if outcome.error is not None:
        pool = pool_unlike_spec(case, ref) if outcome.kind == "error" and "broadcast" in outcome.error else None
        if pool is not None:
            return [Mismatch(case.name, target, "", "ort-deviation",
                             f"the graph is built on onnxruntime's size of pool {pool}, which the spec sizes "
                             f"or pads otherwise: {outcome.error}", case.ops, specials)]
        return [Mismatch(case.name, target, "", outcome.kind, outcome.error, case.ops, specials)]
    tols = tolerances(case, ref)
    found = []
    evaluator_outs = flowing = None
    for name, got in zip(case.outputs, outcome.outputs):
        rtol, atol = tols[name]
        diff = compare(got, ref.outputs[name], rtol, atol)
        if diff is None:
            continue
        # Shapes are tie-broken too: onnxruntime computes a pooling output size without ceil
        # mode as ``(span) / stride + 1`` in C++ integer division, which truncates a negative
        # span (a dilated window larger than the padded input) towards zero and gives 1 where
        # the ONNX spec's ``floor(span / stride + 1)``, onnx.reference and PyTorch give 0
        # (ONNX's own C++ shape inference truncates the same way, so the case passes as valid).
        if tiebreak and diff[0] != "dtype":
            if evaluator_outs is None:
                evaluator_outs = onnx_reference(case)
            alts = [evaluator_outs.get(name) if evaluator_outs else None]
            if alts[0] is None or compare(got, alts[0], rtol, atol) is not None:
                # the whole graph in onnx.reference settles nothing (it cannot run it, e.g. Pad with
                # negative pads, or an upstream op of it differs from both, e.g. its AveragePool
                # skips NaN, its Conv spreads a NaN over neighbouring outputs): run the producing
                # node alone on onnxruntime's values of its inputs, and the output's ancestors alone
                alts += [node_reference(case, ref, name), pruned_reference(case, name)]
                if all(alt is None or compare(got, alt, rtol, atol) is not None for alt in alts):
                    alts.append(upstream_substituted(case, ref, name))
            if any(alt is not None and compare(got, alt, rtol, atol) is None and
                   compare(ref.outputs[name], alt, rtol, atol) is not None for alt in alts):
                found.append(Mismatch(case.name, target, name, "ort-deviation",
                                      "agrees with onnx.reference, onnxruntime differs: " + diff[1], case.ops,
                                      specials, diff[2]))
                continue
        pool = pool_unlike_spec(case, ref, name) if diff[0] in ("shape", "value", "nan", "inf") else None
        if pool is not None:
            found.append(Mismatch(case.name, target, name, "ort-deviation",
                                  f"onnxruntime sizes or pads pool {pool} unlike the spec: {diff[1]}",
                                  case.ops, specials, diff[2]))
            continue
        m = Mismatch(case.name, target, name, diff[0], diff[1], case.ops, specials, diff[2])
        if flowing is None:
            flowing = set().union(*[specials_in(v) for v in ref.outputs.values()])
        doc = documented(m, flowing=flowing)
        if doc is not None:
            m = Mismatch(case.name, target, name, DOCUMENTED_KIND,
                         f"{diff[0]}: {doc.reason}: {diff[1]}", case.ops, specials, diff[2])
        elif diff[0] in ("nan", "value") and empty_mean_upstream(case, ref, name):
            m = Mismatch(case.name, target, name, DOCUMENTED_KIND,
                         f"{diff[0]}: {EMPTY_MEAN_REASON}: {diff[1]}", case.ops, specials, diff[2])
        elif diff[0] == "value" and (arg := arg_unsettled(case, ref, name, got)) is not None:
            m = Mismatch(case.name, target, name, arg, f"value: {ARG_REASONS[arg]}: {diff[1]}",
                         case.ops, specials, diff[2])
        elif diff[0] == "value" and ill_conditioned(case, ref, tols, name, got):
            m = Mismatch(case.name, target, name, ILL_KIND,
                         f"value: within what float32 rounding of the values flowing in moves the result: "
                         f"{diff[1]}", case.ops, specials, diff[2])
        elif diff[0] in ("nan", "inf") and _only_nonfinite(got, ref.outputs[name], rtol, atol) and \
                order_dependent(case, ref, name):
            m = Mismatch(case.name, target, name, ORDER_KIND,
                         f"{diff[0]}: a contraction upstream sums overflowing products next to infinities: "
                         f"{diff[1]}", case.ops, specials, diff[2])
        elif diff[0] in ("nan", "inf") and _nonfinite_differences(got, ref.outputs[name], rtol, atol) and \
                cancelling_overflow(case, ref, name):
            m = Mismatch(case.name, target, name, ORDER_KIND,
                         f"{diff[0]}: a contraction upstream sums products that overflow float32 with both "
                         f"signs (NaN, +inf or -inf by summation order and FMA use, and what follows of it): "
                         f"{diff[1]}", case.ops, specials, diff[2])
        found.append(m)
    return found


STEP_OPS = {"Floor": np.floor, "Ceil": np.ceil, "Round": np.round, "Sign": np.sign}


def ill_conditioned(case: Case, ref: Reference, tols: dict, name: str, got: np.ndarray) -> bool:
    """Whether float32 rounding upstream explains a finite mismatch of output ``name``:

    - ``name`` is a Floor/Ceil/Round/Sign whose input, allowed its own tolerance (as if it were an
      output), may cross the step: every differing element is what the op gives for some value
      within that tolerance of onnxruntime's input;
    - or the output is that sensitive to its inputs: running onnxruntime with every float input
      moved by one or two ulps (a few random draws) moves the differing elements by at least half
      of how far tensorforge is (the output is not determined to that precision in float32)."""
    want = np.asarray(ref.outputs[name])
    if want.dtype.kind != "f" or got.shape != want.shape:
        return False
    rtol, atol = tols[name]
    g, w = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(all="ignore"):
        bad = np.isfinite(w) & (np.abs(g - w) > atol + rtol * np.abs(w))
    if not bad.any():
        return False
    node = next((n for n in case.nodes if name in n.outputs), None)
    if node is not None and node.op in STEP_OPS and node.inputs[0] in ref.outputs:
        x = np.asarray(ref.outputs[node.inputs[0]], np.float64)
        if x.shape == w.shape:
            xr, xa = tolerances_of(case, ref, node.inputs[0])
            slack = xa + xr * np.abs(x)
            step = STEP_OPS[node.op]
            with np.errstate(all="ignore"):
                reach = (step(x - slack) == g) | (step(x + slack) == g) | (step(x) == g)
            if reach[bad].all():
                return True
    moved = sensitivity(case, name)
    if moved is None:
        return False
    with np.errstate(all="ignore"):
        return bool((2 * moved[bad] >= np.abs(g - w)[bad]).all())


ARG_OPS = {"ArgMax", "ArgMin"}
ARG_REASONS = {ILL_KIND: "an ArgMax/ArgMin over values within float32 rounding of each other in onnxruntime's "
                         "input (the index is decided by ulps: seed 14141, onnxruntime's Sin of three equal "
                         "padded values differs in the last bit)",
               ORDER_KIND: "an ArgMax/ArgMin whose chosen value is NaN or +-inf from a contraction whose "
                           "overflowing products make NaN against +-inf a matter of summation order"}


def arg_unsettled(case: Case, ref: Reference, name: str, got: np.ndarray) -> str | None:
    """Why an ArgMax/ArgMin output ``name`` may differ without a bug, or None: at every differing
    index, onnxruntime's input holds, at tensorforge's index and at its own, values within the
    input's tolerance of each other (``ILL_KIND``: a near tie), or one of them non-finite where the
    input is order-dependent (``ORDER_KIND``: NaN vs -inf from a contraction upstream)."""
    node = next((n for n in case.nodes if name in n.outputs), None)
    values = dict(case.inputs, **case.inits, **ref.outputs)
    if node is None or node.op not in ARG_OPS or node.inputs[0] not in values:
        return None
    x = np.asarray(values[node.inputs[0]])
    want, g = np.asarray(ref.outputs[name]), np.asarray(got)
    if x.dtype.kind != "f" or g.shape != want.shape or g.dtype.kind not in "iu" or x.ndim == 0:
        return None
    axis = int(node.attrs.get("axis", 0)) % x.ndim
    if not node.attrs.get("keepdims", 1):
        g, want = np.expand_dims(g, axis), np.expand_dims(want, axis)
    if g.shape[:axis] + g.shape[axis + 1:] != x.shape[:axis] + x.shape[axis + 1:] or \
            (g < 0).any() or (g >= x.shape[axis]).any():
        return None
    bad = g != want
    xg = np.take_along_axis(x, g, axis).astype(np.float64)[bad]
    xw = np.take_along_axis(x, want, axis).astype(np.float64)[bad]
    rtol, atol = tolerances_of(case, ref, node.inputs[0])
    with np.errstate(all="ignore"):
        if ((xg == xw) | (np.abs(xg - xw) <= atol + rtol * np.abs(xw))).all():
            return ILL_KIND
        if (~np.isfinite(xg) | ~np.isfinite(xw)).all() and (
                order_dependent(case, ref, node.inputs[0]) or cancelling_overflow(case, ref, node.inputs[0])):
            return ORDER_KIND
    return None


def tolerances_of(case: Case, ref: Reference, tensor: str) -> tuple[float, float]:
    """(rtol, atol) that ``tolerances`` would give ``tensor`` if it were an output."""
    probe = Case(case.name, case.opset, case.nodes, case.inputs, case.inits, [tensor], case.types)
    return tolerances(probe, ref)[tensor]


def sensitivity(case: Case, name: str, draws: int = 4) -> np.ndarray | None:
    """How far onnxruntime's ``name`` moves (elementwise max over ``draws``) when every finite,
    non-zero float input element moves by 1 or 2 ulps in a random direction (None if it cannot run)."""
    rng = np.random.default_rng(12345)
    try:
        sess = _ort_session(to_model(case).SerializeToString())
        index = [o.name for o in sess.get_outputs()].index(name)
        with np.errstate(all="ignore"):
            base = np.asarray(sess.run(None, dict(case.inputs))[index], np.float64)
            moved = np.zeros(base.shape)
            for _ in range(draws):
                feeds = {}
                for k, v in case.inputs.items():
                    v = np.asarray(v)
                    if v.dtype.kind == "f" and v.size:
                        bits = v.view(np.int32 if v.itemsize == 4 else np.int64 if v.itemsize == 8 else np.int16)
                        nudge = rng.integers(-2, 3, size=v.shape).astype(bits.dtype)
                        ok = np.isfinite(v) & (v != 0)
                        v = np.where(ok, (bits + nudge).view(v.dtype), v)
                        v = np.where(np.isfinite(v) | ~ok, v, np.asarray(case.inputs[k]))
                    feeds[k] = v
                out = np.asarray(sess.run(None, feeds)[index], np.float64)
                delta = np.where(np.isnan(out) != np.isnan(base), np.inf, np.abs(out - base))
                moved = np.maximum(moved, np.nan_to_num(delta, nan=0.0))
        return moved
    except Exception:  # noqa: BLE001
        return None


POOLS = {"AveragePool", "MaxPool", "LpPool"}


def pool_unlike_spec(case: Case, ref: Reference, name: str | None = None) -> str | None:
    """The name of a pooling node (among ``name``'s ancestors, if given) that onnxruntime sizes
    or pads unlike the ONNX spec: with SAME padding and a dilation (see below), or where its
    output has a window on a spatial axis where the spec has none: without ceil mode, a dilated
    window wider than the padded input gives ``floor(span / stride) + 1 = 0`` windows by the spec (onnx.reference, PyTorch, tensorforge) but
    1 in onnxruntime and ONNX's C++ shape inference, which truncate the negative ``span / stride``
    towards zero.  A graph built on the latter size (a Mul broadcasting with it) is invalid under
    the spec, and tensorforge refusing it is that deviation, not a bug (docs/numerics.md)."""
    for n in (ancestors(case, name) if name is not None else case.nodes):
        if n.op not in POOLS or n.outputs[0] not in ref.outputs:
            continue
        auto = n.attrs.get("auto_pad", "NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto.startswith("SAME") and any(d > 1 for d in n.attrs.get("dilations", [])):
            # onnxruntime sizes SAME padding without the dilation ((out - 1) * stride + k - in,
            # where the spec has the dilated extent (k - 1) * d + 1; it refuses most such nodes)
            return n.outputs[0]
        if auto not in ("NOTSET", "VALID") or n.attrs.get("ceil_mode", 0):
            continue
        x = case.inputs.get(n.inputs[0], ref.outputs.get(n.inputs[0], case.inits.get(n.inputs[0])))
        if x is None:
            continue
        spatial, out = np.shape(x)[2:], np.shape(ref.outputs[n.outputs[0]])[2:]
        kernel = list(n.attrs.get("kernel_shape", []))
        dil = list(n.attrs.get("dilations", [1] * len(kernel)))
        pads = list(n.attrs.get("pads", [0] * 2 * len(kernel))) if auto == "NOTSET" else [0] * 2 * len(kernel)
        for a, (i, o, k, d) in enumerate(zip(spatial, out, kernel, dil)):
            if i + pads[a] + pads[a + len(kernel)] < (k - 1) * d + 1 and o >= 1:
                return n.outputs[0]
    return None


def _differing(got, want, rtol: float, atol: float):
    """(got, want, mask of the elements that differ beyond tolerance), None when the shapes or the
    kinds differ (not an element-wise mismatch)."""
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or g.dtype.kind != "f":
        return None
    with np.errstate(all="ignore"):
        same = (np.isnan(g) & np.isnan(w)) | (g == w) | np.isclose(g, w, rtol=rtol, atol=atol)
    return g, w, ~same


def _only_nonfinite(got, want, rtol: float, atol: float) -> bool:
    """Every differing element is NaN or +-inf on both sides (NaN against inf: the signature of a
    summation order, never a finite value turned infinite)."""
    d = _differing(got, want, rtol, atol)
    return d is not None and bool(d[2].any()) and bool((~np.isfinite(d[0][d[2]]) & ~np.isfinite(d[1][d[2]])).all())


def _nonfinite_differences(got, want, rtol: float, atol: float) -> bool:
    """Every differing element is NaN or +-inf on at least one side (a masked softmax row turns
    an order-dependent -inf score into a finite 0 and a NaN score into NaN)."""
    d = _differing(got, want, rtol, atol)
    return d is not None and bool(d[2].any()) and bool((~np.isfinite(d[0][d[2]]) | ~np.isfinite(d[1][d[2]])).all())


CONTRACTIONS = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Attention", "Einsum"}
FLT_MAX = float(np.finfo(np.float32).max)


def _contraction_operands(case: Case, ref: Reference, name: str):
    """The first two operands (onnxruntime's values) of every contraction output ``name`` depends on."""
    values = dict(case.inputs, **case.inits, **ref.outputs)
    for n in ancestors(case, name):
        if n.op in CONTRACTIONS and all(i in values for i in n.inputs[:2]) and len(n.inputs) >= 2:
            yield np.asarray(values[n.inputs[0]]), np.asarray(values[n.inputs[1]])


def _finite_range(x: np.ndarray) -> tuple[float, float] | None:
    """(min, max) of the finite elements as float64, None when there are none."""
    f = x[np.isfinite(x)].astype(np.float64)
    return (float(f.min()), float(f.max())) if f.size else None


def cancelling_overflow(case: Case, ref: Reference, name: str) -> bool:
    """Whether output ``name`` depends on a contraction whose operands have products that
    overflow float32 with both signs: ``(-1e30 * 1e30) + (1e30 * 1e30)`` is NaN when each product
    is rounded first and -inf or +inf under FMA chains, depending on the order (seed 11111: the
    query-key product of an ONNX Attention with 1e30 entries; -inf there is a masked score, NaN is
    not), and ONNX fixes neither the order nor FMA use."""
    for a, b in _contraction_operands(case, ref, name):
        if a.dtype.kind != "f" or b.dtype.kind != "f":
            continue
        ra, rb = _finite_range(a), _finite_range(b)
        if ra is None or rb is None:
            continue
        corners = [x * y for x in ra for y in rb]
        if max(corners) > FLT_MAX and min(corners) < -FLT_MAX:
            return True
    return False


def order_dependent(case: Case, ref: Reference, name: str) -> bool:
    """Whether output ``name`` depends on a contraction whose operands hold an infinity and finite
    values whose products overflow float32: there NaN versus +-inf depends on FMA contraction and
    the summation order (``fuzz_known.ORDER_KIND``), which no runtime is held to."""
    return any(_mag(a) * _mag(b) > FLT_MAX and any(np.isinf(o).any() for o in (a, b) if o.dtype.kind == "f")
               for a, b in _contraction_operands(case, ref, name))


UNDEFINED_WHEN_EMPTY = {"ReduceMean", "GlobalAveragePool"}
EMPTY_MEAN_REASON = ("follows PyTorch and NumPy: a mean over no element is 0 / 0 = NaN (ONNX leaves it "
                     "undefined, onnxruntime gives 0)")


def empty_mean_upstream(case: Case, ref: Reference, name: str) -> bool:
    """Whether output ``name`` depends on a mean over an empty set (an input of size 0 with a
    non-empty result), which the ONNX spec leaves undefined (docs/numerics.md)."""
    values = dict(case.inputs, **case.inits, **ref.outputs)
    for n in ancestors(case, name):
        if n.op in UNDEFINED_WHEN_EMPTY and n.inputs[0] in values and n.outputs[0] in values:
            if np.asarray(values[n.inputs[0]]).size == 0 and np.asarray(values[n.outputs[0]]).size > 0:
                return True
    return False


def _evaluator(model):
    """``onnx.reference.ReferenceEvaluator`` with its Mean fixed: onnx 1.23's adds the operands
    into a copy of the first in place, which fails when a later operand broadcasts it larger
    (``Mean(x[1,1,1], y[1,1,3])``) and left such cases without an arbiter (seed 6161 b1159c4)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class Mean(OpRun):
        op_domain = ""

        def _run(self, *args):
            total = args[0]
            for a in args[1:]:
                total = total + a
            return (np.asarray(total / len(args)).astype(args[0].dtype),)

    return ReferenceEvaluator(model, new_ops=[Mean])


def onnx_reference(case: Case) -> dict[str, np.ndarray] | None:
    """The outputs by ``onnx.reference.ReferenceEvaluator`` (None if it cannot run the case)."""
    try:
        with np.errstate(all="ignore"):
            outs = _evaluator(to_model(case)).run(None, dict(case.inputs))
        return dict(zip(case.outputs, [np.asarray(o) for o in outs]))
    except Exception:  # noqa: BLE001
        return None


def pruned_reference(case: Case, name: str) -> np.ndarray | None:
    """``onnx.reference``'s value of ``name`` from the graph inputs through ``name``'s ancestors
    only: a node it cannot run elsewhere in the graph (Pad with negative pads) does not stop it,
    and a deviation of onnxruntime several nodes upstream (ArgMax skipping NaN, then Cast) is
    still seen (None if it cannot run that part)."""
    keep = {id(n) for n in ancestors(case, name)}
    nodes = [n for n in case.nodes if id(n) in keep]
    used = {i for n in nodes for i in n.inputs if i}
    try:
        feeds = {k: v for k, v in case.inputs.items() if k in used}
        sub = Case(case.name, case.opset, nodes, feeds, {k: v for k, v in case.inits.items() if k in used},
                   [name], case.types)
        with np.errstate(all="ignore"):
            outs = _evaluator(to_model(sub)).run(None, feeds)
        return np.asarray(outs[0])
    except Exception:  # noqa: BLE001
        return None


def upstream_substituted(case: Case, ref: Reference, name: str) -> np.ndarray | None:
    """onnxruntime's ``name`` recomputed with the first upstream node at which onnxruntime
    deviates from onnx.reference (that node alone, fed onnxruntime's inputs) replaced by
    onnx.reference's value: settles a deviation several nodes up when onnx.reference cannot run
    the rest of the graph (an AveragePool with ceil mode and auto_pad; seed 7171:
    ReduceLogSumExp of [inf, nan] is inf in onnxruntime, NaN in torch and onnx.reference).
    None when no upstream node deviates or it cannot run."""
    chain = list(reversed(ancestors(case, name)))            # inputs first
    for n in chain[:-1]:
        out = n.outputs[0]
        if out not in ref.outputs or out not in case.types:
            continue
        alt = node_reference(case, ref, out)
        if alt is None or compare(np.asarray(ref.outputs[out]), alt, BASE_RTOL, BASE_ATOL) is None:
            continue
        if alt.shape != tuple(case.types[out][1]) or str(alt.dtype) != case.types[out][0]:
            return None
        nodes = [m for m in case.nodes if m is not n]
        feeds = dict(case.inputs, **{out: alt})
        sub = Case(case.name, case.opset, nodes, feeds, dict(case.inits), [name], case.types)
        try:
            sess = _ort_session(to_model(sub).SerializeToString())
            with np.errstate(all="ignore"):
                return np.asarray(sess.run([name], feeds)[0])
        except Exception:  # noqa: BLE001
            return None
    return None


def node_reference(case: Case, ref: Reference, name: str) -> np.ndarray | None:
    """``onnx.reference``'s value of ``name`` computed by its producing node alone, fed
    onnxruntime's values of the node's inputs (None if it cannot run it)."""
    node = next((n for n in case.nodes if name in n.outputs), None)
    if node is None:
        return None
    values = {**case.inputs, **case.inits, **ref.outputs}
    if any(i and i not in values for i in node.inputs):
        return None
    try:
        feeds = {i: np.asarray(values[i]) for i in dict.fromkeys(node.inputs) if i}
        one = Case(case.name, case.opset, [node], feeds, {}, [name], case.types)
        with np.errstate(all="ignore"):
            outs = _evaluator(to_model(one)).run(None, feeds)
        return np.asarray(outs[0])
    except Exception:  # noqa: BLE001
        return None


def check_cases(cases: Sequence[Case], refs: dict[str, Reference] | None = None,
                targets: Sequence[str] = TARGETS, tiebreak: bool = True) -> list[Mismatch]:
    """Every mismatch of ``cases`` (compiled together per target) against onnxruntime."""
    refs = refs if refs is not None else {c.name: reference(c) for c in cases}
    found = []
    broken: set[str] = set()      # cases the interpreter cannot even import: not compiled natively
    for target in sorted(targets, key=lambda t: t != "interpreter"):
        todo = [c for c in cases if target == "interpreter" or c.name not in broken]
        outcomes = run_tensorforge(todo, target)
        for c in todo:
            out = outcomes[c.name]
            if target == "interpreter" and out.error is not None:
                broken.add(c.name)
            found += check_outcome(c, refs[c.name], target, out, tiebreak)
    return found


def check_model(model, feeds: Sequence[np.ndarray], targets: Sequence[str] = TARGETS) -> list[str]:
    """For regression tests: the mismatches (as lines) of an ONNX model on ``feeds`` between
    onnxruntime and each tensorforge target; [] when all agree."""
    case = case_from_model(model, feeds)
    return [m.line() for m in check_cases([case], targets=targets) if m.kind not in DEVIATION_KINDS]


def case_from_model(model, feeds: Sequence[np.ndarray], name: str = "case") -> Case:
    """A ``Case`` for an ONNX model built by hand (types from ONNX shape inference)."""
    from onnx import helper, numpy_helper, shape_inference
    from .fuzz_graphs import Node
    inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    types = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.elem_type and tt.HasField("shape"):
            types[vi.name] = (str(helper.tensor_dtype_to_np_dtype(tt.elem_type)),
                              tuple(d.dim_value for d in tt.shape.dim))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for k, v in inits.items():
        types[k] = (str(v.dtype), tuple(v.shape))
    names = [i.name for i in model.graph.input if i.name not in inits]
    nodes = [Node(n.op_type, list(n.input), list(n.output), {a.name: helper.get_attribute_value(a) for a in n.attribute})
             for n in model.graph.node]
    for n in nodes:
        n.red_len = _guess_red_len(n, types)
    opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return Case(name, opset, nodes, dict(zip(names, [np.asarray(f) for f in feeds])), inits,
                [o.name for o in model.graph.output], types)


def _guess_red_len(node, types) -> int:
    """How many terms one result element of ``node`` sums, from the shapes (hand-built models)."""
    def numel(t):
        return int(np.prod(types[t][1], dtype=np.int64)) if t in types else 1
    shapes = [types[i][1] for i in node.inputs if i in types]
    if node.op in ("MatMul", "Gemm") and shapes and shapes[0]:
        trans = node.attrs.get("transA", 0)
        return max(1, int(shapes[0][0] if trans and len(shapes[0]) == 2 else shapes[0][-1]))
    if node.op in ("Conv", "ConvTranspose") and len(shapes) > 1:
        return max(1, int(np.prod(shapes[1][1:])) * (shapes[1][0] if node.op == "ConvTranspose" else 1))
    if node.op in EXACT_OPS or not node.outputs or not node.inputs:
        return 1
    out = max(1, numel(node.outputs[0]))
    return max(1, max(numel(i) for i in node.inputs if i) // out)
