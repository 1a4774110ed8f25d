"""Fine-tuning (`--init-from`): weights only, the model's architecture and vocabulary."""

import os
import shutil
import signal
import threading
import time

import numpy as np
import pytest
import sacrebleu

from tests.support.corpora import write_copy_corpus
from tests.support.runs import (
    latest_step,
    replace,
    tiny_run_config,
)
from training.config import ConfigError
from training.run import TrainingInterruptedError, train
from training.summaries import read_scalars
from translator.artifacts import load_model_dir
from translator.inference import Translator
from translator.search import SearchConfig


@pytest.fixture(scope="module")
def base_model(copy_task, tmp_path_factory):
    """A tiny model trained on the copy task (the model to fine-tune)."""
    config = tiny_run_config(copy_task, train={"max_steps": 60})
    return train(config, tmp_path_factory.mktemp("base") / "run", verbose=0).model_dir


def _translations(model_dir, sources, beam_size=1):
    loaded = load_model_dir(model_dir)
    translator = Translator.from_model(
        loaded.model, loaded.vocabulary, SearchConfig(beam_size=beam_size)
    )
    return translator.search(sources).hypotheses


def test_zero_updates_translate_exactly_as_the_original(copy_task, base_model, tmp_path):
    config = tiny_run_config(copy_task, train={"max_steps": 0, "init_from": str(base_model)})
    result = train(config, tmp_path / "tuned", verbose=0)
    sources = copy_task["valid"][0].read_text().splitlines()[:40]
    for beam_size in (1, 3):
        original = _translations(base_model, sources, beam_size)
        tuned = _translations(result.model_dir, sources, beam_size)
        assert [[(h.ids, h.score) for h in row] for row in tuned] == [
            [(h.ids, h.score) for h in row] for row in original
        ]


def test_the_architecture_comes_from_the_model(copy_task, base_model, tmp_path):
    # The run config asks for nothing: the tuned model is the base model's shape.
    config = tiny_run_config(
        copy_task, model={"preset": "base"}, train={"max_steps": 1, "init_from": str(base_model)}
    )
    with pytest.raises(ConfigError, match=r"model.preset: sets num_encoder_layers .* has"):
        train(config, tmp_path / "preset", verbose=0)
    config = tiny_run_config(copy_task, train={"max_steps": 1, "init_from": str(base_model)})
    conflicting = replace(config, "model", overrides={"dropout": 0.0, "d_model": 128})
    with pytest.raises(ConfigError, match=r"model.overrides.d_model: sets d_model 128, but"):
        train(conflicting, tmp_path / "conflict", verbose=0)
    # Setting the model's own value is no conflict, whatever the default preset says.
    same = replace(config, "model", overrides={"dropout": 0.0, "num_encoder_layers": 2})
    assert train(same, tmp_path / "same", verbose=0).steps == 1
    # Dropout is not architecture: changing it is fine-tuning.
    result = train(
        replace(config, "model", overrides={"dropout": 0.2}), tmp_path / "dropout", verbose=0
    )
    tuned = load_model_dir(result.model_dir).model.config
    assert tuned.dropout == 0.2
    assert tuned.d_model == load_model_dir(base_model).model.config.d_model


def test_another_vocabulary_is_refused_naming_both(copy_task, base_model, tmp_path):
    from translator.pipelines.vocab import build_vocabulary

    other = tmp_path / "other_vocab"
    build_vocabulary(
        [copy_task["train"][0]],
        [copy_task["train"][1]],
        other,
        vocab_size=39,
        seed=7,
        byte_fallback=False,
        model_type="bpe",
    )
    config = tiny_run_config(copy_task, train={"max_steps": 1, "init_from": str(base_model)})
    with pytest.raises(ConfigError, match=r"data.vocabulary: .*other_vocab \(sha256 \w+\) is not"):
        train(replace(config, "data", vocabulary=str(other)), tmp_path / "run", verbose=0)
    missing = replace(config, "train", init_from=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"train.init_from: .*nowhere"):
        train(missing, tmp_path / "run2", verbose=0)


def test_the_command_line_fine_tunes_with_the_models_vocabulary(base_model):
    """`train --init-from M` needs no data.vocabulary: the default config's is replaced by
    the model's; one given with --set is kept (and checked when the run starts)."""
    from training.cli import with_init_vocabulary
    from training.config import DEFAULT_CONFIG, read_config

    def vocabulary(*overrides: str) -> str:
        given = read_config(DEFAULT_CONFIG, overrides)
        return with_init_vocabulary(given.config, given.set_keys).data.vocabulary

    init = f"train.init_from={base_model}"
    assert vocabulary(init) == str(base_model / "vocab")
    assert vocabulary() == read_config(DEFAULT_CONFIG).config.data.vocabulary != vocabulary(init)
    assert vocabulary(init, "data.vocabulary=elsewhere") == "elsewhere"


def _bleu(model_dir, sources, references):
    texts = [row[0].text if row else "" for row in _translations(model_dir, sources)]
    return sacrebleu.corpus_bleu(texts, [references]).score


def test_fine_tuning_on_a_new_domain_raises_its_bleu(copy_task, base_model, tmp_path):
    """The base model copies; the new domain reverses. A short fine-tuning learns it."""
    train_files = write_copy_corpus(tmp_path / "reverse", 3000, seed=11, reverse=True)
    valid_files = write_copy_corpus(tmp_path / "reverse", 200, seed=12, reverse=True)
    config = tiny_run_config(
        copy_task,
        train={"max_steps": 150, "init_from": str(base_model)},
        optimizer={"peak_learning_rate": 0.003, "warmup_fraction": 0.05},
    )
    data = {"train_source": str(train_files[0]), "train_target": str(train_files[1])}
    result = train(replace(config, "data", **data), tmp_path / "tuned", verbose=0)
    sources = valid_files[0].read_text().splitlines()
    references = valid_files[1].read_text().splitlines()
    before, after = (
        _bleu(base_model, sources, references),
        _bleu(result.model_dir, sources, references),
    )
    assert after > before + 10, (before, after)


def test_ctrl_c_then_resume_of_a_fine_tuning_equals_an_uninterrupted_one(
    copy_task, base_model, tmp_path
):
    """Ctrl-C in one process, then resuming a fine-tuning (test_train_command.py's slow test
    runs Ctrl-C as the user's process). The resume makes exactly the updates left after
    its checkpoint (TensorBoard's points, one per update: a restart from the base model
    would log from step 1 again)."""
    config = tiny_run_config(
        copy_task,
        model={"preset": "tiny", "overrides": {"dropout": 0.1}},  # RNG state must resume too
        train={"max_steps": 20, "init_from": str(base_model), "log_every_steps": 1},
        checkpoint={"every_steps": 5, "keep_last": 10},
    )
    straight = train(config, tmp_path / "straight", verbose=0)
    run_dir, ended = tmp_path / "interrupted", threading.Event()

    def ctrl_c_after_the_first_checkpoint():
        while latest_step(run_dir) < 5 and not ended.is_set():
            time.sleep(0.02)
        if not ended.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=ctrl_c_after_the_first_checkpoint, daemon=True)
    thread.start()
    try:
        with pytest.raises(TrainingInterruptedError, match="stopped at step"):
            train(config, run_dir, verbose=0)
    finally:
        ended.set()
        thread.join()
    stopped = latest_step(run_dir)
    assert 5 <= stopped < 20 and not (run_dir / "model").exists()
    shutil.move(run_dir / "logs", tmp_path / "logs-before")  # the resume's own points only
    resumed = train(config, run_dir, verbose=0)
    assert resumed.steps == 20
    logged = [step for step, _ in read_scalars(run_dir / "logs")["train"]["loss"]]
    assert logged == list(range(stopped + 1, 21))
    for a, b in zip(straight.model.get_weights(), resumed.model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_planned_fine_tuning_keeps_the_model_and_plans_what_fine_tuning_changes(
    copy_task, base_model, tmp_path
):
    from training.planning.lifecycle import PlanRequest
    from training.run import preview_plan

    config = tiny_run_config(
        copy_task, train={"max_steps": 0, "max_minutes": 0.5, "init_from": str(base_model)}
    )
    plan = preview_plan(config, PlanRequest(frozenset(), cache_dir=tmp_path), tmp_path / "run")
    by_key = {str(choice.key): choice for choice in plan.choices}
    model = by_key["model"]
    assert not model.planned and model.reason == f"the fine-tuned model's ({base_model})"
    trained = load_model_dir(base_model).model.config  # the model's, whatever the budget
    shape = plan.shape
    assert (shape.encoder_layers, shape.decoder_layers, shape.d_model, shape.ffn_dim) == (
        trained.num_encoder_layers,
        trained.num_decoder_layers,
        trained.d_model,
        trained.ffn_dim,
    )
    for key in ("data.pipeline.batch_tokens", "optimizer.peak_learning_rate"):
        assert by_key[key].planned, key


def test_a_fine_tuning_that_only_hurts_keeps_the_model_it_started_from(
    copy_task, base_model, tmp_path, caplog
):
    """Validated before its first update; a learning rate that wrecks the model leaves a
    final model equal to the one fine-tuning started from, and the log says so."""
    config = tiny_run_config(
        copy_task,
        train={"max_steps": 20, "init_from": str(base_model)},
        optimizer={"peak_learning_rate": 0.5, "warmup_fraction": 0.05},
        eval={"every_steps": 20, "bleu": True},
    )
    with caplog.at_level("INFO", logger="training.finetune"):
        result = train(config, tmp_path / "wrecked", verbose=0)
    (first_step, before), (last_step, after) = result.bleu_history[0], result.bleu_history[-1]
    assert (first_step, last_step) == (0, 20) and after < before, result.bleu_history
    assert "the final model is the model fine-tuning started from" in caplog.text
    sources = copy_task["valid"][0].read_text().splitlines()[:40]
    kept, original = _translations(result.model_dir, sources), _translations(base_model, sources)
    assert [[h.ids for h in row] for row in kept] == [[h.ids for h in row] for row in original]
