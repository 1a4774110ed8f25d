"""The base of every error a user can fix: bad input, a missing file, a bad config.

`translator.cli.main` prints such an error as one line and exits with its `exit_code`;
anything else is a bug and keeps its traceback. This module imports nothing.
"""

from __future__ import annotations


class TranslatorError(Exception):
    """An error meant for the user, whose message says what to fix (file, line, field)."""

    # The command's exit status when this error ends it.
    exit_code = 2
    # What the command line calls it: `translator <command>: <label>: <message>`.
    label = "error"


class ConfigError(TranslatorError, ValueError):
    """A config key or value is wrong (YAML, `--set`, an option, a field); the message names it."""


class PipelineError(TranslatorError):
    """Base of every error about data, vocabularies or downloads the user can fix."""


class CorpusError(PipelineError, ValueError):
    """A text file is missing, unreadable, not UTF-8, or misaligned with its pair."""


class CommandError(TranslatorError):
    """A command-line usage error (printed as `translator <cmd>: error: ...`, exit 2)."""


class FieldError(ConfigError):
    """One field of a config section is out of range; the loader prefixes the section."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_ranges(config: object, rules: dict[str, tuple[float, float | None]]) -> None:
    """Checks `minimum <= value` (and `value < below`, if given) for each field named.

    Raises:
        FieldError: the first field out of range.
    """
    for field, (minimum, below) in rules.items():
        value = getattr(config, field)
        if value < minimum:
            raise FieldError(field, f"must be >= {minimum:g}, got {value:g}")
        if below is not None and not value < below:
            raise FieldError(field, f"must be < {below:g}, got {value:g}")
