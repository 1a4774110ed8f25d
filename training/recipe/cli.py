"""`translator recipe`'s command line: its options, and the lines it prints.

The stages run in `training.recipe.stages`, imported when the command runs (it imports
TensorFlow; `--help` does not need it).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from training.config import DEFAULT_CONFIG, DROPOUT, MODEL_OVERRIDES, read_config
from training.engines.backend import choose_backend
from training.recipe.settings import (
    MULTI30K_PAIRS,
    RecipePaths,
    RecipeSettings,
    TestFiles,
    TrainFiles,
)
from translator.config import DROPOUT_FIELDS
from translator.errors import ConfigError

if TYPE_CHECKING:
    from training.recipe.reports import RecipeSummary


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `recipe` subcommand."""
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
            "\n  translator recipe --workdir runs/student --minutes 15 --distill-from runs/multi30k"
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
        help="training time budget, measuring this machine's speed and validation included "
        "(default: 60). On TensorFlow it counts everything from the plan's timing "
        "to the last update, tracing included. On JAX compiling the steps is not: the "
        "run's, one per batch shape, and the timing's, one per timed batch, run before "
        "their clocks, and the plan and log say how long they took (on a GPU, about a "
        "minute or two more)",
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
    corpus.add_argument(
        "--clean",
        action="store_true",
        help="clean each --train corpus first with `translator data clean`'s default rules "
        "(empty, invalid text, too long, length ratio, few letters, copies, duplicates, "
        "wrong language); the report is printed and kept in WORKDIR/data",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        metavar="MODEL",
        help="fine-tune MODEL (a model or run directory, or a Marian model: an OPUS-MT "
        "directory or zip, or a Hugging Face MarianMT directory, imported into WORKDIR/"
        "pretrained first) on --train within the budget: its vocabulary and architecture "
        "are kept, the plan chooses the learning rate, warmup, dropout and batch",
    )
    student = parser.add_argument_group(
        "distillation: a small, fast student of a trained model; --minutes covers the "
        "whole job (the teacher's translation, training, evaluation, export)"
    )
    student.add_argument(
        "--distill-from",
        type=Path,
        metavar="TEACHER",
        help="train a student of TEACHER (a model or run directory, or a Marian model) on "
        "its beam-search translations of the training sources (translated in resumable "
        "chunks, kept in WORKDIR/distilled); the student keeps its vocabulary, and both "
        "are evaluated side by side",
    )
    student.add_argument(
        "--student-speedup",
        type=float,
        default=2.0,
        metavar="X",
        help="the student is the largest shape cut from the teacher (its encoder and 2 or "
        "1 of its decoder blocks, weights and all) whose beam search, timed beside the "
        "teacher's here, is at least X times faster, else the fastest cut one (default: "
        "2); the half-width student from random weights is faster but lost more BLEU in "
        "every job measured, so it is taken by name only (--student student-1-half)",
    )
    student.add_argument(
        "--student",
        default="",
        metavar="NAME",
        help="this student shape instead: student-2, student-1 or student-1-half",
    )
    student.add_argument(
        "--student-data",
        choices=("distilled", "both", "original"),
        default="distilled",
        help="what the student learns: the teacher's translations (default), them beside "
        "the references, or only the references (a control: nothing is translated)",
    )
    student.add_argument(
        "--distill-pairs",
        type=int,
        default=0,
        metavar="N",
        help="translate only the first N pairs of each corpus, where the whole would not "
        "fit the budget (the job says how many fit)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        help="joint vocabulary size (default: planned from the corpus and the budget); a work "
        "directory built at another size is built again, until a run has planned on it",
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


def settings_files(args: argparse.Namespace) -> dict[str, object]:
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
    if not args.train and (args.valid or args.test or args.langs or args.clean):
        raise ConfigError("--valid, --test, --langs and --clean need --train (Multi30k: --pair)")
    if args.init_from is not None and args.vocab_size is not None:
        raise ConfigError(
            "--init-from: fine-tuning keeps the model's vocabulary; leave out --vocab-size"
        )
    paths = RecipePaths(args.workdir)
    settings = RecipeSettings(
        minutes=args.minutes,
        mirror=args.mirror,
        vocab_size=args.vocab_size,
        config=read_config(DEFAULT_CONFIG, args.overrides),  # the one read of --set
        test_sentences=args.test_sentences,
        beam_size=args.beam_size,
        langs=args.langs,
        **settings_files(args),
        pair=args.pair,
        init_from=args.init_from,
        clean=args.clean,
        distill_from=args.distill_from,
        student_speedup=args.student_speedup,
        student=args.student,
        student_data=args.student_data,
        distill_pairs=args.distill_pairs,
    )
    if settings.distill_from is not None:
        _check_distill_options(args, settings)
    choose_backend(settings.config.config)  # before Keras' import
    from training.recipe import stages as recipe  # TensorFlow: not for --help

    if args.plan:
        print("\n".join(recipe.plan_recipe(paths, settings).describe()))
        return 0
    if settings.distill_from is None:
        print_summary(recipe.run_recipe(paths, settings))
        return 0
    from training.recipe import distillation

    summary = distillation.run_distillation(paths, settings)
    print_summary(summary)
    print("\n".join(distillation.describe(paths, summary.corpus)))
    return 0


def _check_distill_options(args: argparse.Namespace, settings: RecipeSettings) -> None:
    """`--distill-from` with an option it cannot take: one error line."""
    if args.init_from is not None:
        raise ConfigError("--distill-from trains a new student; it cannot take --init-from")
    if args.vocab_size is not None:
        raise ConfigError(
            "--distill-from: the student keeps the teacher's vocabulary; leave out --vocab-size"
        )
    if args.plan:
        raise ConfigError(
            "--distill-from: --plan is not supported (the student's plan "
            "follows the teacher's timing and translation)"
        )
    dropout = {MODEL_OVERRIDES.child(field) for field in DROPOUT_FIELDS}
    if any(key.path[0] == "model" and key not in dropout for key in settings.config.set_keys):
        raise ConfigError(
            "--distill-from: the student's shape is chosen by --student or "
            "--student-speedup; of --set model.*, only its dropout may be given "
            "(model.overrides.dropout, attention_dropout, activation_dropout)"
        )
    if args.student_speedup <= 0 or args.distill_pairs < 0:
        raise ConfigError("--student-speedup must be > 0 and --distill-pairs >= 0")


def print_summary(summary: RecipeSummary) -> None:
    """Where each result is: the plan, what training bought, the scores."""
    paths, corpus, plan = summary.paths, summary.corpus, summary.plan
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
            f"{plan.batch_tokens:,} batch tokens, dropout {plan.value(DROPOUT)}, "
            f"~{plan.updates:,} updates, "
            f"{plan.epochs:,.1f} epochs)"
        )
    bleu, start = summary.best_bleu, summary.start_bleu
    print(
        f"trained:     {summary.steps:,} updates"
        + (f", validation BLEU (greedy) {bleu:.2f}" if bleu is not None else "")
        + (f" (the model it fine-tuned: {start:.2f})" if start is not None else "")
    )
    print(f"run:         {paths.run}  (tensorboard --logdir {paths.run / 'logs'})")
    if summary.curves is not None:
        print(f"curves:      {summary.curves}  (loss, learning rate, validation BLEU)")
    print(f"model:       {paths.run / 'model'}")
    for scores in summary.scores:
        print(
            f"report:      {scores.markdown}  (BLEU {scores.bleu:.2f}, chrF {scores.chrf:.2f}, "
            f"TER {scores.ter:.2f} on {scores.sentences} sentences of {scores.name})"
        )
    if not (paths.export_version / "saved_model.pb").is_file():
        print("export:      not written here (TensorFlow is not installed: see stage 5)")
        return
    print(
        f"export:      {paths.export_version}  (translator serve --model "
        f"{paths.export}" + (f"; tags {', '.join(corpus.tags)}" if corpus.tags else "") + ")"
    )
