"""`translator export`: a trained model as a SavedModel for serving, or for CTranslate2."""

from __future__ import annotations

import argparse
import dataclasses

from translator.commands.options import (
    add_model_option,
    add_search_options,
    add_tag_options,
    search_config,
    tag_of,
)
from translator.engines.base import CTRANSLATE2_QUANTIZATIONS
from translator.search.config import SearchConfig
from translator.signatures import describe_signatures

SIGNATURES = "".join(f"  {name}: {what}\n" for name, what in describe_signatures().items())


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `export` subcommand."""
    parser = subparsers.add_parser(
        "export",
        help="export a trained model as a SavedModel (text in, text out) for serving, or "
        "as a CTranslate2 model",
        description=(
            "Writes EXPORT_BASE/<version>/, a SavedModel with in-graph SentencePiece\n"
            "tokenization, the beam search of `translator translate` and detokenization.\n"
            f"Signatures:\n{SIGNATURES}"
            "(the tagged ones when the vocabulary has tags: tags[i] is sentence i's tag,\n"
            '"" for --tag\'s, or none; prefixes[i] begins translation i, "" for none;\n'
            "sample with --sampling: S = --num-samples draws per sentence, best first)\n"
            "It loads with TensorFlow and `import tensorflow_text` alone, and serves with\n"
            "`translator serve` or TF Serving (model base path EXPORT_BASE).\n\n"
            "With --format ctranslate2, writes OUT/ as a CTranslate2 model directory\n"
            "(CTranslate2's converter API; weights as --quantization says) with the\n"
            "vocabulary beside it: `translator translate` and `evaluate` take it as\n"
            "--model (the search options are then given there, not here). Needs\n"
            '`pip install -e ".[ctranslate2]"`.'
        ),
        epilog=(
            "Examples:\n"
            "  translator export --model runs/m30k --out exports/m30k\n"
            "  saved_model_cli show --all --dir exports/m30k/1\n"
            "  translator export --format ctranslate2 --quantization int8 --model runs/m30k "
            "--out exports/m30k-ct2"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_option(parser)
    parser.add_argument(
        "--out",
        required=True,
        metavar="EXPORT_BASE",
        help="directory of numbered versions (TF Serving's model base path); with --format "
        "ctranslate2, the model directory itself",
    )
    parser.add_argument(
        "--format",
        choices=("savedmodel", "ctranslate2", "marian"),
        default="savedmodel",
        help="savedmodel: TF Serving's layout, the search in the graph; ctranslate2: a "
        "CTranslate2 model directory; marian: Marian's files as OPUS-MT ships them (for a "
        "model Marian can express: trained with sinusoid_layout marian and "
        "zero_start_embedding, or imported) (default: %(default)s)",
    )
    parser.add_argument(
        "--quantization",
        choices=CTRANSLATE2_QUANTIZATIONS,
        default="float32",
        help="--format ctranslate2: weight type; int8 is the usual CPU choice "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--version",
        type=int,
        metavar="N",
        help="version number (default: one more than the highest in EXPORT_BASE, or 1)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the version (with --format ctranslate2: OUT) if it exists",
    )
    add_search_options(parser, "search (fixed in the exported graph)")
    add_tag_options(parser)
    parser.add_argument(
        "--n-best",
        type=int,
        metavar="N",
        help="hypotheses per sentence of the n_best signature (default: the beam size)",
    )
    parser.set_defaults(handler=run)


def export_search_config(args: argparse.Namespace) -> tuple[SearchConfig, SearchConfig | None]:
    """The search fixed in the export, and the sample signature's draws.

    The n-best size defaults to the beam size; the draws are None without --sampling.

    Raises:
        ConfigError: naming the invalid setting.
    """
    given = search_config(args)  # checks every option, the sampling ones too
    n_best = args.n_best or args.beam_size
    beam = dataclasses.replace(given, sampling="", num_samples=1, n_best=n_best)
    return beam, (given if given.sampled else None)


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    import os
    import time

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.format == "ctranslate2":
        return _run_ctranslate2(args)
    if args.format == "marian":
        return _run_marian(args)

    search, sampling = export_search_config(args)
    from translator.export import ExportConfig, export_model
    from translator.signatures import read_metadata

    start = time.monotonic()
    path = export_model(
        args.model,
        args.out,
        ExportConfig(
            search=search,
            max_source_length=args.max_source_length,
            tag=tag_of(args),
            sampling=sampling,
        ),
        version=args.version,
        overwrite=args.overwrite,
    )
    print(f"exported {args.model} to {path} in {time.monotonic() - start:.1f} s")
    for name, what in read_metadata(path)["signatures"].items():
        print(f"  {name}: {what}")
    print(f"  search: beam {search.beam_size}, length penalty {search.length_penalty}")
    print(f"  serve it: translator serve --model {args.out}")
    return 0


def _run_marian(args: argparse.Namespace) -> int:
    """`export --format marian`: Marian's files, which `translator import marian` reads."""
    from pathlib import Path

    from translator.artifacts import load_model_dir, read_model_dir
    from translator.errors import CommandError
    from translator.marian.export import check_exportable, export_marian

    check_exportable(read_model_dir(args.model).model_config)  # before TensorFlow's start
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise CommandError(f"{out}: exists and is not empty; pass --overwrite to replace it")
    path = export_marian(load_model_dir(args.model), out)
    print(f"exported {args.model} to {path} in Marian's format")
    print(f"  import it again: translator import marian {path} --out MODEL_DIR")
    return 0


def _run_ctranslate2(args: argparse.Namespace) -> int:
    """`export --format ctranslate2`: the model directory for CTranslate2."""
    import time
    from pathlib import Path

    from translator.artifacts import load_model_dir, resolve_model_dir
    from translator.engines.ctranslate2_export import export_ctranslate2
    from translator.errors import CommandError

    resolve_model_dir(args.model)  # a wrong --model fails before TensorFlow starts
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        raise CommandError(f"{out}: exists and is not empty; pass --overwrite to replace it")
    start = time.monotonic()
    path = export_ctranslate2(load_model_dir(args.model), out, args.quantization)
    print(
        f"exported {args.model} to {path} for CTranslate2 ({args.quantization} weights) in "
        f"{time.monotonic() - start:.1f} s\n"
        f"  translate with it: translator translate --model {path}"
    )
    return 0
