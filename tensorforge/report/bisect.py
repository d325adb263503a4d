"""``tensorforge explain MODEL --bisect``: the first op whose native result disagrees with the
reference interpreter.

Every result of a graph op becomes an extra output of a copy of the function, which is compiled
as usual (fusion still runs: a value needed outside its kernel is written out, which is what the
fusion engine does for any multi-use value) and run once; the interpreter runs the same copy on the
same inputs.  Walking the results in program order, the first one beyond tolerance is the op
whose kernel is wrong: everything it read was still right.

Tolerance is normwise, as for a whole tensor: ``max|native - ref| <= atol + rtol * max|ref|``
(``rtol`` 1e-4 by default), so values near zero in a large tensor do not trip it.  Integer and
boolean results must match exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..codegen.c.build import build_lowered
from ..codegen.target import Target
from ..ir.builtin import ModuleOp
from ..ir.interpreter import run_function
from ..ir.types import TensorType
from .collect import default_tuning, lower_with_log
from .pictures import kernel_labels

SKIP = ("graph.constant", "func.return")


@dataclass
class OpCheck:
    """One graph op's result compared with the interpreter."""

    index: int                 # position among the checked results (program order)
    op: str                    # e.g. graph.relu
    location: str              # where the frontend found it ("relu_1"), or ""
    kernel: str                # C function that computed it in the bisect build ("" if folded)
    fused: list[str]           # the lowered kernels merged into that function
    max_abs: float
    max_rel: float             # max_abs / max|ref|
    ok: bool
    compiled_in: str = ""      # the kernel holding this op in a normal compile: "#3 conv_relu (k5:conv k6:relu)"

    def line(self) -> str:
        where = f" at {self.location}" if self.location else ""
        kernel = f"kernel {self.kernel} ({_short_list(self.fused)})" if self.kernel else "folded at compile time"
        normal = f"; in a normal compile fused into kernel {self.compiled_in}" if self.compiled_in else ""
        return (f"#{self.index} {self.op}{where} in {kernel}: max abs error {self.max_abs:.3e}, "
                f"rel {self.max_rel:.3e}{normal}")


def _short_list(labels: list[str], most: int = 6) -> str:
    more = f" + {len(labels) - most} more" if len(labels) > most else ""
    return " + ".join(labels[:most]) + more


@dataclass
class BisectResult:
    rtol: float
    atol: float
    checks: list[OpCheck] = field(default_factory=list)

    @property
    def first(self) -> OpCheck | None:
        """The first op beyond tolerance, or None when every result matches."""
        return next((c for c in self.checks if not c.ok), None)

    def text(self) -> str:
        bad = self.first
        head = f"bisect: {len(self.checks)} op results compared (rtol {self.rtol:g}, atol {self.atol:g})"
        if bad is None:
            worst = max(self.checks, key=lambda c: c.max_rel, default=None)
            tail = f"; largest rel error {worst.max_rel:.2e} ({worst.op})" if worst else ""
            return f"{head}: all match{tail}"
        after = sum(1 for c in self.checks[bad.index + 1:] if not c.ok)
        return (f"{head}\nfirst divergence: {bad.line()}\n"
                f"({after} later result(s) also diverge, most of them downstream of it)")


def _compare(native: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> tuple[float, float, bool]:
    native, ref = np.asarray(native), np.asarray(ref)
    if native.shape != ref.shape:
        return float("inf"), float("inf"), False
    if ref.size == 0:
        return 0.0, 0.0, True
    if not np.issubdtype(ref.dtype, np.floating):
        diff = float(np.max(np.abs(native.astype(np.float64) - ref.astype(np.float64))))
        return diff, diff, diff == 0
    a, b = native.astype(np.float64), ref.astype(np.float64)
    same_nonfinite = (np.isnan(a) == np.isnan(b)).all() and (np.isinf(a) == np.isinf(b)).all() \
        and (a[np.isinf(a)] == b[np.isinf(b)]).all()
    finite = np.isfinite(b) & np.isfinite(a)
    diff = float(np.max(np.abs(a - b), where=finite, initial=0.0))
    scale = float(np.max(np.abs(b), where=finite, initial=0.0))
    rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
    return diff, rel, bool(same_nonfinite) and diff <= atol + rtol * scale


def bisect(module: ModuleOp, inputs: Sequence[Any], target: Target | None = None, rtol: float = 1e-4,
           atol: float = 1e-6) -> BisectResult:
    """Compares every graph op result of ``module``'s main function (as optimised: run the
    pipeline first, as ``compile`` does) computed natively against the interpreter."""
    target = target or Target.host()
    probe = module.clone()
    func = probe.main
    n_out = len(func.outputs)
    watched = [(op, r) for op in func.body if op.name not in SKIP for r in op.results
               if isinstance(r.type, TensorType)]
    func.set_return(list(func.outputs) + [r for _, r in watched])
    xs = [np.asarray(x) for x in inputs]
    ref = run_function(func, xs)
    lowered, log = lower_with_log(probe, target)
    model, _ = build_lowered(lowered, probe, target, name="bisect", tuning=default_tuning(target))
    native = model.run(xs)
    normal = _normal_kernels(module, target)
    kernels = [op for op in lowered.main.body if op.name == "structured.kernel"]
    position = {id(k): i for i, k in enumerate(kernels)}
    names = model.layout.kernel_names
    result = BisectResult(rtol, atol)
    for i, (op, _) in enumerate(watched):
        j = n_out + i
        producer = lowered.main.outputs[j].op
        kernel, fused = "", []
        if producer is not None and id(producer) in position:
            kernel, fused = names[position[id(producer)]], kernel_labels(producer, log)
        diff, rel, ok = _compare(native[j], ref[j], rtol, atol)
        loc = "" if op.loc is None else str(op.loc)
        result.checks.append(OpCheck(i, op.name, loc, kernel, fused, diff, rel, ok,
                                     _compiled_in(op.short_name, fused, normal)))
    return result


def _normal_kernels(module: ModuleOp, target: Target) -> dict[str, str]:
    """Fusion label -> the kernel that holds it when ``module`` is compiled as usual.

    Labels (``k12:relu``) number the kernels in lowering order, which exposing values as outputs
    does not change, so a label of the bisect build names the same op in the normal build."""
    lowered, log = lower_with_log(module, target)
    kernels = [op for op in lowered.main.body if op.name == "structured.kernel"]
    where = {}
    for i, k in enumerate(kernels):
        labels = kernel_labels(k, log)
        for lab in labels:
            where[lab] = f"#{i} {k.attributes.get('sym_name', 'kernel')} ({_short_list(labels)})"
    return where


def _compiled_in(short_name: str, fused: list[str], normal: dict[str, str]) -> str:
    """The normal build's kernel of the op whose label (among ``fused``) has its name; "" when
    that is ambiguous or unknown."""
    mine = [lab for lab in fused if lab.split(":", 1)[-1] == short_name]
    return normal.get(mine[0], "") if len(mine) == 1 else ""


__all__ = ["BisectResult", "OpCheck", "bisect"]
