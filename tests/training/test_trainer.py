import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.support.paths import SCRIPTS
from training.engines.tf_trainer import TranslationTrainer
from translator import Transformer, TransformerConfig


def batch(pad=0, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(4, 30, (4, 6)).astype("int32")
    lab = rng.integers(4, 30, (4, 5)).astype("int32")
    lab[1, 3:] = 0
    dec = np.concatenate([np.full((4, 1), 2, "int32"), lab[:, :-1]], axis=1)
    dec[lab == 0] = 0
    if pad:
        src, dec, lab = (np.pad(a, [(0, 0), (0, pad)]) for a in (src, dec, lab))
    return {"source_ids": src, "decoder_input_ids": dec}, lab


def make_trainer(seed=5):
    keras.utils.set_random_seed(seed)
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=30, dropout=0.0))
    trainer = TranslationTrainer(model, label_smoothing=0.1)
    # SGD: the update is linear in the gradient (Adam's 1/sqrt(v) would blow float noise
    # on near-zero gradients up to full-size steps).
    trainer.compile(optimizer=keras.optimizers.SGD(0.5))
    return trainer, model


def test_padding_changes_neither_loss_nor_update():
    results = []
    for pad in (0, 7):
        trainer, model = make_trainer()
        features, labels = batch(pad)
        evaluated = trainer.evaluate(features, labels, batch_size=4, verbose=0, return_dict=True)
        initial = model.get_weights()
        trainer.fit(features, labels, batch_size=4, epochs=1, verbose=0, shuffle=False)
        results.append((evaluated["loss"], evaluated["tokens"], model.get_weights()))
    (loss_a, tokens_a, weights_a), (loss_b, tokens_b, weights_b) = results
    assert tokens_a == tokens_b == 18
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
    for a, b in zip(weights_a, weights_b, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert any(not np.allclose(a, b) for a, b in zip(weights_b, initial, strict=True))  # it updated


def test_loss_is_the_token_mean_of_label_smoothed_cross_entropy():
    trainer, model = make_trainer()
    features, labels = batch()
    logits = np.asarray(model(features), "float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = labels != 0
    nll = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    smoothed = 0.9 * nll + 0.1 * -log_probs.mean(-1)
    result = trainer.evaluate(features, labels, batch_size=4, verbose=0, return_dict=True)
    np.testing.assert_allclose(result["loss"], smoothed[real].mean(), rtol=1e-5)


def test_mirrored_over_two_cpus_matches_one_device():
    """Same global batches, split over 2 replicas: same losses and weights, with and
    without global-norm clipping (replicas hold different token counts)."""
    clip_norms = ("0.0", "0.5")
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "strategy_equivalence.py"), *clip_norms],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    for clip_norm in clip_norms:
        one, mirrored = runs[clip_norm]["one_device"], runs[clip_norm]["mirrored"]
        assert (one["replicas"], mirrored["replicas"]) == (1, 2)
        # The premise: replicas hold different token counts (else a per-replica mean loss
        # would equal the global one and pass).
        assert any(a != b for a, b in mirrored["replica_tokens"])
        assert len(mirrored["weights"]) == len(one["weights"]) > 10_000  # every weight
        assert len(one["losses"]) == len(mirrored["losses"]) == 6
        np.testing.assert_allclose(mirrored["losses"], one["losses"], rtol=1e-5)
        np.testing.assert_allclose(mirrored["weights"], one["weights"], atol=1e-5)
        assert one["losses"][-1] < one["losses"][0]  # it trains
    # Clipping at 0.5 binds: the runs with and without it differ.
    assert not np.allclose(
        runs["0.0"]["one_device"]["weights"], runs["0.5"]["one_device"]["weights"]
    )


def test_scoring_only_real_positions_gives_the_full_pass_gradients():
    # The trainer projects only the real target positions onto the vocabulary; the loss
    # and every gradient equal those of the full pass over the padded logits.
    import tensorflow as tf

    from translator.losses import masked_cross_entropy

    trainer, model = make_trainer()
    features, labels = batch(pad=3)
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        loss = trainer._loss(features, labels, training=False)
    ours = tape.gradient(loss, variables)
    with tf.GradientTape() as tape:
        total, count = masked_cross_entropy(labels, model(features), 0.1)
        reference = total / count
    expected = tape.gradient(reference, variables)
    np.testing.assert_allclose(float(loss), float(reference), rtol=1e-6)
    for variable, a, b in zip(variables, ours, expected, strict=True):
        np.testing.assert_allclose(
            tf.convert_to_tensor(a), tf.convert_to_tensor(b), atol=1e-6, err_msg=variable.path
        )


def test_xla_step_trains_like_the_plain_step():
    results = []
    for jit_compile in (False, True):
        keras.utils.set_random_seed(5)
        model = Transformer(TransformerConfig.preset("tiny", vocab_size=30, dropout=0.0))
        trainer = TranslationTrainer(model, label_smoothing=0.1)
        trainer.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=jit_compile)
        features, labels = batch(pad=2)
        history = trainer.fit(features, labels, batch_size=4, epochs=2, verbose=0, shuffle=False)
        results.append((history.history["loss"], model.get_weights()))
    (loss_a, weights_a), (loss_b, weights_b) = results
    np.testing.assert_allclose(loss_a, loss_b, rtol=1e-5)
    for a, b in zip(weights_a, weights_b, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.slow  # ~42 s; test_xla_step_trains_like_the_plain_step stays
def test_xla_epoch_compiles_once_per_batch_shape(copy_task, tmp_path):
    """An epoch of the XLA step compiles one program per distinct batch shape, bounded by
    the buckets, even after a plain step trained in the same process (once it recompiled
    on every update there)."""
    from tests.support.runs import script_env, tiny_raw_config
    from training.config import RunConfig, build_section, dump_config

    pipeline = {"static_shapes": True, "bucket_boundaries": [6, 10, 16], "batch_tokens": 256}
    raw = tiny_raw_config(copy_task, model={"preset": "tiny", "overrides": {"dropout": 0.1}})
    raw["data"]["pipeline"].update(pipeline)
    dump_config(build_section(RunConfig, raw, ""), tmp_path / "config.yaml")
    dump = tmp_path / "xla"
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "xla_compilations.py"),
            str(tmp_path / "config.yaml"),
            str(dump),
        ],
        env={**script_env(), "XLA_FLAGS": f"--xla_dump_to={dump}"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["batches"] > 3 * len(report["shapes"]) >= 6  # shapes recur: a bound bites
    assert len(report["shapes"]) <= report["buckets"]
    assert report["compilations"] == len(report["shapes"])


@pytest.mark.parametrize("static", [False, True])
def test_the_prepared_validation_set_gives_the_texts_validation_loss(copy_task, tmp_path, static):
    """The validation loss over the set prepared with the corpus (read without TensorFlow
    on JAX) is the loss tf.data's text pipeline gives: the same pairs, batched otherwise,
    under static shapes too (padded rows carry no loss)."""
    import dataclasses

    from tests.support.runs import tiny_run_config
    from training.engines.tf_strategy import make_strategy
    from training.engines.tf_trainer import build_trainer
    from training.inputs import validation_dataset
    from translator.pipelines.prepare import prepare_corpus
    from translator.pipelines.prepared import VALIDATION_DIR
    from translator.pipelines.vocabulary import load_vocabulary

    text = tiny_run_config(copy_task)
    pipeline = dataclasses.replace(text.data.pipeline, static_shapes=static)
    text = dataclasses.replace(text, data=dataclasses.replace(text.data, pipeline=pipeline))
    vocabulary = load_vocabulary(copy_task["vocab"])
    prepared = tmp_path / "prepared"
    prepare_corpus(*copy_task["train"], vocabulary, prepared, pipeline)
    prepare_corpus(*copy_task["valid"], vocabulary, prepared / VALIDATION_DIR, pipeline)
    data = dataclasses.replace(text.data, train_source="", train_target="", prepared=str(prepared))
    ours = dataclasses.replace(text, data=data)
    strategy = make_strategy("one_device")
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    trainer, _ = build_trainer(text, text.model.transformer_config(*sizes), strategy)

    def loss(config) -> float:
        batches = validation_dataset(config, vocabulary, strategy)
        return trainer.evaluate(batches, verbose=0, return_dict=True)

    from_text, from_prepared = loss(text), loss(ours)
    assert from_prepared["tokens"] == from_text["tokens"] > 0  # every real target token
    assert from_prepared["loss"] == pytest.approx(from_text["loss"], rel=1e-5)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_stepper_trains_as_fit_does(copy_task, tmp_path, backend):
    """The planner's timing in turn steps two models outside `fit` (`stepper`): a few
    updates a call, on the same batches, the model ends where `fit`'s ends and counts
    the same tokens; fed one batch late (the control), it ends elsewhere."""
    import json
    import subprocess
    import sys

    from tests.support.paths import SCRIPTS
    from tests.support.runs import script_env, tiny_run_config
    from training.config import dump_config

    config = tiny_run_config(copy_task, train={"max_steps": 6, "backend": backend})
    dump_config(config, tmp_path / "config.yaml")
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "stepper_as_fit.py"), backend,
         str(tmp_path / "config.yaml"), str(tmp_path / "out.json")],
        env=script_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["backend"] == backend
    assert result["trained"] > 1e-3  # (the premise: six updates move the weights)
    assert result["difference"] < 1e-6, result
    assert result["stepper_tokens"] == result["fit_tokens"] > 0
    assert result["control"] > 1e-3, result
