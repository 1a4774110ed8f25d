"""What the user gave `translator recipe`, and where the recipe puts things.

Pure Python, no TensorFlow: the command line builds these before `--help` returns.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from training.config import DEFAULT_CONFIG, GivenConfig, read_config

# Multi30k's directions, when no files are given.
MULTI30K_PAIRS = ("en-de", "de-en")
# The SavedModel version the export stage writes.
EXPORT_VERSION = 1

# The stages' progress lines, numbered in this order: the recipe's, and a distillation's
# (`training.recipe.distillation`), with two more: the student's shape, the teacher's translations.
RECIPE_STAGES = ("data", "vocabulary", "training", "evaluation", "export")
DISTILL_STAGES = (
    "data", "vocabulary", "student", "translation", "training", "evaluation", "export"
)  # fmt: skip


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

    @property
    def plain(self) -> bool:
        """Untagged, of weight 1: a corpus the config can give as one pair of files."""
        return not self.tag and self.weight == 1.0

    def describe(self) -> str:
        """`src | tgt (weight 2, tag <bt>)` for the log and the summary."""
        extras = [f"weight {self.weight:g}"] if self.weight != 1.0 else []
        extras += [f"tag {self.tag}"] if self.tag else []
        return f"{self.source} | {self.target}" + (f" ({', '.join(extras)})" if extras else "")


def one_plain_pair(train: tuple[TrainFiles, ...]) -> bool:
    """One corpus, untagged, of weight 1: the single-pair form of the config and record."""
    return len(train) == 1 and train[0].plain


@dataclasses.dataclass(frozen=True)
class TestFiles:
    """A test set as given: `--test SRC REF [--tag T]`."""

    source: Path
    reference: Path
    # Prepended to its sources, as to the training corpus of its direction; "": none.
    tag: str = ""


@dataclasses.dataclass(frozen=True)
class RecipeSettings:
    """What the user chose on the command line."""

    # Training time budget in minutes.
    minutes: float
    # Local directory with the Multi30k files, for machines without internet.
    mirror: str | None
    # Joint SentencePiece vocabulary size (None: planned from the corpus' size).
    vocab_size: int | None
    # The training config: the default one with the user's `--set`, and the keys they set.
    config: GivenConfig = dataclasses.field(default_factory=lambda: read_config(DEFAULT_CONFIG))
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
    # Clean the training corpora first (`translator.pipelines.clean`, default rules).
    clean: bool = False
    # Distil this trained model (a model or run directory, or a Marian model) into a
    # student (`training.recipe.distillation`); None: train as usual.
    distill_from: Path | None = None
    # The student decodes at least this many times the teacher's speed (the rule's target).
    student_speedup: float = 2.0
    # A student shape by name (`training.planning.students`); "": the rule chooses.
    student: str = ""
    # What the student learns: "distilled", "both" (beside the references), "original".
    student_data: str = "distilled"
    # Translate only the first N pairs of each corpus with the teacher (0: all).
    distill_pairs: int = 0


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
    def pretrained(self) -> Path:
        """`--init-from`'s Marian model, imported (a model directory)."""
        return self.workdir / "pretrained"

    @property
    def teacher(self) -> Path:
        """`--distill-from`'s Marian model, imported (a model directory)."""
        return self.workdir / "teacher"

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

    @property
    def export_version(self) -> Path:
        """The SavedModel the export stage writes (`export/1`)."""
        return self.export / str(EXPORT_VERSION)


def start_stage(settings: RecipeSettings, stage: str, text: str) -> None:
    """Prints `[3/5] text`: where `stage` stands among the job's (a distillation has seven)."""
    stages = DISTILL_STAGES if settings.distill_from is not None else RECIPE_STAGES
    print(f"[{stages.index(stage) + 1}/{len(stages)}] {text}", flush=True)
