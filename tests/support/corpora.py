"""The corpora: synthetic ones made here, Multi30k found on disk, and line files.

- The copy task (`write_copy_corpus`): sentences of 24 two-letter words (a vocabulary of
  39 ids makes each word one piece); the target copies (or reverses) the source.
- Pseudo-word sentences (`synthetic_sentences`), some with umlauts.
- The command tests' input lines (`input_lines`), blank lines in between.
- Multi30k (`find_multi30k`), and the pairs a pipeline must make of a corpus.
"""

from __future__ import annotations

import collections
import gzip
import os
from pathlib import Path

import numpy as np

from tests.support.paths import REPO
from translator.constants import BOS_ID, EOS_ID

MULTI30K_FILES = ("train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz")
# Lines of Multi30k train used for the session vocabulary and the test corpus.
SUBSET = 3000
# A sentence repeated this often is far over MAX_LENGTH (the pipeline tests' defect corpus).
LONG_REPEAT = 40


def find_multi30k() -> Path | None:
    """$TRANSLATOR_DATA_MIRROR (or its multi30k/), else <repo>/../shared/data/multi30k."""
    candidates = []
    if os.environ.get("TRANSLATOR_DATA_MIRROR"):
        mirror = Path(os.environ["TRANSLATOR_DATA_MIRROR"])
        candidates += [mirror / "multi30k", mirror]
    candidates.append(REPO.parent / "shared" / "data" / "multi30k")
    for directory in candidates:
        if all((directory / name).is_file() for name in MULTI30K_FILES):
            return directory
    return None


def read_gz_lines(path: Path, limit: int | None = None) -> list[str]:
    lines = []
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as file:
        for line in file:
            if limit is not None and len(lines) >= limit:
                break
            lines.append(line.rstrip("\n"))
    return lines


def write_lines(path: Path, lines: list[str]) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


def expected_pairs(sources, targets, vocabulary, config):
    """What the pipeline must produce, computed independently with the Python tokenizer.

    Returns (Counter of (source_ids, decoder_input_ids, labels) tuples, empty, too_long).
    """
    pairs = collections.Counter()
    empty = too_long = 0
    encoded = zip(vocabulary.source.encode(sources), vocabulary.target.encode(targets), strict=True)
    for source, target in encoded:
        if not source or not target:
            empty += 1
        elif (
            len(source) + 1 > config.max_source_length or len(target) + 1 > config.max_target_length
        ):
            too_long += 1
        else:
            pairs[((*source, EOS_ID), (BOS_ID, *target), (*target, EOS_ID))] += 1
    return pairs, empty, too_long


WORDS = [f"{a}{b}" for a in "bcdfgk" for b in "aeiou"][:24]  # 24 two-letter words


def write_copy_corpus(
    directory: Path, count: int, seed: int, reverse: bool = False
) -> tuple[Path, Path]:
    """Sentences of 3-8 random words; the target copies (or reverses) the source."""
    rng = np.random.default_rng(seed)
    sources, targets = [], []
    for _ in range(count):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(3, 9))]
        sources.append(" ".join(words))
        targets.append(" ".join(reversed(words) if reverse else words))
    directory.mkdir(parents=True, exist_ok=True)
    src, tgt = directory / f"{seed}.src", directory / f"{seed}.tgt"
    src.write_text("\n".join(sources) + "\n")
    tgt.write_text("\n".join(targets) + "\n")
    return src, tgt


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


BLANK = ("", "   ", "\t", " \t ")


def input_lines(root: Path) -> list[str]:
    """Sentences of 3 to ~24 tokens, shuffled so input order is not length order, with
    empty and whitespace-only lines in between."""
    source, _ = write_copy_corpus(root, 30, seed=5)
    sentences = source.read_text().splitlines()
    long = [" ".join(sentences[i : i + 3]) for i in range(0, 12, 3)]  # ~20 words each
    rng = np.random.default_rng(7)
    lines = [*long, *sentences[12:]]
    lines = [lines[i] for i in rng.permutation(len(lines))]
    for position, blank in zip((0, 5, 9, 14), BLANK, strict=True):
        lines.insert(position, blank)
    lines.append(sentences[12])  # a repeated line
    return lines
