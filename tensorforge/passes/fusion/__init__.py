"""Kernel fusion: merging the one-op kernels of a lowered function into fewer, larger kernels.

Strategies (each a pass, ``passes.py``): vertical (producer into consumer: prologues folded into
loads, epilogues into GEMM/conv, chains along post-dominators), horizontal (sibling GEMMs/convs
by concatenated weights; sibling kernels on a shared input), reuse (multi-output kernels) and
category (runs of cheap kernels).  Legality: kind rules from the op definitions (``rules.py``),
no cycles (``analysis.py``), index maps the contraction can follow.  Profitability: a cost
model for the target (``cost.py``).  Every decision is logged with its reason (``log.py``).
See docs/fusion.md.
"""
from .inline import inline_compute, simplify_kernel  # noqa: F401
from .log import Decision, FusionLog, Group  # noqa: F401
from .passes import STRATEGIES, fuse_function  # noqa: F401

__all__ = ["Decision", "FusionLog", "Group", "STRATEGIES", "fuse_function", "inline_compute", "simplify_kernel"]
