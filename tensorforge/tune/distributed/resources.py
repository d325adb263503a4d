"""The custom Ray resources that say what a node can do for a tuned target.

* **Measure.**  A node started with ``--resources '{"tensorforge_target_<key>": 1, ...}'`` says
  "I am a machine of target <key> (``Target.key()``) and I can time one candidate at a time".  The
  tuner places one measuring actor per such node and the actor holds the whole unit, so two
  measurements never run on one node at once, and no measurement runs on a machine of another
  kind (``host_lock.py`` keeps nodes that share a machine apart too).
* **Build.**  ``tensorforge_build_<arch>_<features digest>`` (one unit) says "gcc here generates
  ``-march=native`` code for this CPU kind".  A build for a ``native`` target asks for a sliver of
  it (``BUILD_SHARE``, so a node's CPUs, not this resource, bound how many builds it runs), so Ray
  places those builds only on nodes of the target's kind; a build for an explicit ``-march`` needs
  no such resource and runs on any node.

    python -m tensorforge.tune.distributed.resources        # prints this machine's resource JSON
    ray start --address HEAD:6379 --resources "$(python -m tensorforge.tune.distributed.resources)"
"""
from __future__ import annotations

import hashlib
import json
import re

BUILD_SHARE = 0.001          # of the build resource one build asks for


def _name(prefix: str, text: str) -> str:
    """``prefix`` + ``text`` with the characters Ray might not take as ``_``."""
    return prefix + re.sub(r"[^A-Za-z0-9_]", "_", text)


def target_resource(target_key: str) -> str:
    """The resource name of measuring nodes of ``target_key``."""
    return _name("tensorforge_target_", target_key)


def build_resource(target) -> str | None:
    """The resource a build for ``target`` needs: one naming its CPU kind when gcc must generate
    for the builder's own CPU (``march == "native"``), else None (any node builds)."""
    if getattr(target, "march", "") != "native":
        return None
    digest = hashlib.sha256(",".join(sorted(target.features)).encode()).hexdigest()[:12]
    return _name("tensorforge_build_", f"{target.arch}_{digest}")


def build_options(target) -> dict:
    """Ray options of a build task for ``target`` (its build resource, when it needs one)."""
    res = build_resource(target)
    return {"resources": {res: BUILD_SHARE}} if res else {}


def node_resources(target=None) -> dict[str, float]:
    """The resources a node advertises: it measures for ``target`` (default: this machine) and
    builds native code for this machine's CPU kind."""
    from ...codegen.target import Target
    host = Target.host()
    out = {target_resource((target or host).key()): 1.0}
    native = build_resource(host)
    if native:
        out[native] = 1.0
    return out


if __name__ == "__main__":
    print(json.dumps(node_resources()))
