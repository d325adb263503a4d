"""`tensorforge db`: look into the tuning database, check it, and move it between machines.

    tensorforge db show   [--db PATH] [--target KEY]    workloads, record counts, best latency and GFLOP/s
    tensorforge db check  [--db PATH]                   read every page; exit 1 if the file is damaged
    tensorforge db export FILE.jsonl [--db PATH]        one JSON object a line (header, workloads, records)
    tensorforge db import FILE.jsonl [--db PATH]        idempotent: importing twice adds nothing

Reading commands open the file read-only, so looking never creates or changes a database.
"""
from __future__ import annotations

import argparse
import math

_DB_HELP = "the tuning database (default: $TENSORFORGE_TUNE_DB, else tuning.sqlite in the tensorforge cache)"


def _open(args: argparse.Namespace, *, readonly: bool):
    from ..tune.database import TuningDatabase
    return TuningDatabase(getattr(args, "db", None), readonly=readonly)


def format_seconds(s: float) -> str:
    """A latency in the unit that keeps 3-4 significant digits readable."""
    if not math.isfinite(s):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _kernel(description: dict) -> str:
    return str(description.get("kernel") or description.get("name") or "?")


def _cmd_show(args: argparse.Namespace) -> int:
    with _open(args, readonly=True) as db:
        workloads = db.workloads()
        rows = [s for s in db.summary() if args.target is None or s.target_key == args.target]
        print(f"database  {db.path}")
        print(f"          {len(workloads)} workloads, {db.count(target_key=args.target)} records"
              + (f" on target {args.target}" if args.target else ""))
        head = (f"{'workload':<12}  {'kernel':<24} {'target':<36} {'records':>7} {'failed':>6} {'best':>10} "
                f"{'GFLOP/s':>8}")
        print(head)
        print("-" * len(head))
        for s in rows:
            flops = s.description.get("flops")
            gflops = (f"{flops / s.best_s / 1e9:.2f}" if isinstance(flops, (int, float)) and math.isfinite(s.best_s)
                      and s.best_s > 0 else "-")
            print(f"{s.workload_key[:12]:<12}  {_kernel(s.description)[:24]:<24} {s.target_key[:36]:<36} "
                  f"{s.records:>7} {s.records - s.ok:>6} {format_seconds(s.best_s):>10} {gflops:>8}")
        tuned = {s.workload_key for s in db.summary()}
        for w in workloads:
            if w.key not in tuned and args.target is None:
                print(f"{w.key[:12]:<12}  {_kernel(w.description)[:24]:<24} {'-':<36} {0:>7} {0:>6} {'-':>10} {'-':>8}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    with _open(args, readonly=True) as db:
        db.check()
        print(f"{db.path}: ok ({len(db.workloads())} workloads, {db.count()} records)")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    with _open(args, readonly=True) as db:
        n = db.export_jsonl(args.file)
        print(f"exported {n} rows from {db.path} to {args.file}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    with _open(args, readonly=False) as db:
        n = db.import_jsonl(args.file)
        print(f"imported {n} new rows from {args.file} into {db.path} (now {db.count()} records)")
    return 0


def register(sub) -> None:
    d = sub.add_parser("db", help="show, check, export or import the tuning database")
    d.add_argument("--db", default=None, metavar="PATH", help=_DB_HELP)
    dsub = d.add_subparsers(dest="db_command", required=True)
    # --db after the subcommand too; SUPPRESS keeps a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH", help=_DB_HELP)

    show = dsub.add_parser("show", parents=[common], help="workloads, record counts, best latency per target")
    show.add_argument("--target", default=None, metavar="KEY", help="only this target key")
    show.set_defaults(fn=_cmd_show)
    check = dsub.add_parser("check", parents=[common], help="read every page; fail if the file is damaged")
    check.set_defaults(fn=_cmd_check)
    export = dsub.add_parser("export", parents=[common], help="write every workload and record as JSON lines")
    export.add_argument("file", metavar="FILE.jsonl")
    export.set_defaults(fn=_cmd_export)
    imp = dsub.add_parser("import", parents=[common], help="add the records of a JSON lines export")
    imp.add_argument("file", metavar="FILE.jsonl")
    imp.set_defaults(fn=_cmd_import)
