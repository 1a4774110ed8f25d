"""`translator` as a user runs it: a real process, and what it must not print.

Also what the command tests' model directory says of itself (`METADATA`).
"""

import dataclasses
import logging
import os
import re
import subprocess
import sys

from tests.support.paths import REPO

# What TensorFlow, absl and SentencePiece print at start-up or while working; a command
# shows none of it without -v.
NOISE = re.compile(
    r"cuda|cuInit|cpu_feature_guard|rebuild TensorFlow|absl|Sharding callback|LOG\(INFO\)"
    r"|INFO:tensorflow|contains input name|oneDNN|^[IWE]\d{4} ",
    re.MULTILINE,
)
# The metadata saved with the command tests' model (random weights).
METADATA = {"step": 0, "note": "random weights, for the command tests"}


def translator(*args, timeout=300, **kwargs):
    """`python -m translator ARGS` with the environment a user has (no log settings)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TF_CPP")}
    return subprocess.run(
        [sys.executable, "-m", "translator", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        **kwargs,
    )


@dataclasses.dataclass(frozen=True)
class Ran:
    """What a command gave: the fields of `subprocess.CompletedProcess` that tests read."""

    returncode: int
    stdout: str
    stderr: str


def in_process(capsys, *args) -> Ran:
    """`translator ARGS` through `main` in this process, what it printed caught by `capsys`.

    For the checks where neither a fresh process (start-up noise, a signal) nor the exit of
    the interpreter is what is tested: it saves the 5 s TensorFlow takes to import.
    """
    from translator.cli import main
    from translator.console import LOG_FORMAT

    capsys.readouterr()
    # The command's log lines on stderr, as in its own process (there `logging.basicConfig`
    # adds this handler; here pytest's own handlers make that call do nothing).
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(handler)
    try:
        code = main([str(arg) for arg in args])
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        logging.getLogger().removeHandler(handler)
    out, err = capsys.readouterr()
    return Ran(code, out, err)
