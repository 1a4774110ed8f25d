"""`translator score`: score hypotheses made elsewhere with sacreBLEU (no model needed).

The service is `translator.evaluation.score_files`.
"""

from __future__ import annotations

import argparse

from translator.commands.options import METRICS_HELP, add_report_arguments, print_report


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `score` subcommand."""
    parser = subparsers.add_parser(
        "score",
        help="score hypotheses against references with sacreBLEU (BLEU, chrF, TER)",
        description=(
            "Scores a file of hypotheses (one per line, plain or .gz) against a reference "
            f"file aligned line by line. {METRICS_HELP}"
        ),
        epilog=(
            "Example: translator score --hyp test.hyp.de --ref test.de.gz "
            "--compare baseline.hyp.de --report reports/test"
        ),
    )
    parser.add_argument("--hyp", required=True, metavar="FILE", help="hypotheses, one per line")
    parser.add_argument("--ref", required=True, metavar="FILE", help="references, one per line")
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
    )
    print_report(written)
    return 0
