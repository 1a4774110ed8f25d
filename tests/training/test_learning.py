"""Training really trains: a tiny model learns to copy, judged by greedy decoding."""

import json
import time

from tests.support.runs import tiny_run_config
from training.run import train
from translator.inference import Translator
from translator.pipelines import load_vocabulary
from translator.search import SearchConfig


def scalars(log_dir):
    """{tag: [values in step order]} of the TensorBoard summaries in `log_dir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    return {
        tag: [float(make_ndarray(event.tensor_proto)) for event in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
    }


def test_tiny_model_learns_the_copy_task(copy_task, tmp_path):
    config = tiny_run_config(
        copy_task,
        data={"pipeline": {"batch_tokens": 1024, "max_source_length": 32, "max_target_length": 32}},
        train={"max_steps": 300},
        eval={"every_steps": 150, "bleu": True},
    )
    started = time.monotonic()
    result = train(config, tmp_path / "run", verbose=0)
    elapsed = time.monotonic() - started

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
    # TensorBoard holds every period's summaries, not only those ending on a multiple of
    # the batch-summary frequency (100): validation BLEU at 150 and 300, tokens/s, the rate.
    logged = {
        split: scalars(tmp_path / "run" / "logs" / split) for split in ("train", "validation")
    }
    bleu = [round(value, 4) for value in logged["validation"]["epoch_bleu"]]
    assert bleu == [round(value, 4) for _, value in result.bleu_history]
    assert len(logged["train"]["epoch_tokens_per_second"]) == 2
    assert len(logged["train"]["epoch_learning_rate"]) == 2
    assert elapsed < 240, f"took {elapsed:.0f} s"  # about a minute on an idle 2-core CPU
