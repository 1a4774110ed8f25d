"""A domain shift inside Multi30k, for the pretrained-model benchmark (bench/pretrained.sh).

Splits each Multi30k file by a topic read from the English side: sentences about water
(beach, sea, lake, swimming, boats, ...) against the rest. The topic holds 2,756 of the
29,000 training pairs, 97 of val and 92 of test_2016_flickr:

    python -m bench.topic_split OUT

writes OUT/{rest,topic}.{train,val,test}.{en,de} and prints the counts.
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

from bench.harness import find_data

TOPIC = re.compile(
    r"\b(water|beach|ocean|swim\w*|pool|lake|river|boat\w*|surf\w*|waves?|sea|kayak\w*"
    r"|canoe\w*|fountain)\b",
    re.IGNORECASE,
)
FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}


def main(out: Path) -> None:
    names = tuple(f"{stem}.{lang}.gz" for stem in FILES.values() for lang in ("en", "de"))
    source = find_data(None, names)
    out.mkdir(parents=True, exist_ok=True)
    for split, stem in FILES.items():
        sides = {lang: _lines(source / f"{stem}.{lang}.gz") for lang in ("en", "de")}
        topical = [bool(TOPIC.search(line)) for line in sides["en"]]
        for part, wanted in (("topic", True), ("rest", False)):
            for lang, lines in sides.items():
                kept = [line for line, t in zip(lines, topical, strict=True) if t == wanted]
                text = "".join(f"{line}\n" for line in kept)
                (out / f"{part}.{split}.{lang}").write_text(text, "utf-8")
            print(f"{part}.{split}: {sum(t == wanted for t in topical):,} pairs")


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as file:
        return file.read().splitlines()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
