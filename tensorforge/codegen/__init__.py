"""Native code generation: targets (what a CPU offers) and backends (C today)."""
from .target import Target

__all__ = ["Target"]
