"""Random primitive sequences, as an auto-tuner would sample them: each step either is rejected with
ScheduleError and changes nothing, or is applied; the result keeps numerics, prints and parses back,
and its trace replays to identical C."""
import random

import pytest

from tensorforge.errors import ScheduleError
from tensorforge.ir import Module
from tensorforge.ir.parser import parse_module
from tensorforge.ir.printer import print_module
from tensorforge.schedule import Schedule, Trace, replay
from tensorforge.schedule.analysis import ALLOC, perfect_chain, perfect_child, walk_ops

from tests.schedule.kernels import (c_source, check_numerics, col_sum, conv1d, elementwise_chain, lowered, matmul,
                                    softmax, two_stage)

KERNELS = [lambda: matmul(7, 9, 5), lambda: softmax(5, 7), lambda: elementwise_chain(5, 6), lambda: two_stage(6, 5),
           lambda: col_sum(5, 7), lambda: conv1d(11, 3)]
PRIMS = ["split", "split", "tile", "reorder", "reorder", "fuse", "parallel", "vectorize", "unroll", "cache_write",
         "cache_write", "cache_read", "compute_at", "compute_at", "compute_inline"]


def random_step(s: Schedule, rnd: random.Random) -> tuple[str, tuple]:
    """A primitive with arguments that are often, not always, legal."""
    tags = s.loop_tags()
    computes = sorted({t.split(".")[0] for t in tags if t[0].isdigit()})
    allocs = [op.attributes["tag"] for op in walk_ops(s.fn, ALLOC) if op.attributes.get("tag")]
    buffers = [f"in{i}" for i in range(s.fn.attributes["num_inputs"])] + allocs
    loop = s.loop(rnd.choice(tags))
    chain = [l.attributes["tag"] for l in perfect_chain(loop)]
    child = perfect_child(loop)
    inner = child.attributes["tag"] if child is not None else rnd.choice(tags)
    p = rnd.choice(PRIMS)
    args = {
        "split": lambda: (chain[0], rnd.choice([1, 2, 3, 4, 8])),
        "tile": lambda: (chain[0], inner, rnd.choice([2, 3, 4]), rnd.choice([2, 4, 5])),
        "reorder": lambda: tuple(rnd.sample(chain, 2)) if len(chain) > 1 else tuple(rnd.sample(tags, 2)),
        "fuse": lambda: (chain[0], inner),
        "parallel": lambda: (chain[0],),
        "vectorize": lambda: (rnd.choice(tags),),
        "unroll": lambda: (chain[0], rnd.choice([2, 4])),
        "cache_write": lambda: (rnd.choice(computes), rnd.choice(tags + [None])),
        "cache_read": lambda: (rnd.choice(buffers), rnd.choice(tags + [None]), None),
        "compute_at": lambda: (rnd.choice(computes), rnd.choice(tags)),
        "compute_inline": lambda: (rnd.choice(computes),),
    }[p]()
    return p, args


@pytest.mark.parametrize("seed", range(12))
def test_random_schedule_keeps_numerics_and_replays(seed):
    rnd = random.Random(seed)
    kernel = rnd.choice(KERNELS)()
    s = Schedule(lowered(kernel))
    for _ in range(rnd.randint(3, 8)):
        p, args = random_step(s, rnd)
        before = print_module(s.fn)
        try:
            getattr(s, p)(*args)
        except ScheduleError:
            assert print_module(s.fn) == before, f"rejected {p}{args} changed the function"
    check_numerics(kernel, s.fn)
    fresh = replay(lowered(kernel), Trace.from_json(s.trace.to_json()))
    assert c_source(fresh.fn) == c_source(s.fn)
    m = Module()
    m.body.append(s.fn.clone())
    text = print_module(m)
    assert print_module(parse_module(text)) == text
