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
* **Portable.** ``export_jsonl``/``import_jsonl`` move records (with their confirmations and the
  warm cost model's feature rows) between machines; import is idempotent because a record's
  identity is a digest of its whole content.
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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence, TypeVar

from ..errors import TuningDatabaseError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x54464442          # "TFDB" in the SQLite header: marks the file as ours
JSONL_FORMAT = "tensorforge-tuning"  # the header line of an export
BUSY_TIMEOUT_S = 60.0                # how long a writer waits for another one before giving up
CONFIRM_MARGIN = 0.04                # a tuned config is applied only if it beat the default by more than this
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


@dataclass(frozen=True)
class Confirmation:
    """The default and the best measured configs of a workload re-timed together, round-robin in
    one process (``Measurer.confirm``): the evidence ``best`` decides on, because the one-by-one
    timings of the search can rank a candidate above the default when it is not faster.

    ``configs[0]`` is the default; ``latencies[k][r]`` is config k's seconds per call in round r on
    ``clock``; ``records`` is how many records the workload had when confirmed (a later tune
    confirms again only when that changed)."""

    workload_key: str
    target_key: str
    configs: tuple[dict, ...]
    latencies: tuple[tuple[float, ...], ...]
    clock: str = "wall"
    records: int = 0
    version: str = ""
    created: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", tuple(self.configs))
        object.__setattr__(self, "latencies", tuple(tuple(float(x) for x in row) for row in self.latencies))

    @property
    def speedups(self) -> tuple[float, ...]:
        """Per config: the median over rounds of default time / this config's time in the same
        round (1.0 for the default itself); a median of paired ratios, so that load which comes
        and goes between rounds cancels."""
        base = self.latencies[0]
        return tuple(statistics.median(d / t for d, t in zip(base, row)) for row in self.latencies)

    def winners(self, margin: float = CONFIRM_MARGIN) -> list[tuple[dict, float]]:
        """(config, confirmed speedup) of the tuned configs that beat the default by more than
        ``margin``, fastest first; empty: the default is kept."""
        return sorted(((c, s) for c, s in zip(self.configs[1:], self.speedups[1:]) if s > 1.0 + margin),
                      key=lambda cs: -cs[1])

    def to_dict(self) -> dict:
        d = asdict(self)
        d["configs"], d["latencies"] = list(self.configs), [list(row) for row in self.latencies]
        return d

    def digest(self) -> str:
        return hashlib.sha256(canonical_config(self.to_dict()).encode()).hexdigest()


def check_confirmation(c: Confirmation) -> None:
    """Raise ``TuningDatabaseError`` for a confirmation that must not be stored."""
    where = f"confirmation of workload {c.workload_key!r}"
    if not isinstance(c.workload_key, str) or not c.workload_key or not isinstance(c.target_key, str) \
            or not c.target_key:
        raise TuningDatabaseError(f"{where}: workload_key and target_key must be non-empty strings")
    if len(c.configs) < 2 or len(c.latencies) != len(c.configs):
        raise TuningDatabaseError(f"{where}: needs the default and at least one config, one latency row each")
    for config in c.configs:
        _check_json_dict(config, f"{where}: config")
    if c.configs[0].get("kind") != "default":
        raise TuningDatabaseError(f"{where}: the first config must be the default")
    rounds = {len(row) for row in c.latencies}
    if len(rounds) != 1 or 0 in rounds:
        raise TuningDatabaseError(f"{where}: every config needs the same number (> 0) of rounds")
    if any(not math.isfinite(x) or x <= 0 for row in c.latencies for x in row):
        raise TuningDatabaseError(f"{where}: latencies must be finite and > 0")
    if not isinstance(c.records, int) or c.records < 0 or not isinstance(c.clock, str):
        raise TuningDatabaseError(f"{where}: records must be an int >= 0 and clock a string")


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
    return replace(r, version=r.version or _version(), created=r.created or time.time())


def _version() -> str:
    import tensorforge
    return tensorforge.__version__


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
""" + """
CREATE TABLE IF NOT EXISTS confirmations (
    id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    workload_key TEXT NOT NULL,
    target_key TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS confirmations_task ON confirmations (workload_key, target_key);
""" + """
CREATE TABLE IF NOT EXISTS record_features (
    digest TEXT PRIMARY KEY,
    layout TEXT NOT NULL,
    vector TEXT NOT NULL
);
"""
# Added after schema 1 shipped: created on open when missing (a file written before has none, and a
# read-only open of such a file reads "no confirmations"), so the schema version stays 1.
_CONFIRMATIONS_SCHEMA = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS confirmations"):
                                _SCHEMA.index("CREATE TABLE IF NOT EXISTS record_features")]
# Added with the warm cost model (docs/tuning.md, "Warm start"), the same way: the cost model's
# feature row of a record, by the record's digest, so that a later tune of ANOTHER model can train
# on it without the kernel (which the database does not hold).  Exported as "features" lines after
# the records they belong to, so a database moved to another machine warms its tunes too.
_FEATURES_SCHEMA = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS record_features"):]
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
            if not self._has_confirmations():
                self._write(lambda c: [c.execute(stmt) for stmt in filter(str.strip, _CONFIRMATIONS_SCHEMA.split(";"))])
            if not self._has_table("record_features"):
                self._write(lambda c: [c.execute(stmt) for stmt in filter(str.strip, _FEATURES_SCHEMA.split(";"))])

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

    def _has_confirmations(self) -> bool:
        return self._has_table("confirmations")

    def _has_table(self, name: str) -> bool:
        return bool(self._live().execute(
            "SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()[0])

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

    def add_records(self, records: Iterable[Record],
                    features: "tuple[str, Sequence[Sequence[float] | None]] | None" = None) -> int:
        """Store a batch in ONE transaction; returns how many were new (an identical record,
        e.g. from a repeated import, is stored once).  ``features``: (layout id, one cost-model
        feature row or None per record), stored in the same transaction (``record_features``)."""
        batch = [_stamped(r) for r in records]
        for r in batch:
            check_record(r)
        rows = []
        if features is not None:
            layout, vectors = features
            if len(vectors) != len(batch):
                raise TuningDatabaseError(f"add_records got {len(vectors)} feature rows for {len(batch)} records")
            rows = [(r.digest(), layout, json.dumps([float(x) for x in v])) for r, v in zip(batch, vectors)
                    if v is not None]

        def body(c: sqlite3.Connection) -> int:
            n = self._insert_records(c, batch)
            self._insert_features(c, rows)
            return n
        with self._lock, self._errors():
            self._live()
            return self._write(body)

    def featured_records(self, target_key: str, layout: str) -> list[tuple[str, float, list[float]]]:
        """(workload key, median seconds, feature row) of every successful record on ``target_key``
        whose features were stored with ``layout`` (the warm cost model's training set)."""
        if not self._has_table_read("record_features"):
            return []
        rows = self._read("SELECT r.workload_key, r.median, f.vector FROM records r JOIN record_features f "
                          "ON f.digest = r.digest WHERE r.target_key=? AND f.layout=? AND r.median IS NOT NULL "
                          "ORDER BY r.id", (target_key, layout))
        return [(wk, float(m), json.loads(v)) for wk, m, v in rows]

    def content_version(self, target_key: str) -> tuple[int, int]:
        """(successful records on ``target_key``, the largest record id): what the warm cost
        model's cache compares against to decide whether to retrain."""
        n, top = self._read("SELECT count(median), coalesce(max(id), 0) FROM records WHERE target_key=?",
                            (target_key,))[0]
        return int(n), int(top)

    def _has_table_read(self, name: str) -> bool:
        return bool(self._read("SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?", (name,))[0][0])

    def add_confirmation(self, c: Confirmation) -> int:
        """Store a confirmation (1 if new; the latest one of a workload and target is the one
        that counts)."""
        c = c if c.version and c.created else replace(
            c, version=c.version or _version(), created=c.created or time.time())
        check_confirmation(c)
        with self._lock, self._errors():
            self._live()
            return self._write(lambda conn: self._insert_confirmations(conn, [c]))

    @staticmethod
    def _insert_confirmations(conn: sqlite3.Connection, batch: list[Confirmation]) -> int:
        before = conn.total_changes
        conn.executemany("INSERT OR IGNORE INTO confirmations (digest, workload_key, target_key, body, created) "
                         "VALUES (?,?,?,?,?)",
                         [(c.digest(), c.workload_key, c.target_key, canonical_config(c.to_dict()), c.created)
                          for c in batch])
        return conn.total_changes - before

    @staticmethod
    def _insert_workloads(conn: sqlite3.Connection, ws: list[Workload]) -> int:
        now = time.time()
        return sum(conn.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?)",
                                (w.key, canonical_config(w.description), now)).rowcount for w in ws)

    @staticmethod
    def _insert_features(conn: sqlite3.Connection, rows: list[tuple[str, str, str]]) -> int:
        before = conn.total_changes
        conn.executemany("INSERT OR IGNORE INTO record_features VALUES (?,?,?)", rows)
        return conn.total_changes - before

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

    def confirmation(self, workload_key: str, target_key: str) -> Confirmation | None:
        """The latest confirmation of a workload on a target (None: never confirmed, e.g. a file
        written before confirmations existed)."""
        with self._lock, self._errors():
            if not self._retry(self._has_confirmations):
                return None
        rows = self._read("SELECT body FROM confirmations WHERE workload_key=? AND target_key=? "
                          "ORDER BY created DESC, id DESC LIMIT 1", (workload_key, target_key))
        return _confirmation_from_dict(json.loads(rows[0][0])) if rows else None

    def confirmations(self) -> list[Confirmation]:
        with self._lock, self._errors():
            if not self._retry(self._has_confirmations):
                return []
        return [_confirmation_from_dict(json.loads(b)) for (b,) in
                self._read("SELECT body FROM confirmations ORDER BY id")]

    def best(self, workload_key: str, target_key: str, *, latency_slack: float = 0.0,
             margin: float = CONFIRM_MARGIN) -> Record | None:
        """The record to apply, None for "use the default".

        A confirmed workload (``confirmation``) gets a tuned config only if it beat the default by
        more than ``margin`` in the confirmation: among those winners, the ones within
        ``(1 + latency_slack) x`` the fastest confirmed time, the one with the least workspace.
        An unconfirmed workload (older files) gets the Pareto rule on the search's medians: among
        successful records no slower than ``(1 + latency_slack) x`` the fastest median, the one
        with the least workspace (ties: the faster, then the smaller code)."""
        if not (latency_slack >= 0 and math.isfinite(latency_slack)):
            raise TuningDatabaseError(f"latency_slack must be a finite number >= 0 (got {latency_slack!r})")
        conf = self.confirmation(workload_key, target_key)
        if conf is not None:
            return self._best_confirmed(conf, latency_slack, margin)
        # Only the records within the bound are read: compile calls this for every kernel.
        rows = self._read(
            f"SELECT {_RECORD_COLUMNS} FROM records WHERE workload_key=?1 AND target_key=?2 AND median <= "
            "(SELECT min(median) FROM records WHERE workload_key=?1 AND target_key=?2) * ?3 ORDER BY id",
            (workload_key, target_key, 1.0 + latency_slack))
        if not rows:
            return None
        return min(map(_row_to_record, rows), key=lambda r: (r.workspace_bytes, r.median_s, r.code_size))

    def _best_confirmed(self, conf: Confirmation, latency_slack: float, margin: float) -> Record | None:
        winners = conf.winners(margin)
        if not winners:
            return None
        fastest = winners[0][1]
        by_config: dict[str, Record] = {}
        for r in self._ok_records(conf.workload_key, conf.target_key):
            key = canonical_config(r.config)
            if key not in by_config or r.median_s < by_config[key].median_s:
                by_config[key] = r
        close = [(by_config[canonical_config(c)], s) for c, s in winners
                 if s * (1.0 + latency_slack) >= fastest and canonical_config(c) in by_config]
        if not close:
            return None
        return min(close, key=lambda rs: (rs[0].workspace_bytes, -rs[1], rs[0].code_size))[0]

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

            def snapshot() -> tuple[list, list, list]:
                conn.execute("BEGIN")
                try:
                    return (conn.execute("SELECT key, description FROM workloads ORDER BY rowid").fetchall(),
                            conn.execute(f"SELECT {_RECORD_COLUMNS} FROM records ORDER BY id").fetchall(),
                            conn.execute("SELECT f.digest, f.layout, f.vector FROM record_features f "
                                         "JOIN records r ON r.digest = f.digest ORDER BY r.id").fetchall()
                            if self._has_table("record_features") else [])
                finally:
                    conn.execute("COMMIT")
            workloads, records, features = self._retry(snapshot)
        confirmations = self.confirmations()
        lines = [{"type": "header", "format": JSONL_FORMAT, "schema": SCHEMA_VERSION, "tensorforge": _version()}]
        lines += [{"type": "workload", "key": k, "description": json.loads(d)} for k, d in workloads]
        lines += [{"type": "record", **_record_dict(_row_to_record(row))} for row in records]
        lines += [{"type": "confirmation", **c.to_dict()} for c in confirmations]
        lines += [{"type": "features", "record": d, "layout": layout, "vector": json.loads(v)}
                  for d, layout, v in features]
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
        export = parse_jsonl(text, name)
        with self._lock, self._errors():
            self._live()
            return self._write(lambda c: self._insert_workloads(c, export.workloads)
                               + self._insert_records(c, export.records)
                               + self._insert_confirmations(c, export.confirmations)
                               + self._insert_features(c, export.features))

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


_CONFIRMATION_FIELDS = {f.name for f in fields(Confirmation)}


def _confirmation_from_dict(obj: dict) -> Confirmation:
    missing, unknown = {"workload_key", "target_key", "configs", "latencies"} - set(obj), set(obj) - _CONFIRMATION_FIELDS
    if missing or unknown:
        raise TuningDatabaseError(f"confirmation fields missing {sorted(missing)}, unknown {sorted(unknown)}")
    if not isinstance(obj["configs"], list) or not isinstance(obj["latencies"], list):
        raise TuningDatabaseError("a confirmation's configs and latencies must be lists")
    return Confirmation(**obj)


class Export(NamedTuple):
    """What an export file holds; ``features``: (record digest, layout, vector JSON) rows."""

    workloads: list[Workload]
    records: list[Record]
    confirmations: list[Confirmation]
    features: list[tuple[str, str, str]]


def _features_row(obj: dict) -> tuple[str, str, str]:
    if set(obj) != {"record", "layout", "vector"}:
        raise TuningDatabaseError(f"a features line has exactly 'record', 'layout' and 'vector' (got {sorted(obj)})")
    vector = obj["vector"]
    if not isinstance(vector, list) or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in vector):
        raise TuningDatabaseError("a features vector is a list of finite numbers")
    if not isinstance(obj["record"], str) or not isinstance(obj["layout"], str):
        raise TuningDatabaseError("a features line's 'record' and 'layout' are strings")
    return obj["record"], obj["layout"], json.dumps([float(x) for x in vector])


def parse_jsonl(text: str, name: str = "<jsonl>") -> Export:
    """The workloads, records, confirmations and feature rows of an export; ``TuningDatabaseError``
    names the first bad line (a feature row must belong to a record of the same file)."""
    workloads: list[Workload] = []
    records: list[Record] = []
    confirmations: list[Confirmation] = []
    features: list[tuple[str, str, str]] = []
    feature_lines: list[str] = []
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
            elif kind == "confirmation":
                c = _confirmation_from_dict(obj)
                check_confirmation(c)
                confirmations.append(c)
            elif kind == "features":
                features.append(_features_row(obj))
                feature_lines.append(where)
            else:
                raise TuningDatabaseError(f"unknown line type {kind!r} (expected header, workload, record, "
                                          f"confirmation or features)")
        except TuningDatabaseError as exc:
            raise TuningDatabaseError(f"{where}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise TuningDatabaseError(f"{where}: {exc}") from None
    digests = {r.digest() for r in records}
    for row, where in zip(features, feature_lines):
        if row[0] not in digests:
            raise TuningDatabaseError(f"{where}: features of record {row[0]}, which the file does not hold")
    return Export(workloads, records, confirmations, features)
