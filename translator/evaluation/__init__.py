"""Scoring translations with sacreBLEU, and evaluation reports.

    from translator.evaluation import evaluate
    from translator.io import read_lines

    result = evaluate(read_lines("hyp.zh"), [read_lines("ref1.zh"), read_lines("ref2.zh")],
                      scoring=Scoring(target_lang="zh"))
    result.metric("bleu").score, result.metric("bleu").signature

`Scoring` sets the metrics for the target language as sacreBLEU's command line does
(BLEU's tokenizer, TER's Asian support) and adds chrF++ on request.

`EvaluationReport` records how the scores were obtained (model, data sha256, search,
timing); `write_report` writes `report.json`, `report.md` and PNG charts. `score_files`
and `evaluate_model` serve `translator score` and `translator evaluate`.
"""

from translator.evaluation.metrics import EXTRA_METRICS, Scoring, ScoringError
from translator.evaluation.render import (
    BOOTSTRAP_CHART,
    REPORT_JSON,
    REPORT_MD,
    SOURCE_LENGTH_CHART,
    format_scores,
    render_markdown,
    write_report,
)
from translator.evaluation.report import (
    REPORT_FORMAT,
    EvaluationReport,
    FileIdentity,
    ModelIdentity,
    Timing,
    file_identity,
)
from translator.evaluation.scoring import (
    COMPARED,
    DEFAULT_BOOTSTRAP_SAMPLES,
    DEFAULT_SAMPLES,
    DEFAULT_WORST,
    METRICS,
    SOURCE_LENGTH_EDGES,
    Comparison,
    Evaluation,
    EvaluationError,
    LengthBucket,
    LengthStats,
    MetricScore,
    SentenceScore,
    check_references,
    check_same_length,
    compare_systems,
    corpus_metrics,
    evaluate,
    score_corpus,
    sentence_chrf,
    source_length,
    source_length_buckets,
)
from translator.evaluation.service import (
    ReportFiles,
    evaluate_model,
    model_identity,
    read_aligned,
    read_references,
    score_files,
    search_record,
)

__all__ = [
    "BOOTSTRAP_CHART",
    "COMPARED",
    "DEFAULT_BOOTSTRAP_SAMPLES",
    "DEFAULT_SAMPLES",
    "DEFAULT_WORST",
    "EXTRA_METRICS",
    "METRICS",
    "REPORT_FORMAT",
    "REPORT_JSON",
    "REPORT_MD",
    "SOURCE_LENGTH_CHART",
    "SOURCE_LENGTH_EDGES",
    "Comparison",
    "Evaluation",
    "EvaluationError",
    "EvaluationReport",
    "FileIdentity",
    "LengthBucket",
    "LengthStats",
    "MetricScore",
    "ModelIdentity",
    "ReportFiles",
    "Scoring",
    "ScoringError",
    "SentenceScore",
    "Timing",
    "check_references",
    "check_same_length",
    "compare_systems",
    "corpus_metrics",
    "evaluate",
    "evaluate_model",
    "file_identity",
    "format_scores",
    "model_identity",
    "read_aligned",
    "read_references",
    "render_markdown",
    "score_corpus",
    "score_files",
    "search_record",
    "sentence_chrf",
    "source_length",
    "source_length_buckets",
    "write_report",
]
