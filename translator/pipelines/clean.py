"""Cleaning a noisy parallel corpus: rules, counted, each with a setting.

Web-crawled corpora (OPUS, ParaCrawl, CCMatrix) hold empty sides, copies of the source,
the wrong language, boilerplate repeated thousands of times, control characters and
mojibake, and misaligned pairs whose lengths disagree. `clean_corpus` streams a corpus
once, drops each pair at the first rule it breaks (in `RULES` order: cheap rules first,
language identification last), keeps a few examples of each, and writes the kept pairs
atomically. Duplicates are found by 8-byte digests, so memory grows with the number of
distinct pairs (about 100 bytes each), not with their text.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import os
import re
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from translator.errors import ConfigError, CorpusError
from translator.io import atomic_file
from translator.languages import language_code, word_count
from translator.pipelines.corpus import ParallelCorpus

PathLike = str | os.PathLike[str]
# The rules, in the order a pair is checked; a pair counts under the first it breaks.
RULES = (
    "empty",  # a side is empty or only whitespace
    "invalid_text",  # control characters, U+FFFD / noncharacters, or mojibake
    "too_long",  # a side longer than max_characters or max_words
    "length_ratio",  # one side's words many times the other's
    "few_letters",  # a side mostly digits, punctuation or symbols
    "copy",  # the target repeats the source (after normalization)
    "duplicate",  # the pair (or, with dedup_sources, its source) was seen before
    "wrong_language",  # language identification disagrees with the expected language
)
ErrorsMode = Literal["strict", "replace"]
# Pairs between calls of `clean_corpus`'s progress callback.
PROGRESS_EVERY = 10_000
# C0 and C1 control characters but tab, U+FFFD (what replaced invalid bytes), and the
# noncharacters U+FFFE/U+FFFF.
_INVALID = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ufffd\ufffe\uffff]")
# UTF-8 read as Latin-1 or Windows-1252: "Ã¤" for "ä", "ÃŸ" for "ß", "â€™" for "’".
# A UTF-8 continuation byte (0x80-0xBF) read so follows "Ã" or "Â", which real text
# never puts before a C1 control, a Latin-1 symbol or Windows-1252's extra characters.
_CONTINUATION = "\u0080-\u00bf" + bytes(range(0x80, 0xA0)).decode("cp1252", errors="ignore")
_MOJIBAKE = re.compile(f"[\u00c2\u00c3][{_CONTINUATION}]|\u00e2\u20ac")
_LETTER = re.compile(r"[^\W\d_]")  # a letter of any script
_NOT_SPACE = re.compile(r"\S")
_PUNCTUATION_OR_SPACE = re.compile(r"[\W_]+")


@dataclasses.dataclass(frozen=True)
class CleanConfig:
    """The cleaning rules' settings (`translator data clean`, `recipe --clean`)."""

    # Language codes of the two sides (for wrong_language); "" skips that side's check.
    source_lang: str = ""
    target_lang: str = ""
    # too_long: a side with more characters than this.
    max_characters: int = 1000
    # too_long: a side with more words (`translator.languages.word_count`) than this.
    max_words: int = 250
    # length_ratio: (longer + 1) / (shorter + 1) in words above this drops the pair
    # (the + 1 spares one-word pairs such as "Yes." / "Ja, gerne.").
    max_length_ratio: float = 3.0
    # few_letters: a side whose letters are fewer than this share of its non-space
    # characters (numbers, prices, punctuation, symbols only).
    min_letter_share: float = 0.5
    # duplicate: drop a pair seen before (exact text of both sides).
    dedup: bool = True
    # duplicate: also drop a pair whose source was seen before with another target.
    dedup_sources: bool = False
    # wrong_language: identify each side's language (py3langid, its model in the wheel).
    language_check: bool = True
    # wrong_language: a side is wrong when the expected language's probability is below
    # this (among all languages py3langid knows, lengths calibrated as it does).
    min_language_probability: float = 0.05
    # Invalid UTF-8: "strict" stops with the file and line; "replace" reads bad bytes as
    # U+FFFD, counts the lines, and drops those pairs under invalid_text.
    errors: ErrorsMode = "strict"
    # Examples kept per rule for the report.
    examples: int = 3

    def check(self) -> None:
        """Raises `ConfigError` naming the first bad setting."""
        if self.max_characters < 1 or self.max_words < 1:
            raise ConfigError("clean: max_characters and max_words must be >= 1")
        if self.max_length_ratio < 1:
            raise ConfigError(f"clean: max_length_ratio must be >= 1, got {self.max_length_ratio}")
        if not 0 <= self.min_letter_share <= 1:
            raise ConfigError(
                f"clean: min_letter_share must be in [0, 1], got {self.min_letter_share}"
            )
        if self.errors not in ("strict", "replace"):
            raise ConfigError(f"clean: errors must be strict or replace, got {self.errors!r}")


@dataclasses.dataclass(frozen=True)
class Example:
    """A removed pair, for the report."""

    # 1-based line number in the input files.
    line: int
    source: str
    target: str


@dataclasses.dataclass(frozen=True)
class CleanReport:
    """What `clean_corpus` kept and removed, and how."""

    source: str
    target: str
    out_source: str
    out_target: str
    pairs: int
    kept: int
    # Pairs removed by each rule, every rule listed (in `RULES` order).
    removed: dict[str, int]
    # A few removed pairs per rule.
    examples: dict[str, list[Example]]
    # Lines read with U+FFFD for invalid UTF-8 (errors="replace").
    replaced_lines: int
    settings: CleanConfig
    seconds: float

    def summary(self) -> str:
        """The report as the command prints it."""

        def row(name: str, count: int) -> str:
            share = 100 * count / self.pairs if self.pairs else 0.0
            return f"  {name:<16} {count:>10,} {share:5.1f}%"

        lines = [
            f"{self.source} | {self.target}: {self.pairs:,} pairs in {self.seconds:.1f} s "
            f"({self.pairs / max(self.seconds, 1e-9):,.0f} pairs/s)",
            row("kept", self.kept),
        ]
        for rule in RULES:
            lines.append(row(rule, self.removed[rule]))
            for example in self.examples[rule]:
                lines.append(
                    f"      line {example.line}: {_shown(example.source)} ||| "
                    f"{_shown(example.target)}"
                )
        settings = self.settings
        checked = "/".join(lang or "-" for lang in (settings.source_lang, settings.target_lang))
        if not settings.language_check:
            lines.append("  (language check off)")
        elif checked == "-/-":
            lines.append("  (language check off: no languages; give --langs SRC-TGT)")
        else:
            lines.append(f"  (language check: {checked}, py3langid)")
        lines.append(
            f"  (settings: max_characters {settings.max_characters}, max_words "
            f"{settings.max_words}, max_length_ratio {settings.max_length_ratio:g}, "
            f"min_letter_share {settings.min_letter_share:g}, dedup {settings.dedup}, "
            f"dedup_sources {settings.dedup_sources}, min_language_probability "
            f"{settings.min_language_probability:g}, errors {settings.errors})"
        )
        if self.replaced_lines:
            lines.append(f"  lines with invalid UTF-8 read as U+FFFD: {self.replaced_lines:,}")
        lines.append(f"wrote {self.out_source} and {self.out_target}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The JSON document written beside the output."""
        return dataclasses.asdict(self)


class LanguageCheck:
    """Whether a text is in its expected language, by py3langid (model in its wheel)."""

    def __init__(self, languages: tuple[str, ...], min_probability: float):
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self.identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        known = set(self.identifier.labels)
        unknown = sorted({lang for lang in languages if lang and lang not in known})
        if unknown:
            raise ConfigError(
                f"clean: the language check does not know {', '.join(unknown)} (py3langid "
                f"knows {len(known)} ISO 639-1 codes, e.g. en, de, zh, ja); give other "
                "--langs, or turn the check off with --no-language-check"
            )
        self.index: dict[str, int] = {}
        for i, lang in enumerate(self.identifier.nb_classes):  # aliases fold into the first
            self.index.setdefault(lang, i)
        self.min_probability = min_probability

    def probability(self, text: str, language: str) -> float:
        """py3langid's probability that `text` is in `language` (among all it knows)."""
        # Its private per-language scores: `rank` would sort all 97 languages per call.
        return float(self.identifier._decide(text)[self.index[language]])

    def wrong(self, text: str, language: str) -> bool:
        """True when `language`'s probability for `text` is below the minimum."""
        return bool(language) and self.probability(text, language) < self.min_probability


class _Rules:
    """The per-pair checks of a `CleanConfig`, with the digests seen so far."""

    def __init__(self, config: CleanConfig):
        self.config = config
        self.pairs_seen: set[bytes] = set()
        self.sources_seen: set[bytes] = set()
        self.languages = (language_code(config.source_lang), language_code(config.target_lang))
        self.language = None
        if config.language_check and any(self.languages):
            self.language = LanguageCheck(self.languages, config.min_language_probability)

    def broken(self, source: str, target: str) -> str | None:
        """The first rule the pair breaks, or None to keep it."""
        config = self.config
        if not source.strip() or not target.strip():
            return "empty"
        if _invalid(source) or _invalid(target):
            return "invalid_text"
        if max(len(source), len(target)) > config.max_characters:
            return "too_long"
        source_words, target_words = word_count(source), word_count(target)
        if max(source_words, target_words) > config.max_words:
            return "too_long"
        longer, shorter = sorted((source_words, target_words), reverse=True)
        if (longer + 1) / (shorter + 1) > config.max_length_ratio:
            return "length_ratio"
        if _few_letters(source, config.min_letter_share) or _few_letters(
            target, config.min_letter_share
        ):
            return "few_letters"
        if _normalized(source) == _normalized(target):
            return "copy"
        if self._duplicate(source, target):
            return "duplicate"
        if self.language is not None and (
            self.language.wrong(source, self.languages[0])
            or self.language.wrong(target, self.languages[1])
        ):
            return "wrong_language"
        return None

    def _duplicate(self, source: str, target: str) -> bool:
        config = self.config
        if not config.dedup and not config.dedup_sources:
            return False
        source_digest = _digest(source)
        if config.dedup_sources:
            if source_digest in self.sources_seen:
                return True
            self.sources_seen.add(source_digest)
        if config.dedup:
            pair = _digest(target, source_digest)
            if pair in self.pairs_seen:
                return True
            self.pairs_seen.add(pair)
        return False


def clean_corpus(
    source: PathLike,
    target: PathLike,
    out_source: PathLike,
    out_target: PathLike,
    config: CleanConfig = CleanConfig(),
    progress: Callable[[int], None] | None = None,
) -> CleanReport:
    """Streams a parallel corpus once and writes the pairs that break no rule.

    Both outputs appear together when the whole corpus is read (atomic renames); an
    error or an interruption leaves neither. Output files ending in .gz are gzipped.

    Args:
        source: Source-language file (plain or gzip).
        target: Target-language file, aligned line by line.
        out_source: Where the kept sources go.
        out_target: Where the kept targets go.
        config: The rules' settings.
        progress: Called with `PROGRESS_EVERY` each time that many more pairs are read.

    Returns:
        The counts per rule, examples and settings.

    Raises:
        CorpusError: misaligned files, or invalid UTF-8 (file and line) under "strict".
        ConfigError: a bad setting, or a language the language check does not know.
    """
    config.check()
    for path in (out_source, out_target):
        if not Path(path).resolve().parent.is_dir():
            raise CorpusError(f"{path}: cannot write: its directory does not exist")
    rules = _Rules(config)
    removed = dict.fromkeys(RULES, 0)
    examples: dict[str, list[Example]] = collections.defaultdict(list)
    replaced = [0]

    def on_invalid(line: int) -> None:
        replaced[0] += 1

    corpus = ParallelCorpus(source, target)
    started = time.monotonic()
    pairs = kept = 0
    with contextlib.ExitStack() as stack:
        sinks = [
            stack.enter_context(atomic_file(path, compress=str(path).endswith(".gz")))
            for path in (out_source, out_target)
        ]
        reading = corpus.pairs(on_invalid if config.errors == "replace" else None)
        for pairs, (source_line, target_line) in enumerate(reading, start=1):
            rule = rules.broken(source_line, target_line)
            if rule is None:
                kept += 1
                sinks[0].write(source_line.encode("utf-8") + b"\n")
                sinks[1].write(target_line.encode("utf-8") + b"\n")
            else:
                removed[rule] += 1
                if len(examples[rule]) < config.examples:
                    examples[rule].append(Example(pairs, source_line, target_line))
            if progress is not None and pairs % PROGRESS_EVERY == 0:
                progress(PROGRESS_EVERY)
    return CleanReport(
        source=str(source),
        target=str(target),
        out_source=str(out_source),
        out_target=str(out_target),
        pairs=pairs,
        kept=kept,
        removed=removed,
        examples={rule: examples[rule] for rule in RULES},
        replaced_lines=replaced[0],
        settings=config,
        seconds=time.monotonic() - started,
    )


def _invalid(text: str) -> bool:
    return bool(_INVALID.search(text) or _MOJIBAKE.search(text))


def _few_letters(text: str, share: float) -> bool:
    visible = len(_NOT_SPACE.findall(text))
    return len(_LETTER.findall(text)) < share * visible


def _normalized(text: str) -> str:
    """Case, width, punctuation and spacing set aside: "Hello, World!" -> "helloworld"."""
    return _PUNCTUATION_OR_SPACE.sub("", unicodedata.normalize("NFKC", text).casefold())


def _digest(text: str, salt: bytes = b"") -> bytes:
    """An 8-byte digest of text (at 10M distinct pairs, any collision has a 3e-6 chance)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=salt).digest()


def _shown(text: str, width: int = 60) -> str:
    """A sentence for the terminal: control characters visible, long ones cut."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= width else shown[: width - 1] + "…"
