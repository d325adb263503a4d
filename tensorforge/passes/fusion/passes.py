"""The fusion passes, by name: ``fuse-vertical``, ``fuse-horizontal``, ``fuse-reuse``,
``fuse-category``, and ``fuse`` (all of them).

Each pass takes a function at the graph level or already lowered: graph ops still present are
lowered to one kernel each first (the horizontal strategy concatenates sibling GEMM/conv
weights before that, while the graph ops still exist), then the strategy merges kernels.  Run
as ``PassManager.parse("fuse")``, from ``tf-opt -p 'fuse-vertical{vector-registers=8}'``, or
from the compile path through ``lower_function`` (``fuse_function``).

Options override what the cost model reads from the target (0 keeps the target's value):
``vector-registers``, ``cache-bytes``, ``max-kernel-ops``, ``small-bytes``, ``launch-bytes``;
``micro-kernels`` and ``gpu-resources`` (true) turn a veto source off.
After a run, ``pass.log`` holds every decision (``print(pass.log)``).
"""
from __future__ import annotations

from typing import Any, Callable, ClassVar

from ...ir.builtin import FuncOp
from ...ir.core import Operation
from ...ir.pass_manager import Option, Pass, parse_pipeline
from ...ir.symbolic import hints_from, symbol_table_of
from ...errors import PassError
from ..lower.graph_to_kernels import KEEP, lower_ops
from ..registry import get_pass, register_pass
from .category import fuse_category
from .constants import fold_constants
from .cost import Machine
from .engine import Fusion
from .gpu_resources import gpu_resource_oracle
from .horizontal import concat_sibling_contractions, fuse_horizontal
from .log import FusionLog
from .reuse import fuse_reuse
from .vertical import fuse_vertical

STRATEGIES = ("vertical", "reuse", "horizontal", "category")
MAX_ROUNDS = 4


class FusionPass(Pass):
    """Base of the fusion passes; ``strategies`` says which run (in the order of STRATEGIES)."""

    strategies: ClassVar[tuple[str, ...]] = STRATEGIES
    options = {
        "vector_registers": Option(0, "vector registers (0: the target's)"),
        "cache_bytes": Option(0, "per-core cache a fused reduction row must fit (0: the target's L2)"),
        "max_kernel_ops": Option(0, "largest fused kernel in scalar ops (0: 4000)"),
        "small_bytes": Option(0, "results up to this size are cheap for category fusion (0: 64 KiB)"),
        "launch_bytes": Option(0, "cost of one kernel call in bytes of traffic (0: 16 KiB)"),
        "micro_kernels": Option(True, "veto merges that take a GEMM/conv off the micro-kernel path"),
        "gpu_resources": Option(True, "GPU targets: veto merges whose kernel ptxas says does not fit"),
    }

    def __init__(self, target: Any = None, **options: Any):
        super().__init__(**options)
        self.target = target
        self.log = FusionLog()

    def machine(self) -> Machine:
        return Machine.of(self.target, vector_registers=self.vector_registers, cache_bytes=self.cache_bytes,
                          max_kernel_ops=self.max_kernel_ops, small_bytes=self.small_bytes,
                          launch_bytes=self.launch_bytes)

    def run(self, module) -> bool:
        changed = False
        for f in module.functions:
            changed |= self.run_function(f)
        return changed

    def run_function(self, func: FuncOp) -> bool:
        """Fuses ``func``'s kernels; cost decisions read symbolic sizes at the function's hints."""
        with hints_from(symbol_table_of(func)):
            return self._run_function(func)

    def _run_function(self, func: FuncOp) -> bool:
        log = self.log
        graph_ops = sum(1 for op in func.body if op.name not in KEEP)
        before = graph_ops + _kernel_count(func)
        changed = False
        if "horizontal" in self.strategies and graph_ops:
            changed |= concat_sibling_contractions(func, log) > 0
        changed |= lower_ops(func) > 0
        folded, hoisted = fold_constants(func)
        if folded or hoisted:
            changed = True
            log.record("constant", (f"{folded} kernels, {hoisted} computes",), True,
                       "evaluated at compile time: they read only constants")
        fz = Fusion(func, self.machine(), log, micro_kernel_oracle(self.target) if self.micro_kernels else None,
                    gpu_resource_oracle(self.target) if self.gpu_resources else None)
        for _ in range(MAX_ROUNDS):
            merged = 0
            if "vertical" in self.strategies:
                merged += fuse_vertical(fz)
            if "reuse" in self.strategies:
                merged += fuse_reuse(fz)
            if "horizontal" in self.strategies:
                merged += fuse_horizontal(fz)
            if "category" in self.strategies:
                merged += fuse_category(fz)
            changed |= merged > 0
            if not merged:
                break
        fz.finish()
        log.kernels_before += before
        log.kernels_after += _kernel_count(func)
        return changed


def _kernel_count(func: FuncOp) -> int:
    return sum(1 for op in func.body if op.name == "structured.kernel")


@register_pass
class FusePass(FusionPass):
    name = "fuse"
    summary = "lower to kernels and fuse them: vertical, reuse, horizontal and category strategies"


@register_pass
class FuseVerticalPass(FusionPass):
    name = "fuse-vertical"
    summary = "fuse producers into consumers (prologues, epilogues, chains) along post-dominators"
    strategies = ("vertical",)


@register_pass
class FuseHorizontalPass(FusionPass):
    name = "fuse-horizontal"
    summary = "concatenate sibling GEMM/conv weights; run sibling kernels on a shared input as one"
    strategies = ("horizontal",)


@register_pass
class FuseReusePass(FusionPass):
    name = "fuse-reuse"
    summary = "multi-output kernels: values needed inside and outside a group, sibling reductions"
    strategies = ("reuse",)


@register_pass
class FuseCategoryPass(FusionPass):
    name = "fuse-category"
    summary = "merge runs of adjacent cheap kernels of the same kind"
    strategies = ("category",)


def micro_kernel_oracle(target: Any = None) -> Callable[[Operation], bool] | None:
    """``kernel -> bool``: whether the C code generator maps the kernel's contraction onto its
    GEMM/conv micro-kernels (None when that generator is not available or ``target`` is not
    one it generates for)."""
    if not getattr(target, "tensorizes", True):
        return None
    try:
        from ...codegen.c.tensorize import Tensorizer
    except ImportError:
        return None
    tensorizer = Tensorizer(target)

    def mapped(kernel: Operation) -> bool:
        consts = {i for i, v in enumerate(kernel.operands) if v.op is not None and v.op.name == "graph.constant"}
        return tensorizer.plan(kernel, consts) is not None

    return mapped


def fuse_function(func: FuncOp, target: Any = None, pipeline: str = "fuse",
                  log: FusionLog | None = None) -> FusionLog:
    """Lowers ``func`` and runs the fusion passes named in ``pipeline`` (``"fuse"``,
    ``"fuse-vertical,fuse-category"``, ``"fuse{vector-registers=8}"``) for ``target``;
    returns the log of every decision."""
    log = log if log is not None else FusionLog()
    counts = (log.kernels_before, log.kernels_after)
    before = sum(1 for op in func.body if op.name not in KEEP) + _kernel_count(func)
    for name, opts in parse_pipeline(pipeline):
        p = get_pass(name, **opts)
        if not isinstance(p, FusionPass):
            raise PassError(f"'{name}' is not a fusion pass (fusion pipelines take fuse, fuse-vertical, "
                            f"fuse-horizontal, fuse-reuse, fuse-category)")
        p.target, p.log = target, log
        p.run_function(func)
    lower_ops(func)
    log.kernels_before, log.kernels_after = counts[0] + before, counts[1] + _kernel_count(func)
    return log


__all__ = ["FusePass", "FuseCategoryPass", "FuseHorizontalPass", "FuseReusePass", "FuseVerticalPass",
           "FusionPass", "STRATEGIES", "fuse_function"]
