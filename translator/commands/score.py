"""`translator score`: score hypotheses made elsewhere with sacreBLEU (no model needed).

The service is `translator.evaluation.score_files`.
"""

from __future__ import annotations

import argparse

from translator.commands.options import (
    METRICS_HELP,
    add_reference_option,
    add_report_arguments,
    print_report,
    scoring_of,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `score` subcommand."""
    parser = subparsers.add_parser(
        "score",
        help="score hypotheses against references with sacreBLEU (BLEU, chrF, TER)",
        description=(
            "Scores a file of hypotheses (one per line, plain or .gz) against one or more "
            f"reference files aligned line by line. {METRICS_HELP}"
        ),
        epilog=(
            "Examples: translator score --hyp test.hyp.de --ref test.de.gz "
            "--compare baseline.hyp.de --report reports/test; translator score --hyp "
            "test.hyp.zh --ref test.ref1.zh --ref test.ref2.zh -l en-zh --metrics chrf++"
        ),
    )
    parser.add_argument("--hyp", required=True, metavar="FILE", help="hypotheses, one per line")
    add_reference_option(parser, "--hyp")
    add_report_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    from translator.evaluation import score_files

    written = score_files(
        args.hyp,
        args.ref,
        baseline=args.compare,
        bootstrap_samples=args.bootstrap_samples,
        report_dir=args.report,
        scoring=scoring_of(args),
    )
    print_report(written)
    return 0
