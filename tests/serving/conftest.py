"""Session fixtures: one tiny exported model, a run of it in a fresh process that imports only
tensorflow and tensorflow_text, and a real `translator serve` process on loopback.

The model has random weights (with a real SentencePiece vocabulary; a 1+1-layer
Transformer whose hypotheses run to the length limit, so every sentence gets its own
translation): exactness does not need a trained model, and building it takes a second.
Exporting traces the search twice (once per signature); the server and the fresh process
start together, so their TensorFlow start-ups overlap.
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

import numpy as np
import pytest

from translator.search import SearchConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
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


def synthetic_sentences(count: int, seed: int, max_words: int = 12) -> list[str]:
    """Sentences of 2 to `max_words` pseudo-words built from syllables, some with umlauts."""
    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bdfgklmnprstvwz" for v in "aeiouäöü"]
    words = sorted({"".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(300)})
    sentences = []
    for _ in range(count):
        chosen = [words[i] for i in rng.integers(0, len(words), rng.integers(2, max_words + 1))]
        chosen[0] = chosen[0].capitalize()
        sentences.append(" ".join(chosen) + rng.choice([".", "!", ",", ""]))
    return sentences


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


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> Exported:
    from tests.search.helpers import tiny_model
    from translator.artifacts import save_model_dir
    from translator.export import ExportConfig, export_model
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("serving")
    corpus = synthetic_sentences(2000, seed=1)
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", "utf-8")
    vocab_dir = root / "vocab"
    build_vocabulary([root / "corpus.txt"], [root / "corpus.txt"], vocab_dir, vocab_size=400)
    model = tiny_model(400, seed=5, logit_scale=2.0, num_encoder_layers=1, num_decoder_layers=1)
    model_dir = save_model_dir(root / "model", model, vocab_dir, {"purpose": "serving tests"})
    config = ExportConfig(search=SEARCH, max_source_length=MAX_SOURCE_LENGTH)
    version_dir = export_model(model_dir, root / "export", config)
    return Exported(model_dir, vocab_dir, root / "export", version_dir)


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


@pytest.fixture(scope="session")
def server_process(exported, tmp_path_factory):
    """The server, started (not yet ready: see `server`)."""
    server = ServerProcess(
        exported.base,
        tmp_path_factory.mktemp("server") / "serve.log",
        "--max-batch-size",
        str(MAX_BATCH_SIZE),
        "--batch-timeout-micros",
        "20000",
        "--max-request-sentences",
        str(MAX_REQUEST_SENTENCES),
        "--max-request-bytes",
        str(MAX_REQUEST_BYTES),
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def server(server_process) -> ServerProcess:
    """The server, ready to answer."""
    server_process.wait_ready()
    return server_process


@pytest.fixture(scope="session")
def reference(exported, server_process) -> dict[str, Any]:
    """The export run in a fresh process with only tensorflow and tensorflow_text.

    Depends on `server_process` only so that the server starts first and both load
    TensorFlow at the same time.
    """
    result = subprocess.run(
        [
            sys.executable,
            str(HERE / "saved_model_reference.py"),
            str(exported.version_dir),
            json.dumps(SENTENCES),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # nothing of the repository on sys.path
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)
