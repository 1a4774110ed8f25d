"""`translator train` and `translator average-checkpoints` (plugged in by entry point)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

from training.config import (
    DATA_PREPARED,
    DATA_TEXT,
    DATA_VOCABULARY,
    DEFAULT_CONFIG,
    INIT_FROM,
    MAX_MINUTES,
    RUN_CONFIG_FILE,
    Change,
    ConfigKey,
    RunConfig,
    read_config,
)
from training.engines.backend import check_tensorflow, choose_backend
from translator.errors import ConfigError


def register_train(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `train` subcommand."""
    parser = subparsers.add_parser(
        "train",
        help="train a model from a YAML run config (resumes an interrupted run)",
        description=(
            "Trains a Transformer as a YAML run config says, under a tf.distribute strategy\n"
            "(or on Keras' JAX backend: --set train.backend=jax, for GPUs and TPUs set up\n"
            "for JAX), with checkpoints, validation BLEU and TensorBoard logs in the run\n"
            "directory.\n"
            "What the config and --set leave unset (model shape and dropout, batch tokens,\n"
            "subword sampling, learning rate, warmup, label smoothing, validation cadence)\n"
            "is planned for the run's budget on this machine (RUN/plan.json; --plan shows\n"
            "it). Running it again on the same run directory resumes from the last\n"
            "checkpoint, with the same plan.\n"
            "A resume given --max-minutes M (or --set train.max_minutes=M) has M minutes in\n"
            "all, measuring included: a finished or interrupted run trains on from its last\n"
            "checkpoint, its learning-rate schedule stretched to the new end (plan.json is\n"
            "updated; the other planned values stay). A larger train.max_steps trains on too."
        ),
        epilog=(
            "Examples:\n"
            "  translator train --run-dir runs/m30k --set train.max_minutes=5\n"
            "  translator train --run-dir runs/m30k-jax --max-minutes 5 --set train.backend=jax\n"
            "  translator train --run-dir runs/news --init-from runs/m30k --max-minutes 10 \\\n"
            "      --set data.train_source=news.en.gz --set data.train_target=news.de.gz\n"
            f"Default config: {DEFAULT_CONFIG}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="YAML run config (default: RUN_DIR/config.yaml when resuming a run, else "
        "Multi30k EN-DE)",
    )
    parser.add_argument(
        "--run-dir", type=Path, help="where checkpoints, logs and the model go (required)"
    )
    parser.add_argument(
        "--help-config",
        action="store_true",
        help="print every config key with its type, default and meaning (docs/config.md) and exit",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set optimizer.peak_learning_rate=0.003 (repeatable)",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        help="shorthand for --set train.max_minutes=M: the time budget, measuring and "
        "validation included; on JAX compiling the steps (the run's and the timing's) "
        "is not: it runs before the clock, and the plan and log say how long it took",
    )
    parser.add_argument(
        "--init-from",
        metavar="MODEL",
        help="fine-tune: start from the weights of MODEL (a model or run directory, or a "
        ".keras file); its architecture and vocabulary are used (data.vocabulary defaults "
        "to the model's), and the optimizer, schedule and budget start fresh (shorthand for "
        "--set train.init_from=MODEL)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the plan (corpus counts, measured speeds, the updates and epochs the "
        "budget buys, each planned value and the rule's reason) and exit without training",
    )
    parser.add_argument(
        "--no-plan",
        action="store_true",
        help="plan nothing: train the config as it is, with the built-in defaults for "
        "what it leaves unset",
    )
    parser.set_defaults(handler=run_train, log_level=logging.INFO)


def run_train(args: argparse.Namespace) -> int:
    """Runs `translator train`."""
    if args.help_config:
        from training.config_reference import reference

        print(reference(), end="")
        return 0
    if args.run_dir is None:
        raise ConfigError("train: --run-dir is required")
    args.config = run_config_path(args.config, args.run_dir)
    given = read_config(args.config, args.overrides)  # the one read of --set
    if args.max_minutes is not None:
        given = given.with_values(Change(MAX_MINUTES, float(args.max_minutes)))
    if args.init_from is not None:
        given = given.with_values(Change(INIT_FROM, str(args.init_from)))
    config = with_init_vocabulary(given.config, given.set_keys)
    config = with_prepared_corpus(config, given.set_keys)
    choose_backend(config)  # before Keras is imported
    check_tensorflow(config)
    from training.planning.lifecycle import PlanRequest
    from training.record import summary_line
    from training.run import preview_plan, train

    request = None
    if not args.no_plan:
        request = PlanRequest(given.keys, given.set_keys)
    if args.plan:
        if request is None:
            raise ConfigError("--plan and --no-plan: choose one")
        print("\n".join(preview_plan(config, request, args.run_dir).describe()))
        return 0
    result = train(config, args.run_dir, planning=request)
    print(summary_line(result))
    print(f"final model: {result.model_dir}")
    if result.curves is not None:
        print(f"curves:      {result.curves}  (loss, learning rate, validation BLEU)")
    return 0


def with_prepared_corpus(config: RunConfig, set_keys: frozenset[ConfigKey]) -> RunConfig:
    """The config training on a prepared corpus given with `--set data.prepared=DIR`.

    It replaces the config file's training text files (the default Multi30k ones
    included); text files set on the command line beside it are an error at the start.
    """
    if DATA_PREPARED not in set_keys or any(key in set_keys for key in DATA_TEXT):
        return config
    data = dataclasses.replace(config.data, train=(), train_source="", train_target="")
    return dataclasses.replace(config, data=data)


def with_init_vocabulary(config: RunConfig, set_keys: frozenset[ConfigKey]) -> RunConfig:
    """The config with fine-tuning's vocabulary: the model's own (`train.init_from`).

    Fine-tuning needs the model's vocabulary, so the user need not point at it: a config
    file's `data.vocabulary` (the default Multi30k one's included) is replaced. One set on
    the command line is kept, and checked against the model's when the run starts.
    """
    from training.finetune import find_init_model

    if not config.train.init_from or DATA_VOCABULARY in set_keys:
        return config
    vocabulary = find_init_model(config.train.init_from).vocabulary_dir
    if vocabulary is None:  # a bare .keras file: the config's vocabulary, size-checked
        return config
    data = dataclasses.replace(config.data, vocabulary=str(vocabulary))
    return dataclasses.replace(config, data=data)


def run_config_path(given: Path | None, run_dir: Path) -> Path:
    """The config a run reads: --config, else an existing run's own, else the default.

    Resuming `translator train --run-dir R` without --config continues R as it was
    configured (R/config.yaml, the resolved config it wrote), plus any --set.
    """
    own = run_dir / RUN_CONFIG_FILE
    path = given or (own if own.is_file() else DEFAULT_CONFIG)
    why = "--config" if given else ("the run's own" if path == own else "the default")
    logging.getLogger("training.run").info("config: %s (%s)", path, why)
    return path


def register_average(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `average-checkpoints` subcommand."""
    parser = subparsers.add_parser(
        "average-checkpoints",
        help="average the weights of a run's last K checkpoints into a model directory",
        description=(
            "Averages the model weights of the last K checkpoints of a training run (as the "
            "paper does for its reported results) and writes a model directory that "
            "translate, evaluate and export load."
        ),
    )
    parser.add_argument("--run-dir", type=Path, required=True, help="a training run directory")
    parser.add_argument("--last", type=int, default=5, help="how many checkpoints (default: 5)")
    parser.add_argument("--out", type=Path, help="output model directory (default: RUN/averaged)")
    parser.set_defaults(handler=run_average)


def run_average(args: argparse.Namespace) -> int:
    """Runs `translator average-checkpoints`."""
    from training.average import average_run

    out, paths = average_run(args.run_dir, args.last, args.out)
    print(f"averaged {len(paths)} checkpoints: {', '.join(Path(p).name for p in paths)}")
    print(f"model: {out}")
    return 0
