"""The serving tests' settings and sentences, and the export's paths.

What the export and the test server are made with (SEARCH, MAX_SOURCE_LENGTH, the
request limits) and the sentences every comparison uses (SENTENCES). The server as a
process is the library's `serving.process.ServerProcess`, which the benchmarks use too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.corpora import synthetic_sentences
from tests.support.paths import SCRIPTS
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
# The vocabulary's tags (e.g. the target languages of a multilingual model): the export
# has the tagged signatures too.
TAGS = ("<2de>", "<2en>")
# The export's sample signature: 2 draws per sentence among the 5 most probable tokens.
SAMPLING = SearchConfig(sampling="topk:5", num_samples=2, seed=3, max_length_b=6)


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
# A target prefix per sentence of SENTENCES for the prefixed signature: words, "", and
# one for the empty sentence (which still translates to "").
PREFIXES = [
    *(" ".join(s.split()[:2]) for s in synthetic_sentences(7, seed=97, max_words=5)),
    "Baku",  # for ""
    "",
    "",
    "",
    "",
    "Zoë",
    "",
]


@dataclasses.dataclass(frozen=True)
class Exported:
    """The session's model directory and its export."""

    model_dir: Path
    vocab_dir: Path
    base: Path
    version_dir: Path


def run_saved_model_reference(
    version_dir: Path,
    sentences: list[str],
    tags: tuple[str, ...] = (),
    prefixes: list[str] | None = None,
) -> dict[str, Any]:
    """The export run in a fresh process with only tensorflow and tensorflow_text.

    Nothing of the repository is on its path (cwd "/", no PYTHONPATH), and the script
    blocks the project's packages: see scripts/saved_model_reference.py for the output.
    """
    result = subprocess.run(
        [
            sys.executable,
            str(SAVED_MODEL_REFERENCE),
            str(version_dir),
            json.dumps(sentences),
            json.dumps(list(tags)),
            *([json.dumps(prefixes)] if prefixes is not None else []),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # nothing of the repository on sys.path
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)
