"""`translator recipe`: the whole job for a new user, one command.

    translator recipe --workdir runs/multi30k --minutes 60

fetches Multi30k (from `--mirror` / `$TRANSLATOR_DATA_MIRROR` when offline), builds the
joint SentencePiece vocabulary, trains the default recipe within the time budget,
translates test_2016_flickr with beam search and scores it with sacreBLEU into a report,
and exports a SavedModel for serving; then prints where each result is. Each stage is
skipped when its result is already there, and an interrupted training resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from training.budgets import BudgetSetting, setting_for
from training.cli import DEFAULT_CONFIG

if TYPE_CHECKING:
    from training.config import RunConfig

log = logging.getLogger(__name__)

# The test set the recipe reports on, and the export version it writes.
TEST_SET = "test_2016_flickr"
EXPORT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class RecipePaths:
    """Where the recipe puts things, under one work directory."""

    workdir: Path

    @property
    def data(self) -> Path:
        """The Multi30k files."""
        return self.workdir / "data"

    @property
    def vocabulary(self) -> Path:
        """The joint SentencePiece vocabulary."""
        return self.workdir / "vocab"

    @property
    def run(self) -> Path:
        """The training run directory (its final model is `run/model`)."""
        return self.workdir / "run"

    @property
    def report(self) -> Path:
        """The evaluation report on the test set (report.json, report.md, translations)."""
        return self.workdir / "eval" / TEST_SET

    @property
    def export(self) -> Path:
        """The export base directory: SavedModel versions as TF Serving expects them."""
        return self.workdir / "export"


@dataclasses.dataclass(frozen=True)
class RecipeSettings:
    """What the user chose on the command line."""

    # Training time budget in minutes (the published figure uses 60).
    minutes: float
    # Local directory with the Multi30k files, for machines without internet.
    mirror: str | None
    # Joint SentencePiece vocabulary size (None: the budget setting's).
    vocab_size: int | None
    # `--set key=value` overrides of the training config.
    overrides: tuple[str, ...] = ()
    # Translate and score only the first N test sentences (0 = all); for quick checks.
    test_sentences: int = 0
    # Beam size of the test translation and of the export.
    beam_size: int = 4

    @property
    def budget(self) -> BudgetSetting:
        """The training setting chosen for this time budget (`training.budgets`)."""
        return setting_for(self.minutes)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `recipe` subcommand."""
    parser = subparsers.add_parser(
        "recipe",
        help="the whole job: data, vocabulary, training, test-set report, export",
        description=(
            "Runs the default Multi30k English-to-German recipe end to end in one work "
            "directory: fetch the data, build the vocabulary, train within a time budget, "
            f"translate {TEST_SET} with beam search and score it with sacreBLEU into a "
            "report, export a SavedModel. Stages already done are skipped; an interrupted "
            "training resumes (delete WORKDIR/run/model to train again)."
        ),
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("runs/multi30k"), help="default: runs/multi30k"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=60.0,
        help="training time budget (default: 60); the model, learning rate and validation "
        "cadence are those chosen for the budget (training/budgets.py)",
    )
    parser.add_argument("--mirror", help="local directory with the Multi30k files (no network)")
    parser.add_argument(
        "--vocab-size",
        type=int,
        help="joint vocabulary size (default: the one the budget's setting was chosen with)",
    )
    parser.add_argument(
        "--beam-size", type=int, default=4, help="beam of the test report and export (default: 4)"
    )
    parser.add_argument(
        "--test-sentences",
        type=int,
        default=0,
        metavar="N",
        help=f"translate only the first N sentences of {TEST_SET} (default: all)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a value of the training config (repeatable)",
    )
    parser.set_defaults(handler=run, log_level=logging.INFO)


def run(args: argparse.Namespace) -> int:
    """Runs `translator recipe`."""
    from translator.cli import CommandError

    if args.minutes <= 0:
        raise CommandError(f"--minutes must be positive, got {args.minutes:g}")
    paths = RecipePaths(args.workdir)
    settings = RecipeSettings(
        minutes=args.minutes,
        mirror=args.mirror,
        vocab_size=args.vocab_size,
        overrides=tuple(args.overrides),
        test_sentences=args.test_sentences,
        beam_size=args.beam_size,
    )
    run_recipe(paths, settings)
    print_summary(paths)
    return 0


def run_recipe(paths: RecipePaths, settings: RecipeSettings) -> None:
    """Every stage in order, each skipped when its result is already there.

    Raises:
        PipelineError, ConfigError, TrainingError: from the stage that failed.
    """
    fetch_data(paths, settings)
    build_vocab(paths, settings)
    train_model(paths, settings)
    evaluate_test_set(paths, settings)
    export_model(paths, settings)


def fetch_data(paths: RecipePaths, settings: RecipeSettings) -> None:
    """Stage 1: the Multi30k files, checksum-verified."""
    from translator.pipelines import fetch_dataset

    print(f"[1/5] data -> {paths.data}", flush=True)
    fetch_dataset(
        "multi30k", paths.data, mirror=settings.mirror, log=lambda line: print("  " + line)
    )


def build_vocab(paths: RecipePaths, settings: RecipeSettings) -> None:
    """Stage 2: the joint SentencePiece vocabulary of the training data."""
    from translator.pipelines import build_vocabulary

    print(f"[2/5] vocabulary -> {paths.vocabulary}", flush=True)
    if (paths.vocabulary / "vocab.json").is_file():
        print("  already built")
        return
    build_vocabulary(
        [paths.data / "train.en.gz"],
        [paths.data / "train.de.gz"],
        paths.vocabulary,
        vocab_size=settings.vocab_size or settings.budget.vocab_size,
    )


def train_model(paths: RecipePaths, settings: RecipeSettings) -> None:
    """Stage 3: the default recipe within the time budget (resumed if interrupted)."""
    from training.run import train

    print(f"[3/5] training ({settings.minutes:g} minutes) -> {paths.run}", flush=True)
    print(f"  {settings.budget.describe()}", flush=True)
    if (paths.run / "model" / "model.keras").is_file():
        print(f"  already trained: {paths.run / 'model'}")
        return
    config = run_config(paths, settings)
    result = train(config, paths.run)
    best = (
        f"; best validation BLEU (greedy) {result.best_bleu:.2f} at step {result.best_step}"
        if result.best_bleu is not None
        else ""
    )
    print(
        f"  {result.steps:,} updates, {result.target_tokens:,} target tokens, "
        f"{result.stop_reason}{best}",
        flush=True,
    )


def run_config(paths: RecipePaths, settings: RecipeSettings) -> RunConfig:
    """The training config: the default one, the budget's setting, then the user's `--set`."""
    from training.config import load_config

    return load_config(
        DEFAULT_CONFIG,
        [
            f"data.train_source={paths.data / 'train.en.gz'}",
            f"data.train_target={paths.data / 'train.de.gz'}",
            f"data.valid_source={paths.data / 'val.en.gz'}",
            f"data.valid_target={paths.data / 'val.de.gz'}",
            f"data.vocabulary={paths.vocabulary}",
            f"train.max_minutes={settings.minutes}",
            *settings.budget.overrides,
            *settings.overrides,
        ],
    )


def evaluate_test_set(paths: RecipePaths, settings: RecipeSettings) -> None:
    """Stage 4: beam-search translation of the test set, scored into a report."""
    from translator.commands.evaluate import evaluate_model
    from translator.search.config import SearchConfig

    print(f"[4/5] {TEST_SET} with beam {settings.beam_size} -> {paths.report}", flush=True)
    if (paths.report / "report.json").is_file():
        print("  already evaluated")
        return
    source = paths.data / f"{TEST_SET}.en.gz"
    reference = paths.data / f"{TEST_SET}.de.gz"
    if settings.test_sentences:
        source, reference = (
            _head(
                path, settings.test_sentences, paths.report.parent / path.name.removesuffix(".gz")
            )
            for path in (source, reference)
        )
    paths.report.mkdir(parents=True, exist_ok=True)
    evaluate_model(
        paths.run,
        source,
        reference,
        SearchConfig(beam_size=settings.beam_size),
        hypotheses_out=paths.report / "translations.de",
        report_dir=paths.report,
    )


def export_model(paths: RecipePaths, settings: RecipeSettings) -> None:
    """Stage 5: the SavedModel (tokenizer, beam search, detokenizer inside)."""
    from translator.export import ExportConfig
    from translator.export import export_model as export_saved_model
    from translator.search.config import SearchConfig

    version = paths.export / str(EXPORT_VERSION)
    print(f"[5/5] SavedModel -> {version}", flush=True)
    if (version / "saved_model.pb").is_file():
        print("  already exported")
        return
    search = SearchConfig(beam_size=settings.beam_size, n_best=settings.beam_size)
    path = export_saved_model(
        paths.run, paths.export, ExportConfig(search=search), version=EXPORT_VERSION
    )
    print(f"  exported {path}", flush=True)


def print_summary(paths: RecipePaths) -> None:
    """Where each result is, and the test scores."""
    report = json.loads((paths.report / "report.json").read_text("utf-8"))
    scores = report["scores"]
    print()
    print(f"data:        {paths.data}")
    print(f"vocabulary:  {paths.vocabulary}")
    print(f"run:         {paths.run}  (tensorboard --logdir {paths.run / 'logs'})")
    print(f"model:       {paths.run / 'model'}")
    print(
        f"report:      {paths.report / 'report.md'}  (BLEU {scores['bleu']['score']:.2f}, "
        f"chrF {scores['chrf']['score']:.2f}, TER {scores['ter']['score']:.2f} "
        f"on {report['sentences']} sentences of {TEST_SET})"
    )
    print(
        f"export:      {paths.export / str(EXPORT_VERSION)}  (translator serve --model "
        f"{paths.export})"
    )


def _head(path: Path, count: int, out: Path) -> Path:
    """The first `count` lines of a gzip text file, written to `out`."""
    import gzip

    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        out.write_text("".join(line for _, line in zip(range(count), lines, strict=False)), "utf-8")
    return out
