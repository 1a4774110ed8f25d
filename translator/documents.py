"""Documents in, documents out: a line's sentences translated apart, then rejoined.

A model is trained on sentences, so a line of several is split into them (`segment`), each
sentence still longer than the model's source limit is split again at the best boundary
under it (`fit_to_limit`), every segment of every line is translated in one batch, and
`Segmented.join` puts each line back together with the source's own whitespace between
its segments. A blank line stays blank.

Sentences are found by sentencex (Wikimedia's segmenter, in Rust): about 300 languages
through its fallback chains, the whitespace between sentences kept in its segments (they
concatenate back to the input), and a few hundred times faster than pysbd, which knows 23
languages and raises for others (decision D3): a server splits every
request. Without a known source language the generic rules (sentencex's English ones)
split, after one warning.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from translator.languages import LANGUAGE_CODE, language_code

log = logging.getLogger(__name__)

# The rules used where the source language is not known.
GENERIC_LANGUAGE = "en"
# Where a long sentence is best split again, best first: after a clause's punctuation
# (Latin, CJK) then a space; after a space; after CJK punctuation alone.
CLAUSE_MARKS = frozenset(",;:)]}\u2013\u2014\u3001\uff0c\uff1b\uff1a")
CJK_CLAUSE_MARKS = frozenset("\u3001\uff0c\uff1b\uff1a")
SPACE = re.compile(r"\s+")

# What `--no-split` and `--source-lang` say, in every command that takes them.
NO_SPLIT_HELP = (
    "translate each line as one segment, as the exported SavedModel takes a string: cut at "
    "the model's limit, and counted as truncated; by default a line is a paragraph: its "
    "sentences are translated apart (the model learned sentences), one over the limit split "
    "again, and rejoined with the whitespace between them, one line out per line in"
)
SOURCE_LANG_HELP = (
    "the language whose rules find the sentences (en, de, zh, ...; about 300 through "
    "sentencex's fallbacks) (default: the source language the model's record states, else "
    "generic rules, with a warning)"
)
# What says which texts fit the model's source limit: one bool per text (the
# translator's own text path decides, tag and EOS included).
Fits = Callable[[Sequence[str]], Sequence[bool]]

# One hypothesis of a segment, in whatever form its caller keeps it.
Hypothesis = TypeVar("Hypothesis")

_warned: set[str] = set()


class SentenceSplitter:
    """Splits a paragraph into sentences by the rules of its language.

    Args:
        language: The source language's code ("de", "zh-Hans", "fra"); "" or None: not
            known, so the generic rules split, after one warning per process.
    """

    def __init__(self, language: str | None):
        import sentencex

        self._segment = sentencex.segment
        known = bool(language) and LANGUAGE_CODE.fullmatch(language or "") is not None
        self.language = language_code(language) if known else GENERIC_LANGUAGE
        if not known and (language or "") not in _warned:
            _warned.add(language or "")
            reason = f"{language!r}, not a language code" if language else "not known"
            log.warning(
                "sentence splitting: the source language is %s, so the generic rules "
                "split (give --source-lang, or --no-split for a segment per line)",
                reason,
            )

    def split(self, text: str) -> list[str]:
        """The sentences of `text`, each with the whitespace that follows it.

        They concatenate back to `text`; leading whitespace is the first one's.
        """
        return [piece for piece in self._segment(self.language, text) if piece]


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one input line is rebuilt from its segments' translations."""

    # Whitespace before the first segment.
    leading: str
    # Per segment: its index in `Segmented.segments`, and the whitespace after it.
    segments: tuple[tuple[int, str], ...]

    def text(self, translations: Sequence[str]) -> str:
        """The line from its segments' translations, with the source's whitespace.

        "" where the translations are all blank.
        """
        pairs = zip(translations, self.segments, strict=True)
        joined = "".join(translation + after for translation, (_, after) in pairs)
        return self.leading + joined if joined.strip() else ""

    def ranks(self, found: Sequence[Sequence[Hypothesis]]) -> list[list[Hypothesis | None]]:
        """The segments' hypotheses that make the line's k-th, for each k.

        Args:
            found: Every segment's hypotheses, best first (by `Segmented.segments` index).

        Returns:
            Per rank, best first, one per segment: its k-th, or its last where it has
            fewer (None where it has none); as many ranks as its longest list.
        """
        parts = [found[index] for index, _ in self.segments]
        count = max((len(part) for part in parts), default=0)
        return [[part[min(k, len(part) - 1)] if part else None for part in parts]
                for k in range(count)]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Segmented:
    """Input lines as segments to translate, and how to rejoin them."""

    # What is translated, every line's segments in order.
    segments: list[str]
    # Per input line.
    layouts: list[Layout]
    # Lines split into more than one sentence.
    lines_split: int = 0
    # Sentences split again to fit the model's source limit.
    sentences_split: int = 0

    def join(self, translations: Sequence[str]) -> list[str]:
        """Each input line from its segments' `translations`, with the source's whitespace.

        Args:
            translations: One per segment, in `segments`' order.
        """
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)}")
        return [
            layout.text([translations[index] for index, _ in layout.segments])
            for layout in self.layouts
        ]


def segment(
    lines: Sequence[str], splitter: SentenceSplitter | None, fits: Fits | None = None
) -> Segmented:
    """Splits each line into sentences (unless `splitter` is None), and those too long.

    Args:
        lines: The input lines, a paragraph each (no newlines).
        splitter: Splits a line into sentences; None: a line is one segment.
        fits: Which texts fit the model's source limit; None: no limit (nothing split
            again).

    Returns:
        The segments and each line's layout.
    """
    segments: list[str] = []
    layouts: list[Layout] = []
    lines_split = 0
    pieces_of_line: list[list[tuple[str, str]]] = []  # per line: (text, after)
    for line in lines:
        stripped = line.strip()
        if not stripped:
            pieces_of_line.append([])
            continue
        sentences = splitter.split(stripped) if splitter is not None else [stripped]
        pieces = [(s.rstrip(), s[len(s.rstrip()) :]) for s in sentences if s.strip()]
        lines_split += len(pieces) > 1
        pieces_of_line.append(pieces)
    sentences_split = 0
    if fits is not None:
        flat = [text for pieces in pieces_of_line for text, _ in pieces]
        fitting = iter(fits(flat) if flat else [])
        for pieces in pieces_of_line:
            refit = []
            for text, after in pieces:
                if next(fitting):
                    refit.append((text, after))
                    continue
                sentences_split += 1
                parts = fit_to_limit(text, fits)
                refit += [*parts[:-1], (parts[-1][0], after)]
            pieces[:] = refit
    for line, pieces in zip(lines, pieces_of_line, strict=True):
        leading = line[: len(line) - len(line.lstrip())] if pieces else ""
        indices = []
        for text, after in pieces:
            indices.append((len(segments), after))
            segments.append(text)
        layouts.append(Layout(leading, tuple(indices)))
    return Segmented(segments, layouts, lines_split, sentences_split)


def fit_to_limit(text: str, fits: Fits) -> list[tuple[str, str]]:
    """`text` in pieces that each fit, split where the limit allows, best boundary first.

    Each piece is as long as fits, cut at the last clause boundary (a comma, semicolon,
    colon or dash, then a space) in its second half, else at its last space, else (a
    word longer than the limit, or a script without spaces) at the last CJK clause mark
    or, failing that, the last character that fits.

    Returns:
        (piece, the whitespace that followed it) pairs, concatenating back to `text`.
    """
    pieces: list[tuple[str, str]] = []
    rest = text
    while rest and not fits([rest])[0]:
        end, gap = _cut(rest, fits)
        pieces.append((rest[:end], rest[end:gap]))
        rest = rest[gap:]
    if rest:
        pieces.append((rest, ""))
    return pieces


def _cut(text: str, fits: Fits) -> tuple[int, int]:
    """Where `text` (too long) is cut: the piece's end and where the next piece starts."""
    gaps = [(m.start(), m.end()) for m in SPACE.finditer(text)]
    longest = _longest_fitting([start for start, _ in gaps], text, fits)
    if longest is not None:
        half = gaps[longest][0] // 2
        for start, end in reversed(gaps[: longest + 1]):
            if start <= half:
                break
            if text[start - 1] in CLAUSE_MARKS:
                return start, end
        return gaps[longest]
    # No space fits: cut inside, after a CJK clause mark if one fits, else a character.
    ends = list(range(1, len(text)))
    index = _longest_fitting(ends, text, fits)
    end = ends[index] if index is not None else 1  # one character always goes through
    marks = [i + 1 for i in range(end // 2, end) if text[i] in CJK_CLAUSE_MARKS]
    return (marks[-1], marks[-1]) if marks else (end, end)


def _longest_fitting(ends: list[int], text: str, fits: Fits) -> int | None:
    """The index of the last end in `ends` (ascending) whose prefix fits, else None.

    Binary search: a longer prefix of the same text has at least as many pieces.
    """
    low, high = 0, len(ends)  # the answer is in [low - 1, high)
    while low < high:
        middle = (low + high) // 2
        if fits([text[: ends[middle]]])[0]:
            low = middle + 1
        else:
            high = middle
    return low - 1 if low > 0 else None
