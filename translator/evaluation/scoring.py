"""Scoring translations with sacreBLEU: corpus metrics, sentence scores, paired bootstrap.

Metrics are sacreBLEU's own classes, set for the target language as its command line
sets them (`translator.evaluation.metrics.Scoring`), so every score and signature equals
what `sacrebleu REF... -i HYP -l SRC-TGT` prints:

    bleu      BLEU, cased, the target's tokenizer (13a; zh, ja-mecab, ko-mecab)
    bleu_lc   BLEU, lowercased (an extra figure; its signature says case:lc)
    chrf      chrF2 (character 6-grams, beta 2)
    ter       TER (case-insensitive, tercom tokenization; Asian support for CJK targets)
    chrf_pp   chrF2++ (chrF2 with word bigrams), when asked for

Every function takes one or more reference streams, each aligned with the hypotheses.

`compare_systems` runs sacreBLEU's paired bootstrap test against a baseline; the
difference's confidence interval is computed here from the same resamples.
`source_length_buckets` scores the sentences by source length in words (`source_length`).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from translator.errors import TranslatorError
from translator.evaluation.metrics import Scoring
from translator.languages import word_count

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

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
    ("chrf_pp", "chrF2++", True),
)
# Metrics of the paired test (sacreBLEU keys results by name, which bleu_lc shares).
COMPARED = ("bleu", "chrf", "ter")
# Last source length of each bucket but the open-ended last: 0, 1-5, ..., 21-30, 31+. In
# words, not pieces, so reports of models with different vocabularies compare by bucket.
SOURCE_LENGTH_EDGES = (0, 5, 10, 15, 20, 30)


class EvaluationError(TranslatorError, ValueError):
    """Inputs that cannot be scored together (e.g. different line counts); names the files."""


@dataclasses.dataclass(frozen=True)
class MetricScore:
    """One corpus-level score."""

    # Our name for the figure: bleu, bleu_lc, chrf, ter or chrf_pp.
    key: str
    # For people: "BLEU", "BLEU (lowercased)", "chrF2", "TER", "chrF2++".
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
    """Hypothesis against reference length, in BLEU's tokens."""

    hypothesis_tokens: int
    # With several references, the closest reference length of each sentence, summed.
    reference_tokens: int
    # hypothesis_tokens / reference_tokens; BLEU's brevity penalty applies below 1.
    ratio: float
    brevity_penalty: float
    # The tokenizer that counted them (sacreBLEU's name: 13a, zh, ja-mecab, ...).
    tokenizer: str = "13a"


@dataclasses.dataclass(frozen=True)
class SentenceScore:
    """One sentence with its sentence-level chrF (against all its references)."""

    # 1-based line number in the input files.
    line: int
    chrf: float
    hypothesis: str
    # The first reference.
    reference: str
    # The source sentence when known (evaluate), else None (score).
    source: str | None = None
    # The other references of the sentence, in the order given.
    other_references: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class LengthBucket:
    """Corpus scores of the sentences whose source has `first` to `last` words.

    Words as `source_length` counts them: a character of Chinese or Japanese is one.
    """

    # "0", "1-5", ..., "31+".
    label: str
    first: int
    # None for the open-ended last bucket.
    last: int | None
    sentences: int
    # sacreBLEU's corpus BLEU and chrF2 of these sentences, as the corpus scores.
    bleu: float
    chrf: float


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
    # sacreBLEU's p-value; below 0.05 the difference is called significant.
    p_value: float
    # sacreBLEU's bootstrap mean and 95% confidence half-width of each system's score.
    system_mean: float
    system_ci: float
    baseline_mean: float
    baseline_ci: float
    # The metric's signature with the test's settings (bs:N|seed:S).
    signature: str
    higher_is_better: bool
    # Each system's score on each resample, for the chart; not written to report.json (the
    # seed reproduces them).
    system_resamples: tuple[float, ...] = dataclasses.field(default=(), repr=False)
    baseline_resamples: tuple[float, ...] = dataclasses.field(default=(), repr=False)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Scores of hypotheses against references (no identity of files or model)."""

    sentences: int
    # Reference streams scored against (sacreBLEU's nrefs).
    references: int
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
    # Scores by source length, empty buckets left out; None without sources.
    by_source_length: tuple[LengthBucket, ...] | None = None

    def metric(self, key: str) -> MetricScore:
        """The score with this key (bleu, bleu_lc, chrf, ter, chrf_pp)."""
        for metric in self.metrics:
            if metric.key == key:
                return metric
        raise KeyError(key)


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


def corpus_metrics(scoring: Scoring | None = None) -> dict[str, Any]:
    """Fresh sacreBLEU metric objects by key, with the settings reported here."""
    return (scoring or Scoring()).metrics()


def check_references(
    references: Sequence[Sequence[str]], names: Sequence[str | os.PathLike[str]] = ()
) -> None:
    """Raises `EvaluationError` unless there are reference streams of one length.

    Args:
        references: The reference streams.
        names: Their files, for the message (default: "reference 1", ...).
    """
    if not references:
        raise EvaluationError("nothing to score: no references")
    names = list(names) or [f"reference {i + 1}" for i in range(len(references))]
    for stream, name in zip(references[1:], names[1:], strict=False):
        check_same_length(stream, name, references[0], names[0])


def score_corpus(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    scoring: Scoring | None = None,
) -> tuple[tuple[MetricScore, ...], LengthStats]:
    """Corpus BLEU (cased and lowercased), chrF2, TER (and the extras), and the length ratio.

    Args:
        hypotheses: One translation per line.
        references: One or more reference streams, each aligned with `hypotheses`.
        scoring: The target language's settings (default: sacreBLEU's, no language).

    Returns:
        The scores in `METRICS` order, and the token lengths from BLEU.
    """
    scoring = scoring or Scoring()
    metrics = scoring.metrics()
    streams = [list(stream) for stream in references]
    scores = []
    bleu = None
    for key, label, higher_is_better in METRICS:
        if key not in metrics:
            continue
        metric = metrics[key]
        result = metric.corpus_score(list(hypotheses), streams)
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
        tokenizer=scoring.bleu_tokenizer,
    )
    return tuple(scores), length


def sentence_chrf(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> list[float]:
    """chrF2 of each sentence against its references (one or more aligned streams)."""
    from sacrebleu.metrics import CHRF

    metric = CHRF()
    return [
        float(metric.sentence_score(h, list(refs)).score)
        for h, *refs in zip(hypotheses, *references, strict=True)
    ]


def source_length(source: str) -> int:
    """A source's length in words, the unit of `source_length_buckets`.

    Words as `translator.languages.word_count` counts them: a Chinese or Japanese character
    is one.
    """
    return word_count(source)


def compare_systems(
    hypotheses: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[Sequence[str]],
    n_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    scoring: Scoring | None = None,
) -> tuple[tuple[Comparison, ...], int]:
    """Paired bootstrap resampling of `hypotheses` against `baseline` (sacreBLEU's test).

    The seed is sacreBLEU's: `$SACREBLEU_SEED`, default 12345, so the p-values equal
    those of `sacrebleu REF -i BASELINE SYSTEM --paired-bs`.

    Args:
        hypotheses: This system's translations.
        baseline: The other system's translations of the same sources.
        references: One or more reference streams.
        n_samples: Bootstrap resamples.
        scoring: The target language's settings.

    Returns:
        One `Comparison` per metric of `COMPARED`, and the seed used.
    """
    from sacrebleu.significance import PairedTest

    metrics = corpus_metrics(scoring)
    chosen = {key: metrics[key] for key in COMPARED}
    test = PairedTest(
        [("baseline", list(baseline)), ("system", list(hypotheses))],
        chosen,
        [list(stream) for stream in references],
        test_type="bs",
        n_samples=n_samples,
    )
    signatures, results = test()
    seed = _sacrebleu_seed()
    comparisons = []
    # sacreBLEU keys results by metric name (BLEU, chrF2, TER), in the order given.
    names = [name for name in results if name != "System"]
    for key, name in zip(COMPARED, names, strict=True):
        resampled = _resampled_scores(
            chosen[key], hypotheses, baseline, references, n_samples, seed
        )
        comparisons.append(_comparison(key, results[name], signatures[name].format(), *resampled))
    return tuple(comparisons), seed


def _comparison(
    key: str, scored: tuple, signature: str, system_scores: np.ndarray, baseline_scores: np.ndarray
) -> Comparison:
    """One metric's `Comparison` from sacreBLEU's (baseline, system) results and ours."""
    base, system = scored
    mean, low, high = _difference_interval(system_scores - baseline_scores)
    label, better = {key: (label, better) for key, label, better in METRICS}[key]
    return Comparison(
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
        signature=signature,
        higher_is_better=better,
        system_resamples=tuple(system_scores.tolist()),
        baseline_resamples=tuple(baseline_scores.tolist()),
    )


def source_length_buckets(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    sources: Sequence[str],
    edges: Sequence[int] = SOURCE_LENGTH_EDGES,
    scoring: Scoring | None = None,
) -> tuple[LengthBucket, ...]:
    """Corpus BLEU and chrF2 of the sentences of each source-length bucket.

    A source's length is `source_length`'s words; empty buckets are left out.

    Args:
        hypotheses: One translation per line.
        references: One or more aligned reference streams.
        sources: Aligned source sentences.
        edges: The last length of each bucket but the last, increasing.
        scoring: The target language's settings.

    Returns:
        The non-empty buckets, shortest sources first.
    """
    members: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for index, source in enumerate(sources):
        # The first bucket whose last length is at least the source's (else the open one).
        members[bisect.bisect_left(edges, source_length(source))].append(index)
    metrics = corpus_metrics(scoring)
    buckets = []
    for b, indices in enumerate(members):
        if not indices:
            continue
        first = 0 if b == 0 else edges[b - 1] + 1
        last = edges[b] if b < len(edges) else None
        chosen = (
            [hypotheses[i] for i in indices],
            [[stream[i] for i in indices] for stream in references],
        )
        buckets.append(
            LengthBucket(
                label=_bucket_label(first, last),
                first=first,
                last=last,
                sentences=len(indices),
                bleu=float(metrics["bleu"].corpus_score(*chosen).score),
                chrf=float(metrics["chrf"].corpus_score(*chosen).score),
            )
        )
    return tuple(buckets)


def evaluate(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    sources: Sequence[str] | None = None,
    baseline: Sequence[str] | None = None,
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    worst: int = DEFAULT_WORST,
    samples: int = DEFAULT_SAMPLES,
    scoring: Scoring | None = None,
) -> Evaluation:
    """Scores hypotheses; with a baseline, also the paired bootstrap comparison.

    Args:
        hypotheses: One translation per line.
        references: One or more reference streams, each aligned with the hypotheses.
        sources: Aligned source sentences, shown next to the sample and worst sentences
            and bucketing the scores by source length.
        baseline: Another system's aligned translations to compare with.
        bootstrap_samples: Resamples of the paired test.
        worst: How many lowest-chrF sentences to keep.
        samples: How many sample sentences to keep.
        scoring: The target language's tokenizers and extra metrics (default: none known).

    Raises:
        EvaluationError: if the sequences differ in length or are empty.
        ScoringError: a tokenizer whose package is missing, or an unknown setting.
    """
    scoring = scoring or Scoring()
    scoring.check()
    check_references(references)
    if not references[0]:
        raise EvaluationError("nothing to score: no reference lines")
    with _each_warning_once(logging.getLogger("sacrebleu")):
        return _evaluate(
            hypotheses, references, sources, baseline, bootstrap_samples, worst, samples, scoring
        )


def _evaluate(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    sources: Sequence[str] | None,
    baseline: Sequence[str] | None,
    bootstrap_samples: int,
    worst: int,
    samples: int,
    scoring: Scoring,
) -> Evaluation:
    check_same_length(hypotheses, "hypotheses", references[0], "references")
    if sources is not None:
        check_same_length(sources, "sources", references[0], "references")
    if baseline is not None:
        check_same_length(baseline, "baseline", references[0], "references")
    metrics, length = score_corpus(hypotheses, references, scoring)
    chrf = sentence_chrf(hypotheses, references)

    def sentence(index: int) -> SentenceScore:
        return SentenceScore(
            line=index + 1,
            chrf=chrf[index],
            hypothesis=hypotheses[index],
            reference=references[0][index],
            source=None if sources is None else sources[index],
            other_references=tuple(stream[index] for stream in references[1:]),
        )

    order = sorted(range(len(chrf)), key=lambda i: (chrf[i], i))
    comparison = seed = None
    if baseline is not None:
        comparison, seed = compare_systems(
            hypotheses, baseline, references, bootstrap_samples, scoring
        )
    return Evaluation(
        sentences=len(hypotheses),
        references=len(references),
        empty_hypotheses=sum(not h.strip() for h in hypotheses),
        metrics=metrics,
        length=length,
        worst=tuple(sentence(i) for i in order[:worst]),
        samples=tuple(sentence(i) for i in _spread(len(hypotheses), samples)),
        comparison=comparison,
        bootstrap_samples=bootstrap_samples if baseline is not None else None,
        bootstrap_seed=seed,
        by_source_length=(
            None
            if sources is None
            else source_length_buckets(
                hypotheses, references, sources, SOURCE_LENGTH_EDGES, scoring
            )
        ),
    )


def _bucket_label(first: int, last: int | None) -> str:
    """A bucket's name: 0, 1-5, ..., 31+."""
    if last is None:
        return f"{first}+"
    return str(first) if first == last else f"{first}-{last}"


def _bleu_detail(result) -> str:
    return (
        f"{result.prec_str} (BP = {result.bp:.3f} ratio = {result.ratio:.3f} "
        f"hyp_len = {result.sys_len:d} ref_len = {result.ref_len:d})"
    )


def _resampled_scores(
    metric,
    hypotheses: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[Sequence[str]],
    n_samples: int,
    seed: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each system's score on each of sacreBLEU's paired resamples: two float arrays.

    The indices are drawn as `sacrebleu.significance._paired_bs_test` draws them, with
    sacreBLEU's private statistics methods (it has no public API for them).
    """
    import numpy as np

    references_ = [list(stream) for stream in references]
    system = np.array(metric._extract_corpus_statistics(list(hypotheses), references_), "float32")
    base = np.array(metric._extract_corpus_statistics(list(baseline), references_), "float32")
    rng = np.random.default_rng(seed if seed else None)
    indices = rng.choice(len(hypotheses), size=(n_samples, len(hypotheses)), replace=True)
    system_scores = np.array(
        [metric._compute_score_from_stats(system[row].sum(0)).score for row in indices]
    )
    baseline_scores = np.array(
        [metric._compute_score_from_stats(base[row].sum(0)).score for row in indices]
    )
    return system_scores, baseline_scores


def _difference_interval(differences: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% interval of the paired differences (system - baseline) of the resamples."""
    import numpy as np

    differences = np.sort(differences)
    # The same order statistics as sacrebleu.significance.estimate_ci (2.5% and 97.5%).
    lower = len(differences) // 40
    return (
        float(differences.mean()),
        float(differences[lower]),
        float(differences[len(differences) - lower - 1]),
    )


@contextlib.contextmanager
def _each_warning_once(logger: logging.Logger) -> Iterator[None]:
    """Drops repeats of a log message while active (sacreBLEU's "forgot to detokenize?")."""
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
