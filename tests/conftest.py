"""Shared pytest setup: quiet TensorFlow, fixed seeds; the fixtures of several folders.

- The Multi30k files (`multi30k_dir`, `subset_files`): the pipeline and command tests.
- One tiny exported model (`exported`), a run of it in a fresh process that imports only
  tensorflow and tensorflow_text (`reference`), and a real `translator serve` process on
  loopback (`server_process`, `server`): the export and serving tests.

The exported model has random weights (with a real SentencePiece vocabulary; a 1+1-layer
Transformer whose hypotheses run to the length limit, so every sentence gets its own
translation): exactness does not need a trained model, and building it takes a second.
Its vocabulary has tags (TAGS), so the export has the tagged signatures too. Exporting
traces the search once per signature; the server and the fresh process start together,
so their TensorFlow start-ups overlap.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pathlib import Path
from typing import Any

import keras
import pytest

from serving.process import ServerProcess
from tests.support.corpora import (
    SUBSET,
    read_gz_lines,
    synthetic_sentences,
    write_lines,
)
from tests.support.missing import need_multi30k
from tests.support.serving import (
    MAX_BATCH_SIZE,
    MAX_REQUEST_BYTES,
    MAX_REQUEST_SENTENCES,
    MAX_SOURCE_LENGTH,
    PREFIXES,
    SAMPLING,
    SEARCH,
    SENTENCES,
    TAGS,
    Exported,
    run_saved_model_reference,
)

# The longest work first (its times: bench/RESULTS.md, "The test suite's time"): the
# README's chains, one worker's group and the longest, then the folders that train.
HEAVY_FIRST = (
    "tests/test_readme.py",
    "tests/training/",
    "tests/backends/",
    "tests/marian/",
    "tests/engines/",
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """How `-n 2 --dist loadgroup` shares the tests out between its two workers.

    A test that uses a fixture of its module (a trained model, a worker process) runs on
    the worker that runs its module's other tests, so the fixture is built once; any other
    test runs on whichever worker is free. The long work is handed out first, the slow
    tests, then HEAVY_FIRST, so that no long test or group starts when the other worker
    has nothing left to do (pytest collects tests/training last).
    """
    shared = ("module", "class", "package")
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs.values() if info is not None else ()
        if any(defined[-1].scope in shared for defined in definitions):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))

    def rank(item) -> tuple[bool, int]:
        folder = next((i for i, f in enumerate(HEAVY_FIRST) if item.nodeid.startswith(f)), None)
        slow = item.get_closest_marker("slow") is not None
        return not slow, len(HEAVY_FIRST) if folder is None else folder

    items.sort(key=rank)  # stable: each file's own order holds


def pytest_runtest_logreport(report):
    """With `TRANSLATOR_TEST_TIMELINE=PATH`, a TSV row per finished test phase: the worker,
    the end time and the seconds, written by the controller under `-n` (where two workers
    idle, or wait on each other, is read off the end times)."""
    path = os.environ.get("TRANSLATOR_TEST_TIMELINE")
    if path and "PYTEST_XDIST_WORKER" not in os.environ:
        worker = getattr(getattr(report, "node", None), "gateway", None)
        with open(path, "a", encoding="utf-8") as file:
            file.write(
                f"{getattr(worker, 'id', 'main')}\t{time.time():.2f}\t"
                f"{report.duration:.2f}\t{report.when}\t{report.nodeid}\n"
            )


@pytest.fixture(autouse=True)
def _seed():
    """Fixed seeds, and Keras' float32 policy before and after each test: a test that sets
    another (the precision tests, `select_precision`) does not leave it to whichever test,
    or module fixture's model, comes next on its worker under `-n 2`. (`train` restores
    the caller's policy itself: tests/training/test_run.py checks it.)"""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(autouse=True)
def _speed_cache(tmp_path_factory, monkeypatch):
    """Each test its own machine speed cache (the planner's), also in its subprocesses."""
    monkeypatch.setenv("TRANSLATOR_CACHE_DIR", str(tmp_path_factory.mktemp("speed-cache")))


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    return need_multi30k()


@pytest.fixture(scope="session")
def subset_files(multi30k_dir, tmp_path_factory) -> tuple[Path, Path]:
    """The first SUBSET training pairs: English as plain text, German gzipped."""
    root = tmp_path_factory.mktemp("subset")
    source = write_lines(root / "train.en", read_gz_lines(multi30k_dir / "train.en.gz", SUBSET))
    target = write_lines(root / "train.de.gz", read_gz_lines(multi30k_dir / "train.de.gz", SUBSET))
    return source, target


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> Exported:
    from tests.support.models import tiny_model
    from translator.artifacts import save_model_dir
    from translator.export import ExportConfig, export_model
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("serving")
    corpus = synthetic_sentences(2000, seed=1)
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", "utf-8")
    vocab_dir = root / "vocab"
    corpus_files = [root / "corpus.txt"]
    build_vocabulary(corpus_files, corpus_files, vocab_dir, vocab_size=400, user_symbols=TAGS)
    model = tiny_model(400, seed=5, logit_scale=2.0, num_encoder_layers=1, num_decoder_layers=1)
    model_dir = save_model_dir(root / "model", model, vocab_dir, {"purpose": "serving tests"})
    config = ExportConfig(search=SEARCH, max_source_length=MAX_SOURCE_LENGTH, sampling=SAMPLING)
    version_dir = export_model(model_dir, root / "export", config)
    return Exported(model_dir, vocab_dir, root / "export", version_dir)


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
        # A string is one segment, as the SavedModel takes it: these tests compare the two
        # APIs with the export's own signatures (tests/serving/test_splitting.py splits).
        "--no-split",
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
    return run_saved_model_reference(exported.version_dir, SENTENCES, TAGS, PREFIXES)
