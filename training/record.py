"""What a finished run records and returns.

Its record beside its model (`RUN/model/metadata.json`, `RunRecord`), typed, and what
`training.run.train` returns (`TrainResult`) and prints of it (`summary_line`).
`translator train` writes the record; the recipe's summary, evaluation reports (which embed it)
and the benchmarks read it back through `RunRecord`, never by string key.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from translator.artifacts import METADATA_FILE

if TYPE_CHECKING:  # pragma: no cover
    from training.planning.rules import Plan
    from translator.model import Transformer

# A YAML/JSON value as the run config's `to_dict` holds it.
ConfigMapping = Mapping[str, object]


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a run trained and bought; JSON through `to_dict` and `from_dict`."""

    # Optimizer updates the final weights have had (across resumes).
    step: int
    # The run config as trained (`RunConfig.to_dict()`).
    config: ConfigMapping = dataclasses.field(default_factory=dict)
    # Checkpoints averaged into the final weights (1: the last alone).
    averaged_checkpoints: int = 1
    # The best greedy validation BLEU and its step (None without BLEU validation).
    best_validation_bleu: float | None = None
    best_validation_step: int | None = None
    # (step, greedy validation BLEU) after each validation, in order.
    validation_bleu: tuple[tuple[int, float], ...] = ()
    # This process' training wall time; the budget's over all resumes.
    training_seconds: float = 0.0
    budget_seconds: float = 0.0
    # Real (non-padding) target tokens trained on, over all replicas and resumes.
    target_tokens: int = 0
    # The dtype policy it trained in.
    precision: str = "float32"

    def to_dict(self) -> dict[str, object]:
        """The record as `metadata.json` holds it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RunRecord:
        """Reads `to_dict`'s output; a field an older record lacks takes its default."""
        names = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        history = values.get("validation_bleu") or ()
        values["validation_bleu"] = tuple((int(step), float(bleu)) for step, bleu in history)
        return cls(**values)

    @classmethod
    def read(cls, model_dir: str | Path) -> RunRecord:
        """The record of a run's final model directory (`RUN/model`)."""
        path = Path(model_dir) / METADATA_FILE
        return cls.from_dict(json.loads(path.read_text("utf-8")))


@dataclasses.dataclass
class TrainResult:
    """What a finished run produced."""

    # The run directory.
    run_dir: Path
    # Optimizer updates done in total (across resumes).
    steps: int
    # Why training stopped.
    stop_reason: str
    # The final model directory (<run>/model).
    model_dir: Path
    # Best validation BLEU and its step (None without BLEU validation).
    best_bleu: float | None
    best_step: int | None
    # Validation BLEU after each validation: (step, BLEU).
    bleu_history: list[tuple[int, float]]
    # Training loss of the last epoch.
    final_loss: float
    # Real (non-padding) target tokens trained on, across resumes.
    target_tokens: int
    # The trained Transformer (averaged when checkpoint.average_last > 1).
    model: Transformer
    # The plan the run trained (None when nothing was planned).
    plan: Plan | None = None
    # The curves of the run as a PNG (None when nothing was logged, or not the chief).
    curves: Path | None = None


def summary_line(result: TrainResult) -> str:
    """What a run bought: the plan, the updates made, the validation BLEU reached."""
    planned = ""
    if result.plan is not None:
        plan = result.plan
        bought = f", {plan.epochs:,.1f} epochs" if plan.updates else ""
        planned = (
            f" of the plan's ~{plan.updates:,}" if plan.updates else ""
        ) + f" ({plan.shape.describe()}, {plan.batch_tokens:,} batch tokens{bought}; RUN/plan.json)"
    best = (
        f"; best validation BLEU {result.best_bleu:.2f} at step {result.best_step:,}"
        if result.best_bleu is not None
        else ""
    )
    return f"trained {result.steps:,} updates{planned} ({result.stop_reason}){best}"
