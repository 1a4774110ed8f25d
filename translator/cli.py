"""The `translator` command: one entry point, git-style subcommands.

Subcommands are discovered from the `translator.commands` entry-point group, so the
`training` and `serving` packages add `train` and `serve` without this package
importing them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

import translator

ENTRY_POINT_GROUP = "translator.commands"


class CommandError(Exception):
    """An error meant for the user: printed as `translator <cmd>: error: ...`, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    """Builds the top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="translator",
        description=(
            "Train encoder-decoder Transformer translation models, translate and evaluate "
            "with beam search and sacreBLEU, export SavedModels and serve them."
        ),
        epilog="Run `translator <command> --help` for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {translator.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        entry.load()(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `translator` command line and returns its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.handler(args) or 0)
    except CommandError as error:
        print(f"translator {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"translator {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
