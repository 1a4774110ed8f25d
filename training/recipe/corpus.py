"""Stage 1 of the recipe: the corpus in place, checked, and a validation set.

Multi30k from its mirror when no files are given; else the user's corpora, each checked
and counted, with a seeded slice of the first held out for validation when no `--valid`
is given, and the test sets named for their reports.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from pathlib import Path

from training.recipe.settings import RecipePaths, RecipeSettings, TrainFiles, start_stage
from training.recipe.workdir import check_record
from translator.errors import ConfigError
from translator.io import atomic_file, write_atomic
from translator.languages import language_of, language_pair
from translator.pipelines import fetch_dataset
from translator.pipelines.clean import CleanConfig, clean_corpus
from translator.pipelines.corpus import ParallelCorpus
from translator.pipelines.errors import CorpusError

# Multi30k's test set, the report of a run on Multi30k.
MULTI30K_TEST = "test_2016_flickr"
# The seed of the held-out validation slice (the same corpus gives the same slice).
HOLD_OUT_SEED = 1234


def held_out_size(pairs: int) -> int:
    """Validation pairs held out of a training corpus given without `--valid`.

    5% of the pairs, at least 200 and at most 1,000 (enough for a stable BLEU, little
    taken from training), and never more than a fifth of a tiny corpus.
    """
    return max(1, min(1000, max(200, pairs // 20), pairs // 5))


@dataclasses.dataclass(frozen=True)
class TestSet:
    """One test set the recipe reports on."""

    # The report's name (eval/<name>/), from the source file's name.
    name: str
    source: Path
    reference: Path
    # Prepended to its sources when it is translated; "": none.
    tag: str = ""


@dataclasses.dataclass(frozen=True)
class RecipeCorpus:
    """The files of one recipe run, once the data stage has them in place."""

    source_lang: str
    target_lang: str
    # The training corpora (the first one without its held-out slice, if any).
    train: tuple[TrainFiles, ...]
    valid: tuple[Path, Path]
    # How the validation set came about (a file given, or pairs held out).
    valid_origin: str
    # The test sets (empty: the report is on the validation set).
    tests: tuple[TestSet, ...]
    # The validation sources' tag (the first corpus', unless --valid has its own).
    valid_tag: str = ""

    @property
    def reports(self) -> tuple[TestSet, ...]:
        """The sets reported on: the tests, else the validation set."""
        if self.tests:
            return self.tests
        return (TestSet("validation", *self.valid, tag=self.valid_tag),)

    @property
    def tags(self) -> tuple[str, ...]:
        """Every tag of the corpora and sets, in order of appearance, once each."""
        found = [c.tag for c in self.train] + [self.valid_tag] + [t.tag for t in self.tests]
        return tuple(dict.fromkeys(tag for tag in found if tag))


def languages(settings: RecipeSettings) -> tuple[str, str]:
    """The source and target language codes: --langs, the first corpus' suffixes, or --pair.

    Raises:
        ConfigError: when neither names them, or both sides are the same language.
    """
    text = settings.langs or (None if settings.train else settings.pair)
    if text:
        return language_pair(text)
    first = settings.train[0]
    source, target = (language_of(path) for path in first.files)
    if not source or not target:
        raise ConfigError(
            f"--langs: the language codes are not in the file names "
            f"({first.source.name}, {first.target.name}); give --langs SRC-TGT"
        )
    if source == target:
        raise ConfigError(f"--langs: source and target are both {source!r}")
    return source, target


def prepare_data(paths: RecipePaths, settings: RecipeSettings) -> RecipeCorpus:
    """Stage 1: the corpus files in place, checked; the validation slice held out."""
    source_lang, target_lang = languages(settings)
    start_stage(settings, "data", f"data ({source_lang}->{target_lang}) -> {paths.data}")
    check_record(paths, settings, (source_lang, target_lang))
    if not settings.train:
        return _multi30k(paths, settings, source_lang, target_lang)
    counts = []
    for corpus in settings.train:  # each checked and counted on its own
        pairs = ParallelCorpus(*corpus.files).validate()  # one error line naming the file
        if pairs == 0:
            raise CorpusError(f"{corpus.source} | {corpus.target}: no sentence pairs")
        print(f"  train {corpus.describe()}: {pairs:,} pairs", flush=True)
        counts.append(pairs)
    if settings.clean:
        cleaned = _cleaned(paths.data, settings.train, (source_lang, target_lang))
        settings = dataclasses.replace(settings, train=tuple(c for c, _ in cleaned))
        counts = [kept for _, kept in cleaned]
    train, valid, origin = _validation(paths, settings, counts[0], (source_lang, target_lang))
    tests: list[TestSet] = []
    for test in settings.tests:
        ParallelCorpus(test.source, test.reference).validate()
        tests.append(TestSet(_set_name(test.source, tests), test.source, test.reference, test.tag))
    valid_tag = settings.valid_tag if settings.valid else settings.train[0].tag
    corpus = RecipeCorpus(source_lang, target_lang, train, valid, origin, tuple(tests), valid_tag)
    print(f"  validation: {origin}" + (f" (tag {valid_tag})" if valid_tag else ""), flush=True)
    if not tests:
        print("  no --test: the report is on the validation set", flush=True)
    return corpus


def _cleaned(
    directory: Path, corpora: tuple[TrainFiles, ...], langs: tuple[str, str]
) -> list[tuple[TrainFiles, int]]:
    """Each corpus cleaned into `directory` (once: kept while its inputs are unchanged).

    Returns:
        Each corpus with its files replaced by the cleaned ones, and the pairs kept.
    """
    config = CleanConfig(source_lang=langs[0], target_lang=langs[1])
    directory.mkdir(parents=True, exist_ok=True)
    cleaned = []
    for number, corpus in enumerate(corpora, start=1):
        out = tuple(directory / f"clean-{number}.{lang}.gz" for lang in langs)
        marker = directory / f"clean-{number}.json"
        origin = {
            "source": [str(path.resolve()) for path in corpus.files],
            "sizes": [path.stat().st_size for path in corpus.files],
            "settings": dataclasses.asdict(config),
        }
        done = json.loads(marker.read_text("utf-8")) if marker.is_file() else {}
        if done.get("origin") == origin:
            kept = done["report"]["kept"]
            print(f"  clean {corpus.describe()}: {kept:,} pairs kept (done before)", flush=True)
        else:
            report = clean_corpus(*corpus.files, *out, config)
            print("  " + report.summary().replace("\n", "\n  "), flush=True)
            kept = report.kept
            document = {"origin": origin, "report": report.to_dict()}
            write_atomic(marker, json.dumps(document, indent=2))
        if kept < 2:
            raise CorpusError(f"{corpus.source}: cleaning kept {kept} pairs; nothing to train on")
        cleaned.append((dataclasses.replace(corpus, source=out[0], target=out[1]), kept))
    return cleaned


def _validation(
    paths: RecipePaths, settings: RecipeSettings, pairs: int, langs: tuple[str, str]
) -> tuple[tuple[TrainFiles, ...], tuple[Path, Path], str]:
    """The training corpora, the validation files, and where the validation set comes from.

    Without --valid, the slice is held out of the first corpus (`pairs` pairs).
    """
    if settings.valid:
        ParallelCorpus(*settings.valid).validate()
        return settings.train, settings.valid, f"{settings.valid[0]} (given)"
    first = settings.train[0]
    if pairs < 2:
        raise CorpusError(
            f"{first.source}: {pairs} pair, too few to hold a validation slice out of; "
            "give --valid SRC TGT"
        )
    train, valid, held = hold_out(paths.data, first.files, pairs, langs)
    origin = (
        f"{held:,} of the {pairs:,} training pairs"
        + (" of the first corpus" if len(settings.train) > 1 else "")
        + f", held out (seed {HOLD_OUT_SEED}) and never trained on"
    )
    rest = settings.train[1:]
    return (dataclasses.replace(first, source=train[0], target=train[1]), *rest), valid, origin


def _multi30k(
    paths: RecipePaths, settings: RecipeSettings, source_lang: str, target_lang: str
) -> RecipeCorpus:
    fetch_dataset(
        "multi30k", paths.data, mirror=settings.mirror, log=lambda line: print("  " + line)
    )

    def pair(stem: str) -> tuple[Path, Path]:
        return (paths.data / f"{stem}.{source_lang}.gz", paths.data / f"{stem}.{target_lang}.gz")

    test = TestSet(MULTI30K_TEST, *pair(MULTI30K_TEST))
    train = (TrainFiles(*pair("train")),)
    return RecipeCorpus(source_lang, target_lang, train, pair("val"), "Multi30k val", (test,))


def _set_name(source: Path, earlier: list[TestSet]) -> str:
    """`news.fr.gz` -> news (news-2, ... when two test sets share a name)."""
    name = source.name.removesuffix(".gz")
    if language_of(Path(name)):
        name = name.rpartition(".")[0]
    name = re.sub(r"[^\w.-]+", "_", name) or "test"
    taken = {test.name for test in earlier} | {"validation"}
    unique, number = name, 1
    while unique in taken:
        number += 1
        unique = f"{name}-{number}"
    return unique


def hold_out(
    directory: Path, train: tuple[Path, Path], pairs: int, langs: tuple[str, str]
) -> tuple[tuple[Path, Path], tuple[Path, Path], int]:
    """Splits the training pairs into train and a seeded validation slice, once.

    Returns:
        The training files, the validation files, and the validation pairs.
    """
    count = held_out_size(pairs)
    out_train = tuple(directory / f"train.{lang}" for lang in langs)
    out_valid = tuple(directory / f"valid.{lang}" for lang in langs)
    marker = directory / "split.json"
    origin = {
        "source": [str(path.resolve()) for path in train],
        "sizes": [path.stat().st_size for path in train],
        "pairs": pairs,
        "held_out": count,
        "seed": HOLD_OUT_SEED,
    }
    if marker.is_file() and json.loads(marker.read_text("utf-8")) == origin:
        return out_train, out_valid, count
    held = set(random.Random(HOLD_OUT_SEED).sample(range(pairs), count))
    directory.mkdir(parents=True, exist_ok=True)
    with (
        atomic_file(out_train[0]) as train_source,
        atomic_file(out_train[1]) as train_target,
        atomic_file(out_valid[0]) as valid_source,
        atomic_file(out_valid[1]) as valid_target,
    ):
        for index, (source, target) in enumerate(ParallelCorpus(*train)):
            sinks = (valid_source, valid_target) if index in held else (train_source, train_target)
            sinks[0].write(f"{source}\n".encode())
            sinks[1].write(f"{target}\n".encode())
    write_atomic(marker, json.dumps(origin, indent=2))
    return out_train, out_valid, count
