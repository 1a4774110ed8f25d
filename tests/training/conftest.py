"""Fixtures of the training tests: the copy task with a real SentencePiece vocabulary."""

import pytest

from tests.support.corpora import write_copy_corpus


@pytest.fixture(scope="session")
def copy_task(tmp_path_factory):
    """Train/validation files and a vocabulary where each word is one piece."""
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("copy_task")
    train = write_copy_corpus(root, 3000, seed=1)
    valid = write_copy_corpus(root, 200, seed=2)
    # 39 = the 24 words as whole pieces + letters + specials: no byte fallback needed.
    build_vocabulary([train[0]], [train[1]], root / "vocab", vocab_size=39, byte_fallback=False)
    return {"train": train, "valid": valid, "vocab": root / "vocab", "root": root}
