"""Fixtures of the pipeline tests: a small real SentencePiece vocabulary, a corpus with known
defects. Vocabularies are trained once per session (a few seconds); the Multi30k files
(`multi30k_dir`, `subset_files`) come from tests/conftest.py."""

from pathlib import Path

import pytest

from tests.support.corpora import LONG_REPEAT, read_gz_lines, write_lines


@pytest.fixture(scope="session")
def vocab_dir(subset_files, tmp_path_factory) -> Path:
    """A joint unigram vocabulary of 1000 ids trained on the subset."""
    from translator.pipelines.vocab import build_vocabulary

    out = tmp_path_factory.mktemp("vocab") / "joint"
    build_vocabulary([subset_files[0]], [subset_files[1]], out, vocab_size=1000)
    return out


@pytest.fixture(scope="session")
def vocabulary(vocab_dir):
    from translator.pipelines.vocabulary import load_vocabulary

    return load_vocabulary(vocab_dir)


@pytest.fixture(scope="session")
def defect_corpus(multi30k_dir, tmp_path_factory):
    """1,500 real pairs plus planted empty, blank and over-long lines.

    Line numbers are 0-based indices into the pairs.

    Returns (source_path, target_path, source_lines, target_lines).
    """
    sources = read_gz_lines(multi30k_dir / "train.en.gz", 1500)
    targets = read_gz_lines(multi30k_dir / "train.de.gz", 1500)
    sources[10] = ""  # empty source
    targets[20] = ""  # empty target
    sources[30] = targets[30] = ""  # both empty
    sources[40] = "    "  # blank source: spaces only, no pieces after normalization
    sources[50] = " ".join([sources[50]] * LONG_REPEAT)  # over-long source
    targets[60] = " ".join([targets[60]] * LONG_REPEAT)  # over-long target
    sources[70] = " ".join([sources[70]] * LONG_REPEAT)  # both over-long
    targets[70] = " ".join([targets[70]] * LONG_REPEAT)
    sources[80] = ""  # empty and over-long: counted as empty
    targets[80] = " ".join([targets[80]] * LONG_REPEAT)
    root = tmp_path_factory.mktemp("defects")
    source = write_lines(root / "defects.en.gz", sources)
    target = write_lines(root / "defects.de", targets)
    return source, target, sources, targets
