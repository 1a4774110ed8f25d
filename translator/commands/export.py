"""`translator export`: a trained model as a text-in, text-out SavedModel for serving."""

from __future__ import annotations

import argparse
from typing import Any

from translator.commands.translate import TOP_BEAM_STOP_HELP, search_fields


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `export` subcommand."""
    parser = subparsers.add_parser(
        "export",
        help="export a trained model as a SavedModel (text in, text out) for serving",
        description=(
            "Writes EXPORT_BASE/<version>/, a SavedModel with in-graph SentencePiece\n"
            "tokenization, the beam search of `translator translate` and detokenization.\n"
            "Signatures:\n"
            "  serving_default  inputs: string [batch] -> translations: string [batch],\n"
            "                   scores: float [batch]\n"
            "  n_best           inputs: string [batch] -> translations: string [batch, N],\n"
            "                   scores: float [batch, N]\n"
            "It loads with TensorFlow and `import tensorflow_text` alone, and serves with\n"
            "`translator serve` or TF Serving (model base path EXPORT_BASE)."
        ),
        epilog=(
            "Example: translator export --model runs/m30k --out exports/m30k\n"
            "  saved_model_cli show --all --dir exports/m30k/1"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="RUN_DIR",
        help="a training run directory or a model directory (model.keras + vocab/)",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="EXPORT_BASE",
        help="directory of numbered versions (TF Serving's model base path)",
    )
    parser.add_argument(
        "--version",
        type=int,
        metavar="N",
        help="version number (default: one more than the highest in EXPORT_BASE, or 1)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the version if it exists")
    search = parser.add_argument_group("search (fixed in the exported graph)")
    search.add_argument(
        "--beam-size", type=int, default=4, metavar="K", help="beam size; 1 = greedy (default: 4)"
    )
    search.add_argument(
        "--length-penalty",
        type=float,
        default=0.6,
        metavar="ALPHA",
        help="GNMT length penalty exponent; score = log P / ((5 + |Y|) / 6) ** ALPHA "
        "(default: 0.6)",
    )
    search.add_argument(
        "--n-best",
        type=int,
        metavar="N",
        help="hypotheses per sentence of the n_best signature (default: the beam size)",
    )
    search.add_argument(
        "--max-length-a",
        type=float,
        default=1.2,
        metavar="A",
        help="output length limit a * source_length + b: a (default: 1.2)",
    )
    search.add_argument(
        "--max-length-b",
        type=int,
        default=10,
        metavar="B",
        help="output length limit a * source_length + b: b (default: 10)",
    )
    search.add_argument(
        "--min-length",
        type=int,
        default=1,
        metavar="N",
        help="tokens before EOS may end a translation; 1 rules out empty translations of "
        "non-empty inputs (default: 1)",
    )
    search.add_argument(
        "--top-beam-stop",
        action="store_true",
        help=TOP_BEAM_STOP_HELP,
    )
    search.add_argument(
        "--max-output-length",
        type=int,
        default=256,
        metavar="N",
        help="cap on output tokens, EOS included (default: 256)",
    )
    search.add_argument(
        "--max-source-length",
        type=int,
        metavar="N",
        help="longer sources are cut to N tokens, EOS included (default: as `translate`: "
        "the position table size for learned positions, else 1024)",
    )
    parser.set_defaults(handler=run)


def search_config(args: argparse.Namespace) -> Any:
    """The `SearchConfig` fixed in the exported graph, from the command-line options.

    Raises:
        CommandError: naming the invalid setting.
    """
    from translator.cli import CommandError
    from translator.search import SearchConfig

    try:
        return SearchConfig(
            **search_fields(args),
            max_output_length=args.max_output_length,
            n_best=args.n_best or args.beam_size,
        )
    except ValueError as error:
        raise CommandError(str(error)) from error


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    import os
    import time

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from translator.cli import CommandError

    search = search_config(args)
    from translator.artifacts import ModelDirError
    from translator.export import ExportConfig, ExportError, export_model

    start = time.monotonic()
    try:
        path = export_model(
            args.model,
            args.out,
            ExportConfig(search=search, max_source_length=args.max_source_length),
            version=args.version,
            overwrite=args.overwrite,
        )
    except (ModelDirError, ExportError) as error:
        raise CommandError(str(error)) from error
    print(f"exported {args.model} to {path} in {time.monotonic() - start:.1f} s")
    print(
        f"  serving_default: inputs string [batch] -> translations string [batch], scores "
        f"float [batch] (beam {search.beam_size}, length penalty {search.length_penalty})"
    )
    print(
        f"  n_best: translations string [batch, {search.n_best}], scores float [batch, "
        f"{search.n_best}]"
    )
    print(f"  serve it: translator serve --model {args.out}")
    return 0
