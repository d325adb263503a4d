"""The tuning database: every measured candidate of every tuning task, in one SQLite file.

Tuning is expensive and its results outlive the process, so they go to an embedded SQLite file
(stdlib only) that any number of tuner processes share:

* **Durable in batches.** ``add_records`` is one transaction: a tuner killed mid-run loses at most
  the batch in flight, never a half batch, and the file stays readable (WAL journal; uncommitted
  frames are ignored when the file is next opened).
* **Concurrent writers.** WAL lets readers run beside one writer; writers take the write lock up
  front (``BEGIN IMMEDIATE``) so they queue on the busy timeout instead of deadlocking, and retry
  with backoff when SQLite still answers "busy".
* **Ours or an error.** A file that is not SQLite, is damaged, belongs to another application
  (``PRAGMA application_id`` + the ``meta`` table) or was written by a newer schema raises
  ``TuningDatabaseError`` naming the file and what to do, rather than being "repaired" over.
* **Everything kept.** Failed candidates are records too (with ``error``), so a second run knows
  they were tried; ``measured_configs`` is what lets it do zero new trials.  Selection keeps every
  candidate's (latency, workspace, code size) and applies a Pareto rule (``best``).
* **Portable.** ``export_jsonl``/``import_jsonl`` move records between machines; import is
  idempotent because a record's identity is a digest of its whole content.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
import sqlite3
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, TypeVar

from ..errors import TuningDatabaseError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x54464442          # "TFDB" in the SQLite header: marks the file as ours
JSONL_FORMAT = "tensorforge-tuning"  # the header line of an export
BUSY_TIMEOUT_S = 60.0                # how long a writer waits for another one before giving up
_SQLITE_MAGIC = b"SQLite format 3\x00"
_ADVICE = "move it away or pass --db PATH to use another file"

_T = TypeVar("_T")


def canonical_config(config: dict) -> str:
    """Sorted-keys compact JSON: two configs are the same candidate iff these strings are equal."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)


def default_path() -> Path:
    """``$TENSORFORGE_TUNE_DB``, else ``tuning.sqlite`` in tensorforge's cache folder (the one
    compiled libraries go to), so that tuning once serves every later compile on this machine."""
    env = os.environ.get("TENSORFORGE_TUNE_DB")
    if env:
        return Path(env).expanduser()
    from ..codegen.c.toolchain import cache_dir  # lazy: the database should not pull in codegen
    return cache_dir() / "tuning.sqlite"


@dataclass(frozen=True)
class Workload:
    """One tuning task: a kernel's structural hash + shapes (``key``), described for humans."""

    key: str
    description: dict = field(default_factory=dict)


class Measured:
    """What a measured candidate's ``latencies`` (seconds) and ``error`` say: the database's
    records and the tuner's fresh measurements answer these the same way."""

    latencies: tuple[float, ...]
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.latencies)

    @property
    def median_s(self) -> float:
        """Median latency in seconds (robust to a noisy repeat); ``inf`` for a failed candidate."""
        return statistics.median(self.latencies) if self.ok else math.inf


@dataclass(frozen=True)
class Record(Measured):
    """One measured candidate of a workload on a target. Failed candidates (``error`` set, no
    latencies) are kept so that nobody measures them again."""

    workload_key: str
    target_key: str
    config: dict
    latencies: tuple[float, ...]
    workspace_bytes: int = 0
    code_size: int = 0
    error: str | None = None
    version: str = ""
    created: float = 0.0

    def __post_init__(self) -> None:
        # Lists (from JSON) and NumPy scalars become a hashable tuple of plain floats.
        object.__setattr__(self, "latencies", tuple(float(x) for x in self.latencies))

    def digest(self) -> str:
        """Identity of the record: equal content, equal digest (what import deduplicates on)."""
        return hashlib.sha256(canonical_config(_record_dict(self)).encode()).hexdigest()


class TaskSummary(NamedTuple):
    """One (workload, target) pair as ``tensorforge db show`` lists it."""

    workload_key: str
    target_key: str
    records: int
    ok: int
    best_s: float              # inf when no candidate succeeded
    description: dict          # {} when the workload itself was never added


def _record_dict(r: Record) -> dict:
    d = asdict(r)
    d["latencies"] = list(r.latencies)
    return d


def check_record(r: Record) -> None:
    """Raise ``TuningDatabaseError`` for a record that must not be stored (wrong types, negative
    sizes, NaN latencies, a config that is not JSON)."""
    where = f"record of workload {r.workload_key!r}"
    if not isinstance(r.workload_key, str) or not r.workload_key:
        raise TuningDatabaseError(f"record has no workload_key (got {r.workload_key!r})")
    if not isinstance(r.target_key, str) or not r.target_key:
        raise TuningDatabaseError(f"{where}: target_key must be a non-empty string (got {r.target_key!r})")
    _check_json_dict(r.config, f"{where}: config")
    if any(not math.isfinite(x) or x < 0 for x in r.latencies):
        raise TuningDatabaseError(f"{where}: latencies must be finite and >= 0 (got {list(r.latencies)})")
    for name in ("workspace_bytes", "code_size"):
        v = getattr(r, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TuningDatabaseError(f"{where}: {name} must be an int >= 0 (got {v!r})")
    if r.error is not None and not isinstance(r.error, str):
        raise TuningDatabaseError(f"{where}: error must be a string or None (got {r.error!r})")
    if not isinstance(r.version, str) or not isinstance(r.created, (int, float)):
        raise TuningDatabaseError(f"{where}: version must be a string and created a number")


def _check_workload(w: Workload) -> None:
    if not isinstance(w.key, str) or not w.key:
        raise TuningDatabaseError(f"workload has no key (got {w.key!r})")
    _check_json_dict(w.description, f"workload {w.key!r}: description")


def _check_json_dict(value, what: str) -> None:
    """``value`` must be a dict that JSON can hold (configs and descriptions are stored as JSON)."""
    if not isinstance(value, dict):
        raise TuningDatabaseError(f"{what} must be a dict (got {type(value).__name__})")
    try:
        canonical_config(value)
    except (TypeError, ValueError) as exc:
        raise TuningDatabaseError(f"{what} is not JSON-serialisable: {exc}") from None


def _stamped(r: Record) -> Record:
    """Fill in the tensorforge version and the time when the measurer left them empty."""
    if r.version and r.created:
        return r
    import tensorforge
    return replace(r, version=r.version or tensorforge.__version__, created=r.created or time.time())


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE workloads (key TEXT PRIMARY KEY, description TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    workload_key TEXT NOT NULL,
    target_key TEXT NOT NULL,
    config TEXT NOT NULL,
    latencies TEXT NOT NULL,
    median REAL,
    workspace_bytes INTEGER NOT NULL,
    code_size INTEGER NOT NULL,
    error TEXT,
    version TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX records_task ON records (workload_key, target_key);
"""
_RECORD_COLUMNS = ("workload_key, target_key, config, latencies, workspace_bytes, code_size, error, "
                   "version, created")


def _row_to_record(row: tuple) -> Record:
    wk, tk, config, lat, ws, code, err, version, created = row
    return Record(wk, tk, json.loads(config), tuple(json.loads(lat)), ws, code, err, version, created)


class TuningDatabase:
    """Workloads and measured records in one SQLite file, safe to share between processes.

    Every public method is one short transaction; the object may be shared by threads."""

    def __init__(self, path: str | os.PathLike | None = None, *, readonly: bool = False,
                 timeout: float = BUSY_TIMEOUT_S):
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.readonly = readonly
        self._timeout = timeout
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        if readonly and not self.path.is_file():
            raise TuningDatabaseError(f"no tuning database at {self.path}: tune first, or pass --db PATH")
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._check_magic()
        with self._errors():
            if readonly:
                conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout,
                                       isolation_level=None, check_same_thread=False)
            else:
                conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._conn = conn
            try:
                self._open()
            except BaseException:
                self.close()
                raise

    # -- opening ---------------------------------------------------------------------------------
    def _check_magic(self) -> None:
        """A file that is not SQLite at all: say so before SQLite says "file is not a database"."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise TuningDatabaseError(f"cannot read tuning database {self.path}: {exc}") from None
        if head and head != _SQLITE_MAGIC:
            raise TuningDatabaseError(f"{self.path} is not a tuning database (not an SQLite file): {_ADVICE}")

    def _open(self) -> None:
        conn = self._conn
        if self._state() == "empty":
            if self.readonly:
                raise TuningDatabaseError(f"{self.path} is an empty file, not a tuning database: {_ADVICE}")
            self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            self._write(self._initialise)
        self._verify()
        if not self.readonly:
            # WAL survives in the file header, but a file copied from elsewhere may be in rollback mode.
            self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses nothing committed

    def _state(self) -> str:
        """"empty" (a new or zero-length file), "ours" or "foreign"."""
        app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == APPLICATION_ID:
            return "ours"
        tables = self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        return "empty" if app_id == 0 and tables == 0 else "foreign"

    def _initialise(self, conn: sqlite3.Connection) -> None:
        if self._state() != "empty":  # another process initialised it while we waited for the lock
            return
        # One statement at a time: executescript would COMMIT the transaction we are in.
        for stmt in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(stmt)
        import tensorforge
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [
            ("schema_version", str(SCHEMA_VERSION)), ("application", "tensorforge"),
            ("created_by", tensorforge.__version__)])
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _verify(self) -> None:
        state = self._state()
        if state != "ours":
            raise TuningDatabaseError(
                f"{self.path} is an SQLite file of another application, not a tuning database: {_ADVICE}")
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            row = None
        if row is None or not str(row[0]).isdigit():
            raise TuningDatabaseError(f"tuning database {self.path} is damaged (no schema version): {_ADVICE}")
        version = int(row[0])
        if version > SCHEMA_VERSION:
            raise TuningDatabaseError(
                f"tuning database {self.path} has schema version {version}, newer than this tensorforge reads "
                f"({SCHEMA_VERSION}): upgrade tensorforge, or {_ADVICE}")

    # -- transactions ----------------------------------------------------------------------------
    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors, translated into one that names the file and what to do."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise TuningDatabaseError(
                    f"tuning database {self.path} stayed locked by another process for {self._timeout:.0f} s; "
                    f"try again when it finishes, or pass --db PATH") from None
            if "readonly" in str(exc).lower() or "read-only" in str(exc).lower():
                raise TuningDatabaseError(f"tuning database {self.path} is read-only here: {exc}") from None
            raise TuningDatabaseError(f"tuning database {self.path}: {exc}: {_ADVICE}") from None
        except sqlite3.DatabaseError as exc:  # "file is not a database", "disk image is malformed", ...
            raise TuningDatabaseError(f"tuning database {self.path} is corrupt ({exc}): {_ADVICE}") from None

    def _retry(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` again with jittered backoff while SQLite reports busy (beyond busy_timeout,
        which some lock upgrades bypass), up to the timeout."""
        deadline = time.monotonic() + self._timeout
        delay = 0.005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.25)

    def _write(self, body: Callable[[sqlite3.Connection], _T]) -> _T:
        """``body`` inside one write transaction, all or nothing; retried whole when busy."""
        if self.readonly:
            raise TuningDatabaseError(f"tuning database {self.path} was opened read-only")
        conn = self._conn

        def attempt() -> _T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                conn.execute("COMMIT")
                return result
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return self._retry(attempt)

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock, self._errors():
            return self._retry(lambda: self._live().execute(sql, params).fetchall())

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise TuningDatabaseError(f"tuning database {self.path} is closed")
        return self._conn

    # -- writing ---------------------------------------------------------------------------------
    def add_workload(self, w: Workload) -> None:
        """Record a task (idempotent: the first description of a key stays)."""
        _check_workload(w)
        with self._lock, self._errors():
            self._live()
            self._write(lambda c: self._insert_workloads(c, [w]))

    def add_records(self, records: Iterable[Record]) -> int:
        """Store a batch in ONE transaction; returns how many were new (an identical record,
        e.g. from a repeated import, is stored once)."""
        batch = [_stamped(r) for r in records]
        for r in batch:
            check_record(r)
        with self._lock, self._errors():
            self._live()
            return self._write(lambda c: self._insert_records(c, batch))

    @staticmethod
    def _insert_workloads(conn: sqlite3.Connection, ws: list[Workload]) -> int:
        now = time.time()
        return sum(conn.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?)",
                                (w.key, canonical_config(w.description), now)).rowcount for w in ws)

    @staticmethod
    def _insert_records(conn: sqlite3.Connection, batch: list[Record]) -> int:
        before = conn.total_changes
        conn.executemany(
            f"INSERT OR IGNORE INTO records (digest, median, {_RECORD_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [(r.digest(), r.median_s if r.ok else None, r.workload_key, r.target_key, canonical_config(r.config),
              json.dumps(list(r.latencies)), r.workspace_bytes, r.code_size, r.error, r.version, r.created)
             for r in batch])
        return conn.total_changes - before

    # -- reading ---------------------------------------------------------------------------------
    def records(self, workload_key: str, target_key: str | None = None) -> list[Record]:
        """Every record of a workload (on one target, or all), in the order they were added."""
        sql = f"SELECT {_RECORD_COLUMNS} FROM records WHERE workload_key=?"
        params: tuple = (workload_key,)
        if target_key is not None:
            sql += " AND target_key=?"
            params += (target_key,)
        return [_row_to_record(row) for row in self._read(sql + " ORDER BY id", params)]

    def _ok_records(self, workload_key: str, target_key: str) -> list[Record]:
        return [r for r in self.records(workload_key, target_key) if r.ok]

    def best(self, workload_key: str, target_key: str, *, latency_slack: float = 0.0) -> Record | None:
        """The record to apply. Pareto rule: among successful records no slower than
        ``(1 + latency_slack) x`` the fastest median, the one with the least workspace (ties: the
        faster, then the smaller code). ``latency_slack=0`` is simply the fastest."""
        if not (latency_slack >= 0 and math.isfinite(latency_slack)):
            raise TuningDatabaseError(f"latency_slack must be a finite number >= 0 (got {latency_slack!r})")
        # Only the records within the bound are read: compile calls this for every kernel.
        rows = self._read(
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE workload_key=?1 AND target_key=?2 AND median <= "
            "(SELECT min(median) FROM records WHERE workload_key=?1 AND target_key=?2) * ?3 ORDER BY id",
            (workload_key, target_key, 1.0 + latency_slack))
        if not rows:
            return None
        return min(map(_row_to_record, rows), key=lambda r: (r.workspace_bytes, r.median_s, r.code_size))

    def pareto_front(self, workload_key: str, target_key: str) -> list[Record]:
        """Successful records not dominated in (median, workspace bytes, code size), fastest
        first; of records with equal triples only the earliest is kept."""
        ranked = sorted(self._ok_records(workload_key, target_key),
                        key=lambda r: (r.median_s, r.workspace_bytes, r.code_size))
        front: list[Record] = []
        for r in ranked:
            # Sorted by median, so a dominator of r is already in front (dominance is transitive).
            if not any(q.workspace_bytes <= r.workspace_bytes and q.code_size <= r.code_size for q in front):
                front.append(r)
        return front

    def count(self, workload_key: str | None = None, target_key: str | None = None) -> int:
        """Number of records (failed ones included), optionally of one workload and/or target."""
        where, params = [], []
        for col, val in (("workload_key", workload_key), ("target_key", target_key)):
            if val is not None:
                where.append(f"{col}=?")
                params.append(val)
        sql = "SELECT count(*) FROM records" + (" WHERE " + " AND ".join(where) if where else "")
        return self._read(sql, tuple(params))[0][0]

    def measured_configs(self, workload_key: str, target_key: str) -> set[str]:
        """``canonical_config`` of every candidate already tried, failed ones included: what a
        rerun skips so that it measures nothing twice."""
        rows = self._read("SELECT DISTINCT config FROM records WHERE workload_key=? AND target_key=?",
                          (workload_key, target_key))
        return {row[0] for row in rows}

    def workloads(self) -> list[Workload]:
        return [Workload(k, json.loads(d)) for k, d in
                self._read("SELECT key, description FROM workloads ORDER BY rowid")]

    def summary(self) -> list[TaskSummary]:
        """One row per (workload, target) that has records: counts and the fastest median."""
        desc = {w.key: w.description for w in self.workloads()}
        rows = self._read("SELECT workload_key, target_key, count(*), count(median), min(median) FROM records "
                          "GROUP BY workload_key, target_key ORDER BY min(rowid)")
        return [TaskSummary(wk, tk, n, ok, best if best is not None else math.inf, desc.get(wk, {}))
                for wk, tk, n, ok, best in rows]

    def check(self) -> None:
        """Read every page (``PRAGMA quick_check``): damage anywhere raises ``TuningDatabaseError``
        now rather than when an unlucky query reaches it."""
        rows = self._read("PRAGMA quick_check")
        if [r[0] for r in rows] != ["ok"]:
            problems = "; ".join(str(r[0]) for r in rows[:3])
            raise TuningDatabaseError(f"tuning database {self.path} is corrupt ({problems}): {_ADVICE}")

    # -- JSON lines ------------------------------------------------------------------------------
    def export_jsonl(self, path_or_file: str | os.PathLike | io.TextIOBase) -> int:
        """Write a header line, then every workload and record, one JSON object a line, from one
        consistent snapshot. Returns the number of workload and record lines. A path is written
        atomically (a reader never sees half a file)."""
        with self._lock, self._errors():
            conn = self._live()

            def snapshot() -> tuple[list, list]:
                conn.execute("BEGIN")
                try:
                    return (conn.execute("SELECT key, description FROM workloads ORDER BY rowid").fetchall(),
                            conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records ORDER BY id").fetchall())
                finally:
                    conn.execute("COMMIT")
            workloads, records = self._retry(snapshot)
        import tensorforge
        lines = [{"type": "header", "format": JSONL_FORMAT, "schema": SCHEMA_VERSION,
                  "tensorforge": tensorforge.__version__}]
        lines += [{"type": "workload", "key": k, "description": json.loads(d)} for k, d in workloads]
        lines += [{"type": "record", **_record_dict(_row_to_record(row))} for row in records]
        text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
        if hasattr(path_or_file, "write"):
            path_or_file.write(text)
        else:
            dest = Path(path_or_file)
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, dest)
        return len(lines) - 1

    def import_jsonl(self, path_or_file: str | os.PathLike | io.TextIOBase) -> int:
        """Read an export (all lines are checked before anything is written; an error names the
        line) and add it in one transaction. Returns the number of NEW workloads + records, so
        importing the same file twice returns 0 the second time."""
        name = getattr(path_or_file, "name", None) or str(path_or_file)
        if hasattr(path_or_file, "read"):
            text = path_or_file.read()
        else:
            try:
                text = Path(path_or_file).read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise TuningDatabaseError(f"cannot read {name}: {exc}") from None
        workloads, records = parse_jsonl(text, name)
        with self._lock, self._errors():
            self._live()
            return self._write(lambda c: self._insert_workloads(c, workloads) + self._insert_records(c, records))

    # -- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "TuningDatabase":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TuningDatabase({str(self.path)!r}{', readonly=True' if self.readonly else ''})"


_RECORD_FIELDS = {"workload_key", "target_key", "config", "latencies", "workspace_bytes", "code_size", "error",
                  "version", "created"}
_REQUIRED_RECORD_FIELDS = {"workload_key", "target_key", "config", "latencies"}


def parse_jsonl(text: str, name: str = "<jsonl>") -> tuple[list[Workload], list[Record]]:
    """The workloads and records of an export; ``TuningDatabaseError`` names the first bad line."""
    workloads: list[Workload] = []
    records: list[Record] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TuningDatabaseError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise TuningDatabaseError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        kind = obj.pop("type", None)
        try:
            if kind == "header":
                if obj.get("format") != JSONL_FORMAT:
                    raise TuningDatabaseError(f"not a tensorforge tuning export (format {obj.get('format')!r})")
                if not isinstance(obj.get("schema"), int) or obj["schema"] > SCHEMA_VERSION:
                    raise TuningDatabaseError(f"written by a newer tensorforge (schema {obj.get('schema')!r}, "
                                              f"this one reads {SCHEMA_VERSION}): upgrade tensorforge")
            elif kind == "workload":
                if set(obj) != {"key", "description"}:
                    raise TuningDatabaseError(f"a workload has exactly 'key' and 'description' (got {sorted(obj)})")
                w = Workload(obj["key"], obj["description"])
                _check_workload(w)
                workloads.append(w)
            elif kind == "record":
                missing, unknown = _REQUIRED_RECORD_FIELDS - set(obj), set(obj) - _RECORD_FIELDS
                if missing or unknown:
                    raise TuningDatabaseError(f"record fields missing {sorted(missing)}, unknown {sorted(unknown)}")
                if not isinstance(obj["latencies"], list):
                    raise TuningDatabaseError("latencies must be a list of seconds")
                r = Record(**obj)
                check_record(r)
                records.append(r)
            else:
                raise TuningDatabaseError(f"unknown line type {kind!r} (expected header, workload or record)")
        except TuningDatabaseError as exc:
            raise TuningDatabaseError(f"{where}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise TuningDatabaseError(f"{where}: {exc}") from None
    return workloads, records
