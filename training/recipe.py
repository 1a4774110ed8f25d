"""`translator recipe`: the whole job for a new user, one command.

    translator recipe --workdir runs/multi30k --minutes 60

fetches Multi30k (from `--mirror` / `$TRANSLATOR_DATA_MIRROR` when offline), builds the
joint SentencePiece vocabulary, trains the default recipe within the time budget
(resuming if the work directory holds an interrupted run), and prints where each
result is. Each stage is skipped when its result is already there.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

from training.cli import DEFAULT_CONFIG

log = logging.getLogger(__name__)


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
        """The training run directory."""
        return self.workdir / "run"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `recipe` subcommand."""
    parser = subparsers.add_parser(
        "recipe",
        help="the whole job: fetch Multi30k, build the vocabulary, train (README's main command)",
        description=(
            "Runs the default Multi30k English-to-German recipe end to end in one work "
            "directory: data, vocabulary, training. Stages already done are skipped; an "
            "interrupted training resumes."
        ),
    )
    parser.add_argument(
        "--workdir", type=Path, default=Path("runs/multi30k"), help="default: runs/multi30k"
    )
    parser.add_argument(
        "--minutes", type=float, default=60.0, help="training time budget (default: 60)"
    )
    parser.add_argument("--mirror", help="local directory with the Multi30k files (no network)")
    parser.add_argument(
        "--vocab-size", type=int, default=8000, help="joint vocabulary size (default: 8000)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a value of the training config (repeatable)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Runs `translator recipe`."""
    from training.config import ConfigError
    from training.run import TrainingError
    from translator.cli import CommandError
    from translator.pipelines import PipelineError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        result = run_recipe(
            RecipePaths(args.workdir), args.minutes, args.mirror, args.vocab_size, args.overrides
        )
    except (PipelineError, ConfigError, TrainingError) as error:
        raise CommandError(str(error)) from error
    paths = RecipePaths(args.workdir)
    print()
    print(f"data:        {paths.data}")
    print(f"vocabulary:  {paths.vocabulary}")
    print(
        f"run:         {paths.run}  (checkpoints; logs: tensorboard --logdir {paths.run / 'logs'})"
    )
    best = (
        f"; best validation BLEU {result.best_bleu:.2f} at step {result.best_step}"
        if result.best_bleu
        else ""
    )
    print(f"model:       {result.model_dir}  ({result.steps} steps, {result.stop_reason}{best})")
    return 0


def run_recipe(
    paths: RecipePaths, minutes: float, mirror: str | None, vocab_size: int, overrides=()
):
    """Data, vocabulary and training; returns the `TrainResult`."""
    from training.config import load_config
    from training.run import train
    from translator.pipelines import build_vocabulary, fetch_dataset

    print(f"[1/3] data -> {paths.data}", flush=True)
    fetch_dataset("multi30k", paths.data, mirror=mirror, log=lambda line: print("  " + line))
    print(f"[2/3] vocabulary -> {paths.vocabulary}", flush=True)
    if (paths.vocabulary / "vocab.json").is_file():
        print("  already built")
    else:
        build_vocabulary(
            [paths.data / "train.en.gz"],
            [paths.data / "train.de.gz"],
            paths.vocabulary,
            vocab_size=vocab_size,
        )
    print(f"[3/3] training ({minutes:g} minutes) -> {paths.run}", flush=True)
    config = load_config(
        DEFAULT_CONFIG,
        [
            f"data.train_source={paths.data / 'train.en.gz'}",
            f"data.train_target={paths.data / 'train.de.gz'}",
            f"data.valid_source={paths.data / 'val.en.gz'}",
            f"data.valid_target={paths.data / 'val.de.gz'}",
            f"data.vocabulary={paths.vocabulary}",
            f"train.max_minutes={minutes}",
            *overrides,
        ],
    )
    return train(config, paths.run)
