"""A test-only hook: swap one graph op's lowering for another inside a ``with`` block.

``tensorforge explain --bisect`` must find a kernel that computes the wrong thing; the way to
prove it does is to break one lowering on purpose and check that bisect names that op:

    with override_lowering("graph.relu", lambda ctx: [...]):    # a deliberately wrong kernel
        result = bisect(module, inputs)

Not for production use: the table is process-wide, so other threads compiling at the same time
see the override too.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from ....errors import UnsupportedOpError
from . import registry
from .registry import LoweringFn


@contextlib.contextmanager
def override_lowering(op_name: str, fn: LoweringFn) -> Iterator[None]:
    """Within the block, ``op_name`` (e.g. ``"graph.relu"``) lowers through ``fn(ctx)``."""
    if not op_name.startswith("graph."):
        raise UnsupportedOpError(f"override_lowering takes a graph op name such as 'graph.relu', not '{op_name}'")
    table = registry._TABLE
    missing = object()
    old = table.get(op_name, missing)
    table[op_name] = fn
    try:
        yield
    finally:
        if old is missing:
            table.pop(op_name, None)
        else:
            table[op_name] = old


__all__ = ["override_lowering"]
