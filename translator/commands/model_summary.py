"""`translator model-summary`: build a preset, run a forward pass, print its size."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `model-summary` subcommand."""
    parser = subparsers.add_parser(
        "model-summary",
        help="build a model preset, run one forward pass and print its parameter count",
        description=(
            "Builds a Transformer from a named preset, runs a forward pass on a random batch "
            "and prints the parameter count per component and the output shape."
        ),
    )
    parser.add_argument(
        "--preset", default="small", help="tiny, small, base or big (default: small)"
    )
    parser.add_argument(
        "--vocab-size", type=int, default=8000, help="shared vocabulary size (default: 8000)"
    )
    parser.add_argument("--batch-size", type=int, default=2, help="batch of the forward pass")
    parser.add_argument("--length", type=int, default=16, help="source and target length")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    import numpy as np

    from translator.config import TransformerConfig
    from translator.model import Transformer

    config = TransformerConfig.preset(args.preset, vocab_size=args.vocab_size)
    model = Transformer(config)
    rng = np.random.default_rng(0)
    shape = (args.batch_size, args.length)
    source = rng.integers(4, args.vocab_size, size=shape).astype("int32")
    target = rng.integers(4, args.vocab_size, size=shape).astype("int32")
    logits = model((source, target), training=False)
    print(f"preset {args.preset}: {config}")
    for name, count in model.parameter_breakdown().items():
        print(f"  {name:<24} {count:>14,d}")
    print(f"  {'total':<24} {model.count_params():>14,d}")
    print(f"forward pass: source {shape}, target {shape} -> logits {tuple(logits.shape)}")
    return 0
