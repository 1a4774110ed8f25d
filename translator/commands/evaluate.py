"""`translator evaluate`: translate a test set with a model and score it with sacreBLEU."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from translator.commands.score import METRICS_HELP, add_report_arguments
from translator.commands.translate import add_search_arguments


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
    add_search_arguments(parser)
    data = parser.add_argument_group("data and report")
    data.add_argument(
        "--src", required=True, metavar="FILE", help="source sentences, one per line (plain/.gz)"
    )
    data.add_argument(
        "--ref",
        required=True,
        metavar="FILE",
        help="references, aligned with --src line by line (plain/.gz)",
    )
    data.add_argument(
        "--hyp-out",
        metavar="FILE",
        help="also keep the translations in FILE, one per source line (gzipped if *.gz)",
    )
    add_report_arguments(data)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    from translator.cli import CommandError
    from translator.commands.score import check_aligned, emit, read_baseline, read_text
    from translator.commands.translate import (
        atomic_output,
        blank_to_empty,
        load_translator,
        one_line,
        progress_bar,
        resolve_model,
        search_config,
    )
    from translator.evaluation import EvaluationReport, Timing, evaluate, file_identity

    # Everything the user can get wrong is checked before the model is loaded.
    resolve_model(args.model)
    sources = read_text(args.src)
    references = read_text(args.ref)
    check_aligned(sources, args.src, references, args.ref)
    baseline = read_baseline(args, references)
    if args.hyp_out is not None and not Path(args.hyp_out).resolve().parent.is_dir():
        raise CommandError(f"{args.hyp_out}: cannot write: its directory does not exist")
    config = search_config(args)

    loaded = load_translator(args, config)
    translator = loaded.translator
    started = time.monotonic()
    with progress_bar(len(sources), "translating") as progress:
        hypotheses = [one_line(h) for h in translator.translate(blank_to_empty(sources), progress)]
    seconds = time.monotonic() - started
    data = {
        "source": file_identity(args.src, len(sources)),
        "reference": file_identity(args.ref, len(references)),
    }
    if args.hyp_out:
        with atomic_output(args.hyp_out) as sink:
            sink.write("".join(h + "\n" for h in hypotheses).encode("utf-8"))
        data["hypotheses"] = file_identity(args.hyp_out, len(hypotheses))
    if baseline is not None:
        data["baseline"] = file_identity(args.compare, len(baseline))

    evaluation = evaluate(
        hypotheses,
        references,
        sources=sources,
        baseline=baseline,
        bootstrap_samples=args.bootstrap_samples,
    )
    stats = translator.stats
    report = EvaluationReport(
        evaluation=evaluation,
        data=data,
        model=_model_identity(loaded.trained),
        search={
            **config.to_dict(),
            "batch_tokens": translator.batch_tokens,
            "max_source_length": translator.max_source_length,
            "xla": translator.decoder.jit_compile,
        },
        translation={
            "lines": stats.lines,
            "empty": stats.empty,
            "truncated": stats.truncated,
            "batches": stats.batches,
            "target_tokens": stats.target_tokens,
        },
        timing=Timing(
            load_seconds=loaded.load_seconds,
            warmup_seconds=loaded.warmup_seconds,
            translate_seconds=seconds,
            sentences_per_second=len(sources) / seconds if seconds > 0 else 0.0,
            target_tokens_per_second=stats.target_tokens / seconds if seconds > 0 else 0.0,
        ),
    )
    print(
        f"translated {stats.lines:,} lines ({stats.empty:,} empty, {stats.truncated:,} "
        f"truncated) in {seconds:.1f} s with {args.model}\n"
    )
    emit(report, args.report)
    return 0


def _model_identity(trained: Any) -> Any:
    from translator.artifacts import MODEL_FILE
    from translator.evaluation import ModelIdentity, sha256_file

    return ModelIdentity(
        directory=str(trained.directory.resolve()),
        model_sha256=sha256_file(trained.directory / MODEL_FILE),
        source_vocab_sha256=trained.vocabulary.source.sha256,
        target_vocab_sha256=trained.vocabulary.target.sha256,
        metadata=trained.metadata,
    )
