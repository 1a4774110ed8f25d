"""Rendering reports: `report.json` (programs), `report.md` and its charts (people), terminal."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from translator.evaluation.report import EvaluationReport
from translator.evaluation.scoring import Evaluation, LengthBucket, SentenceScore
from translator.io import write_atomic

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
# The charts beside report.md, which links them by these names (relative paths).
SOURCE_LENGTH_CHART = "source-length.png"
BOOTSTRAP_CHART = "bootstrap.png"


def format_scores(evaluation: Evaluation) -> str:
    """The scores as a plain-text table (what the commands print)."""
    rows = []
    for metric in evaluation.metrics:
        rows.append(f"{metric.label:<18} {metric.score:6.2f}  {metric.signature}")
        if metric.key == "bleu":
            rows.append(f"{'':<18} {'':6}  {metric.detail}")
    length = evaluation.length
    rows.append(
        f"{'length ratio':<18} {length.ratio:6.3f}  hypothesis {length.hypothesis_tokens:,} / "
        f"reference {length.reference_tokens:,} tokens ({length.tokenizer}), "
        f"brevity penalty {length.brevity_penalty:.3f}"
    )
    rows.append(
        f"{'sentences':<18} {evaluation.sentences:6,}  "
        f"({evaluation.empty_hypotheses:,} empty hypotheses)"
    )
    if evaluation.comparison:
        rows.append("")
        rows.append(
            f"paired bootstrap against the baseline ({evaluation.bootstrap_samples} resamples, "
            f"seed {evaluation.bootstrap_seed}):"
        )
        for c in evaluation.comparison:
            mark = " *" if c.p_value < 0.05 else ""
            rows.append(
                f"{c.label:<18} {c.system:6.2f} vs {c.baseline:6.2f}  "
                f"difference {c.difference:+.2f}, 95% CI [{c.difference_low:+.2f}, "
                f"{c.difference_high:+.2f}], p = {c.p_value:.4f}{mark}"
            )
    return "\n".join(rows)


def write_report(
    report: EvaluationReport, directory: str | os.PathLike[str]
) -> tuple[Path, Path, tuple[Path, ...]]:
    """Writes `report.json`, the charts and `report.md` into `directory` (created if missing).

    The charts are `SOURCE_LENGTH_CHART` (when the sources are known) and
    `BOOTSTRAP_CHART` (with a comparison); they are drawn before report.md is written,
    so its links never point at a picture that is not there. A chart this report has no
    data for is removed, so a directory written again never keeps one of another run.

    Returns:
        The paths of report.json and report.md, and those of the charts.
    """
    from translator.evaluation.charts import draw_bootstrap, draw_source_length

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / REPORT_JSON, directory / REPORT_MD
    write_atomic(json_path, json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    evaluation, charts = report.evaluation, []
    if evaluation.by_source_length:
        charts.append(
            draw_source_length(
                evaluation.by_source_length,
                directory / SOURCE_LENGTH_CHART,
                bleu=evaluation.metric("bleu").score,
                chrf=evaluation.metric("chrf").score,
            )
        )
    else:
        (directory / SOURCE_LENGTH_CHART).unlink(missing_ok=True)
    if evaluation.comparison:
        charts.append(
            draw_bootstrap(
                evaluation.comparison,
                directory / BOOTSTRAP_CHART,
                samples=evaluation.bootstrap_samples,
                seed=evaluation.bootstrap_seed,
            )
        )
    else:
        (directory / BOOTSTRAP_CHART).unlink(missing_ok=True)
    write_atomic(md_path, render_markdown(report))
    return json_path, md_path, tuple(charts)


def render_markdown(report: EvaluationReport) -> str:
    """`report.md`: scores, by source length, comparison, settings, sample and worst sentences.

    Sections with a chart link its file, which `write_report` draws beside report.md.
    """
    evaluation = report.evaluation
    lines = ["# Evaluation report", "", f"Created {report.created}."]
    if report.model is not None:
        model = report.model
        facts = ", ".join(
            f"{key} {value}"
            for key, value in model.metadata.items()
            if isinstance(value, str | int | float) and not isinstance(value, bool)
        )
        lines.append(
            f"Model: `{model.directory}` ({facts + '; ' if facts else ''}model.keras sha256 "
            f"`{model.model_sha256[:16]}…`, vocabulary sha256 "
            f"`{model.source_vocab_sha256[:16]}…`)."
        )
    lines += ["", "| Data | Path | Lines | sha256 |", "|---|---|---:|---|"]
    for role, identity in report.data.items():
        lines.append(
            f"| {role} | `{_cell(identity.path)}` | {identity.lines:,} | "
            f"`{identity.sha256[:16]}…` |"
        )
    lines += ["", "## Scores", "", "| Metric | Score | sacreBLEU signature |", "|---|---:|---|"]
    for metric in evaluation.metrics:
        lines.append(f"| {metric.label} | {metric.score:.2f} | `{_cell(metric.signature)}` |")
    length = evaluation.length
    lines += [
        "",
        f"BLEU details: {evaluation.metric('bleu').detail}.",
        "",
        f"Length ratio {length.ratio:.3f} (hypotheses {length.hypothesis_tokens:,} / references "
        f"{length.reference_tokens:,} tokens after {length.tokenizer} tokenization; brevity "
        f"penalty "
        f"{length.brevity_penalty:.3f}). {evaluation.sentences:,} sentences, "
        f"{evaluation.empty_hypotheses:,} empty hypotheses.",
    ]
    if evaluation.by_source_length:
        lines += _source_length_markdown(evaluation.by_source_length)
    if evaluation.comparison:
        lines += _comparison_markdown(report)
    if report.search is not None or report.timing is not None:
        lines += _settings_markdown(report)
    lines += ["", "## Sample translations", ""]
    lines += _sentences_markdown(evaluation.samples)
    lines += ["", "## Worst sentences by sentence-level chrF", ""]
    lines += _sentences_markdown(evaluation.worst)
    return "\n".join(lines) + "\n"


def _source_length_markdown(buckets: Sequence[LengthBucket]) -> list[str]:
    lines = [
        "",
        "## Scores by source length",
        "",
        "Corpus BLEU and chrF2 of the sentences in each bucket of source length, counted in "
        "words of the source: whitespace-separated, a Chinese or Japanese character counting "
        "as one (same sacreBLEU settings as above; buckets without sentences are left out, "
        "and a bucket of few sentences has a noisy score).",
        "",
        "| Source words | Sentences | BLEU | chrF2 |",
        "|---|---:|---:|---:|",
    ]
    for b in buckets:
        lines.append(f"| {b.label} | {b.sentences:,} | {b.bleu:.2f} | {b.chrf:.2f} |")
    lines += ["", f"![BLEU and chrF2 by source length]({SOURCE_LENGTH_CHART})"]
    return lines


def _comparison_markdown(report: EvaluationReport) -> list[str]:
    evaluation = report.evaluation
    baseline = report.data.get("baseline")
    name = f"`{_cell(baseline.path)}`" if baseline else "the baseline"
    lines = [
        "",
        f"## Comparison with {name}",
        "",
        f"sacreBLEU paired bootstrap resampling, {evaluation.bootstrap_samples} resamples, "
        f"seed {evaluation.bootstrap_seed}. Difference = this system − baseline (for TER, "
        "negative is better); p < 0.05 is marked *.",
        "",
        "| Metric | This system | Baseline | Difference | 95% CI | p-value |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for c in evaluation.comparison:
        mark = " *" if c.p_value < 0.05 else ""
        lines.append(
            f"| {c.label} | {c.system:.2f} ({c.system_mean:.2f} ± {c.system_ci:.2f}) | "
            f"{c.baseline:.2f} ({c.baseline_mean:.2f} ± {c.baseline_ci:.2f}) | "
            f"{c.difference:+.2f} | [{c.difference_low:+.2f}, {c.difference_high:+.2f}] | "
            f"{c.p_value:.4f}{mark} |"
        )
    lines += [
        "",
        "Each system's score over the resamples (lines: the scores on the whole test set):",
        "",
        f"![Scores of both systems over the bootstrap resamples]({BOOTSTRAP_CHART})",
    ]
    return lines


def _settings_markdown(report: EvaluationReport) -> list[str]:
    lines = ["", "## Translation", ""]
    if report.search is not None:
        settings = ", ".join(f"{k} {v}" for k, v in report.search.items())
        lines.append(f"Search: {settings}.")
    if report.translation is not None:
        t = report.translation
        lines.append(
            f"Lines {t['lines']:,} ({t['empty']:,} empty, {t['truncated']:,} truncated), "
            f"{t['batches']:,} batches, {t['target_tokens']:,} target tokens."
        )
    if report.timing is not None:
        timing = report.timing
        lines.append(
            f"Model loaded in {timing.load_seconds:.1f} s, search built in "
            f"{timing.warmup_seconds:.1f} s; translated in "
            f"{timing.translate_seconds:.1f} s ({timing.sentences_per_second:.1f} sentences/s, "
            f"{timing.target_tokens_per_second:.0f} target tokens/s)."
        )
    return lines


def _sentences_markdown(sentences: Sequence[SentenceScore]) -> list[str]:
    if not sentences:
        return ["(none)"]
    body = []
    for s in sentences:
        body.append(f"line {s.line}, chrF {s.chrf:.1f}")
        if s.source is not None:
            body.append(f"  SRC  {s.source}")
        body.append(f"  REF  {s.reference}")
        for n, other in enumerate(s.other_references, start=2):
            body.append(f"  REF{n} {other}")
        body.append(f"  HYP  {s.hypothesis}")
        body.append("")
    text = "\n".join(body).rstrip("\n")
    fence = "`" * max(3, _longest_run(text, "`") + 1)  # a fence no sentence can close
    return [f"{fence}text", text, fence]


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (GFM allows an escaped pipe in code)."""
    return text.replace("|", "\\|")


def _longest_run(text: str, char: str) -> int:
    longest = run = 0
    for c in text:
        run = run + 1 if c == char else 0
        longest = max(longest, run)
    return longest
