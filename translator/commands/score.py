"""`translator score`: score hypotheses made elsewhere with sacreBLEU (no model needed).

Also the input and report helpers `evaluate` shares.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

METRICS_HELP = (
    "Scores are sacreBLEU's with its defaults: BLEU (13a tokenization, cased), chrF2 and TER "
    "(case-insensitive), each printed with its sacreBLEU signature, plus lowercased BLEU and "
    "the hypothesis/reference length ratio. With --compare, sacreBLEU's paired bootstrap "
    "resampling (1000 resamples, seed $SACREBLEU_SEED or 12345) tests the difference to the "
    "other hypotheses: 95% confidence interval of the difference and p-value "
    "(p < 0.05: significant, marked *)."
)


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --report, --compare and --bootstrap-samples."""
    parser.add_argument(
        "--report",
        metavar="DIR",
        help=(
            "also write DIR/report.json (scores, signatures, settings, file sha256s, timing) "
            "and DIR/report.md (scores table, comparison, samples, worst sentences by "
            "sentence-level chrF); DIR is created if missing"
        ),
    )
    parser.add_argument(
        "--compare",
        metavar="HYP_FILE",
        help="another system's hypotheses of the same sources: paired bootstrap comparison",
    )
    parser.add_argument(
        "--bootstrap-samples",
        type=int,
        default=1000,
        metavar="N",
        help="resamples of the paired bootstrap test (default: 1000, as sacreBLEU)",
    )


def read_text(path: str) -> list[str]:
    """The lines of a plain or .gz UTF-8 file.

    Raises:
        CorpusError: naming the file (and line, for invalid UTF-8).
    """
    from translator.io import read_lines

    return read_lines(path)


def check_aligned(
    lines: Sequence[str], path: str, references: Sequence[str], ref_path: str
) -> None:
    """Raises EvaluationError naming both files and counts when the line counts differ."""
    from translator.evaluation import check_same_length

    check_same_length(lines, path, references, ref_path)
    if not references:
        from translator.cli import CommandError

        raise CommandError(f"{ref_path}: no lines to score")


def read_baseline(args: argparse.Namespace, references: Sequence[str]) -> list[str] | None:
    """The --compare hypotheses, checked against the references; None without --compare."""
    if args.compare is None:
        return None
    if args.bootstrap_samples < 1:
        from translator.cli import CommandError

        raise CommandError(f"--bootstrap-samples must be >= 1, got {args.bootstrap_samples}")
    baseline = read_text(args.compare)
    check_aligned(baseline, args.compare, references, args.ref)
    return baseline


def emit(report: Any, directory: str | None) -> None:
    """Prints the scores table; with a directory, writes report.json and report.md too."""
    from translator.evaluation import format_scores, write_report

    print(format_scores(report.evaluation))
    if directory is not None:
        json_path, md_path = write_report(report, directory)
        print(f"\nwrote {json_path} and {md_path}")


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
    from translator.evaluation import EvaluationReport, evaluate, file_identity

    hypotheses = read_text(args.hyp)
    references = read_text(args.ref)
    check_aligned(hypotheses, args.hyp, references, args.ref)
    baseline = read_baseline(args, references)
    evaluation = evaluate(
        hypotheses, references, baseline=baseline, bootstrap_samples=args.bootstrap_samples
    )
    data = {
        "hypotheses": file_identity(args.hyp, len(hypotheses)),
        "reference": file_identity(args.ref, len(references)),
    }
    if baseline is not None:
        data["baseline"] = file_identity(args.compare, len(baseline))
    emit(EvaluationReport(evaluation=evaluation, data=data), args.report)
    return 0
