"""Training on Keras' JAX backend through the product: `train.backend: jax`.

The JAX runs go in processes of their own (this one runs Keras on TensorFlow), through
`scripts/train_run.py`, which sets `KERAS_BACKEND` from the config as `translator train`
does. What they leave behind is then used here, on TensorFlow, as any run's would be.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.runs import (
    TRAIN_SCRIPT,
    assert_same_weights,
    killed_and_resumed_equals_straight,
    replace,
    script_env,
    tiny_run_config,
    train_to_end,
)
from training.config import dump_config
from training.summaries import read_scalars

STEPS = 30


def jax_config(task, **sections):
    raw = {"checkpoint": {"every_steps": 10, "keep_last": 5}, **sections}
    train = {"max_steps": STEPS, "backend": "jax", "log_every_steps": 10, **raw.pop("train", {})}
    return tiny_run_config(task, train=train, **raw)


def train_in_process(config, tmp_path, name: str, env: dict | None = None) -> str:
    """Trains `config` to its end in a new process; its weights go to NAME.npz."""
    path = tmp_path / f"{name}.yaml"
    dump_config(config, path)
    if env is None:
        return train_to_end(path, tmp_path / name, tmp_path / f"{name}.npz")
    return train_one_after_another([(config, name)], tmp_path, env)


def train_one_after_another(runs, tmp_path, env: dict) -> str:
    """Trains each (config, NAME) of `runs` to its end, one after the other in one new
    process (one start-up); the weights go to NAME.npz. Returns what the process logged."""
    arguments = []
    for config, name in runs:
        dump_config(config, tmp_path / f"{name}.yaml")
        arguments += [tmp_path / f"{name}.yaml", tmp_path / name, tmp_path / f"{name}.npz"]
    result = subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), *map(str, arguments), "--log"],
        env={**script_env(), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def jax_run(copy_task, tmp_path_factory):
    """A tiny run trained on JAX: checkpoints every 10 updates, validation BLEU at the end."""
    root = tmp_path_factory.mktemp("jax_run")
    config = jax_config(copy_task, eval={"every_steps": 0, "bleu": True, "max_sentences": 20})
    out = train_in_process(config, root, "run")
    assert f"steps={STEPS}" in out
    return root


def test_a_jax_run_keeps_its_backend_checkpoints_logs_and_model(jax_run):
    from training.checkpoints import kept_checkpoints
    from training.config import load_config
    from training.summaries import read_scalars
    from translator.artifacts import read_model_dir

    run = jax_run / "run"
    assert load_config(run / "config.yaml").train.backend == "jax"  # a resume stays on JAX
    names = [os.path.basename(p) for p in kept_checkpoints(run / "checkpoints")]
    assert names == ["ckpt-10.npz", "ckpt-20.npz", "ckpt-30.npz"]
    metadata = read_model_dir(run / "model").metadata
    assert metadata["step"] == STEPS and metadata["best_validation_bleu"] is not None
    losses = read_scalars(run / "logs")["train"]["loss"]
    assert [step for step, _ in losses][-1] == STEPS
    assert losses[-1][1] < losses[0][1]  # it learned
    assert (run / "curves.png").stat().st_size > 0


def test_a_jax_run_resumed_from_a_checkpoint_ends_as_the_straight_run(jax_run, tmp_path):
    """As after a kill once step 20 was saved: the same command goes on from there. It
    makes the 10 updates left (its TensorBoard points: step 30 alone, where a restart
    from step 0 logs 10, 20 and 30), from the checkpoint's weights: one of them
    perturbed (the control), the run ends elsewhere."""

    def resumable(name: str) -> Path:
        """A copy of the run as a kill after step 20's checkpoint leaves it, no logs."""
        copy = tmp_path / name
        shutil.copytree(jax_run / "run", copy)
        for gone in (copy / "model", copy / "logs"):
            shutil.rmtree(gone)
        (copy / "checkpoints" / "ckpt-30.npz").unlink()
        return copy

    shutil.copy(jax_run / "run.yaml", tmp_path / "run.yaml")
    resumed = resumable("run")
    out = train_to_end(tmp_path / "run.yaml", resumed, tmp_path / "resumed.npz")
    assert f"steps={STEPS}" in out
    assert_same_weights(jax_run / "run.npz", tmp_path / "resumed.npz")
    assert [step for step, _ in read_scalars(resumed / "logs")["train"]["loss"]] == [STEPS]

    perturbed = resumable("perturbed")
    checkpoint = perturbed / "checkpoints" / "ckpt-20.npz"
    arrays = dict(np.load(checkpoint))
    name = next(k for k, a in arrays.items() if a.dtype.kind == "f" and a.size > 1)
    arrays[name] = arrays[name] + 0.5
    np.savez(checkpoint, **arrays)
    train_to_end(tmp_path / "run.yaml", perturbed, tmp_path / "perturbed.npz")
    with pytest.raises(AssertionError):
        assert_same_weights(jax_run / "run.npz", tmp_path / "perturbed.npz")


@pytest.mark.slow
def test_a_jax_run_killed_after_a_checkpoint_resumes_equal_to_an_uninterrupted_one(
    copy_task, tmp_path
):
    """SIGKILL once step 10 is saved, then the same command: the straight run's weights."""
    killed_and_resumed_equals_straight(jax_config(copy_task), tmp_path, kill_at=10)


@pytest.mark.slow
def test_a_jax_run_stopped_by_ctrl_c_resumes_equal_to_an_uninterrupted_one(copy_task, tmp_path):
    """Ctrl-C (SIGINT) saves the step it stopped at; the same command goes on from it."""
    import signal

    config = jax_config(copy_task)
    killed_and_resumed_equals_straight(config, tmp_path, kill_at=10, signum=signal.SIGINT)


def test_a_damaged_jax_checkpoint_is_skipped_for_the_one_before(jax_run, tmp_path, caplog):
    from training.callbacks import Budget
    from training.checkpoints import ArrayCheckpoints
    from training.config import load_config
    from training.optimizer import make_optimizer, make_schedule
    from translator.model import Transformer
    from translator.pipelines.vocabulary import load_vocabulary

    directory = tmp_path / "checkpoints"
    shutil.copytree(jax_run / "run" / "checkpoints", directory)
    (directory / "ckpt-30.npz").write_bytes(b"not a checkpoint")
    config = load_config(jax_run / "run" / "config.yaml")
    vocabulary = load_vocabulary(jax_run / "run" / "vocab")
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    model = Transformer(config.model.transformer_config(*sizes))
    model.build()
    schedule = make_schedule(config, model.config.d_model)
    optimizer = make_optimizer(config, model.config.d_model, schedule)
    optimizer.build(model.trainable_variables)
    budget = Budget(config.train.max_steps, config.train.max_minutes, schedule)
    store = ArrayCheckpoints(directory, model, optimizer, 5, None, budget=budget.state())
    with caplog.at_level("WARNING"):
        assert store.restore_latest() == 20
    assert "ckpt-30.npz does not read" in caplog.text
    saved = np.load(directory / "ckpt-20.npz")
    np.testing.assert_array_equal(model.weights[0].numpy(), saved["weights/0"])
    assert float(budget.target_tokens.numpy()) > 0  # the budget spent so far, too


def test_average_checkpoints_of_a_jax_run_is_the_mean_of_their_weights(jax_run, tmp_path):
    from training.average import average_run
    from translator.artifacts import load_model_dir

    out, paths = average_run(jax_run / "run", 2, tmp_path / "averaged")
    assert [os.path.basename(p) for p in paths] == ["ckpt-20.npz", "ckpt-30.npz"]
    first, second = (np.load(p) for p in paths)
    averaged = load_model_dir(out).model
    for index, weight in enumerate(averaged.weights):
        expected = (first[f"weights/{index}"] + second[f"weights/{index}"]) / 2
        np.testing.assert_allclose(weight.numpy(), expected, atol=1e-6)


def test_a_jax_trained_model_exports_a_savedmodel_that_translates_as_translate(jax_run, tmp_path):
    """Exported and reloaded on TensorFlow, the JAX-trained model gives `Translator`'s
    texts and scores on TensorFlow: no conversion step between the backends."""
    import tensorflow as tf

    from training.config import load_config
    from translator.artifacts import load_model_dir
    from translator.export import ExportConfig, export_model
    from translator.inference import Translator
    from translator.io import read_lines
    from translator.layers.layer_norm import portable_layer_norms
    from translator.search import SearchConfig

    search = SearchConfig(beam_size=2)
    trained = load_model_dir(jax_run / "run" / "model")
    sources = read_lines(load_config(jax_run / "run" / "config.yaml").data.valid_source, 12)
    model_dir = jax_run / "run" / "model"
    version = export_model(model_dir, tmp_path / "export", ExportConfig(search=search))
    exported = tf.saved_model.load(str(version)).signatures["serving_default"]
    result = exported(inputs=tf.constant(sources))
    texts = [t.decode("utf-8") for t in result["translations"].numpy()]
    with portable_layer_norms():  # the export's graph
        engine = Translator.from_model(
            trained.model, trained.vocabulary, search, batch_tokens=1 << 20
        )
        want = engine.search(sources)
    assert texts == want.texts
    assert any(texts)
    np.testing.assert_allclose(
        result["scores"].numpy(), [h[0].score for h in want.hypotheses], rtol=1e-5
    )


def test_fine_tuning_crosses_backends_both_ways(jax_run, copy_task, tmp_path):
    """A JAX model fine-tuned on TensorFlow, and that model fine-tuned on JAX again:
    each starts from the other's weights (a learning rate of ~0 keeps them)."""
    from training.run import train

    still = {"peak_learning_rate": 1e-12}
    on_tf = replace(
        jax_config(copy_task, optimizer=still, train={"max_steps": 2, "backend": "tensorflow"}),
        "train",
        init_from=str(jax_run / "run" / "model"),
    )
    result = train(on_tf, tmp_path / "on_tf", verbose=0)  # here: Keras runs on TensorFlow
    np.savez(tmp_path / "on_tf.npz", *result.model.get_weights())
    assert_close_weights(jax_run / "run.npz", tmp_path / "on_tf.npz")
    on_jax = replace(
        jax_config(copy_task, optimizer=still, train={"max_steps": 2}),
        "train",
        init_from=str(tmp_path / "on_tf" / "model"),
    )
    train_in_process(on_jax, tmp_path, "on_jax")
    assert_close_weights(tmp_path / "on_tf.npz", tmp_path / "on_jax.npz")


def assert_close_weights(expected_path, actual_path) -> None:
    expected, actual = np.load(expected_path), np.load(actual_path)
    assert expected.files == actual.files
    for key in expected.files:
        np.testing.assert_allclose(actual[key], expected[key], atol=1e-6, err_msg=key)


def test_data_parallel_over_two_devices_trains_as_one_device(copy_task, tmp_path):
    """`mirrored` on JAX: two host devices, each half of every batch; the loss is the
    global token mean and clipping global, so every weight is one device's. The halves
    hold different token counts and the clip binds (without it the weights differ), so a
    per-replica mean loss or norm would not pass."""
    two = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    # Adam's epsilon keeps updates of near-zero gradients (summed in another order on
    # two devices) from being scaled up to full steps.
    optimizer = {"clip_norm": 0.5, "epsilon": 1e-3}
    config = jax_config(copy_task, train={"max_steps": 5}, optimizer=optimizer)
    pipeline = dataclasses.replace(config.data.pipeline, batch_size_multiple=2)  # same batches
    config = replace(config, "data", pipeline=pipeline)
    halves = _half_batch_tokens(config, batches=5)
    assert any(a != b for a, b in halves), halves
    one = replace(config, "train", strategy="one_device")
    mirrored = replace(config, "train", strategy="mirrored")
    unclipped = replace(one, "optimizer", clip_norm=0.0)
    runs = [(one, "one"), (mirrored, "two"), (unclipped, "unclipped")]
    out = train_one_after_another(runs, tmp_path, env=two)
    assert out.count("steps=5") == 3 and out.count("2 replica(s)") == 1, out[-3000:]
    assert_same_weights(tmp_path / "one.npz", tmp_path / "two.npz")
    with pytest.raises(AssertionError):
        assert_same_weights(tmp_path / "one.npz", tmp_path / "unclipped.npz")


def _half_batch_tokens(config, batches: int) -> list[tuple[int, int]]:
    """Real target tokens in each half of the run's first batches (JAX's static shapes,
    as `training.engines.jax_engine.adapt` sets them: buckets 16 tokens wide)."""
    from translator.pipelines.dataset import make_dataset
    from translator.pipelines.vocabulary import load_vocabulary

    pipeline = dataclasses.replace(config.data.pipeline, static_shapes=True, bucket_width=16)
    data = config.data
    dataset = make_dataset(
        data.train_source,
        data.train_target,
        load_vocabulary(data.vocabulary),
        pipeline,
        training=True,
    )
    halves = []
    for _, labels in dataset.take(batches):
        first, second = np.split(labels.numpy(), 2)
        halves.append((int(np.count_nonzero(first)), int(np.count_nonzero(second))))
    return halves


def cache_env(root) -> dict[str, str]:
    """The machine cache in ROOT/cache, every program kept (however fast it compiled:
    which ones pass the usual threshold varies with the machine's load)."""
    return {
        "TRANSLATOR_CACHE_DIR": str(root / "cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def prepared_jax_config(copy_task, root, valid: bool = False, **sections):
    """`jax_config` training from the copy task prepared once into ROOT/prepared
    (`data.prepared`), with its validation set too when `valid`."""
    from translator.pipelines.prepare import prepare_corpus
    from translator.pipelines.prepared import VALIDATION_DIR
    from translator.pipelines.vocabulary import load_vocabulary

    base = jax_config(copy_task, **sections)
    vocabulary = load_vocabulary(copy_task["vocab"])
    prepared = root / "prepared"
    prepare_corpus(*copy_task["train"], vocabulary, prepared, base.data.pipeline)
    if valid:
        prepare_corpus(
            *copy_task["valid"], vocabulary, prepared / VALIDATION_DIR, base.data.pipeline
        )
    data = dataclasses.replace(base.data, train_source="", train_target="", prepared=str(prepared))
    return dataclasses.replace(base, data=data)


@pytest.fixture(scope="module")
def prepared_jax_run(copy_task, tmp_path_factory):
    """The JAX run of `jax_run`, trained from the copy task prepared once (`data.prepared`),
    its compiled programs kept in `cache/`."""
    root = tmp_path_factory.mktemp("prepared_jax_run")
    config = prepared_jax_config(copy_task, root)
    out = train_in_process(config, root, "run", env=cache_env(root))
    assert f"steps={STEPS}" in out and "chosen from the corpus for static shapes" in out
    return root, config


def test_a_jax_run_from_a_prepared_corpus_resumes_at_its_batch_with_the_programs_it_compiled(
    prepared_jax_run, tmp_path
):
    """Resumed from step 20's checkpoint, it ends with the straight run's weights: the
    reader skips the 20 batches trained (restarting them would end elsewhere). And it
    compiles nothing: every program it needs is in the persistent cache the first run
    filled (a new file would be a program compiled again)."""
    root, config = prepared_jax_run
    resumed = tmp_path / "run"
    shutil.copytree(root / "run", resumed)
    shutil.rmtree(resumed / "model")
    (resumed / "checkpoints" / "ckpt-30.npz").unlink()
    cached = sorted(path.name for path in (root / "cache" / "jax").iterdir())
    assert cached  # the straight run's training and validation steps
    out = train_in_process(config, tmp_path, "run", env=cache_env(root))
    assert f"steps={STEPS}" in out
    assert_same_weights(root / "run.npz", tmp_path / "run.npz")
    assert sorted(path.name for path in (root / "cache" / "jax").iterdir()) == cached


def test_the_jax_loop_reads_nothing_from_the_device_between_its_looks(copy_task, tmp_path):
    """The host looks (the clock, the callbacks) every 10 updates, the callbacks' cadence,
    not after each; the updates in between run under JAX's transfer guard, which a
    device read slipped in between trips (the control)."""
    from tests.support.paths import SCRIPTS

    config = jax_config(copy_task)
    dump_config(config, tmp_path / "config.yaml")
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "jax_loop_looks.py"), str(tmp_path / "config.yaml"),
         str(tmp_path / "looks.json")],
        env=script_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "looks.json").read_text())
    assert result["steps"] == [10, 20, 30]
    assert "Disallowed device-to-host transfer" in result["control"], result["control"]


def test_the_jax_loop_dispatches_no_more_than_a_second_of_the_devices_work_unseen(monkeypatch):
    """Dispatch runs ahead of a slow device: the host looks once the updates queued since
    its last look are `MAX_SECONDS_UNSEEN` of work at the pace its looks measured (the
    first look after one update), not after `MAX_UPDATES_UNSEEN`, so the clock, the
    budget's and a timing's, is read within about that time of the device's progress.
    Here a simulated device takes 50 ms an update and dispatch takes none."""
    import types

    import jax

    from training.engines import jax_engine

    seconds_per_update, unseen = 0.05, 0.2
    monkeypatch.setattr(jax_engine, "MAX_SECONDS_UNSEEN", unseen)
    looked_at = []  # the updates each look read

    def device_get(results):  # the device finishes what was queued, then answers
        looked_at.append(len(results))
        jax_engine.time.sleep(seconds_per_update * len(results))
        return [(1.0, 10.0) for _ in results]

    monkeypatch.setattr(jax, "device_get", device_get)

    class Loop:
        _epoch = jax_engine._Loop._epoch
        every, updates, total = jax_engine.MAX_UPDATES_UNSEEN, 0, None
        backlog = jax_engine.backlog(None)  # (read after MAX_SECONDS_UNSEEN is set)
        trainer = types.SimpleNamespace(stop_training=False)
        callbacks = types.SimpleNamespace(on_train_batch_end=lambda index, logs: None)
        place = staticmethod(lambda batch: batch)

        def update(self, batch):
            self.updates += 1
            return types.SimpleNamespace(loss_sum=1.0, tokens=10.0)

    logs = Loop()._epoch(iter(range(40)), 40)
    assert logs["tokens"] == 400.0 and sum(looked_at) == 40
    # A look after the first update, then about 0.2 s of updates (4) at a time.
    assert looked_at[0] == 1 and max(looked_at) <= 5 and len(looked_at) >= 8, looked_at
    assert jax_engine.backlog(seconds_per_update) == 4  # (at that pace)
    assert jax_engine.backlog(1e-4) == jax_engine.MAX_UPDATES_UNSEEN  # a fast device's
    assert jax_engine.backlog(10.0) == 1


# A process as a JAX-only accelerator machine gives one: importing TensorFlow raises.
NO_TENSORFLOW = {"TRANSLATOR_TEST_NO_TENSORFLOW": "1"}


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGINT"])
def test_without_tensorflow_a_prepared_jax_run_stopped_resumes_equal_to_an_uninterrupted_one(
    copy_task, tmp_path, signal_name
):
    """Killed, or stopped by Ctrl-C, after step 10's checkpoint, then the same command, all
    in processes that cannot import TensorFlow: the straight run's weights. Validation
    (loss from the prepared set, BLEU through the host's text path) runs each time."""
    import signal

    config = prepared_jax_config(
        copy_task, tmp_path, valid=True, eval={"every_steps": 10, "bleu": True, "max_sentences": 20}
    )
    killed_and_resumed_equals_straight(
        config, tmp_path, kill_at=10, signum=getattr(signal, signal_name), env=NO_TENSORFLOW
    )
    # Its TensorBoard events, written without TensorFlow, hold the validations after the
    # resume. (A kill may land before a period's events are written; Ctrl-C's period
    # ends where it stopped, with the loss but not BLEU.)
    scalars = read_scalars(tmp_path / "killed" / "logs")
    for tag in ("loss", "bleu"):
        steps = [step for step, _ in scalars["validation"][tag]]
        assert steps[-1] == 30 and steps == sorted(set(steps)), (tag, steps)
    assert [step for step, _ in scalars["train"]["loss"]][-1] == 30
