"""The custom Ray resource that marks a node as a measuring machine of one target.

A node started with ``--resources '{"tensorforge_target_<key>": 1}'`` says "I am a machine of
target <key> (``Target.key()``) and I can time one candidate at a time".  The tuner places one
measuring actor per such node and the actor holds the whole unit, so two measurements never run
on one machine at once, and no measurement runs on a machine of another kind.

    python -m tensorforge.tune.distributed.resources        # prints this machine's resource JSON
    ray start --address HEAD:6379 --resources "$(python -m tensorforge.tune.distributed.resources)"
"""
from __future__ import annotations

import json
import re


def target_resource(target_key: str) -> str:
    """The resource name of ``target_key`` (characters Ray might not take become ``_``)."""
    return "tensorforge_target_" + re.sub(r"[^A-Za-z0-9_]", "_", target_key)


def node_resources(target=None) -> dict[str, float]:
    """The resources a node of ``target`` (default: this machine) advertises."""
    if target is None:
        from ...codegen.target import Target
        target = Target.host()
    return {target_resource(target.key()): 1.0}


if __name__ == "__main__":
    print(json.dumps(node_resources()))
