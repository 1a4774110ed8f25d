"""Stage 4 of the recipe, and what its summary reports.

Each report set is translated with beam search and scored with sacreBLEU into
`eval/<name>/`; `summarize` reads a finished recipe's results back as typed records.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from training.planning.measure import load_plan
from training.planning.rules import Plan
from training.recipe.corpus import RecipeCorpus
from training.recipe.settings import RecipePaths, RecipeSettings, start_stage
from training.record import RunRecord
from training.summaries import CURVES_FILE
from translator.engines.base import InferenceOptions
from translator.evaluation import Scoring, evaluate_model
from translator.io import read_lines, write_atomic
from translator.search.config import SearchConfig


def evaluate_sets(
    paths: RecipePaths,
    settings: RecipeSettings,
    corpus: RecipeCorpus,
    *,
    model: Path | None = None,
    out: Path | None = None,
    baseline: Path | None = None,
) -> None:
    """Stage 4: beam-search translation of each report set, scored into a report.

    Args:
        paths: The work directory's paths.
        settings: The recipe's settings (the beam, how many test sentences).
        corpus: The data stage's corpora and test sets.
        model: The model to translate with (default: the run's).
        out: Where the reports go, one directory per set (default: `WORKDIR/eval`).
        baseline: Reports of another model on the same sets (`out` of an earlier call):
            each report tests this model against its translations (paired bootstrap).
    """
    for test in corpus.reports:
        report = (out / test.name) if out is not None else paths.report(test.name)
        beam = settings.beam_size
        start_stage(settings, "evaluation", f"{test.name} with beam {beam} -> {report}")
        if (report / "report.json").is_file():
            print("  already evaluated")
            continue
        source, reference = test.source, test.reference
        if settings.test_sentences:
            source, reference = (
                _head(path, settings.test_sentences, report.parent / f"{test.name}.head{i}")
                for i, path in enumerate((source, reference))
            )
        report.mkdir(parents=True, exist_ok=True)
        hypotheses = f"translations.{corpus.target_lang}"
        written = evaluate_model(
            model or paths.run,
            source,
            reference,
            SearchConfig(beam_size=settings.beam_size),
            options=InferenceOptions(tag=test.tag),
            hypotheses_out=report / hypotheses,
            report_dir=report,
            baseline=None if baseline is None else baseline / test.name / hypotheses,
            scoring=Scoring(target_lang=corpus.target_lang),
        )
        print(written.summary(), flush=True)


def _head(path: Path, count: int, out: Path) -> Path:
    """The first `count` lines of a text file (plain or gzip), written to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "".join(f"{line}\n" for line in read_lines(path, count)))
    return out


@dataclasses.dataclass(frozen=True)
class SetScores:
    """One report set's scores, as its report.json has them."""

    name: str
    # The report's Markdown file.
    markdown: Path
    bleu: float
    chrf: float
    ter: float
    sentences: int


@dataclasses.dataclass(frozen=True)
class RecipeSummary:
    """What a finished recipe produced, for the lines that say where each result is."""

    corpus: RecipeCorpus
    paths: RecipePaths
    # The plan trained (None: nothing was planned).
    plan: Plan | None
    # Updates made, and the best greedy validation BLEU (None without validation).
    steps: int
    best_bleu: float | None
    # Fine-tuning: the validation BLEU of the model it started from (step 0), else None.
    start_bleu: float | None
    # The curves' PNG (None: not written).
    curves: Path | None
    scores: tuple[SetScores, ...]


def read_scores(paths: RecipePaths, name: str) -> SetScores:
    """The scores of one report set, from its report.json."""
    report = json.loads((paths.report(name) / "report.json").read_text("utf-8"))
    scores = report["scores"]
    return SetScores(
        name,
        paths.report(name) / "report.md",
        scores["bleu"]["score"],
        scores["chrf"]["score"],
        scores["ter"]["score"],
        report["sentences"],
    )


def _start_bleu(record: RunRecord) -> float | None:
    """A fine-tuning's validation BLEU before its first update; None for other runs."""
    if not (record.config.get("train") or {}).get("init_from"):
        return None
    return next((bleu for step, bleu in record.validation_bleu if step == 0), None)


def summarize(paths: RecipePaths, corpus: RecipeCorpus) -> RecipeSummary:
    """Reads a finished recipe's plan, model metadata and reports."""
    record = RunRecord.read(paths.run / "model")
    curves = paths.run / CURVES_FILE
    return RecipeSummary(
        corpus=corpus,
        paths=paths,
        plan=load_plan(paths.run),
        steps=record.step,
        best_bleu=record.best_validation_bleu,
        start_bleu=_start_bleu(record),
        curves=curves if curves.is_file() else None,
        scores=tuple(read_scores(paths, test.name) for test in corpus.reports),
    )
