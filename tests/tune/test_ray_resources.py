"""What a node advertises (``tune/distributed/resources.py``), no Ray needed: a measuring unit for
its target and a build resource for its CPU kind; builds for a ``native`` target ask for a sliver
of the build resource of the target's kind, builds for an explicit ``-march`` for nothing."""
import dataclasses

from tensorforge.codegen.target import Target
from tensorforge.tune.distributed.resources import (BUILD_SHARE, build_options, build_resource, node_resources,
                                                    target_resource)


def test_a_node_measures_for_its_target_and_builds_for_its_cpu_kind():
    host = Target.host()
    res = node_resources()
    assert res[target_resource(host.key())] == 1.0
    assert res[build_resource(host)] == 1.0 and len(res) == 2
    assert all(k.replace("_", "").isalnum() for k in res)


def test_native_builds_need_the_targets_cpu_kind_and_explicit_march_builds_do_not():
    host = Target.host()
    assert build_options(host) == {"resources": {build_resource(host): BUILD_SHARE}}
    other_kind = dataclasses.replace(host, features=frozenset(host.features) - {"avx512f", "avx2"})
    assert build_resource(other_kind) != build_resource(host)
    explicit = dataclasses.replace(host, march="x86-64-v2", features=host.features)
    assert build_resource(explicit) is None and build_options(explicit) == {}
