"""The same model, search and training step on JAX as on TensorFlow.

A tiny Transformer is trained here, under TensorFlow, and its weights written to a
`.weights.h5`; `tests.support.jax_worker` then reads them in a process on Keras' JAX
backend where importing TensorFlow raises. Its logits, greedy and beam-4 translations,
loss and gradients must equal TensorFlow's for the same weights and batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support.missing import DEV_EXTRA, need_module
from tests.support.models import random_sources
from tests.support.paths import REPO
from tests.support.runs import planned_shape
from training.engines.tf_trainer import TranslationTrainer
from translator import Transformer, TransformerConfig
from translator.constants import BOS_ID, EOS_ID
from translator.flops import training_flops
from translator.search import Decoder, SearchConfig

need_module("jax", DEV_EXTRA, module_level=True)

VOCAB = 40
SEARCHES = {
    "greedy": {"beam_size": 1},
    "beam4": {"beam_size": 4, "n_best": 2, "length_penalty": 0.6},
}
STEPS = 25
# The planner's inputs (a time budget and a speed per shape, fastest first): its rule is
# plain Python, so JAX's process must choose the shape this one does.
PLAN = {
    "pairs": 29_000,
    "characters": 3_600_000,
    "seconds": 180.0,
    "tokens_per_update": 3_000.0,
    "batch_tokens": 4096,
    "rates": [20_000.0, 10_000.0, 6_667.0, 5_000.0],
}
# The architectures compared: ours by default, a student's depths, and the options an
# imported Marian model brings (post-norm, Swish, sines then cosines, embedding
# LayerNorm, tied output bias).
ARCHITECTURES = {
    "default": {},
    # A distillation student's: a deep encoder, a one-block decoder.
    "deep-shallow": {"num_encoder_layers": 3, "num_decoder_layers": 1},
    "marian": {
        "norm_first": False,
        "activation": "swish",
        "sinusoid_layout": "marian",
        "embedding_norm": True,
        "output_bias": True,
        "zero_start_embedding": True,
    },
}


def _copy_task(rng, rows: int):
    """Sources and their shifted-right targets, where the target copies the source."""
    lengths = rng.integers(4, 10, size=rows)
    source = random_sources(rng, lengths, VOCAB)  # pieces + EOS, then PAD
    target = np.zeros_like(source)
    target[:, 0] = BOS_ID
    target[:, 1:] = source[:, :-1]
    target[source == 0] = 0
    return source, target, source.copy()  # labels: the source itself, EOS included


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def exchanged(request, tmp_path_factory):
    """TensorFlow's outputs and the JAX worker's, for one trained tiny model."""
    directory = tmp_path_factory.mktemp("jax")
    keras.utils.set_random_seed(1)
    config = TransformerConfig.preset(
        "tiny",
        vocab_size=VOCAB,
        d_model=32,
        ffn_dim=64,
        num_heads=4,
        dropout=0.0,
        **ARCHITECTURES[request.param],
    )
    model = Transformer(config)
    trainer = TranslationTrainer(model, label_smoothing=0.1)
    trainer.build()
    trainer.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    rng = np.random.default_rng(0)
    source, target, labels = _copy_task(rng, 64)
    features = {"source_ids": source, "decoder_input_ids": target}
    trainer.fit(features, labels, batch_size=16, epochs=8, verbose=0)
    model.save_weights(directory / "model.weights.h5")

    source, target, labels = _copy_task(np.random.default_rng(1), 6)
    np.savez(directory / "inputs.npz", source=source, target=target, labels=labels)
    spec = {"model": config.to_dict(), "searches": SEARCHES, "steps": STEPS, "plan": PLAN}
    (directory / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.jax_worker", str(directory)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    theirs = dict(np.load(directory / "jax.npz"))

    ours = {"logits": model((source, target), training=False).numpy()}
    ours["flops"] = training_flops(model.config, 10, 12)
    ours["attention"] = Decoder(model, SearchConfig()).cross_attention(source, labels)
    for name, fields in SEARCHES.items():
        result = Decoder(model, SearchConfig(**fields))(source)
        ours[f"{name}_ids"], ours[f"{name}_scores"] = result.ids.numpy(), result.scores.numpy()
    trainer.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    features = {"source_ids": source, "decoder_input_ids": target}
    with tf.GradientTape() as tape:
        loss = trainer._loss(features, labels, training=True)
    variables = model.trainable_variables
    ours["loss"] = loss.numpy()
    for variable, gradient in zip(variables, tape.gradient(loss, variables), strict=True):
        # Without the trainer's and the model's names (another test's models may have
        # made this one "transformer_6").
        path = variable.path.removeprefix(f"{trainer.name}/").partition("/")[2]
        ours[f"grad/{path}"] = tf.convert_to_tensor(gradient).numpy()
    return ours, theirs


def test_the_worker_ran_on_jax_without_tensorflow(exchanged):
    """JAX's process, with TensorFlow blocked, plans and counts FLOPs as this one does."""
    ours, theirs = exchanged
    assert str(theirs["backend"]) == "jax"
    assert not bool(theirs["tensorflow_imported"])
    assert str(theirs["plan_shape"]) == planned_shape(PLAN)
    assert float(theirs["flops"]) == float(ours["flops"])


def test_same_weights_give_the_same_logits(exchanged):
    ours, theirs = exchanged
    np.testing.assert_allclose(theirs["logits"], ours["logits"], atol=2e-4, rtol=1e-4)


def test_the_attention_of_alignments_is_the_same(exchanged):
    """`cross_attention` (word alignments' source) on both backends: the same weights."""
    ours, theirs = exchanged
    np.testing.assert_allclose(theirs["attention"], ours["attention"], atol=1e-5)
    assert np.allclose(ours["attention"].sum(-1), 1.0, atol=1e-4)  # each row a distribution
    assert ours["attention"].std() > 0.01  # not uniform: the trained model looks somewhere


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_greedy_and_beam_translate_alike(exchanged, name):
    ours, theirs = exchanged
    np.testing.assert_array_equal(theirs[f"{name}_ids"], ours[f"{name}_ids"])
    np.testing.assert_allclose(theirs[f"{name}_scores"], ours[f"{name}_scores"], atol=1e-4)
    assert (ours[f"{name}_ids"] == EOS_ID).any()  # real hypotheses, not empty slots


def test_no_future_leakage_and_no_padding_effect_on_jax(exchanged):
    _, theirs = exchanged
    logits = theirs["logits"]
    np.testing.assert_allclose(theirs["logits_changed_future"][:, :4], logits[:, :4], atol=1e-5)
    assert not np.allclose(theirs["logits_changed_future"][:, 5:], logits[:, 5:], atol=1e-3)
    np.testing.assert_allclose(theirs["logits_padded_source"], logits, atol=1e-5)


def test_a_jax_step_has_the_loss_and_gradients_of_the_tensorflow_step(exchanged):
    ours, theirs = exchanged
    np.testing.assert_allclose(theirs["loss"], ours["loss"], rtol=1e-5)
    names = sorted(name for name in ours if name.startswith("grad/"))
    assert names == sorted(name for name in theirs if name.startswith("grad/"))
    assert len(names) > 20
    for name in names:
        np.testing.assert_allclose(theirs[name], ours[name], atol=2e-5, rtol=1e-3, err_msg=name)


def test_jax_steps_in_mixed_bfloat16_lower_the_loss(exchanged):
    _, theirs = exchanged
    losses = theirs["step_losses"]
    assert len(losses) == STEPS and int(theirs["iterations"]) == STEPS
    assert np.isfinite(losses).all()
    assert losses[-5:].mean() < 0.8 * losses[:3].mean(), losses
