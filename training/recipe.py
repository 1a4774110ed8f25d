r"""`translator recipe`: the whole job, one command, for any parallel corpus.

    translator recipe --workdir runs/multi30k --minutes 60            # Multi30k EN->DE
    translator recipe --workdir runs/fr-en --minutes 30 \
        --train corpus.fr.gz corpus.en.gz --test news.fr news.en
    translator recipe --workdir runs/fr-en-bt --minutes 30 \
        --train corpus.fr corpus.en --weight 2 --train synthetic.fr synthetic.en --tag "<bt>"

gets the corpus (Multi30k from `--mirror` / `$TRANSLATOR_DATA_MIRROR` when no files are
given; else the user's corpora, mixed by `--weight` and tagged by `--tag`, with a
seeded slice of the first held out for validation when no `--valid` is given), builds a
joint SentencePiece vocabulary of the planned size (keeping the tags one piece each), plans
and trains within the time budget (`training.plan`: the corpus' size and this machine's
measured speed decide the model, batch, dropout, learning rate...), translates every
test set with beam search and scores it with sacreBLEU into a report, and exports a
SavedModel for serving; then prints where each result is. Each stage is skipped when its
result is already there, and an interrupted training resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING

from training.cli import DEFAULT_CONFIG
from translator.errors import ConfigError
from translator.io import atomic_file, read_lines, write_atomic

if TYPE_CHECKING:
    from training.config import RunConfig
    from training.plan import Plan
    from training.run import PlanRequest

log = logging.getLogger(__name__)

# Multi30k's test set, the report of a run on Multi30k.
MULTI30K_TEST = "test_2016_flickr"
MULTI30K_PAIRS = ("en-de", "de-en")
EXPORT_VERSION = 1
# The seed of the held-out validation slice (the same corpus gives the same slice).
HOLD_OUT_SEED = 1234
# A language code as file suffixes write it: en, deu, pt_BR, zh-Hans.
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,4})?")


def held_out_size(pairs: int) -> int:
    """Validation pairs held out of a training corpus given without `--valid`.

    5% of the pairs, at least 200 and at most 1,000 (enough for a stable BLEU, little
    taken from training), and never more than a fifth of a tiny corpus.
    """
    return max(1, min(1000, max(200, pairs // 20), pairs // 5))


@dataclasses.dataclass(frozen=True)
class TrainFiles:
    """One training corpus: `--train SRC TGT [--weight W] [--tag T]`."""

    source: Path
    target: Path
    # Its share of the drawn pairs, relative to the other corpora's weights.
    weight: float = 1.0
    # Prepended to its sources as one piece, e.g. <bt> or <2de>; "": none.
    tag: str = ""

    @property
    def files(self) -> tuple[Path, Path]:
        return self.source, self.target

    def describe(self) -> str:
        """`src | tgt (weight 2, tag <bt>)` for the log and the summary."""
        extras = [f"weight {self.weight:g}"] if self.weight != 1.0 else []
        extras += [f"tag {self.tag}"] if self.tag else []
        return f"{self.source} | {self.target}" + (f" ({', '.join(extras)})" if extras else "")


@dataclasses.dataclass(frozen=True)
class TestFiles:
    """A test set as given: `--test SRC REF [--tag T]`."""

    source: Path
    reference: Path
    # Prepended to its sources, as to the training corpus of its direction; "": none.
    tag: str = ""


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


@dataclasses.dataclass(frozen=True)
class RecipeSettings:
    """What the user chose on the command line."""

    # Training time budget in minutes.
    minutes: float
    # Local directory with the Multi30k files, for machines without internet.
    mirror: str | None
    # Joint SentencePiece vocabulary size (None: planned from the corpus' size).
    vocab_size: int | None
    # `--set key=value` overrides of the training config.
    overrides: tuple[str, ...] = ()
    # Translate and score only the first N test sentences (0 = all); for quick checks.
    test_sentences: int = 0
    # Beam size of the test translation and of the export.
    beam_size: int = 4
    # The user's training corpora (none: Multi30k) and optional validation files.
    train: tuple[TrainFiles, ...] = ()
    valid: tuple[Path, Path] | None = None
    # The tag of the validation sources (--tag after --valid); "": the first corpus'.
    valid_tag: str = ""
    # The user's test sets.
    tests: tuple[TestFiles, ...] = ()
    # "SRC-TGT" language codes (None: from the file suffixes, or `pair`).
    langs: str | None = None
    # Multi30k's direction when no files are given.
    pair: str = "en-de"
    # Fine-tune this trained model (its vocabulary and architecture) instead of training
    # from scratch.
    init_from: Path | None = None


@dataclasses.dataclass(frozen=True)
class RecipePaths:
    """Where the recipe puts things, under one work directory."""

    workdir: Path

    @property
    def data(self) -> Path:
        """The corpus files (Multi30k, or the held-out split of the user's corpus)."""
        return self.workdir / "data"

    @property
    def vocabulary(self) -> Path:
        """The joint SentencePiece vocabulary."""
        return self.workdir / "vocab"

    @property
    def run(self) -> Path:
        """The training run directory (its final model is `run/model`)."""
        return self.workdir / "run"

    def report(self, name: str) -> Path:
        """The evaluation report of one set (report.json, report.md, translations)."""
        return self.workdir / "eval" / name

    @property
    def export(self) -> Path:
        """The export base directory: SavedModel versions as TF Serving expects them."""
        return self.workdir / "export"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `recipe` subcommand.

    Over 60 lines: one flat argparse declaration per option, read top to bottom.
    """
    parser = subparsers.add_parser(
        "recipe",
        help="the whole job: data, vocabulary, planned training, test reports, export",
        description=(
            "Runs the whole job in one work directory: the corpus (Multi30k when no\n"
            "--train is given), a joint vocabulary, training planned for the budget on this\n"
            "machine (model, batch, dropout, learning rate: --plan shows the plan),\n"
            "beam-search translation of each test set scored with sacreBLEU into a report,\n"
            "and a SavedModel. Stages already done are skipped; an interrupted training\n"
            "resumes (delete WORKDIR/run to train again)."
        ),
        epilog=(
            "Examples:\n"
            "  translator recipe --workdir runs/multi30k --minutes 5\n"
            "  translator recipe --workdir runs/m30k-de-en --pair de-en --minutes 15\n"
            "  translator recipe --workdir runs/fr-en --minutes 30 \\\n"
            "      --train corpus.fr.gz corpus.en.gz --test news.fr news.en --plan\n"
            "  translator recipe --workdir runs/en-de-bidi --minutes 30 \\\n"
            "      --train train.en train.de --tag '<2de>' --train train.de train.en --tag '<2en>'"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("runs/multi30k"), help="default: runs/multi30k"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=60.0,
        help="training time budget, measuring this machine's speed included (default: 60)",
    )
    corpus = parser.add_argument_group(
        "corpus (default: Multi30k); --weight and --tag apply to the --train, --valid or "
        "--test before them"
    )
    corpus.add_argument(
        "--train",
        nargs=2,
        type=Path,
        action=_Files,
        metavar=("SRC", "TGT"),
        help="training files, aligned line by line (plain or .gz); repeatable: several "
        "corpora are mixed by weight",
    )
    corpus.add_argument(
        "--weight",
        type=float,
        action=_Attribute,
        metavar="W",
        help="the share of the --train before it among the corpora (default: 1; "
        "e.g. 2 draws its pairs twice as often as a weight-1 corpus of any size)",
    )
    corpus.add_argument(
        "--tag",
        action=_Attribute,
        metavar="T",
        help="prepend T to the sources of the --train, --valid or --test before it, e.g. "
        "<bt> for back-translated data or <2de> for a target language (kept one piece "
        "by the vocabulary)",
    )
    corpus.add_argument(
        "--valid",
        nargs=2,
        type=Path,
        action=_Files,
        metavar=("SRC", "TGT"),
        help="validation files (default: a seeded slice of the first --train, held out)",
    )
    corpus.add_argument(
        "--test",
        nargs=2,
        type=Path,
        action=_Files,
        metavar=("SRC", "REF"),
        help="a test set to report on (repeatable; default: the validation set)",
    )
    corpus.add_argument(
        "--langs",
        metavar="SRC-TGT",
        help="language codes, e.g. fr-en (default: the files' suffixes, train.fr.gz -> fr)",
    )
    corpus.add_argument(
        "--pair",
        choices=MULTI30K_PAIRS,
        default="en-de",
        help="Multi30k's direction, without --train (default: en-de)",
    )
    corpus.add_argument("--mirror", help="local directory with the Multi30k files (no network)")
    parser.add_argument(
        "--init-from",
        type=Path,
        metavar="MODEL",
        help="fine-tune MODEL (a model or run directory) on --train within the budget: its "
        "vocabulary and architecture are kept, the plan chooses the learning rate, warmup, "
        "dropout and batch",
    )
    parser.add_argument(
        "--vocab-size", type=int, help="joint vocabulary size (default: planned from the corpus)"
    )
    parser.add_argument(
        "--beam-size", type=int, default=4, help="beam of the test reports and export (default: 4)"
    )
    parser.add_argument(
        "--test-sentences",
        type=int,
        default=0,
        metavar="N",
        help="translate only the first N sentences of each test set (default: all)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a value of the training config; it is kept, and planned around (repeatable)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="get the data and vocabulary, print the training plan and exit",
    )
    parser.set_defaults(handler=run, log_level=logging.INFO)


class _Files(argparse.Action):
    """`--train/--valid/--test A B`: a list of `{"files", "weight", "tag"}` entries.

    It remembers which came last, for the --weight or --tag that follows.
    """

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        entries = list(getattr(namespace, self.dest) or [])
        if self.dest == "valid" and entries:
            parser.error("--valid: give one validation set")
        entries.append({"files": tuple(values), "weight": None, "tag": None})
        setattr(namespace, self.dest, entries)
        namespace.last_files = (option_string, entries[-1])


class _Attribute(argparse.Action):
    """`--weight W` / `--tag T`: set on the --train (--valid, --test) before it."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        option, entry = getattr(namespace, "last_files", None) or (None, None)
        if entry is None or (self.dest == "weight" and option != "--train"):
            wanted = "--train" if self.dest == "weight" else "--train, --valid or --test"
            parser.error(f"{option_string} {values}: give it after the {wanted} it applies to")
        if entry[self.dest] is not None:
            parser.error(f"{option_string}: {option} {' '.join(map(str, entry['files']))} has one")
        if self.dest == "weight" and not values > 0:
            parser.error(f"--weight {values:g}: must be > 0 (leave a corpus out by not giving it)")
        entry[self.dest] = values


def _settings_files(args: argparse.Namespace) -> dict:
    """The corpora, validation and test sets of the parsed options, with their attributes."""
    train = tuple(
        TrainFiles(*entry["files"], weight=entry["weight"] or 1.0, tag=entry["tag"] or "")
        for entry in args.train or ()
    )
    valid = (args.valid or [None])[0]
    tests = tuple(TestFiles(*entry["files"], tag=entry["tag"] or "") for entry in args.test or ())
    return {
        "train": train,
        "valid": valid and valid["files"],
        "valid_tag": (valid and valid["tag"]) or "",
        "tests": tests,
    }


def run(args: argparse.Namespace) -> int:
    """Runs `translator recipe`."""
    if args.minutes <= 0:
        raise ConfigError(f"--minutes must be positive, got {args.minutes:g}")
    if not args.train and (args.valid or args.test or args.langs):
        raise ConfigError("--valid, --test and --langs need --train (Multi30k: --pair)")
    paths = RecipePaths(args.workdir)
    settings = RecipeSettings(
        minutes=args.minutes,
        mirror=args.mirror,
        vocab_size=args.vocab_size,
        overrides=tuple(args.overrides),
        test_sentences=args.test_sentences,
        beam_size=args.beam_size,
        langs=args.langs,
        **_settings_files(args),
        pair=args.pair,
        init_from=args.init_from,
    )
    if args.plan:
        corpus = prepare_data(paths, settings)
        build_vocab(paths, settings, corpus)
        print("\n".join(preview(paths, settings, corpus).describe()))
        return 0
    corpus = run_recipe(paths, settings)
    print_summary(paths, corpus)
    return 0


def run_recipe(paths: RecipePaths, settings: RecipeSettings) -> RecipeCorpus:
    """Every stage in order, each skipped when its result is already there.

    Raises:
        PipelineError, ConfigError, TrainingError: from the stage that failed.
    """
    corpus = prepare_data(paths, settings)
    build_vocab(paths, settings, corpus)
    train_model(paths, settings, corpus)
    evaluate(paths, settings, corpus)
    export_model(paths, settings, corpus)
    return corpus


# ---- Stage 1: the corpus -----------------------------------------------------------------


def languages(settings: RecipeSettings) -> tuple[str, str]:
    """The source and target language codes: --langs, the first corpus' suffixes, or --pair.

    Raises:
        ConfigError: when neither names them, or both sides are the same language.
    """
    text = settings.langs or (None if settings.train else settings.pair)
    if text:
        source, sep, target = text.partition("-")
        if not sep or not LANGUAGE_CODE.fullmatch(source) or not LANGUAGE_CODE.fullmatch(target):
            raise ConfigError(f"--langs: expected SRC-TGT language codes like fr-en, got {text!r}")
    else:
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


def language_of(path: Path) -> str | None:
    """The language suffix of a file name (`train.fr.gz` -> fr), or None."""
    name = path.name.removesuffix(".gz")
    suffix = name.rpartition(".")[2] if "." in name else ""
    return suffix if LANGUAGE_CODE.fullmatch(suffix) else None


def prepare_data(paths: RecipePaths, settings: RecipeSettings) -> RecipeCorpus:
    """Stage 1: the corpus files in place, checked; the validation slice held out."""
    source_lang, target_lang = languages(settings)
    print(f"[1/5] data ({source_lang}->{target_lang}) -> {paths.data}", flush=True)
    _check_inputs(paths, settings, (source_lang, target_lang))
    if not settings.train:
        return _multi30k(paths, settings, source_lang, target_lang)
    from translator.pipelines.corpus import ParallelCorpus
    from translator.pipelines.errors import CorpusError

    counts = []
    for corpus in settings.train:  # each checked and counted on its own
        pairs = ParallelCorpus(*corpus.files).validate()  # one error line naming the file
        if pairs == 0:
            raise CorpusError(f"{corpus.source} | {corpus.target}: no sentence pairs")
        print(f"  train {corpus.describe()}: {pairs:,} pairs", flush=True)
        counts.append(pairs)
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


def _validation(
    paths: RecipePaths, settings: RecipeSettings, pairs: int, langs: tuple[str, str]
) -> tuple[tuple[TrainFiles, ...], tuple[Path, Path], str]:
    """The training corpora, the validation files, and where the validation set comes from.

    Without --valid, the slice is held out of the first corpus (`pairs` pairs).
    """
    from translator.pipelines.corpus import ParallelCorpus
    from translator.pipelines.errors import CorpusError

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
    from translator.pipelines import fetch_dataset

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
    from translator.pipelines.corpus import ParallelCorpus

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


def _check_inputs(paths: RecipePaths, settings: RecipeSettings, langs: tuple[str, str]) -> None:
    """Refuses a work directory that holds a recipe of other inputs.

    Its stages would be skipped as done, and the results would not be of these inputs.
    """
    inputs: dict[str, object] = {
        "languages": list(langs),
        "train": _train_record(settings.train),
        "valid": [str(path.resolve()) for path in settings.valid] if settings.valid else None,
    }
    if settings.valid_tag:
        inputs["valid_tag"] = settings.valid_tag
    if settings.init_from is not None:
        inputs["init_from"] = str(settings.init_from.resolve())
    record = paths.workdir / "recipe.json"
    if record.is_file():
        previous = json.loads(record.read_text("utf-8"))
        if previous != inputs:
            raise ConfigError(
                f"--workdir {paths.workdir} holds a recipe of other inputs ({record}: "
                f"{previous}); use a new work directory"
            )
        return
    paths.workdir.mkdir(parents=True, exist_ok=True)
    write_atomic(record, json.dumps(inputs, indent=2))


def _one_plain_pair(train: tuple[TrainFiles, ...]) -> bool:
    """One corpus, untagged, of weight 1: the single-pair form of the config and record."""
    return len(train) == 1 and not train[0].tag and train[0].weight == 1.0


def _train_record(train: tuple[TrainFiles, ...]) -> object:
    """The corpora as recipe.json records them (one untagged corpus: its two paths)."""
    if not train:
        return "multi30k"
    if _one_plain_pair(train):
        return [str(path.resolve()) for path in train[0].files]
    return [
        {
            "files": [str(path.resolve()) for path in corpus.files],
            "weight": corpus.weight,
            "tag": corpus.tag,
        }
        for corpus in train
    ]


# ---- Stage 2: the vocabulary -------------------------------------------------------------


def build_vocab(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> None:
    """Stage 2: the joint SentencePiece vocabulary of the training data, of planned size."""
    from training.plan import choose_vocab_size, vocab_size_reason
    from training.planning import count_characters
    from translator.pipelines import VocabularyError, build_vocabulary

    print(f"[2/5] vocabulary -> {paths.vocabulary}", flush=True)
    if (paths.vocabulary / "vocab.json").is_file():
        print("  already built")
        return
    if settings.init_from is not None:
        _copy_init_vocabulary(paths, settings.init_from)
        return
    size, why = settings.vocab_size, "--vocab-size"
    if size is None:
        characters = sum(count_characters(*files.files) for files in corpus.train)
        size = choose_vocab_size(characters)
        why = f"planned: {vocab_size_reason(characters)}"
    tags = corpus.tags
    print(f"  {size:,} pieces ({why})" + (f"; tags {', '.join(tags)}" if tags else ""), flush=True)
    sources = [files.source for files in corpus.train]
    targets = [files.target for files in corpus.train]

    def build(size: int) -> None:
        build_vocabulary(sources, targets, paths.vocabulary, vocab_size=size, user_symbols=tags)

    try:
        build(size)
    except VocabularyError as error:
        # A planned size the corpus cannot fill (few distinct words): SentencePiece says
        # the most it supports; a size the user asked for stays an error.
        if settings.vocab_size is not None or error.supported_size is None:
            raise
        size = error.supported_size
        print(f"  {size:,} pieces: all that the corpus supports", flush=True)
        build(size)


def _copy_init_vocabulary(paths: RecipePaths, init_from: Path) -> None:
    """Fine-tuning keeps the model's vocabulary: a copy of it, not a new one."""
    import shutil

    from training.finetune import find_init_model
    from translator.io import atomic_directory

    init = find_init_model(init_from)
    if init.vocabulary_dir is None:
        raise ConfigError(f"--init-from {init_from}: no vocab/ beside the model to fine-tune with")
    with atomic_directory(paths.vocabulary) as staging:
        shutil.copytree(init.vocabulary_dir, staging, dirs_exist_ok=True)
    print(f"  the vocabulary of {init_from} ({init.vocabulary_dir})", flush=True)


# ---- Stage 3: training -------------------------------------------------------------------


def _request(
    paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus
) -> tuple[RunConfig, PlanRequest]:
    """The run config and its plan request.

    The default config, then the corpus and the budget, then the user's `--set`.
    """
    from training.config import explicit_keys, load_config
    from training.run import PlanRequest

    overrides = (
        *_corpus_overrides(corpus.train),
        f"data.valid_source={corpus.valid[0]}",
        f"data.valid_target={corpus.valid[1]}",
        *([f"data.valid_tag={corpus.valid_tag}"] if corpus.valid_tag else []),
        f"data.vocabulary={paths.vocabulary}",
        f"train.max_minutes={settings.minutes}",
        *([f"train.init_from={settings.init_from}"] if settings.init_from else []),
        *settings.overrides,
    )
    keys = explicit_keys(DEFAULT_CONFIG, overrides)
    request = PlanRequest(DEFAULT_CONFIG, overrides, keys, cache_dir=paths.workdir)
    return load_config(DEFAULT_CONFIG, overrides), request


def _corpus_overrides(train: tuple[TrainFiles, ...]) -> tuple[str, ...]:
    """The config's training data: one pair of files, or `data.train`, a weighted list."""
    if _one_plain_pair(train):
        return (f"data.train_source={train[0].source}", f"data.train_target={train[0].target}")
    corpora = [
        {"source": str(c.source), "target": str(c.target), "weight": c.weight, "tag": c.tag}
        for c in train
    ]
    # JSON is YAML: `--set` values are read as YAML.
    return ("data.train_source=", "data.train_target=", f"data.train={json.dumps(corpora)}")


def preview(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> Plan:
    """The plan the training stage would train (`--plan`)."""
    from training.run import preview_plan

    config, request = _request(paths, settings, corpus)
    return preview_plan(config, request, paths.run)


def train_model(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> None:
    """Stage 3: planned training within the time budget (resumed if interrupted)."""
    from training.cli import summary_line
    from training.run import train

    print(f"[3/5] training ({settings.minutes:g} minutes) -> {paths.run}", flush=True)
    if (paths.run / "model" / "model.keras").is_file():
        print(f"  already trained: {paths.run / 'model'}")
        return
    config, request = _request(paths, settings, corpus)
    result = train(config, paths.run, planning=request)
    print(f"  {summary_line(result)}", flush=True)


# ---- Stages 4 and 5: reports and export ----------------------------------------------------


def evaluate(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> None:
    """Stage 4: beam-search translation of each report set, scored into a report."""
    from translator.engines.base import InferenceOptions
    from translator.evaluation import evaluate_model
    from translator.search.config import SearchConfig

    for test in corpus.reports:
        report = paths.report(test.name)
        print(f"[4/5] {test.name} with beam {settings.beam_size} -> {report}", flush=True)
        if (report / "report.json").is_file():
            print("  already evaluated")
            continue
        source, reference = test.source, test.reference
        if settings.test_sentences:
            source, reference = (
                _head(path, settings.test_sentences, report.parent / f"{test.name}.head{i}")
                for i, path in enumerate((source, reference))
            )
        report.mkdir(parents=True, exist_ok=True)
        written = evaluate_model(
            paths.run,
            source,
            reference,
            SearchConfig(beam_size=settings.beam_size),
            options=InferenceOptions(tag=test.tag),
            hypotheses_out=report / f"translations.{corpus.target_lang}",
            report_dir=report,
        )
        print(written.summary(), flush=True)


def export_model(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> None:
    """Stage 5: the SavedModel (tokenizer, beam search, detokenizer inside).

    Its untagged signatures tag as validation did (the run's main direction); the tagged
    ones, written when there are tags, take any of them per sentence.
    """
    from translator.export import ExportConfig
    from translator.export import export_model as export_saved_model
    from translator.search.config import SearchConfig

    version = paths.export / str(EXPORT_VERSION)
    print(f"[5/5] SavedModel -> {version}", flush=True)
    if (version / "saved_model.pb").is_file():
        print("  already exported")
        return
    search = SearchConfig(beam_size=settings.beam_size, n_best=settings.beam_size)
    config = ExportConfig(search=search, tag=corpus.valid_tag)
    path = export_saved_model(paths.run, paths.export, config, version=EXPORT_VERSION)
    print(f"  exported {path}", flush=True)


def print_summary(paths: RecipePaths, corpus: RecipeCorpus) -> None:
    """Where each result is: the plan, what training bought, the scores."""
    from training.planning import load_plan
    from training.summaries import CURVES_FILE

    metadata_path = paths.run / "model" / "metadata.json"
    metadata = json.loads(metadata_path.read_text("utf-8"))
    plan = load_plan(paths.run)
    print()
    print(f"languages:   {corpus.source_lang} -> {corpus.target_lang}")
    for files in corpus.train:
        print(f"data:        {files.describe()}")
    tagged = f" (tag {corpus.valid_tag})" if corpus.valid_tag else ""
    print(f"validation:  {corpus.valid_origin}{tagged}")
    print(f"vocabulary:  {paths.vocabulary}")
    if plan is not None:
        print(
            f"plan:        {paths.run / 'plan.json'}  ({plan.shape.describe()}, "
            f"{plan.value('data.pipeline.batch_tokens'):,} batch tokens, dropout "
            f"{plan.value('model.overrides.dropout')}, ~{plan.updates:,} updates, "
            f"{plan.epochs:,.1f} epochs)"
        )
    bleu = metadata.get("best_validation_bleu")
    print(
        f"trained:     {metadata['step']:,} updates"
        + (f", validation BLEU (greedy) {bleu:.2f}" if bleu is not None else "")
    )
    print(f"run:         {paths.run}  (tensorboard --logdir {paths.run / 'logs'})")
    if (paths.run / CURVES_FILE).is_file():
        print(f"curves:      {paths.run / CURVES_FILE}  (loss, learning rate, validation BLEU)")
    print(f"model:       {paths.run / 'model'}")
    for test in corpus.reports:
        report = json.loads((paths.report(test.name) / "report.json").read_text("utf-8"))
        scores = report["scores"]
        print(
            f"report:      {paths.report(test.name) / 'report.md'}  (BLEU "
            f"{scores['bleu']['score']:.2f}, chrF {scores['chrf']['score']:.2f}, TER "
            f"{scores['ter']['score']:.2f} on {report['sentences']} sentences of {test.name})"
        )
    print(
        f"export:      {paths.export / str(EXPORT_VERSION)}  (translator serve --model "
        f"{paths.export}" + (f"; tags {', '.join(corpus.tags)}" if corpus.tags else "") + ")"
    )


def _head(path: Path, count: int, out: Path) -> Path:
    """The first `count` lines of a text file (plain or gzip), written to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "".join(f"{line}\n" for line in read_lines(path, count)))
    return out
