"""Scoring translations with sacreBLEU, and evaluation reports.

    from translator.evaluation import evaluate, read_lines

    result = evaluate(read_lines("hyp.de"), read_lines("ref.de"))
    result.metric("bleu").score, result.metric("bleu").signature

Metrics are sacreBLEU's own classes with their default settings, so every score here
equals what the `sacrebleu` command prints for the same files, and carries the same
signature:

    bleu      BLEU, 13a tokenization, cased (the figure to report)
    bleu_lc   BLEU, lowercased (an extra figure; its signature says case:lc)
    chrf      chrF2 (character 6-grams, beta 2)
    ter       TER (sacreBLEU's default: case-insensitive, tercom tokenization)

`compare_systems` runs sacreBLEU's paired bootstrap resampling (`PairedTest`, the
Moses/Koehn test) against a baseline's hypotheses. sacreBLEU reports each system's
bootstrap mean, 95% confidence half-width and the p-value; the difference's confidence
interval is computed here from the same resamples (same seed, same indices).

`EvaluationReport` adds what a report must say about how the scores were obtained
(model, data files with sha256, search settings, timing); `write_report` writes it as
`report.json` (for programs) and `report.md` (for people). Nothing here imports
TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from translator.errors import TranslatorError

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
# Version of the report.json layout; bump on incompatible changes.
REPORT_FORMAT = "translator-evaluation/1"
# sacreBLEU's default number of paired bootstrap resamples.
DEFAULT_BOOTSTRAP_SAMPLES = 1000
# Sentences listed in report.md.
DEFAULT_WORST = 10
DEFAULT_SAMPLES = 5

# (key, label, higher is better) of each corpus metric, in report order.
METRICS = (
    ("bleu", "BLEU", True),
    ("bleu_lc", "BLEU (lowercased)", True),
    ("chrf", "chrF2", True),
    ("ter", "TER", False),
)
# Metrics of the paired test: sacreBLEU keys its results by metric name, which the
# lowercased BLEU would share with BLEU.
COMPARED = ("bleu", "chrf", "ter")


class EvaluationError(TranslatorError, ValueError):
    """Inputs that cannot be scored together (e.g. different line counts); names the files."""


@dataclasses.dataclass(frozen=True)
class MetricScore:
    """One corpus-level score."""

    # Our name for the figure: bleu, bleu_lc, chrf or ter.
    key: str
    # For people: "BLEU", "BLEU (lowercased)", "chrF2", "TER".
    label: str
    score: float
    # sacreBLEU's signature, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0".
    signature: str
    # False for TER (an error rate).
    higher_is_better: bool
    # BLEU's n-gram precisions, brevity penalty and lengths; "" for the others.
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class LengthStats:
    """Hypothesis against reference length, in BLEU's 13a tokens."""

    hypothesis_tokens: int
    reference_tokens: int
    # hypothesis_tokens / reference_tokens; BLEU's brevity penalty applies below 1.
    ratio: float
    brevity_penalty: float


@dataclasses.dataclass(frozen=True)
class SentenceScore:
    """One sentence with its sentence-level chrF."""

    # 1-based line number in the input files.
    line: int
    chrf: float
    hypothesis: str
    reference: str
    # The source sentence when known (evaluate), else None (score).
    source: str | None = None


@dataclasses.dataclass(frozen=True)
class Comparison:
    """This system against a baseline on one metric, by paired bootstrap resampling."""

    key: str
    label: str
    system: float
    baseline: float
    # system - baseline (for TER, negative means fewer errors).
    difference: float
    # Mean and 95% confidence interval of the difference over the paired resamples.
    difference_mean: float
    difference_low: float
    difference_high: float
    # sacreBLEU's p-value: chance of an absolute difference this large if the two systems
    # were the same process. Below 0.05 the difference is called significant.
    p_value: float
    # sacreBLEU's bootstrap mean and 95% confidence half-width of each system's score.
    system_mean: float
    system_ci: float
    baseline_mean: float
    baseline_ci: float
    # The metric's signature with the test's settings (bs:N|seed:S).
    signature: str
    higher_is_better: bool


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Scores of hypotheses against references (no identity of files or model)."""

    sentences: int
    # Hypothesis lines that are empty or only whitespace.
    empty_hypotheses: int
    metrics: tuple[MetricScore, ...]
    length: LengthStats
    # Lowest sentence-level chrF first.
    worst: tuple[SentenceScore, ...]
    # A few sentences spread over the file, in file order.
    samples: tuple[SentenceScore, ...]
    comparison: tuple[Comparison, ...] | None = None
    # Resamples and seed of the paired test, when there is a comparison.
    bootstrap_samples: int | None = None
    bootstrap_seed: int | None = None

    def metric(self, key: str) -> MetricScore:
        """The score with this key (bleu, bleu_lc, chrf, ter)."""
        for metric in self.metrics:
            if metric.key == key:
                return metric
        raise KeyError(key)


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """Which file was used: path, content hash, line count."""

    path: str
    # Hex sha256 of the file's bytes as stored (the compressed bytes for .gz).
    sha256: str
    lines: int


@dataclasses.dataclass(frozen=True)
class ModelIdentity:
    """Which model translated."""

    directory: str
    # Hex sha256 of model.keras.
    model_sha256: str
    source_vocab_sha256: str
    target_vocab_sha256: str
    # Contents of the model directory's metadata.json (step, validation BLEU, run config).
    metadata: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Timing:
    """How long translation took (loading and warm-up excluded from the rates)."""

    load_seconds: float
    # Tracing the search graph (one dummy sentence), before the timed translation.
    warmup_seconds: float
    translate_seconds: float
    sentences_per_second: float
    target_tokens_per_second: float


@dataclasses.dataclass(frozen=True)
class EvaluationReport:
    """Scores plus everything needed to reproduce them: what `report.json` holds."""

    evaluation: Evaluation
    # Role -> file: "hypotheses", "reference", and "source" / "baseline" when used.
    data: dict[str, FileIdentity]
    # The model and how it searched; None when scoring hypotheses made elsewhere.
    model: ModelIdentity | None = None
    search: dict[str, Any] | None = None
    # Counts of the translation run (lines, empty, truncated, batches, target_tokens).
    translation: dict[str, int] | None = None
    timing: Timing | None = None
    created: str = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    )
    versions: dict[str, str] = dataclasses.field(default_factory=lambda: _versions())

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of `report.json`: scores keyed by metric, then provenance."""
        evaluation = self.evaluation
        comparison = None
        if evaluation.comparison is not None:
            comparison = {
                "test": "paired bootstrap resampling (sacrebleu.significance.PairedTest)",
                "resamples": evaluation.bootstrap_samples,
                "seed": evaluation.bootstrap_seed,
                "metrics": {c.key: _fields(c, drop=("key",)) for c in evaluation.comparison},
            }
        return {
            "format": REPORT_FORMAT,
            "created": self.created,
            "scores": {m.key: _fields(m, drop=("key",)) for m in evaluation.metrics},
            "length": dataclasses.asdict(evaluation.length),
            "sentences": evaluation.sentences,
            "empty_hypotheses": evaluation.empty_hypotheses,
            "comparison": comparison,
            "model": None if self.model is None else dataclasses.asdict(self.model),
            "data": {role: dataclasses.asdict(f) for role, f in self.data.items()},
            "search": self.search,
            "translation": self.translation,
            "timing": None if self.timing is None else dataclasses.asdict(self.timing),
            "versions": self.versions,
            "samples": [dataclasses.asdict(s) for s in evaluation.samples],
            "worst": [dataclasses.asdict(s) for s in evaluation.worst],
        }


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """The lines of a UTF-8 text file, plain or gzip, without line ends.

    Raises:
        translator.pipelines.errors.CorpusError: a missing or unreadable file, or the
            line number of the first line that is not valid UTF-8.
    """
    from translator.pipelines.corpus import iter_lines

    return list(iter_lines(path))


def check_same_length(
    first: Sequence[str],
    first_path: str | os.PathLike[str],
    second: Sequence[str],
    second_path: str | os.PathLike[str],
) -> None:
    """Raises `EvaluationError` naming both files and their line counts when they differ."""
    if len(first) != len(second):
        raise EvaluationError(
            f"line counts differ: {first_path} has {len(first):,}, {second_path} has "
            f"{len(second):,}; the files must be aligned line by line"
        )


def file_identity(path: str | os.PathLike[str], lines: int) -> FileIdentity:
    """Path, sha256 and line count of an input file."""
    return FileIdentity(path=str(path), sha256=sha256_file(path), lines=lines)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def corpus_metrics() -> dict[str, Any]:
    """Fresh sacreBLEU metric objects by key, with the settings reported here."""
    from sacrebleu.metrics import BLEU, CHRF, TER

    return {"bleu": BLEU(), "bleu_lc": BLEU(lowercase=True), "chrf": CHRF(), "ter": TER()}


def score_corpus(
    hypotheses: Sequence[str], references: Sequence[str]
) -> tuple[tuple[MetricScore, ...], LengthStats]:
    """Corpus BLEU (cased and lowercased), chrF2 and TER, and the length ratio.

    Args:
        hypotheses: One translation per line.
        references: One reference per line, aligned with `hypotheses`.

    Returns:
        The scores in `METRICS` order, and the 13a-token lengths from BLEU.
    """
    metrics = corpus_metrics()
    scores = []
    bleu = None
    for key, label, higher_is_better in METRICS:
        metric = metrics[key]
        result = metric.corpus_score(list(hypotheses), [list(references)])
        if key == "bleu":
            bleu = result
        scores.append(
            MetricScore(
                key=key,
                label=label,
                score=float(result.score),
                signature=metric.get_signature().format(),
                higher_is_better=higher_is_better,
                detail=_bleu_detail(result) if key.startswith("bleu") else "",
            )
        )
    length = LengthStats(
        hypothesis_tokens=int(bleu.sys_len),
        reference_tokens=int(bleu.ref_len),
        ratio=float(bleu.sys_len / bleu.ref_len) if bleu.ref_len else 0.0,
        brevity_penalty=float(bleu.bp),
    )
    return tuple(scores), length


def sentence_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> list[float]:
    """chrF2 of each sentence against its reference."""
    from sacrebleu.metrics import CHRF

    metric = CHRF()
    return [
        float(metric.sentence_score(h, [r]).score)
        for h, r in zip(hypotheses, references, strict=True)
    ]


def compare_systems(
    hypotheses: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[str],
    n_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
) -> tuple[tuple[Comparison, ...], int]:
    """Paired bootstrap resampling of `hypotheses` against `baseline` (sacreBLEU's test).

    The seed is sacreBLEU's: `$SACREBLEU_SEED`, default 12345, so the p-values equal
    those of `sacrebleu REF -i BASELINE SYSTEM --paired-bs`.

    Args:
        hypotheses: This system's translations.
        baseline: The other system's translations of the same sources.
        references: The references.
        n_samples: Bootstrap resamples.

    Returns:
        One `Comparison` per metric of `COMPARED`, and the seed used.
    """
    from sacrebleu.significance import PairedTest

    metrics = corpus_metrics()
    chosen = {key: metrics[key] for key in COMPARED}
    test = PairedTest(
        [("baseline", list(baseline)), ("system", list(hypotheses))],
        chosen,
        [list(references)],
        test_type="bs",
        n_samples=n_samples,
    )
    signatures, results = test()
    seed = _sacrebleu_seed()
    labels = {key: (label, better) for key, label, better in METRICS}
    comparisons = []
    # sacreBLEU keys results by metric name (BLEU, chrF2, TER), in the order given.
    names = [name for name in results if name != "System"]
    for key, name in zip(COMPARED, names, strict=True):
        base, system = results[name]
        mean, low, high = _difference_interval(
            chosen[key], hypotheses, baseline, references, n_samples, seed
        )
        label, better = labels[key]
        comparisons.append(
            Comparison(
                key=key,
                label=label,
                system=float(system.score),
                baseline=float(base.score),
                difference=float(system.score - base.score),
                difference_mean=mean,
                difference_low=low,
                difference_high=high,
                p_value=float(system.p_value),
                system_mean=float(system.mean),
                system_ci=float(system.ci),
                baseline_mean=float(base.mean),
                baseline_ci=float(base.ci),
                signature=signatures[name].format(),
                higher_is_better=better,
            )
        )
    return tuple(comparisons), seed


def evaluate(
    hypotheses: Sequence[str],
    references: Sequence[str],
    sources: Sequence[str] | None = None,
    baseline: Sequence[str] | None = None,
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    worst: int = DEFAULT_WORST,
    samples: int = DEFAULT_SAMPLES,
) -> Evaluation:
    """Scores hypotheses; with a baseline, also the paired bootstrap comparison.

    Args:
        hypotheses: One translation per line.
        references: Aligned references.
        sources: Aligned source sentences, shown next to the sample and worst sentences.
        baseline: Another system's aligned translations to compare with.
        bootstrap_samples: Resamples of the paired test.
        worst: How many lowest-chrF sentences to keep.
        samples: How many sample sentences to keep.

    Raises:
        EvaluationError: if the sequences differ in length or are empty.
    """
    if not references:
        raise EvaluationError("nothing to score: no reference lines")
    with _each_warning_once(logging.getLogger("sacrebleu")):
        return _evaluate(
            hypotheses, references, sources, baseline, bootstrap_samples, worst, samples
        )


def _evaluate(
    hypotheses: Sequence[str],
    references: Sequence[str],
    sources: Sequence[str] | None,
    baseline: Sequence[str] | None,
    bootstrap_samples: int,
    worst: int,
    samples: int,
) -> Evaluation:
    check_same_length(hypotheses, "hypotheses", references, "references")
    if sources is not None:
        check_same_length(sources, "sources", references, "references")
    if baseline is not None:
        check_same_length(baseline, "baseline", references, "references")
    metrics, length = score_corpus(hypotheses, references)
    chrf = sentence_chrf(hypotheses, references)

    def sentence(index: int) -> SentenceScore:
        return SentenceScore(
            line=index + 1,
            chrf=chrf[index],
            hypothesis=hypotheses[index],
            reference=references[index],
            source=None if sources is None else sources[index],
        )

    order = sorted(range(len(chrf)), key=lambda i: (chrf[i], i))
    comparison = seed = None
    if baseline is not None:
        comparison, seed = compare_systems(hypotheses, baseline, references, bootstrap_samples)
    return Evaluation(
        sentences=len(hypotheses),
        empty_hypotheses=sum(not h.strip() for h in hypotheses),
        metrics=metrics,
        length=length,
        worst=tuple(sentence(i) for i in order[:worst]),
        samples=tuple(sentence(i) for i in _spread(len(hypotheses), samples)),
        comparison=comparison,
        bootstrap_samples=bootstrap_samples if baseline is not None else None,
        bootstrap_seed=seed,
    )


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
        f"reference {length.reference_tokens:,} tokens (13a), "
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


def write_report(report: EvaluationReport, directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Writes `report.json` and `report.md` into `directory` (created if missing).

    Returns:
        The paths of the two files.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / REPORT_JSON, directory / REPORT_MD
    _write_text(json_path, json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    _write_text(md_path, render_markdown(report))
    return json_path, md_path


def render_markdown(report: EvaluationReport) -> str:
    """`report.md`: scores table, length, settings, sample and worst sentences."""
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
        f"{length.reference_tokens:,} tokens after 13a tokenization; brevity penalty "
        f"{length.brevity_penalty:.3f}). {evaluation.sentences:,} sentences, "
        f"{evaluation.empty_hypotheses:,} empty hypotheses.",
    ]
    if evaluation.comparison:
        lines += _comparison_markdown(report)
    if report.search is not None or report.timing is not None:
        lines += _settings_markdown(report)
    lines += ["", "## Sample translations", ""]
    lines += _sentences_markdown(evaluation.samples)
    lines += ["", "## Worst sentences by sentence-level chrF", ""]
    lines += _sentences_markdown(evaluation.worst)
    return "\n".join(lines) + "\n"


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
        body.append(f"  HYP  {s.hypothesis}")
        body.append("")
    text = "\n".join(body).rstrip("\n")
    fence = "`" * max(3, _longest_run(text, "`") + 1)  # a fence no sentence can close
    return [f"{fence}text", text, fence]


def _fields(item: Any, drop: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(item).items() if k not in drop}


def _bleu_detail(result) -> str:
    return (
        f"{result.prec_str} (BP = {result.bp:.3f} ratio = {result.ratio:.3f} "
        f"hyp_len = {result.sys_len:d} ref_len = {result.ref_len:d})"
    )


def _difference_interval(
    metric,
    hypotheses: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[str],
    n_samples: int,
    seed: int | None,
) -> tuple[float, float, float]:
    """Mean and 95% interval of (system - baseline) over sacreBLEU's paired resamples.

    Draws the resample indices exactly as `sacrebleu.significance._paired_bs_test` does
    (one `numpy` generator seeded like `PairedTest`), so each difference pairs the same
    two resampled scores that sacreBLEU's p-value is computed from. sacreBLEU has no
    public function for the sufficient statistics, hence its two underscore methods.
    """
    import numpy as np

    references_ = [list(references)]
    system = np.array(metric._extract_corpus_statistics(list(hypotheses), references_), "float32")
    base = np.array(metric._extract_corpus_statistics(list(baseline), references_), "float32")
    rng = np.random.default_rng(seed if seed else None)
    indices = rng.choice(len(hypotheses), size=(n_samples, len(hypotheses)), replace=True)
    differences = np.sort(
        [
            metric._compute_score_from_stats(system[row].sum(0)).score
            - metric._compute_score_from_stats(base[row].sum(0)).score
            for row in indices
        ]
    )
    # The same order statistics as sacrebleu.significance.estimate_ci (2.5% and 97.5%).
    lower = len(differences) // 40
    return (
        float(differences.mean()),
        float(differences[lower]),
        float(differences[len(differences) - lower - 1]),
    )


@contextlib.contextmanager
def _each_warning_once(logger: logging.Logger) -> Iterator[None]:
    """Drops repeats of a log message while active.

    Every metric (and the bootstrap test) would otherwise repeat sacreBLEU's "forgot to
    detokenize?" warning.
    """
    seen: set[str] = set()

    def first_time(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in seen:
            return False
        seen.add(message)
        return True

    logger.addFilter(first_time)
    try:
        yield
    finally:
        logger.removeFilter(first_time)


def _sacrebleu_seed() -> int | None:
    """The seed `sacrebleu.significance.PairedTest` uses (None: not fixed)."""
    seed = os.environ.get("SACREBLEU_SEED", "12345")
    return None if seed.lower() == "none" else int(seed)


def _spread(count: int, k: int) -> list[int]:
    """Up to k indices spread evenly over range(count), first and last included."""
    k = min(k, count)
    if k <= 0:
        return []
    if k == 1:
        return [0]
    return sorted({round(i * (count - 1) / (k - 1)) for i in range(k)})


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (GFM allows an escaped pipe in code)."""
    return text.replace("|", "\\|")


def _longest_run(text: str, char: str) -> int:
    longest = run = 0
    for c in text:
        run = run + 1 if c == char else 0
        longest = max(longest, run)
    return longest


def _write_text(path: Path, text: str) -> None:
    """Writes through a temporary sibling and a rename: never a half-written report."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def _versions() -> dict[str, str]:
    import sacrebleu

    import translator

    return {"translator": translator.__version__, "sacrebleu": sacrebleu.__version__}
