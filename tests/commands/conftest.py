"""A saved model directory for the command tests, and what it translates each line to.

The model has random weights (a trained one would cost a minute of CPU); it is saved
with a real SentencePiece vocabulary through `translator.artifacts.save_model_dir`, so the
commands load it exactly as they load a trained model. Random output is fine for what
the tests check: order, line counts, formats, and scores against sacreBLEU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import METADATA
from tests.support.corpora import input_lines, write_copy_corpus


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    from tests.support.models import tiny_model
    from translator.artifacts import save_model_dir
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("commands")
    train = write_copy_corpus(root, 3000, seed=1)
    vocab = root / "vocab"
    build_vocabulary([train[0]], [train[1]], vocab, vocab_size=39, byte_fallback=False)
    # Sharpened logits: near-ties between tokens, which could flip with batch shape, are rare.
    model = tiny_model(39, seed=3, logit_scale=4.0, num_encoder_layers=1, num_decoder_layers=1)
    return save_model_dir(root / "model", model, vocab, METADATA)


@pytest.fixture(scope="session")
def lines(tmp_path_factory) -> list[str]:
    return input_lines(tmp_path_factory.mktemp("lines"))


@pytest.fixture(scope="session")
def alone(model_dir, lines) -> dict[str, str]:
    """Each non-blank line translated on its own (a batch of one), default search."""
    from translator.artifacts import load_model_dir
    from translator.inference import Translator

    loaded = load_model_dir(model_dir)
    translator = Translator.from_model(loaded.model, loaded.vocabulary)
    return {line: translator.translate([line])[0] for line in set(lines) if line.strip()}
