"""The subcommands of the ``tensorforge`` command line, one module each.

Each module has ``register(subparsers)``, which adds its parser and sets ``fn`` (a function of the
parsed arguments returning the exit code).  ``COMMANDS`` lists them in the order ``--help`` shows.
"""
from __future__ import annotations

import importlib

COMMANDS = ("zoo", "demo", "explain", "bench", "compile", "quantize", "run", "db", "tune", "export_mlir")


def register_all(subparsers) -> None:
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(subparsers)
