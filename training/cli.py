"""`translator train` and `translator average-checkpoints` (plugged in by entry point)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "multi30k_en_de.yaml"


def register_train(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `train` subcommand."""
    parser = subparsers.add_parser(
        "train",
        help="train a model from a YAML run config (resumes an interrupted run)",
        description=(
            "Trains a Transformer as a YAML run config says, under a tf.distribute strategy, "
            "with checkpoints, validation BLEU and TensorBoard logs in the run directory. "
            "Running it again on the same run directory resumes from the last checkpoint."
        ),
        epilog=(
            "Example: translator train --run-dir runs/m30k --set train.max_minutes=5\n"
            f"Default config: {DEFAULT_CONFIG}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="YAML run config (default: Multi30k EN-DE)",
    )
    parser.add_argument(
        "--run-dir", type=Path, required=True, help="where checkpoints, logs and the model go"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set optimizer.peak_learning_rate=0.003 (repeatable)",
    )
    parser.add_argument("--max-minutes", type=float, help="shorthand for --set train.max_minutes=M")
    parser.set_defaults(handler=run_train, log_level=logging.INFO)


def run_train(args: argparse.Namespace) -> int:
    """Runs `translator train`."""
    from training.config import load_config
    from training.run import train

    overrides = list(args.overrides)
    if args.max_minutes is not None:
        overrides.append(f"train.max_minutes={args.max_minutes}")
    config = load_config(args.config, overrides)
    result = train(config, args.run_dir)
    best = (
        f", best validation BLEU {result.best_bleu:.2f} at step {result.best_step}"
        if result.best_bleu
        else ""
    )
    print(f"trained {result.steps} steps ({result.stop_reason}){best}")
    print(f"final model: {result.model_dir}")
    return 0


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
