"""Schedules: transformations of loop-level kernels (primitives, traces, default schedules)."""
from .default import default_schedule  # noqa: F401
