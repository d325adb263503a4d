"""Static memory planning: liveness of intermediate tensors and their offsets in one arena."""
from .plan import MemoryPlan, plan_memory, peak_live_bytes  # noqa: F401
