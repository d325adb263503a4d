"""The tuning database: storage, the Pareto rule, JSON lines, damaged files, concurrent writers,
a writer killed mid-batch, and the two properties the tuner relies on (a second run does zero
trials; a kill loses at most the batch in flight)."""
from __future__ import annotations

import io
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorforge
from tensorforge.errors import TensorforgeError, TuningDatabaseError
from tensorforge.tune.database import (
    APPLICATION_ID,
    Record,
    TuningDatabase,
    Workload,
    canonical_config,
    default_path,
)

REPO = Path(__file__).resolve().parents[2]
W, T = "wk0", "x86_64-avx2-native-2c-abc"


def rec(i: int, median: float, ws: int = 0, code: int = 0, *, wk: str = W, tk: str = T, **kw) -> Record:
    """A stamped record whose median is exactly ``median`` (three repeats around it)."""
    return Record(wk, tk, {"tile": i}, (median * 1.5, median, median * 0.5), ws, code,
                  version="9.9", created=1000.0 + i, **kw)


@pytest.fixture
def db(tmp_path):
    with TuningDatabase(tmp_path / "t.sqlite") as d:
        yield d


def _run_child(code: str, db_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(db_path), *args], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# -- storage --------------------------------------------------------------------------------------

def test_round_trip_and_stamping(tmp_path):
    path = tmp_path / "sub" / "dir" / "t.sqlite"     # parent folders are created
    w = Workload("k1", {"kernel": "conv2d+relu", "shapes": [[1, 3, 8, 8]], "flops": 1234})
    r = Record("k1", T, {"trace": [["split", "i", 4]], "mr": 6}, [3e-3, 1e-3, 2e-3], 4096, 800)
    failed = Record("k1", T, {"mr": 8}, (), error="build error: x")
    with TuningDatabase(path) as db:
        db.add_workload(w)
        db.add_workload(w)                               # idempotent
        assert db.add_records([r, failed]) == 2
    with TuningDatabase(path) as db:                     # reopened: everything persisted
        assert db.workloads() == [w]
        got = db.records("k1")
        assert [g.config for g in got] == [r.config, failed.config]
        assert got[0].latencies == (3e-3, 1e-3, 2e-3) and got[0].median_s == 2e-3 and got[0].ok
        assert (got[0].workspace_bytes, got[0].code_size) == (4096, 800)
        assert got[0].version == tensorforge.__version__ and got[0].created > 1.6e9   # filled in
        assert got[1].error == "build error: x" and not got[1].ok and got[1].median_s == math.inf
        assert db.count() == 2 and db.count("k1", T) == 2 and db.count("k1", "other") == 0 and db.count("zz") == 0
        assert db.records("k1", "other") == []
        assert db.best("k1", T).config == r.config


def test_records_filtered_by_target_and_summary(db):
    db.add_workload(Workload(W, {"kernel": "matmul", "flops": 2e6}))
    db.add_records([rec(0, 2e-3), rec(1, 1e-3), rec(2, 5e-4, tk="arm"), rec(3, 0, error="timeout")])
    assert [r.config["tile"] for r in db.records(W, T)] == [0, 1, 3]
    assert [r.config["tile"] for r in db.records(W, "arm")] == [2]
    rows = {(s.workload_key, s.target_key): s for s in db.summary()}
    assert rows[W, T].records == 3 and rows[W, T].ok == 2 and rows[W, T].best_s == pytest.approx(1e-3)
    assert rows[W, "arm"].best_s == pytest.approx(5e-4) and rows[W, T].description["flops"] == 2e6


# -- selection ------------------------------------------------------------------------------------

def test_best_is_fastest_without_slack_and_trades_latency_for_memory_with_slack(db):
    db.add_records([
        rec(0, 1.00e-3, ws=8000, code=100),
        rec(1, 1.04e-3, ws=1000, code=300),
        rec(2, 1.04e-3, ws=1000, code=200),   # same latency and workspace as 1, smaller code
        rec(3, 1.20e-3, ws=0, code=100),
        rec(4, 0.50e-3, ws=0, code=0, error="wrong output"),   # failed: never chosen
    ])
    assert db.best(W, T).config == {"tile": 0}
    assert db.best(W, T, latency_slack=0.05).config == {"tile": 2}   # 1.04 <= 1.05 x fastest; less memory
    assert db.best(W, T, latency_slack=0.25).config == {"tile": 3}
    assert db.best(W, T, latency_slack=0.03).config == {"tile": 0}
    assert db.best(W, "nowhere") is None
    with pytest.raises(TuningDatabaseError, match="latency_slack"):
        db.best(W, T, latency_slack=-0.1)


def test_best_ties_go_to_faster_then_smaller_code(db):
    db.add_records([rec(0, 1.0e-3, ws=0, code=50), rec(1, 1.1e-3, ws=0, code=10), rec(2, 1.0e-3, ws=0, code=40)])
    assert db.best(W, T, latency_slack=0.5).config == {"tile": 2}


def test_pareto_front(db):
    db.add_records([
        rec(0, 1.0e-3, ws=500, code=500),
        rec(1, 2.0e-3, ws=100, code=500),
        rec(2, 2.0e-3, ws=600, code=600),   # dominated by 0
        rec(3, 3.0e-3, ws=100, code=100),
        rec(4, 3.0e-3, ws=100, code=100),   # equal to 3: kept once
        rec(5, 4.0e-3, ws=100, code=100),   # dominated by 3
        rec(6, 0.1e-3, error="crash"),
    ])
    front = db.pareto_front(W, T)
    assert [r.config["tile"] for r in front] == [0, 1, 3]
    # Brute-force check of the definition on the stored records.
    ok = [r for r in db.records(W, T) if r.ok]
    def key(r):
        return r.median_s, r.workspace_bytes, r.code_size

    def dominated(r):
        return any(all(a <= b for a, b in zip(key(q), key(r))) and key(q) != key(r) for q in ok)
    assert {key(r) for r in ok if not dominated(r)} == {key(r) for r in front}
    assert len(front) == len({key(r) for r in front})


# -- dedup ----------------------------------------------------------------------------------------

def test_dedup_and_measured_configs(db):
    a = Record(W, T, {"b": 1, "a": [1, 2]}, (1e-3,), version="1", created=5.0)
    assert db.add_records([a, a]) == 1
    assert db.add_records([a]) == 0
    # A re-measurement of the same config is a new record, but the config was tried once.
    assert db.add_records([Record(W, T, {"a": [1, 2], "b": 1}, (2e-3,), version="1", created=6.0)]) == 1
    db.add_records([Record(W, T, {"c": 1}, (), error="timeout", version="1", created=7.0)])
    assert db.count(W, T) == 3
    assert db.measured_configs(W, T) == {'{"a":[1,2],"b":1}', '{"c":1}'}
    assert canonical_config({"b": 1, "a": [1, 2]}) == canonical_config({"a": [1, 2], "b": 1}) == '{"a":[1,2],"b":1}'
    assert db.measured_configs(W, "other") == set()


def test_invalid_records_are_refused_before_anything_is_written(db):
    good = rec(0, 1e-3)
    for bad, match in [
        (Record(W, T, {"f": object()}, (1e-3,)), "JSON"),
        (Record(W, T, {}, (float("nan"),)), "finite"),
        (Record(W, T, {}, (1e-3,), workspace_bytes=-1), "workspace_bytes"),
        (Record(W, "", {}, (1e-3,)), "target_key"),
    ]:
        with pytest.raises(TuningDatabaseError, match=match):
            db.add_records([good, bad])
    assert db.count() == 0


# -- JSON lines -----------------------------------------------------------------------------------

def test_jsonl_round_trip_and_idempotent_import(tmp_path, db):
    db.add_workload(Workload(W, {"kernel": "softmax", "shapes": [[4, 128]]}))
    db.add_records([rec(0, 1e-3, 64, 10), rec(1, 2e-3), rec(2, 0, error="crash", tk="arm")])
    out = tmp_path / "x.jsonl"
    assert db.export_jsonl(out) == 4
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["type"] == "header" and [x["type"] for x in lines[1:]] == ["workload", "record", "record", "record"]
    with TuningDatabase(tmp_path / "other.sqlite") as other:
        assert other.import_jsonl(out) == 4
        assert other.import_jsonl(out) == 0            # same records twice = once
        assert other.count() == 3
        assert other.workloads() == db.workloads()
        for tk in (T, "arm"):
            assert other.records(W, tk) == db.records(W, tk)   # bit-exact floats and fields
        buf = io.StringIO()
        other.export_jsonl(buf)
        assert buf.getvalue().splitlines()[1:] == out.read_text().splitlines()[1:]


@pytest.mark.parametrize("line, match", [
    ("{not json", "not JSON"),
    ('[1, 2]', "JSON object"),
    ('{"type": "blob"}', "unknown line type"),
    ('{"type": "record", "workload_key": "w", "target_key": "t", "config": {}}', r"missing \['latencies'\]"),
    ('{"type": "record", "workload_key": "w", "target_key": "t", "config": {}, "latencies": [1], "x": 1}',
     r"unknown \['x'\]"),
    ('{"type": "record", "workload_key": "w", "target_key": "t", "config": {}, "latencies": [-1]}', "finite"),
    ('{"type": "record", "workload_key": "w", "target_key": "t", "config": {}, "latencies": ["a"]}', "float"),
    ('{"type": "workload", "key": "w", "description": 3}', "dict"),
    ('{"type": "header", "format": "tensorforge-tuning", "schema": 99}', "newer"),
])
def test_jsonl_bad_line_names_its_number_and_imports_nothing(tmp_path, db, line, match):
    good = ('{"type": "record", "workload_key": "w", "target_key": "t", "config": {"a": 1}, "latencies": [0.5],'
            ' "created": 1.0}')
    src = tmp_path / "bad.jsonl"
    src.write_text(f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(TuningDatabaseError, match=rf"bad.jsonl:3: .*{match}"):
        db.import_jsonl(src)
    assert db.count() == 0
    with pytest.raises(TuningDatabaseError, match="cannot read"):
        db.import_jsonl(tmp_path / "missing.jsonl")


# -- damaged, foreign and newer files -------------------------------------------------------------

def _make_db(path: Path, n: int = 50) -> None:
    with TuningDatabase(path) as d:
        d.add_records(Record(W, T, {"i": i, "pad": "x" * 200}, (1e-3,), created=1.0) for i in range(n))


def test_not_sqlite_foreign_newer_and_corrupt_files(tmp_path):
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"\x00\x01 not a database " * 64)
    with pytest.raises(TuningDatabaseError, match=r"garbage.sqlite is not a tuning database .*move it away"):
        TuningDatabase(garbage)

    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE photos (id INTEGER)")
    c.close()
    with pytest.raises(TuningDatabaseError, match=r"foreign.sqlite is an SQLite file of another application"):
        TuningDatabase(foreign)
    with sqlite3.connect(foreign) as c:                  # unchanged: still not in WAL mode, tables intact
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    c.close()

    newer = tmp_path / "newer.sqlite"
    _make_db(newer, 1)
    c = sqlite3.connect(newer)
    c.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    c.commit()
    c.close()
    with pytest.raises(TuningDatabaseError, match=r"schema version 99, newer .*upgrade tensorforge"):
        TuningDatabase(newer)

    no_meta = tmp_path / "nometa.sqlite"
    _make_db(no_meta, 1)
    c = sqlite3.connect(no_meta)
    c.execute("DROP TABLE meta")
    c.commit()
    c.close()
    with pytest.raises(TuningDatabaseError, match="damaged"):
        TuningDatabase(no_meta)

    corrupt = tmp_path / "corrupt.sqlite"
    _make_db(corrupt)
    data = bytearray(corrupt.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)              # the schema page, header kept
    corrupt.write_bytes(bytes(data))
    with pytest.raises(TuningDatabaseError, match=r"corrupt.sqlite is corrupt .*move it away"):
        TuningDatabase(corrupt)

    damaged_page = tmp_path / "page.sqlite"              # opens; the damage shows on reading
    _make_db(damaged_page)
    data = bytearray(damaged_page.read_bytes())
    data[8 * 4096:] = b"\x5a" * (len(data) - 8 * 4096)   # the pages after the roots of the 7 b-trees
    damaged_page.write_bytes(bytes(data))
    with TuningDatabase(damaged_page) as d:
        with pytest.raises(TuningDatabaseError, match="is corrupt"):
            d.check()
        with pytest.raises(TuningDatabaseError, match="corrupt"):
            d.records(W)

    assert issubclass(TuningDatabaseError, TensorforgeError)


def test_empty_file_becomes_a_database_and_readonly_rules(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(TuningDatabaseError, match="empty file"):
        TuningDatabase(empty, readonly=True)
    with TuningDatabase(empty) as d:
        d.add_records([rec(0, 1e-3)])
    c = sqlite3.connect(empty)
    assert c.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    c.close()
    with TuningDatabase(empty, readonly=True) as ro:
        assert ro.count() == 1
        with pytest.raises(TuningDatabaseError, match="read-only"):
            ro.add_records([rec(1, 1e-3)])
    with pytest.raises(TuningDatabaseError, match="no tuning database at"):
        TuningDatabase(tmp_path / "missing.sqlite", readonly=True)
    d = TuningDatabase(empty)
    d.close()
    with pytest.raises(TuningDatabaseError, match="closed"):
        d.count()


def test_default_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_TUNE_DB", str(tmp_path / "env.sqlite"))
    assert default_path() == tmp_path / "env.sqlite"
    monkeypatch.delenv("TENSORFORGE_TUNE_DB")
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))
    assert default_path() == tmp_path / "cache" / "tuning.sqlite"
    with TuningDatabase() as d:
        d.add_records([rec(0, 1e-3)])
    assert (tmp_path / "cache" / "tuning.sqlite").is_file()


# -- processes ------------------------------------------------------------------------------------

_WRITER = """
    import sys
    from tensorforge.tune.database import Record, TuningDatabase
    path, writer, batches, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    db = TuningDatabase(path)
    print("ready", flush=True)
    sys.stdin.readline()                       # all writers start together
    for b in range(batches):
        n = db.add_records(Record("w", "t", {"writer": writer, "batch": b, "i": i}, (1e-3 * (i + 1), writer + b))
                           for i in range(size))
        assert n == size, n
    db.close()
    print("done", flush=True)
"""


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "shared.sqlite"
    writers, batches, size = 4, 12, 25
    procs = [_run_child(_WRITER, path, str(w), str(batches), str(size)) for w in range(writers)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0 and out.strip() == "done", err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    with TuningDatabase(path) as db:
        db.check()
        assert db.count() == writers * batches * size
        got = {canonical_config(r.config): r.latencies for r in db.records("w", "t")}
        for w in range(writers):
            for b in range(batches):
                for i in range(size):
                    assert got[canonical_config({"writer": w, "batch": b, "i": i})] == (1e-3 * (i + 1), w + b)


_KILLED = """
    import sys
    from tensorforge.tune.database import Record, TuningDatabase
    path, size = sys.argv[1], int(sys.argv[2])
    db = TuningDatabase(path)
    def batch(b, n):
        return [Record("w", "t", {"batch": b, "i": i, "pad": "p" * 400}, (1e-3,)) for i in range(n)]
    for b in range(3):
        db.add_records(batch(b, size))
        print("committed", b, flush=True)
    conn = db._conn
    conn.execute("PRAGMA cache_size=2")          # spill uncommitted pages into the WAL file
    before = conn.total_changes
    calls = [0]
    def stall():                                 # runs inside add_records' transaction
        calls[0] += 1
        if conn.in_transaction and conn.total_changes - before > 100:
            print("inflight", conn.total_changes - before, flush=True)
            sys.stdin.readline()                 # the parent SIGKILLs us here
        return 0
    conn.set_progress_handler(stall, 50)
    db.add_records(batch(3, 20 * size))
    print("finished", flush=True)                # never reached
"""


def test_writer_killed_mid_batch_keeps_committed_batches(tmp_path):
    path = tmp_path / "killed.sqlite"
    size = 20
    p = _run_child(_KILLED, path, str(size))
    try:
        lines = [p.stdout.readline().split() for _ in range(4)]
        assert lines[:3] == [["committed", "0"], ["committed", "1"], ["committed", "2"]], p.stderr.read()
        assert lines[3][0] == "inflight" and int(lines[3][1]) > 100       # rows written, not committed
        assert Path(f"{path}-wal").stat().st_size > 0
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
        p.stdout.close()
        p.stderr.close()
        p.stdin.close()
    assert p.returncode == -signal.SIGKILL
    with TuningDatabase(path) as db:
        db.check()
        assert db.count() == 3 * size
        assert {r.config["batch"] for r in db.records("w", "t")} == {0, 1, 2}
        assert db.add_records([Record("w", "t", {"after": 1}, (1e-3,))]) == 1   # the lock died with the writer
        assert db.count() == 3 * size + 1


# -- the tuner's two properties, at the database level --------------------------------------------

_TUNER = """
    import sys, os, signal
    from tensorforge.tune.database import Record, TuningDatabase, Workload, canonical_config
    path, space, batch, kill_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

    def latency(cfg):                            # deterministic stand-in for a measurement
        return 1e-4 * (1 + (cfg["tile"] * 37) % 101)

    db = TuningDatabase(path)
    db.add_workload(Workload("w", {"kernel": "matmul", "flops": 1e6}))
    tried = db.measured_configs("w", "t")
    todo = [{"tile": i} for i in range(space) if canonical_config({"tile": i}) not in tried]
    trials = 0
    for start in range(0, len(todo), batch):
        records = []
        for cfg in todo[start:start + batch]:
            trials += 1
            if trials == kill_after:             # killed while measuring: this batch is lost
                os.kill(os.getpid(), signal.SIGKILL)
            records.append(Record("w", "t", cfg, (latency(cfg),), workspace_bytes=cfg["tile"]))
        db.add_records(records)
    best = db.best("w", "t")
    print(trials, best.config["tile"], repr(best.median_s), flush=True)
"""


def _tune(path: Path, space: int, batch: int, kill_after: int = 0) -> tuple[int, list[str]]:
    p = _run_child(_TUNER, path, str(space), str(batch), str(kill_after))
    out, err = p.communicate(timeout=60)
    assert p.returncode in (0, -signal.SIGKILL), err
    return p.returncode, out.split()


def test_second_run_does_zero_trials_and_kill_loses_at_most_one_batch(tmp_path):
    space, batch = 60, 8
    path = tmp_path / "tune.sqlite"
    # Killed at the 30th trial: batches 0..2 (24 trials) were committed; batch 3 is lost.
    rc, _ = _tune(path, space, batch, kill_after=30)
    assert rc == -signal.SIGKILL
    with TuningDatabase(path) as db:
        assert db.count("w", "t") == 24
    rc, out = _tune(path, space, batch)                  # resume: measures only what was not stored
    assert rc == 0 and int(out[0]) == space - 24
    rc, again = _tune(path, space, batch)                # complete: zero trials, same answer
    assert rc == 0 and again == ["0", *out[1:]]
    expected = min(range(space), key=lambda i: (1e-4 * (1 + (i * 37) % 101), i))
    assert int(out[1]) == expected and float(out[2]) == 1e-4 * (1 + (expected * 37) % 101)
    with TuningDatabase(path) as db:
        assert db.count("w", "t") == space and len(db.measured_configs("w", "t")) == space


def test_jsonl_carries_the_warm_models_feature_rows(tmp_path, db):
    """The feature rows stored with records (the warm cost model's training set) travel with them."""
    good, bad = rec(0, 1e-3), rec(1, 0, error="crash")
    db.add_records([good, bad], features=("layout-1", [[0.5, 2.0, -1.0], None]))
    out = tmp_path / "f.jsonl"
    assert db.export_jsonl(out) == 3                   # two records, one feature row
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[-1] == {"type": "features", "record": good.digest(), "layout": "layout-1", "vector": [0.5, 2.0, -1.0]}
    with TuningDatabase(tmp_path / "other.sqlite") as other:
        assert other.import_jsonl(out) == 3
        assert other.import_jsonl(out) == 0
        assert other.featured_records(T, "layout-1") == db.featured_records(T, "layout-1")
        assert other.featured_records(T, "layout-1") == [(W, 1e-3, [0.5, 2.0, -1.0])]
    orphan = tmp_path / "orphan.jsonl"
    orphan.write_text(json.dumps({"type": "features", "record": "0" * 64, "layout": "x", "vector": [1.0]}) + "\n")
    with pytest.raises(TuningDatabaseError, match=r"orphan.jsonl:1: features of record 0+, which the file does not"):
        db.import_jsonl(orphan)
    assert db.count() == 2
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"type": "features", "record": "a", "layout": "x", "vector": [NaN]}\n')
    with pytest.raises(TuningDatabaseError, match="nan.jsonl:1: a features vector is a list of finite numbers"):
        db.import_jsonl(nan)
