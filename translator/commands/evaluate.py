"""`translator evaluate`: translate a test set with a model and score it with sacreBLEU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from translator.commands.options import (
    METRICS_HELP,
    add_batching_options,
    add_document_options,
    add_model_option,
    add_reference_option,
    add_report_arguments,
    add_search_options,
    add_tag_options,
    inference_options,
    print_report,
    scoring_of,
    search_config,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `evaluate` subcommand."""
    parser = subparsers.add_parser(
        "evaluate",
        help="translate a test set and score it with sacreBLEU (BLEU, chrF, TER)",
        description=(
            "Translates --src with the model (exactly as `translator translate` does) and "
            f"scores the translations against --ref. {METRICS_HELP} The report records the "
            "model (directory, metadata.json, sha256 of model.keras and the vocabulary), the "
            "data (paths, sha256, line counts), the search settings and the timing."
        ),
        epilog=(
            "Example: translator evaluate --model runs/m30k --src test_2016_flickr.en.gz "
            "--ref test_2016_flickr.de.gz --report reports/m30k-test --hyp-out test.hyp.de"
        ),
    )
    add_model_option(parser)
    add_search_options(parser)
    add_tag_options(parser)
    add_document_options(parser)
    add_batching_options(parser)
    data = parser.add_argument_group("data and report")
    data.add_argument(
        "--src", required=True, metavar="FILE", help="source sentences, one per line (plain/.gz)"
    )
    add_reference_option(data, "--src")
    data.add_argument(
        "--hyp-out",
        metavar="FILE",
        help="also keep the translations in FILE, one per source line (gzipped if *.gz)",
    )
    add_report_arguments(data)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    from translator.console import progress_bar
    from translator.engines import check_model
    from translator.errors import CommandError
    from translator.evaluation import evaluate_model
    from translator.io import count_lines

    # Everything the user can get wrong is checked before the model loads.
    check_model(args.model, args.engine)  # a wrong --model fails before TensorFlow starts
    if args.hyp_out is not None and not Path(args.hyp_out).resolve().parent.is_dir():
        raise CommandError(f"{args.hyp_out}: cannot write: its directory does not exist")
    search, options, scoring = search_config(args), inference_options(args), scoring_of(args)
    with progress_bar(count_lines(args.src), "translating") as progress:
        written = evaluate_model(
            args.model,
            args.src,
            args.ref,
            search,
            options,
            hypotheses_out=args.hyp_out,
            report_dir=args.report,
            baseline=args.compare,
            bootstrap_samples=args.bootstrap_samples,
            progress=progress,
            scoring=scoring,
        )
    for note in written.notes:
        print(note, file=sys.stderr)
    print_report(written)
    return 0
