"""`tensorforge db show | check | export | import`: exit codes, output, and files."""
from __future__ import annotations

import json

import pytest

from tensorforge.cli import main
from tensorforge.commands.db import format_seconds
from tensorforge.tune.database import Record, TuningDatabase, Workload

T = "x86_64-avx2-native-2c-0123456789ab"


@pytest.fixture
def filled(tmp_path):
    path = tmp_path / "t.sqlite"
    with TuningDatabase(path) as db:
        db.add_workload(Workload("a" * 64, {"kernel": "conv2d+relu", "flops": 2_000_000}))
        db.add_workload(Workload("b" * 64, {"kernel": "softmax"}))
        db.add_workload(Workload("c" * 64, {"kernel": "never-tuned"}))
        db.add_records([
            Record("a" * 64, T, {"mr": 4}, (2e-3, 1e-3, 3e-3), created=1.0),        # median 2 ms
            Record("a" * 64, T, {"mr": 6}, (5e-4, 5e-4, 5e-4), created=2.0),        # median 0.5 ms: best
            Record("a" * 64, T, {"mr": 8}, (), error="timeout", created=3.0),
            Record("b" * 64, "arm64-neon", {"v": 1}, (2.5e-6,), created=4.0),
        ])
    return path


def _row(out: str, prefix: str) -> list[str]:
    return next(line for line in out.splitlines() if line.startswith(prefix)).split()


def test_show(filled, capsys):
    assert main(["db", "show", "--db", str(filled)]) == 0
    out = capsys.readouterr().out
    assert f"database  {filled}" in out and "3 workloads, 4 records" in out
    a = _row(out, "a" * 12)
    assert a[1:] == ["conv2d+relu", T, "3", "1", "500", "us", "4.00"]      # 2e6 flop / 0.5 ms = 4 GFLOP/s
    assert _row(out, "b" * 12)[1:] == ["softmax", "arm64-neon", "1", "0", "2.5", "us", "-"]
    assert _row(out, "c" * 12)[1:] == ["never-tuned", "-", "0", "0", "-", "-"]


def test_show_one_target_and_db_before_subcommand(filled, capsys):
    assert main(["db", "--db", str(filled), "show", "--target", "arm64-neon"]) == 0
    out = capsys.readouterr().out
    assert "1 records on target arm64-neon" in out
    assert _row(out, "b" * 12)[2] == "arm64-neon"
    assert not any(line.startswith("a" * 12) or line.startswith("c" * 12) for line in out.splitlines())


def test_export_import_round_trip(filled, tmp_path, capsys):
    out_file = tmp_path / "dump.jsonl"
    assert main(["db", "export", str(out_file), "--db", str(filled)]) == 0
    assert "exported 7 rows" in capsys.readouterr().out                     # 3 workloads + 4 records
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [x["type"] for x in lines].count("record") == 4

    copy = tmp_path / "copy.sqlite"
    assert main(["db", "import", str(out_file), "--db", str(copy)]) == 0
    assert "imported 7 new rows" in capsys.readouterr().out
    assert main(["db", "import", str(out_file), "--db", str(copy)]) == 0
    second = capsys.readouterr().out
    assert "imported 0 new rows" in second and "now 4 records" in second
    with TuningDatabase(filled) as a, TuningDatabase(copy) as b:
        assert b.workloads() == a.workloads()
        assert b.records("a" * 64) == a.records("a" * 64)
        assert b.best("a" * 64, T).config == {"mr": 6}


def test_check(filled, tmp_path, capsys):
    assert main(["db", "check", "--db", str(filled)]) == 0
    assert "ok (3 workloads, 4 records)" in capsys.readouterr().out


def test_errors_exit_1_with_one_line(tmp_path, capsys):
    garbage = tmp_path / "g.sqlite"
    garbage.write_text("definitely not sqlite\n" * 50)
    assert main(["db", "show", "--db", str(garbage)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tensorforge: error: ") and "not a tuning database" in err and "--db" in err

    missing = tmp_path / "missing.sqlite"
    assert main(["db", "show", "--db", str(missing)]) == 1
    assert "no tuning database at" in capsys.readouterr().err
    assert not missing.exists()                                              # looking creates nothing

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "workload", "key": "k", "description": {}}\n{"type": "record"\n')
    assert main(["db", "import", str(bad), "--db", str(tmp_path / "x.sqlite")]) == 1
    assert "bad.jsonl:2: not JSON" in capsys.readouterr().err


def test_format_seconds():
    assert [format_seconds(s) for s in (2.0, 1.5e-3, 2.5e-6, 3e-9, float("inf"))] == \
        ["2 s", "1.5 ms", "2.5 us", "3 ns", "-"]
