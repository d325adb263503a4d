"""The ``tensorforge`` command line: ``tensorforge <command> ...`` (``tensorforge --help`` lists them).

The commands live in ``tensorforge.commands``, one module each; this module parses the arguments and
turns a ``TensorforgeError`` into a one-line message and exit code 1.
"""
from __future__ import annotations

import argparse
import sys

from .commands import register_all
from .errors import TensorforgeError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tensorforge", description="A deep-learning compiler.")
    sub = p.add_subparsers(dest="command", required=True)
    register_all(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except TensorforgeError as e:
        print(f"tensorforge: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
