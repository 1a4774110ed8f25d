"""Helpers of the pipeline tests: locating Multi30k, reading and writing line files."""

import collections
import gzip
import os
from pathlib import Path

from translator.constants import BOS_ID, EOS_ID

REPO = Path(__file__).resolve().parents[2]
MULTI30K_FILES = ("train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz")
# Lines of Multi30k train used for the session vocabulary and the test corpus.
SUBSET = 3000


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
