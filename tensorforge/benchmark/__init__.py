"""Timing tensorforge against its peers, the way PEERS.md says: interleaved, medians after warm-up.

``timing`` (interleaved timing), ``stats`` (errors and ratios), ``work`` (flops and bytes of a
graph), ``roofline`` (the machine's measured ceilings), ``peers`` (torch eager, torch.compile,
onnxruntime), ``runner`` and ``report`` (``tensorforge bench``: run, then table, JSON, chart),
``child`` (one setting per subprocess, for the scripts under benchmarks/).
"""
from .timing import Timing, time_interleaved  # noqa: F401
