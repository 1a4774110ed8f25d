"""Languages and scripts: language codes, and words counted in every script.

Codes come from file suffixes (`train.fr.gz`) or `--langs SRC-TGT`; "zh-Hans", "zho" and
"zh_CN" all mean zh, as sacreBLEU and py3langid key languages. Words are
whitespace-separated, or a character each where the script is written without spaces
(Chinese, Japanese): reports bucket sources by these words and the corpus cleaner compares
lengths with them, so that a Chinese sentence is not one long word.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from translator.errors import ConfigError

# A language code as file suffixes and --langs give it: en, fra, zh_CN, pt-BR, sr-Latn.
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,4})?")

# Three-letter and macrolanguage codes read as the two-letter code that sacreBLEU and
# py3langid key languages by (OPUS-MT names some languages so).
LANGUAGE_ALIASES = {"zho": "zh", "cmn": "zh", "chi": "zh", "jpn": "ja", "kor": "ko"}

# One character of a script written without spaces between words: Han ideographs (CJK
# and its extensions, compatibility ideographs), Hiragana, Katakana and their half-width
# forms, and CJK punctuation. Hangul is written with spaces, so Korean counts in words.
UNSPACED_CHARACTER = re.compile(
    "[\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003134f]"
)


def word_count(text: str) -> int:
    """The words of `text`: whitespace-separated, each Chinese or Japanese character one.

    Words are whitespace-separated, except in scripts written without spaces, where a
    word boundary cannot be seen without a segmenter.
    """
    unspaced = len(UNSPACED_CHARACTER.findall(text))
    if not unspaced:
        return len(text.split())
    # The spaced rest: what remains once those characters are spaces.
    return unspaced + len(UNSPACED_CHARACTER.sub(" ", text).split())


def word_spans(text: str) -> list[tuple[int, int]]:
    """Where the words of `word_count` are: `(start, end)` character offsets, in order."""
    spans: list[tuple[int, int]] = []
    start = None
    for index, character in enumerate(text):
        unspaced = UNSPACED_CHARACTER.fullmatch(character) is not None
        if character.isspace() or unspaced:
            if start is not None:
                spans.append((start, index))
                start = None
            if unspaced:
                spans.append((index, index + 1))
        elif start is None:
            start = index
    if start is not None:
        spans.append((start, len(text)))
    return spans


def language_code(language: str) -> str:
    """The bare language of a code: "zh-Hans", "zh_CN" and "zho" -> "zh"; "DE" -> "de"."""
    bare = language.strip().lower().replace("_", "-").split("-")[0]
    return LANGUAGE_ALIASES.get(bare, bare)


def language_of(path: str | os.PathLike[str]) -> str | None:
    """The language suffix of a file name (`train.fr.gz` -> fr), or None."""
    name = Path(path).name.removesuffix(".gz")
    suffix = name.rpartition(".")[2] if "." in name else ""
    return suffix if LANGUAGE_CODE.fullmatch(suffix) else None


def language_pair(text: str, option: str = "--langs") -> tuple[str, str]:
    """SRC-TGT ("en-de", "en-zh_CN") as (source, target).

    Raises:
        ConfigError: naming `option`, for anything else or one language twice.
    """
    source, sep, target = text.partition("-")
    if not sep or not LANGUAGE_CODE.fullmatch(source) or not LANGUAGE_CODE.fullmatch(target):
        raise ConfigError(f"{option}: expected SRC-TGT language codes like fr-en, got {text!r}")
    if source == target:
        raise ConfigError(f"{option}: source and target are both {source!r}")
    return source, target
