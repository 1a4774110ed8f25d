"""The two evaluation services: score files made elsewhere, and translate-then-score.

`score_files` is `translator score`; `evaluate_model` is `translator evaluate`. Both check
every input before anything slow starts, and print nothing.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from translator.evaluation.metrics import Scoring
from translator.evaluation.render import format_scores, write_report
from translator.evaluation.report import EvaluationReport, ModelIdentity, Timing, file_identity
from translator.evaluation.scoring import (
    DEFAULT_BOOTSTRAP_SAMPLES,
    Evaluation,
    EvaluationError,
    check_references,
    check_same_length,
    evaluate,
)
from translator.io import one_line, read_lines, sha256_file, write_atomic

if TYPE_CHECKING:  # pragma: no cover
    from translator.engines import InferenceOptions, LoadedModel, LoadedTranslator
    from translator.inference import TranslationStats
    from translator.search.config import SearchConfig

PathLike = str | os.PathLike[str]
# One reference file, or several (each aligned with the sources: multiple references).
ReferencePaths = PathLike | Sequence[PathLike]


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    """A report, and where it was written (None when no directory was asked for)."""

    report: EvaluationReport
    json_path: Path | None = None
    markdown_path: Path | None = None
    # The PNG charts beside report.md (by source length; the bootstrap comparison).
    charts: tuple[Path, ...] = ()
    # What the engine ran differently from the search asked for (one phrase each).
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        """What a command prints: the translation counts (if any), scores and files."""
        parts = []
        stats, timing = self.report.translation, self.report.timing
        if stats is not None and timing is not None:
            model = self.report.model.directory if self.report.model else "the model"
            parts.append(
                f"translated {stats['lines']:,} lines ({stats['empty']:,} empty, "
                f"{stats['truncated']:,} truncated) in {timing.translate_seconds:.1f} s "
                f"with {model}\n"
            )
        parts.append(format_scores(self.report.evaluation))
        if self.json_path is not None:
            charts = "".join(f", {chart}" for chart in self.charts)
            parts.append(f"\nwrote {self.json_path}{charts} and {self.markdown_path}")
        return "\n".join(parts)


def read_references(paths: ReferencePaths) -> tuple[list[PathLike], list[list[str]]]:
    """The reference files as a list, and their lines: one stream each, checked aligned.

    Raises:
        CorpusError: a missing or unreadable file, or invalid UTF-8 (file and line).
        EvaluationError: naming two files and counts when they differ, or no lines.
    """
    files = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not files:
        raise EvaluationError("no reference file given")
    streams = [read_lines(path) for path in files]
    check_references(streams, files)
    if not streams[0]:
        raise EvaluationError(f"{files[0]}: no lines to score")
    return files, streams


def _roles(files: Sequence[PathLike]) -> dict[str, PathLike]:
    """Report roles of the reference files: "reference", then "reference 2", ..."""
    return {"reference" if i == 0 else f"reference {i + 1}": f for i, f in enumerate(files)}


def read_aligned(path: PathLike, references: Sequence[str], reference_path: PathLike) -> list[str]:
    """The lines of `path`, checked to align with the references line by line.

    Raises:
        CorpusError: a missing or unreadable file, or invalid UTF-8 (file and line).
        EvaluationError: naming both files and counts when they differ, or no references.
    """
    lines = read_lines(path)
    check_same_length(lines, path, references, reference_path)
    if not references:
        raise EvaluationError(f"{reference_path}: no lines to score")
    return lines


def score_files(
    hypotheses: PathLike,
    reference: ReferencePaths,
    *,
    baseline: PathLike | None = None,
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    report_dir: PathLike | None = None,
    scoring: Scoring | None = None,
) -> ReportFiles:
    """Scores a hypotheses file against references (`translator score`).

    Args:
        hypotheses: One translation per line (plain or .gz).
        reference: The reference file, or several (multiple references), each aligned
            with `hypotheses`.
        baseline: Another system's hypotheses, for the paired bootstrap test.
        bootstrap_samples: Resamples of the paired test.
        report_dir: Also write report.json and report.md there.
        scoring: The target language's tokenizers and extra metrics.
    """
    scoring = scoring or Scoring()
    scoring.check()
    files, references = read_references(reference)
    hypothesis_lines = read_aligned(hypotheses, references[0], files[0])
    others = _baseline(baseline, bootstrap_samples, references[0], files[0])
    evaluation = evaluate(
        hypothesis_lines,
        references,
        baseline=others,
        bootstrap_samples=bootstrap_samples,
        scoring=scoring,
    )
    roles = {"hypotheses": hypotheses, **_roles(files), "baseline": baseline}
    lines = len(hypothesis_lines)
    data = {role: file_identity(path, lines) for role, path in roles.items() if path}
    return _written(EvaluationReport(evaluation=evaluation, data=data), report_dir)


def evaluate_model(
    model: PathLike,
    source: PathLike,
    reference: ReferencePaths,
    search: SearchConfig,
    options: InferenceOptions | None = None,
    *,
    hypotheses_out: PathLike | None = None,
    report_dir: PathLike | None = None,
    baseline: PathLike | None = None,
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    progress: Callable[[int], None] | None = None,
    scoring: Scoring | None = None,
) -> ReportFiles:
    """Translates `source` with `model` as `translate` does and scores it (`evaluate`).

    Args:
        model: A model or run directory, or a CTranslate2 export.
        source: Source sentences, one per line (plain or .gz).
        reference: The reference file, or several, aligned with `source`.
        search: The `SearchConfig`.
        options: Batching, engine and precision (`translator.engines.InferenceOptions`).
        hypotheses_out: Also write the translations there.
        report_dir: Also write report.json and report.md there.
        baseline: Another system's hypotheses of the same sources, for the paired test.
        bootstrap_samples: Resamples of the paired test.
        progress: Called with the number of lines finished after each batch.
        scoring: The target language's tokenizers and extra metrics (default: the
            target language of the model's run, when it recorded one).

    Raises:
        TranslatorError: naming the file or setting at fault (before the model loads).
    """
    from translator.engines import load_translator

    files, references = read_references(reference)
    sources = read_aligned(source, references[0], files[0])
    others = _baseline(baseline, bootstrap_samples, references[0], files[0])
    scoring = scoring or Scoring()
    scoring.check()
    loaded = load_translator(model, search, options)
    scoring = _with_the_models_language(scoring, loaded.loaded.metadata)
    scoring.check()
    started = time.monotonic()
    translations = loaded.translator.search(sources, progress)
    seconds = time.monotonic() - started
    hypotheses = [one_line(text) for text in translations.texts]
    if hypotheses_out:
        write_atomic(hypotheses_out, "".join(h + "\n" for h in hypotheses))
    evaluation = evaluate(
        hypotheses,
        references,
        sources,
        baseline=others,
        bootstrap_samples=bootstrap_samples,
        scoring=scoring,
    )
    roles = {"source": source, **_roles(files), "hypotheses": hypotheses_out, "baseline": baseline}
    report = _model_report(evaluation, roles, loaded, translations.stats, len(sources), seconds)
    return dataclasses.replace(_written(report, report_dir), notes=loaded.notes)


def _model_report(
    evaluation: Evaluation,
    roles: dict[str, PathLike | None],
    loaded: LoadedTranslator,
    stats: TranslationStats,
    lines: int,
    seconds: float,
) -> EvaluationReport:
    """The report of a model's evaluation: the scores, its files, the model and the search."""
    return EvaluationReport(
        evaluation=evaluation,
        data={  # every file has a line per source line
            role: file_identity(path, lines) for role, path in roles.items() if path is not None
        },
        model=model_identity(loaded.loaded),
        search=search_record(loaded),
        translation=dataclasses.asdict(stats),
        timing=_timing(loaded, stats, lines, seconds),
    )


def _with_the_models_language(scoring: Scoring, metadata: dict[str, Any]) -> Scoring:
    """The scoring, with the target language the model's run recorded when none was given."""
    from translator.artifacts import model_languages

    if scoring.target_lang:
        return scoring
    recorded = model_languages(metadata)[1]
    return dataclasses.replace(scoring, target_lang=recorded) if recorded else scoring


def search_record(loaded: LoadedTranslator) -> dict[str, Any]:
    """The search settings of a report: the `SearchConfig` that ran and how batches ran."""
    translator = loaded.translator
    return {
        **translator.config.to_dict(),  # what ran: an engine may run other rules
        "engine": translator.engine,
        "batch_tokens": translator.batch_tokens,
        "max_source_length": translator.max_source_length,
        "tag": translator.tag or None,
        **translator.decoder.describe(),
    }


def model_identity(loaded: LoadedModel) -> ModelIdentity:
    """Which model translated: its directory, checksums and metadata."""
    return ModelIdentity(
        directory=str(loaded.directory.resolve()),
        model_sha256=sha256_file(loaded.model_file),
        source_vocab_sha256=loaded.vocabulary.source_sha256,
        target_vocab_sha256=loaded.vocabulary.target_sha256,
        metadata=loaded.metadata,
    )


def _timing(
    loaded: LoadedTranslator, stats: TranslationStats, sentences: int, seconds: float
) -> Timing:
    """Loading, warm-up and translation times, and the rates of the translation."""
    return Timing(
        load_seconds=loaded.load_seconds,
        warmup_seconds=loaded.warmup_seconds,
        translate_seconds=seconds,
        sentences_per_second=sentences / seconds if seconds > 0 else 0.0,
        target_tokens_per_second=stats.target_tokens / seconds if seconds > 0 else 0.0,
    )


def _baseline(
    path: PathLike | None, samples: int, references: Sequence[str], reference: PathLike
) -> list[str] | None:
    """The baseline's lines, checked, or None without one."""
    if path is None:
        return None
    if samples < 1:
        raise EvaluationError(f"--bootstrap-samples must be >= 1, got {samples}")
    return read_aligned(path, references, reference)


def _written(report: EvaluationReport, directory: PathLike | None) -> ReportFiles:
    if directory is None:
        return ReportFiles(report)
    return ReportFiles(report, *write_report(report, directory))
