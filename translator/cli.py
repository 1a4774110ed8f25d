"""The `translator` command: one entry point, git-style subcommands.

Subcommands come from the `translator.commands` entry-point group, so `training` and
`serving` add theirs without this package importing them. For every command:

- A `TranslatorError` or `OSError` is one `translator <command>: error: ...` line and a
  non-zero exit; anything else is a bug and keeps its traceback.
- Library logs are hidden (`translator.console`); `-v` shows them and tracebacks.
- Long commands log at INFO (`parser.set_defaults(log_level=logging.INFO)`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

import translator
from translator.console import configure_output, quiet_native_logs
from translator.errors import TranslatorError

ENTRY_POINT_GROUP = "translator.commands"
# Flags that show everything (logs of every library, tracebacks); accepted anywhere.
VERBOSE_FLAGS = ("-v", "--verbose", "--debug")


def build_parser() -> argparse.ArgumentParser:
    """Builds the top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="translator",
        description=(
            "Train encoder-decoder Transformer translation models, translate and evaluate "
            "with beam search and sacreBLEU, export SavedModels and serve them."
        ),
        epilog=(
            "Run `translator <command> --help` for the options of one command. "
            "-v (or --verbose, --debug) works with every command, anywhere on the line."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {translator.__version__}")
    parser.add_argument(
        *VERBOSE_FLAGS,
        dest="verbose",
        action="store_true",
        help="also show TensorFlow's and other libraries' logs, and an error's traceback",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        entry.load()(subparsers)
    return parser


def split_verbose(argv: Sequence[str]) -> tuple[list[str], bool]:
    """`argv` without the verbose flags (up to a `--`), and whether one was there."""
    arguments, verbose, options_end = [], False, False
    for argument in argv:
        if not options_end and argument in VERBOSE_FLAGS:
            verbose = True
            continue
        options_end = options_end or argument == "--"
        arguments.append(argument)
    return arguments, verbose


def describe(error: BaseException) -> str:
    """The one line that tells the user what went wrong."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return str(error) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `translator` command line and returns its exit code."""
    arguments, verbose = split_verbose(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(arguments)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0 if args.command is None else 2
    if argv is None and not verbose:  # the program itself, not a call from Python
        quiet_native_logs()
    level = getattr(args, "log_level", logging.WARNING)  # `serve --log-level` names one
    configure_output(verbose, level.upper() if isinstance(level, str) else level)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # e.g. `translator translate ... | head`: not an error
        # Point stdout at /dev/null, so that flushing it at exit cannot fail again.
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (TranslatorError, OSError) as error:
        if verbose:
            raise
        label = getattr(error, "label", "error")
        print(f"translator {args.command}: {label}: {describe(error)}", file=sys.stderr)
        return getattr(error, "exit_code", 1)
    except KeyboardInterrupt:
        print(f"translator {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
