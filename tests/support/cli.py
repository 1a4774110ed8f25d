"""`translator` as a user runs it: a real process, and what it must not print.

Also what the command tests' model directory says of itself (`METADATA`).
"""

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
