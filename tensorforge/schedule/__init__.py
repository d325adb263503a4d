"""Schedules: transformations of loop-level kernels (primitives, traces, default schedules)."""
from .default import default_schedule  # noqa: F401
from .primitives import PRIMITIVES, Schedule  # noqa: F401
from .trace import Step, Trace, replay  # noqa: F401
