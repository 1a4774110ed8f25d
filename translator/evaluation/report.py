"""`EvaluationReport`: the scores and how they were obtained (model, data, search, timing)."""

from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Any

from translator.evaluation.scoring import Evaluation
from translator.io import sha256_file

# Version of the report.json layout; bump on incompatible changes.
REPORT_FORMAT = "translator-evaluation/1"


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
                "metrics": {
                    c.key: _fields(c, drop=("key", "system_resamples", "baseline_resamples"))
                    for c in evaluation.comparison
                },
            }
        by_length = None
        if evaluation.by_source_length is not None:
            by_length = {
                "unit": "words of the source (whitespace-separated; a Chinese or Japanese "
                "character is one)",
                "buckets": [dataclasses.asdict(b) for b in evaluation.by_source_length],
            }
        return {
            "format": REPORT_FORMAT,
            "created": self.created,
            "scores": {m.key: _fields(m, drop=("key",)) for m in evaluation.metrics},
            "length": dataclasses.asdict(evaluation.length),
            "sentences": evaluation.sentences,
            "references": evaluation.references,
            "empty_hypotheses": evaluation.empty_hypotheses,
            "comparison": comparison,
            "by_source_length": by_length,
            "model": None if self.model is None else dataclasses.asdict(self.model),
            "data": {role: dataclasses.asdict(f) for role, f in self.data.items()},
            "search": self.search,
            "translation": self.translation,
            "timing": None if self.timing is None else dataclasses.asdict(self.timing),
            "versions": self.versions,
            "samples": [dataclasses.asdict(s) for s in evaluation.samples],
            "worst": [dataclasses.asdict(s) for s in evaluation.worst],
        }


def file_identity(path: str | os.PathLike[str], lines: int) -> FileIdentity:
    """Path, sha256 and line count of an input file."""
    return FileIdentity(path=str(path), sha256=sha256_file(path), lines=lines)


def _fields(item: Any, drop: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(item).items() if k not in drop}


def _versions() -> dict[str, str]:
    import sacrebleu

    import translator

    return {"translator": translator.__version__, "sacrebleu": sacrebleu.__version__}
