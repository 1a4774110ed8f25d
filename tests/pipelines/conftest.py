"""Shared fixtures: the Multi30k files, a small real SentencePiece vocabulary, a corpus with
known defects. Vocabularies are trained once per session (a few seconds)."""

from pathlib import Path

import pytest

from tests.pipelines.helpers import (
    MULTI30K_FILES,
    SUBSET,
    find_multi30k,
    read_gz_lines,
    write_lines,
)


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    directory = find_multi30k()
    if directory is None:
        pytest.skip(
            "Multi30k not found: set TRANSLATOR_DATA_MIRROR to a directory with "
            f"{', '.join(MULTI30K_FILES)} (or put them in <repo>/../shared/data/multi30k)"
        )
    return directory


@pytest.fixture(scope="session")
def subset_files(multi30k_dir, tmp_path_factory) -> tuple[Path, Path]:
    """The first SUBSET training pairs: English as plain text, German gzipped."""
    root = tmp_path_factory.mktemp("subset")
    source = write_lines(root / "train.en", read_gz_lines(multi30k_dir / "train.en.gz", SUBSET))
    target = write_lines(root / "train.de.gz", read_gz_lines(multi30k_dir / "train.de.gz", SUBSET))
    return source, target


@pytest.fixture(scope="session")
def vocab_dir(subset_files, tmp_path_factory) -> Path:
    """A joint unigram vocabulary of 1000 ids trained on the subset."""
    from translator.pipelines.vocab import build_vocabulary

    out = tmp_path_factory.mktemp("vocab") / "joint"
    build_vocabulary([subset_files[0]], [subset_files[1]], out, vocab_size=1000)
    return out


@pytest.fixture(scope="session")
def vocabulary(vocab_dir):
    from translator.pipelines.tokenizer import load_vocabulary

    return load_vocabulary(vocab_dir)


# Defects planted in `defect_corpus` (line numbers are 0-based indices into the pairs).
LONG_REPEAT = 40  # a sentence repeated this often is far over MAX_LENGTH


@pytest.fixture(scope="session")
def defect_corpus(multi30k_dir, tmp_path_factory):
    """1,500 real pairs plus planted empty, blank and over-long lines.

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
