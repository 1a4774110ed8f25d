"""Training really trains: a tiny model learns to copy, judged by greedy decoding."""

import json

import pytest

from tests.support.images import assert_png
from tests.support.runs import tiny_run_config
from training.run import train
from training.summaries import CURVES_FILE, read_scalars
from translator.inference import Translator
from translator.pipelines import load_vocabulary
from translator.search import SearchConfig


def test_tiny_model_learns_the_copy_task(copy_task, tmp_path):
    config = tiny_run_config(
        copy_task,
        data={"pipeline": {"batch_tokens": 1024, "max_source_length": 32, "max_target_length": 32}},
        train={"max_steps": 300},
        eval={"every_steps": 150, "bleu": True},
    )
    result = train(config, tmp_path / "run", verbose=0)

    sources = copy_task["valid"][0].read_text().splitlines()  # held out: not trained on
    references = copy_task["valid"][1].read_text().splitlines()
    translator = Translator.from_model(
        result.model, load_vocabulary(copy_task["vocab"]), SearchConfig(beam_size=1)
    )
    hypotheses = translator.translate(sources)
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
    assert exact >= 0.95, (exact, hypotheses[:5])
    # Validation BLEU (greedy, sacreBLEU) rose over training and the best model was kept.
    (first_step, first_bleu), (last_step, last_bleu) = result.bleu_history
    assert (first_step, last_step) == (150, 300) and last_bleu > first_bleu and last_bleu > 90
    assert (tmp_path / "run" / "best" / "model.keras").is_file()
    # The history is kept with the final model (bench.quality reports it).
    metadata = json.loads((result.model_dir / "metadata.json").read_text())
    assert metadata["validation_bleu"] == [list(entry) for entry in result.bleu_history]
    # TensorBoard: validation BLEU at each validation, the training scalars every
    # `log_every_steps` (100) updates, all against the update count.
    logged = read_scalars(tmp_path / "run" / "logs")
    assert logged["validation"]["bleu"] == [(s, pytest.approx(b)) for s, b in result.bleu_history]
    for tag in ("loss", "learning_rate", "tokens_per_second", "minutes"):
        assert [step for step, _ in logged["train"][tag]] == [100, 200, 300], tag
    losses = [value for _, value in logged["train"]["loss"]]
    assert losses[-1] < losses[0] and all(v > 0 for _, v in logged["train"]["tokens_per_second"])
    # ... and drawn at the end of the run: a real PNG of some size.
    assert result.curves == tmp_path / "run" / CURVES_FILE
    assert_png(result.curves, min_bytes=20_000, min_size=600)
