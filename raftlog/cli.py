"""The ``raftlog`` console script.

Subcommands are registered by the modules that own them; this module only
builds the top-level parser and dispatches.
"""

from __future__ import annotations

import argparse
import sys

from raftlog import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftlog",
        description="A replicated, partitioned log on Raft.",
    )
    parser.add_argument("--version", action="version", version=f"raftlog {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
