"""`translator evaluate`: translate a test set with a model and score it with sacreBLEU."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from translator.commands.options import add_batching_options, add_model_option, add_search_options
from translator.commands.score import METRICS_HELP, add_report_arguments


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
    add_batching_options(parser)
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
    from translator.commands.options import search_config
    from translator.commands.translate import check_model

    # Everything the user can get wrong is checked before the model is loaded (the files
    # by `evaluate_model`, which reads them first).
    check_model(args.model, args.engine)  # a wrong --model fails before TensorFlow starts
    if args.hyp_out is not None and not Path(args.hyp_out).resolve().parent.is_dir():
        raise CommandError(f"{args.hyp_out}: cannot write: its directory does not exist")
    evaluate_model(
        args.model,
        args.src,
        args.ref,
        search_config(args),
        batch_tokens=args.batch_tokens,
        max_source_length=args.max_source_length,
        xla=args.xla,
        engine=args.engine,
        precision=args.precision,
        hypotheses_out=args.hyp_out,
        report_dir=args.report,
        baseline=args.compare,
        bootstrap_samples=args.bootstrap_samples,
    )
    return 0


def evaluate_model(
    model: str | Path,
    source: str | Path,
    reference: str | Path,
    search: Any,
    *,
    batch_tokens: int = 4096,
    max_source_length: int | None = None,
    xla: bool = False,
    engine: str = "auto",
    precision: str = "model",
    hypotheses_out: str | Path | None = None,
    report_dir: str | Path | None = None,
    baseline: str | Path | None = None,
    bootstrap_samples: int = 1000,
) -> Any:
    """Translates `source` with `model` as `translate` does and scores it against `reference`.

    Prints the scores (and where the report went); what `translator evaluate` and the
    recipe run.

    Args:
        model: A model directory or a training run directory.
        source: Source sentences, one per line (plain or .gz).
        reference: References aligned with `source`.
        search: The `SearchConfig`.
        batch_tokens: Source tokens per batch.
        max_source_length: Cut longer sources (default: the model's limit).
        xla: Compile the search with XLA.
        engine: "auto", "tensorflow" or "ctranslate2" (`translator.commands.options.ENGINES`).
        precision: What our search computes in (`translator.config.PRECISIONS`).
        hypotheses_out: Also write the translations there.
        report_dir: Also write report.json and report.md there.
        baseline: Another system's hypotheses of the same sources, for the paired test.
        bootstrap_samples: Resamples of the paired test.

    Returns:
        The `EvaluationReport`.

    Raises:
        TranslatorError: naming the file or setting at fault (before the model loads).
    """
    from translator.commands.score import check_aligned, emit, read_text
    from translator.commands.translate import load_translator, one_line, progress_bar
    from translator.errors import ConfigError
    from translator.evaluation import EvaluationReport, evaluate, file_identity
    from translator.io import write_atomic

    sources, references = read_text(source), read_text(reference)
    check_aligned(sources, source, references, reference)
    others = None
    if baseline is not None:
        if bootstrap_samples < 1:
            raise ConfigError(f"--bootstrap-samples must be >= 1, got {bootstrap_samples}")
        others = read_text(baseline)
        check_aligned(others, baseline, references, reference)
    loaded = load_translator(model, search, batch_tokens, max_source_length, xla, engine, precision)
    translator = loaded.translator
    started = time.monotonic()
    with progress_bar(len(sources), "translating") as progress:
        hypotheses = [one_line(h) for h in translator.translate(sources, progress)]
    seconds = time.monotonic() - started
    if hypotheses_out:
        write_atomic(hypotheses_out, "".join(h + "\n" for h in hypotheses))
    files = {"source": source, "reference": reference, "hypotheses": hypotheses_out}
    data = {
        role: file_identity(path, len(sources))  # every file has a line per source line
        for role, path in {**files, "baseline": baseline}.items()
        if path is not None
    }
    evaluation = evaluate(
        hypotheses,
        references,
        sources=sources,
        baseline=others,
        bootstrap_samples=bootstrap_samples,
    )
    report = EvaluationReport(
        evaluation=evaluation,
        data=data,
        model=_model_identity(loaded.trained),
        search=_search_record(translator),
        translation=dataclasses.asdict(translator.stats),
        timing=_timing(loaded, translator.stats, len(sources), seconds),
    )
    stats = translator.stats
    print(
        f"translated {stats.lines:,} lines ({stats.empty:,} empty, {stats.truncated:,} "
        f"truncated) in {seconds:.1f} s with {model}\n"
    )
    emit(report, None if report_dir is None else str(report_dir))
    return report


def _search_record(translator: Any) -> dict[str, Any]:
    """The search settings of a report: the `SearchConfig` and how batches ran."""
    return {
        **translator.config.to_dict(),  # what ran: an engine may run other rules
        "engine": translator.engine,
        "batch_tokens": translator.batch_tokens,
        "max_source_length": translator.max_source_length,
        "xla": translator.decoder.jit_compile,
        # The dtype our search computed in (None for another engine).
        "compute_dtype": translator.model.compute_dtype if translator.model else None,
    }


def _timing(loaded: Any, stats: Any, sentences: int, seconds: float) -> Any:
    from translator.evaluation import Timing

    return Timing(
        load_seconds=loaded.load_seconds,
        warmup_seconds=loaded.warmup_seconds,
        translate_seconds=seconds,
        sentences_per_second=sentences / seconds if seconds > 0 else 0.0,
        target_tokens_per_second=stats.target_tokens / seconds if seconds > 0 else 0.0,
    )


def _model_identity(trained: Any) -> Any:
    from translator.evaluation import ModelIdentity
    from translator.io import sha256_file

    return ModelIdentity(
        directory=str(trained.directory.resolve()),
        model_sha256=sha256_file(trained.model_file),
        source_vocab_sha256=trained.vocabulary.source.sha256,
        target_vocab_sha256=trained.vocabulary.target.sha256,
        metadata=trained.metadata,
    )
