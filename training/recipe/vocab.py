"""Stage 2 of the recipe: the joint SentencePiece vocabulary, of the planned size.

First the data limit's size (`training.planning.vocabulary.choose_vocab_size`, of the
corpus' characters), unless the user gave one; a planned size the corpus cannot fill
falls back to the most SentencePiece supports. Then the budget weighs it
(`size_by_budget`): the plan is made on it, and where the plan takes a smaller size
(few epochs bought: the compute limit), the vocabulary is built again at that size
before training, which plans on it. SentencePiece's second training costs what its first
did (seconds on Multi30k; bench/RESULTS.md), outside the training budget as the first is.
Fine-tuning keeps the model's own vocabulary: a copy of it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from training.finetune import find_init_model
from training.planning.measure import PLAN_FILE
from training.planning.rules import Plan, Speed
from training.planning.speed_cache import resized_speeds
from training.planning.vocabulary import VocabularyChoice, choose_vocab_size, vocab_size_reason
from training.recipe.corpus import RecipeCorpus
from training.recipe.prepared import fixed_vocabulary
from training.recipe.settings import RecipePaths, RecipeSettings, start_stage
from translator.errors import ConfigError
from translator.io import atomic_directory, count_characters, write_atomic
from translator.pipelines import VocabularyError, build_vocabulary
from translator.pipelines.vocabulary import load_vocabulary

# Beside the vocabulary: the size the budget chose and why (`size_by_budget`).
BUDGET_FILE = "budget.json"


def build_vocab(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> None:
    """Stage 2: the joint SentencePiece vocabulary of the training data, of planned size."""
    start_stage(settings, "vocabulary", f"vocabulary -> {paths.vocabulary}")
    if (paths.vocabulary / "vocab.json").is_file() and not _given_size_differs(paths, settings):
        print("  already built")
        return
    if settings.init_from is not None:
        copy_init_vocabulary(paths, settings.init_from)
        return
    size, why = settings.vocab_size, "--vocab-size"
    if size is None:
        characters = sum(count_characters(*files.files) for files in corpus.train)
        size = choose_vocab_size(characters)
        why = f"the data limit: {vocab_size_reason(characters)}"
    tags = corpus.tags
    print(f"  {size:,} pieces ({why})" + (f"; tags {', '.join(tags)}" if tags else ""), flush=True)
    started = time.monotonic()
    try:
        _build(paths, corpus, size)
    except VocabularyError as error:
        # A planned size the corpus cannot fill (few distinct words): SentencePiece says
        # the most it supports; a size the user asked for stays an error.
        if settings.vocab_size is not None or error.supported_size is None:
            raise
        size = error.supported_size
        print(f"  {size:,} pieces: all that the corpus supports", flush=True)
        _build(paths, corpus, size)
    print(f"  built in {time.monotonic() - started:.1f} s", flush=True)


def _given_size_differs(paths: RecipePaths, settings: RecipeSettings) -> bool:
    """Whether `--vocab-size` asks for another size than the one built (built again then).

    Raises:
        ConfigError: it does, and the vocabulary cannot change: a run planned on it, or a
            corpus prepared on it that cannot be prepared again here.
    """
    if settings.vocab_size is None:
        return False
    built = load_vocabulary(paths.vocabulary).target_vocab_size
    if settings.vocab_size == built:
        return False
    held = f"--vocab-size {settings.vocab_size:,}: {paths.vocabulary} holds {built:,} pieces"
    if (paths.run / PLAN_FILE).is_file():
        raise ConfigError(
            f"{held}, and the run in {paths.run} planned on them; use a new work directory"
        )
    fixed = fixed_vocabulary()
    if fixed is not None:
        raise ConfigError(
            f"{held}, and {fixed}: build it where TensorFlow is (this recipe with "
            f"--vocab-size {settings.vocab_size} --plan) and carry the work directory here"
        )
    print(f"  built before at {built:,} pieces: built again at the size given", flush=True)
    return True


def _build(paths: RecipePaths, corpus: RecipeCorpus, size: int) -> None:
    """The joint vocabulary of the training data (the tags one piece each), replaced whole."""
    sources = [files.source for files in corpus.train]
    targets = [files.target for files in corpus.train]
    with atomic_directory(paths.vocabulary) as staging:
        build_vocabulary(sources, targets, staging, vocab_size=size, user_symbols=corpus.tags)


def size_by_budget(
    paths: RecipePaths,
    settings: RecipeSettings,
    corpus: RecipeCorpus,
    plan_on: Callable[[], Plan],
    fixed_by: str | None = None,
    preview: bool = False,
) -> None:
    """The budget's say on the vocabulary's size: built again smaller where the plan says.

    `plan_on` makes the plan on the vocabulary built (its speeds are cached in the work
    directory, so training's plan measures nothing again when the size stays). Skipped
    when the user set the size, when fine-tuning, when decided already (a rerun, a run
    trained or planned), and where the vocabulary cannot change here (`fixed_by` says
    why: a corpus prepared on it that cannot be prepared again, say). A `preview`
    (`--plan`) says what a run here would take and changes nothing: the size follows
    the speed of the machine that trains, and a work directory planned here may train
    on another (README, a GPU without TensorFlow). Where the size is fixed, only a
    preview weighs it, and says how to build the size it would take where it can be.
    """
    record = paths.vocabulary / BUDGET_FILE
    if settings.vocab_size is not None or settings.init_from is not None:
        return
    if record.is_file() or (paths.run / PLAN_FILE).is_file():
        return
    if fixed_by is not None and not preview:
        print(f"  by the budget: kept ({fixed_by}); --plan says what it would take", flush=True)
        return
    plan = plan_on()
    choice = plan.vocabulary
    assert choice is not None  # (a plan made with a vocabulary trade names its size)
    built = load_vocabulary(paths.vocabulary).target_vocab_size
    if preview:
        taken = f"{choice.size:,} pieces" if choice.size < built else "kept"
        how = "--plan builds nothing"
        if fixed_by is not None and choice.size < built:
            how = (
                f"{fixed_by}: to train at that size, run this recipe with --vocab-size "
                f"{choice.size} --plan where TensorFlow is, carry the work directory here, and "
                f"train with --vocab-size {choice.size}"
            )
        print(f"  by the budget, a run here: {taken} ({choice.reason}); {how}")
        return
    if choice.size < built:
        print(f"  by the budget: {choice.size:,} pieces ({choice.reason})", flush=True)
        started = time.monotonic()
        _build(paths, corpus, choice.size)
        print(f"  built again in {time.monotonic() - started:.1f} s", flush=True)
    else:
        print(f"  by the budget: kept ({choice.reason})", flush=True)
    known = ()
    if choice.size < built:  # (training's plan takes the timed speeds, scaled to the size)
        known = resized_speeds(paths.workdir, plan.shape, choice.speedup)
    sized = SizedVocabulary(choice, plan.measuring_seconds, known)
    write_atomic(record, json.dumps(dataclasses.asdict(sized), indent=2))


@dataclasses.dataclass(frozen=True)
class SizedVocabulary:
    """What the vocabulary stage tells training's plan (`BUDGET_FILE`)."""

    choice: VocabularyChoice
    # Seconds the stage's plan spent timing: the budget's, charged by training's plan.
    measuring_seconds: float
    # The chosen shape's speeds at the size built, by speed-cache entry (`resized_speeds`):
    # training's plan times them no more.
    known_speeds: tuple[tuple[str, Speed], ...] = ()

    @classmethod
    def read(cls, path: Path) -> SizedVocabulary | None:
        """The record, or None when there is none."""
        if not path.is_file():
            return None
        data = json.loads(path.read_text("utf-8"))
        known = tuple((key, Speed(**speed)) for key, speed in data.get("known_speeds", ()))
        return cls(VocabularyChoice(**data["choice"]), data["measuring_seconds"], known)


def vocabulary_kept(paths: RecipePaths, settings: RecipeSettings) -> SizedVocabulary:
    """Why training keeps the recipe's vocabulary, and what sizing it already timed.

    The reason (`choice.reason`) is in the plan's words; the seconds are the vocabulary
    stage's timing, charged to training's budget; the known speeds, that timing's at the
    size built.
    """

    def kept(reason: str) -> SizedVocabulary:  # (its size unread: training loads the vocabulary)
        return SizedVocabulary(VocabularyChoice(0, reason, planned=False), 0.0)

    if settings.vocab_size is not None:
        return kept("--vocab-size")
    if settings.init_from is not None:
        return kept(f"the fine-tuned model's ({settings.init_from})")
    if settings.distill_from is not None:
        return kept(f"the teacher's ({settings.distill_from})")
    sized = SizedVocabulary.read(paths.vocabulary / BUDGET_FILE)
    if sized is None:  # (a work directory planned before the budget weighed it)
        return kept("the data limit's, built before training")
    reason = f"sized by the budget before training: {sized.choice.reason}"
    return dataclasses.replace(sized, choice=dataclasses.replace(sized.choice, reason=reason))


def copy_init_vocabulary(paths: RecipePaths, init_from: Path) -> None:
    """Fine-tuning keeps the model's vocabulary: a copy of it, not a new one.

    Raises:
        ConfigError: the model to fine-tune has no vocabulary beside it.
    """
    init = find_init_model(init_from)
    if init.vocabulary_dir is None:
        raise ConfigError(f"--init-from {init_from}: no vocab/ beside the model to fine-tune with")
    with atomic_directory(paths.vocabulary) as staging:
        shutil.copytree(init.vocabulary_dir, staging, dirs_exist_ok=True)
    print(f"  the vocabulary of {init_from} ({init.vocabulary_dir})", flush=True)
