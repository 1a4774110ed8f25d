"""The serving tests' settings and sentences, the export's paths, and the server as a process.

What the export and the test server are made with (SEARCH, MAX_SOURCE_LENGTH, the
request limits), the sentences every comparison uses (SENTENCES), and `ServerProcess`:
`translator serve` as a subprocess with a stdlib HTTP client.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.corpora import synthetic_sentences
from tests.support.paths import REPO, SCRIPTS
from translator.search import SearchConfig

# Runs an export with tensorflow and tensorflow_text only: VERSION_DIR SENTENCES_JSON.
SAVED_MODEL_REFERENCE = SCRIPTS / "saved_model_reference.py"
# The export's settings: `translator translate --beam-size 4 --length-penalty 0.6`, n-best 3.
SEARCH = SearchConfig(beam_size=4, length_penalty=0.6, n_best=3)
# What serving_default searches for (and `translate` by default): the best hypothesis only.
BEST = dataclasses.replace(SEARCH, n_best=1)
# Small, so one test sentence is cut (and must be cut alike by the export and Translator).
MAX_SOURCE_LENGTH = 40
# Limits of the test server (small, so the over-limit requests stay small).
MAX_REQUEST_SENTENCES = 16
MAX_REQUEST_BYTES = 4096
MAX_BATCH_SIZE = 16


# The sentences every comparison uses: ordinary ones of several lengths, and the edge
# cases: empty, whitespace only (empty too, even where SentencePiece makes pieces of it),
# a trailing newline, characters the vocabulary has never seen (byte fallback), and one
# longer than MAX_SOURCE_LENGTH pieces.
SENTENCES = [
    *synthetic_sentences(7, seed=99, max_words=5),
    "",
    "   ",
    "\t",
    "\u3000\u00a0 ",
    "Baku dofi mela.\n",
    "Zoë's café – naïve ✓ 😀",
    " ".join(synthetic_sentences(4, seed=98)),
]


@dataclasses.dataclass(frozen=True)
class Exported:
    """The session's model directory and its export."""

    model_dir: Path
    vocab_dir: Path
    base: Path
    version_dir: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """`translator serve` as a subprocess, and a stdlib HTTP client for it."""

    def __init__(self, base: Path, log_path: Path, *options: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = [sys.executable, "-m", "translator", "serve", "--model", str(base)]
        command += ["--port", str(self.port), *options]
        self._log = open(log_path, "wb")  # noqa: SIM115 (open for the life of the process)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO, env=env
        )

    def log(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace")

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                status, _ = self.get("/healthz", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"server not ready after {timeout} s:\n{self.log()}")

    def request(
        self, method: str, path: str, body: bytes | None = None, timeout: float = 120
    ) -> tuple[int, Any]:
        """(status, parsed JSON body) of one request; HTTP errors are returned, not raised."""
        request = urllib.request.Request(self.url + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())

    def get(self, path: str, timeout: float = 120) -> tuple[int, Any]:
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body: Any, timeout: float = 120) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.request("POST", path, data, timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def run_saved_model_reference(version_dir: Path, sentences: list[str]) -> dict[str, Any]:
    """The export run in a fresh process with only tensorflow and tensorflow_text.

    Nothing of the repository is on its path (cwd "/", no PYTHONPATH), and the script
    blocks the project's packages: see scripts/saved_model_reference.py for the output.
    """
    result = subprocess.run(
        [sys.executable, str(SAVED_MODEL_REFERENCE), str(version_dir), json.dumps(sentences)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # nothing of the repository on sys.path
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)
