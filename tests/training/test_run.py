"""Whole training runs through `training.run.train` on the synthetic copy task."""

import json
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml

from tests.support.runs import (
    TRAIN_SCRIPT,
    killed_and_resumed_equals_straight,
    replace,
    script_env,
    tiny_raw_config,
    tiny_run_config,
)
from training.config import ConfigError, dump_config
from training.record import RunRecord
from training.run import TrainingError, train
from translator.artifacts import load_model_dir
from translator.pipelines.dataset import make_dataset
from translator.pipelines.vocabulary import load_vocabulary


def test_run_directory_layout_and_final_model(copy_task, tmp_path):
    config = tiny_run_config(
        copy_task, train={"max_steps": 20}, checkpoint={"every_steps": 5, "keep_last": 2}
    )
    result = train(config, tmp_path / "run", verbose=0)
    run = tmp_path / "run"
    assert result.steps == 20 and result.stop_reason == "reached max_steps (20)"
    record = RunRecord.read(result.model_dir)
    assert (record.step, record.config["train"]["max_steps"]) == (20, 20)
    assert (run / "config.yaml").is_file() and (run / "vocab" / "vocab.json").is_file()
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("ckpt-*.index"))
    assert checkpoints == ["ckpt-15.index", "ckpt-20.index"]  # keep_last 2
    # The budget spent and the schedule's end travel with the checkpoint (for resume).
    saved = dict(tf.train.list_variables(str(run / "checkpoints" / "ckpt-20")))
    assert "budget/elapsed_seconds/.ATTRIBUTES/VARIABLE_VALUE" in saved
    end = tf.train.load_variable(
        str(run / "checkpoints" / "ckpt-20"), "budget/total_updates/.ATTRIBUTES/VARIABLE_VALUE"
    )
    assert end == 20.0  # a step budget: the schedule ends at max_steps
    assert any((run / "logs").rglob("events.out.tfevents.*"))
    loaded = load_model_dir(run)  # a run directory resolves to its final model
    source = np.array([[5, 6, 7, 3]], "int32")
    target = np.array([[2, 5, 6, 7]], "int32")
    np.testing.assert_allclose(
        loaded.model((source, target)), result.model((source, target)), atol=1e-6
    )
    assert loaded.metadata["step"] == 20
    # What the budget bought: exactly the real target tokens of the 20 batches trained on.
    batches = make_dataset(
        *copy_task["train"],
        load_vocabulary(copy_task["vocab"]),
        config.data.pipeline,
        training=True,
    ).take(20)
    real = sum(int(np.count_nonzero(labels)) for _, labels in batches.as_numpy_iterator())
    assert result.target_tokens == loaded.metadata["target_tokens"] == real


def test_errors_before_training_name_the_key(copy_task, tmp_path):
    config = tiny_run_config(copy_task)
    with pytest.raises(ConfigError, match=r"data\.train_source: file not found: .*missing\.src"):
        train(replace(config, "data", train_source=str(tmp_path / "missing.src")), tmp_path / "a")
    with pytest.raises(ConfigError, match=r"data\.vocabulary: directory not found"):
        train(replace(config, "data", vocabulary=str(tmp_path / "novocab")), tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing started


def test_resuming_with_another_vocabulary_is_refused(copy_task, tmp_path):
    from translator.pipelines.vocab import build_vocabulary

    config = tiny_run_config(copy_task, train={"max_steps": 2})
    train(config, tmp_path / "run", verbose=0)
    other = tmp_path / "other_vocab"
    build_vocabulary(
        [copy_task["train"][0]], [copy_task["train"][1]], other, vocab_size=30, byte_fallback=False
    )
    # (In mixed_bfloat16: a run that ends, here in an error, leaves the caller's policy.)
    refused = replace(
        replace(config, "data", vocabulary=str(other)), "train", precision="mixed_bfloat16"
    )
    with pytest.raises(ConfigError, match="differs from the vocabulary of the run being resumed"):
        train(refused, tmp_path / "run")
    assert keras.config.dtype_policy().name == "float32"


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(
    copy_task, tmp_path, monkeypatch
):
    import training.engines.tf_trainer as trainer_module

    real_loss, real_cross_entropy = (
        trainer_module.TranslationTrainer._loss,
        trainer_module.masked_cross_entropy,
    )
    poison = {}

    def poisoned_loss(self, features, labels, training):
        # From the 7th update on, the cross-entropy is NaN, as a diverging run's would be.
        poison["value"] = tf.where(self.optimizer.iterations >= 6, float("nan"), 0.0)
        return real_loss(self, features, labels, training)

    def poisoned_cross_entropy(labels, logits, label_smoothing=0.0, compiled=True):
        total, count = real_cross_entropy(labels, logits, label_smoothing, compiled)
        return total + poison["value"], count

    monkeypatch.setattr(trainer_module.TranslationTrainer, "_loss", poisoned_loss)
    monkeypatch.setattr(trainer_module, "masked_cross_entropy", poisoned_cross_entropy)
    config = tiny_run_config(copy_task, train={"max_steps": 20}, checkpoint={"every_steps": 5})
    with pytest.raises(TrainingError, match=r"NaN at step 7.*ckpt-5"):
        train(config, tmp_path / "run", verbose=0)
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")).endswith("ckpt-5")
    reader = tf.train.load_checkpoint(str(tmp_path / "run" / "checkpoints" / "ckpt-5"))
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        if np.issubdtype(np.asarray(value).dtype, np.floating):
            assert np.all(np.isfinite(value)), name
    assert not (tmp_path / "run" / "model").exists()  # no final model from a broken run


@pytest.mark.slow  # ~95 s; test_finetune.py's in-process Ctrl-C resume is the default check
def test_resume_after_sigkill_matches_an_uninterrupted_run(copy_task, tmp_path):
    """SIGKILL mid-training, restart: same final weights as a run never interrupted."""
    config = tiny_run_config(
        copy_task,
        model={"preset": "tiny", "overrides": {"dropout": 0.1}},  # RNG state must resume too
        train={"max_steps": 60},
        checkpoint={"every_steps": 10, "keep_last": 10},
    )
    killed_and_resumed_equals_straight(config, tmp_path, kill_at=30)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.slow  # ~40 s; the planned run below, under a time budget, is the default one
def test_multi_worker_two_processes_end_with_identical_weights(copy_task, tmp_path):
    budget = {"max_steps": 8}
    config = tiny_run_config(copy_task, train={**budget, "strategy": "multi_worker"})
    config_path = tmp_path / "config.yaml"
    dump_config(config, config_path)
    _two_workers_agree(config_path, tmp_path, budget)


def test_multi_worker_planned_run_times_in_lockstep_and_ends_with_identical_weights(
    copy_task, tmp_path
):
    # Each worker times the shape; they must make the same plan (batch, schedule) or
    # their collectives would not match. Under the time budget their clocks differ: they
    # must still agree on the learning rate of every update and on the step to stop at.
    raw = tiny_raw_config(copy_task, train={"max_minutes": 0.5, "strategy": "multi_worker"})
    del raw["data"]["pipeline"]["batch_tokens"], raw["optimizer"]
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    _two_workers_agree(config_path, tmp_path, {"max_minutes": 0.5}, "--plan")
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["speeds"]["yours"]["measured"] and plan["measuring_seconds"] > 0


@pytest.mark.slow  # ~60 s: two workers and one device, each a TensorFlow process
def test_multi_worker_trains_as_one_device_on_the_same_global_batches():
    """Two workers, each half of every global batch (rows of different token counts),
    with and without a global-norm clip that binds: the losses and every weight are one
    device's (a per-worker mean loss or norm would not be)."""
    from tests.support.paths import SCRIPTS

    script = [sys.executable, str(SCRIPTS / "strategy_equivalence.py"), "0.0", "0.5"]
    processes = _start_two_workers(lambda index: [*script, "--strategies", "multi_worker"])
    one = subprocess.run(
        [*script, "--strategies", "one_device"],
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
    assert one.returncode == 0, one.stderr[-3000:]
    reference = json.loads(one.stdout.strip().splitlines()[-1])
    chief, other = (json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)
    for clip in ("0.0", "0.5"):
        device, worker = reference[clip]["one_device"], chief[clip]["multi_worker"]
        assert worker["replicas"] == 2 and any(a != b for a, b in worker["replica_tokens"])
        assert len(worker["weights"]) == len(device["weights"]) > 10_000  # every weight
        np.testing.assert_allclose(worker["losses"], device["losses"], rtol=1e-5)
        np.testing.assert_allclose(worker["weights"], device["weights"], atol=1e-5)
        assert worker["weights"] == other[clip]["multi_worker"]["weights"]  # in sync
    # The clip binds: with and without it, the weights differ.
    assert not np.allclose(
        reference["0.0"]["one_device"]["weights"], reference["0.5"]["one_device"]["weights"]
    )


def _start_two_workers(command) -> list[subprocess.Popen]:
    """Starts `command(index)` as workers 0 and 1 of a local TF_CONFIG cluster."""
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(
            subprocess.Popen(
                command(index),
                env={**script_env(), "TF_CONFIG": json.dumps(tf_config)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return processes


def _two_workers_agree(config_path, tmp_path, budget, *extra):
    """Trains on two local workers; both end at the same step with the same weights."""
    processes = _start_two_workers(
        lambda index: [
            *(sys.executable, str(TRAIN_SCRIPT), str(config_path), str(tmp_path / "run")),
            *(str(tmp_path / f"w{index}.npz"), *extra),
        ]
    )
    outputs = [p.communicate(timeout=600) for p in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
    steps = [out.strip().splitlines()[-1] for out, _ in outputs]
    assert steps[0] == steps[1]
    if "max_minutes" in budget:  # how many updates fit depends on the machine and its load
        # (a planned run measures inside its budget: on a loaded machine one may be all)
        assert int(steps[0][6:]) >= (1 if "--plan" in extra else 2)
    else:
        assert steps[0] == "steps=8"
    w0, w1 = np.load(tmp_path / "w0.npz"), np.load(tmp_path / "w1.npz")
    for key in w0.files:
        np.testing.assert_array_equal(w0[key], w1[key], err_msg=key)
    assert (tmp_path / "run" / "model" / "model.keras").is_file()  # the chief wrote the model
    assert not list((tmp_path / "run" / "checkpoints").glob(".scratch-*"))  # worker scratch removed
