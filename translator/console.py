"""What a command prints besides its own output: the libraries' logs, quiet by default.

TensorFlow and SentencePiece write native start-up lines that `TF_CPP_MIN_LOG_LEVEL`
cannot silence, so `quiet_native_logs` routes file descriptor 2 through a filter process
that drops them. A process, not a thread, so it still drains if the command dies.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"
# Python loggers of the libraries below us, and the level they print at without -v.
QUIET_LOGGERS = {"absl": logging.WARNING, "tensorflow": logging.ERROR}
# Native stderr lines dropped without -v: absl and SentencePiece INFO/WARNING lines,
# TensorFlow's CPU-feature notice, and two harmless "errors" (no CUDA driver, oneDNN int64).
NATIVE_NOISE = (
    r"^[IW]\d{4} [\d:.]+ +\d+ \S+:\d+\] "
    r"|^WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|^To enable the following instructions: .*rebuild TensorFlow"
    r"|^\S+\.cc\(\d+\) LOG\(INFO\) "
    r"|^E\d{4} .*(failed call to cuInit|oneDNN supports DT_INT64 only)"
)
# The filter process: whole lines from stdin to stdout, minus the noise.
_FILTER = """
import os, re, sys
noise = re.compile(sys.argv[1].encode())
pending = b""
while chunk := os.read(0, 65536):
    *lines, pending = (pending + chunk).split(b"\\n")
    kept = [line for line in lines if not noise.search(line)]
    if kept:
        os.write(1, b"\\n".join(kept) + b"\\n")
if pending and not noise.search(pending):
    os.write(1, pending)
"""


def configure_output(verbose: bool, level: int | str = logging.WARNING) -> None:
    """Sets what the libraries print: everything with `verbose`, else their errors only.

    Must run before TensorFlow is imported (its C++ log level is read at start-up);
    commands import it lazily, inside their handler.

    Args:
        verbose: Show every library's logs.
        level: The level of the command's own logs (timestamped lines on stderr).
    """
    if verbose:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    else:  # a level the user set in the environment wins
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.INFO if verbose else level, format=LOG_FORMAT)
    logging.getLogger().setLevel(logging.INFO if verbose else level)
    for name, quiet_level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(logging.INFO if verbose else quiet_level)


def quiet_native_logs() -> None:
    """Drops native libraries' log noise from stderr for the rest of the process.

    Call it before `configure_output` and before TensorFlow is imported.
    """
    sys.stderr.flush()
    original = os.dup(2)
    sys.stderr = open(  # noqa: SIM115 (stderr, for the life of the process)
        original, "w", buffering=1, encoding=sys.stderr.encoding, errors="backslashreplace"
    )
    filter_process = subprocess.Popen(
        [sys.executable, "-S", "-c", _FILTER, NATIVE_NOISE],
        stdin=subprocess.PIPE,
        stdout=original,
        start_new_session=True,  # Ctrl-C is for the command, not for its filter
    )
    os.dup2(filter_process.stdin.fileno(), 2)
    filter_process.stdin.close()

    def restore() -> None:
        os.dup2(original, 2)  # closes the pipe: the filter drains it and exits
        with contextlib.suppress(subprocess.TimeoutExpired):  # a child still holds the pipe
            filter_process.wait(timeout=5)

    atexit.register(restore)


@contextlib.contextmanager
def progress_bar(total: int | None, description: str) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr when stderr is a terminal; yields its `update` (or a no-op)."""
    if not sys.stderr.isatty():
        yield lambda n: None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="line", desc=description, file=sys.stderr, leave=False) as bar:
        yield bar.update
