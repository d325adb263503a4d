"""Timing tensorforge against its peers, the way PEERS.md says: interleaved, medians after warm-up."""
from .timing import Timing, time_interleaved  # noqa: F401
