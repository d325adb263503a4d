"""`tensorforge zoo`: list the built-in models."""
from __future__ import annotations

import argparse


def _cmd_zoo(args: argparse.Namespace) -> int:
    from .. import models
    for name in models.names():
        print(models.describe(name) if hasattr(models, "describe") else name)
    return 0


def register(sub) -> None:
    z = sub.add_parser("zoo", help="list the built-in models")
    z.set_defaults(fn=_cmd_zoo)
