"""Every `translator` line of the README parses, in the default suite.

The CLI's own parser takes each line's arguments, and every `--set KEY=VALUE` is a
setting `load_config` accepts: README drift fails here in a second, where
tests/test_readme.py (slow) runs each line.
"""

from __future__ import annotations

import shlex

import pytest

from tests.support.readme import readme_commands
from training.config import load_config
from translator.cli import build_parser, split_verbose

# Shell words that end one command and start the next.
SEPARATORS = {"|", "||", "&&", ";", "&"}


def translator_argvs(command: str) -> list[list[str]]:
    """The `translator` invocations of one shell line, each as its argument list."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True  # (the punctuation still splits: `a|b`, `a && b`)
    argvs, current = [], []
    for word in [*lexer, ";"]:
        if word in SEPARATORS:
            if "translator" in current:
                argvs.append(current[current.index("translator") + 1 :])
            current = []
        else:
            current.append(word)
    return [_without_redirections(argv) for argv in argvs]


def _without_redirections(argv: list[str]) -> list[str]:
    """`argv` without `> FILE`, `>> FILE` and `< FILE`."""
    kept, target = [], False
    for word in argv:
        if target:
            target = False
        elif word in (">", ">>", "<"):
            target = True
        else:
            kept.append(word)
    return kept


def settings(argv: list[str]) -> list[str]:
    """The `KEY=VALUE` of every `--set` in `argv`."""
    values = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--set"]
    return values + [word.split("=", 1)[1] for word in argv if word.startswith("--set=")]


COMMANDS = readme_commands(gpu=True)


def test_the_readme_has_commands_to_check():
    argvs = [argv for command in COMMANDS for argv in translator_argvs(command)]
    assert len(argvs) >= 30 and any(settings(argv) for argv in argvs)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_command_parses_and_its_settings_load(command, capsys):
    parser = build_parser()
    for argv in translator_argvs(command):
        arguments, _ = split_verbose(argv)
        try:
            args = parser.parse_args(arguments)
        except SystemExit as exit_:
            if exit_.code:  # (`--help` exits 0)
                pytest.fail(f"{command}: {capsys.readouterr().err.strip().splitlines()[-1]}")
            continue
        assert args.command, command
        for value in settings(argv):
            load_config(None, [value])  # raises ConfigError naming the key
