"""Mixed precision on the CPU: what a GPU (float16) or TPU (bfloat16) run relies on.

float16 overflows above 65,504, so masks and the softmax must not run in it; the loss
must be scaled (Keras wraps the optimizer in a LossScaleOptimizer under mixed_float16).
These tests run both mixed policies through a training step and a search on a tiny
model, on the CPU, so a GPU run does not meet them first.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import training.engines.tf_strategy as strategy_module
from tests.support.models import random_sources
from training.engines.tf_trainer import TranslationTrainer
from translator import Transformer, TransformerConfig
from translator.layers import MultiHeadAttention
from translator.search import SearchConfig, search

VOCAB = 24
POLICIES = ["mixed_float16", "mixed_bfloat16"]


@pytest.fixture(autouse=True)
def restore_policy():
    yield
    keras.config.set_dtype_policy("float32")


def tiny(policy: str, seed: int = 3) -> Transformer:
    keras.utils.set_random_seed(seed)
    config = TransformerConfig.preset(
        "tiny", vocab_size=VOCAB, dropout=0.1, d_model=32, tie_output_projection=False
    )
    model = Transformer(config, dtype=policy)
    model.build()
    return model


def batch(rng: np.random.Generator):
    source = random_sources(rng, [6, 3, 5, 4], VOCAB)
    labels = random_sources(rng, [5, 4, 2, 5], VOCAB)
    decoder_input = np.concatenate([np.full((4, 1), 2, "int32"), labels[:, :-1]], axis=1)
    decoder_input[labels == 0] = 0
    return {"source_ids": source, "decoder_input_ids": decoder_input}, labels


@pytest.mark.parametrize("policy", POLICIES)
def test_a_training_step_is_finite_and_updates_float32_weights(policy):
    keras.config.set_dtype_policy(policy)
    model = tiny(policy)
    trainer = TranslationTrainer(model, label_smoothing=0.1, clip_norm=1.0)
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    if policy == "mixed_float16":  # Keras scales the loss (dynamically) under float16
        assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    features, labels = batch(np.random.default_rng(0))
    before = [w.numpy().copy() for w in model.trainable_weights]
    history = trainer.fit(features, labels, batch_size=4, epochs=3, verbose=0)
    assert all(np.isfinite(history.history["loss"]))
    assert all(w.dtype == "float32" for w in model.trainable_weights)  # master weights
    after = [w.numpy() for w in model.trainable_weights]
    assert all(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert model.compute_dtype == policy.removeprefix("mixed_")


@pytest.mark.parametrize("policy", POLICIES)
def test_search_chooses_float32s_tokens(policy):
    # A tiny model with well-separated logits: the rounding of half precision must not
    # change which token wins.
    reference = tiny("float32")
    reference.output_projection.kernel.assign(reference.output_projection.kernel * 16.0)
    model = tiny(policy)
    model.set_weights(reference.get_weights())
    source = random_sources(np.random.default_rng(1), [7, 3, 5, 6], VOCAB)
    for beam in (1, 3):
        config = SearchConfig(beam_size=beam, max_length_a=1.0, max_length_b=3)
        expected, result = search(reference, source, config), search(model, source, config)
        np.testing.assert_array_equal(result.ids, expected.ids)
        assert np.all(np.isfinite(np.asarray(result.scores)))


@pytest.mark.parametrize("policy", POLICIES)
def test_masked_attention_is_finite_in_half_precision(policy):
    # The additive mask (-1e9) would overflow float16; scores are masked in float32.
    layer = MultiHeadAttention(num_heads=2, head_dim=8, dtype=policy)
    x = tf.random.normal([1, 5, 16], seed=1)
    allowed = tf.constant([[[True, True, False, False, False]]])  # [batch, 1, keys]
    padded, weights = layer(
        x, key_value=x, attention_mask=allowed, return_attention_scores=True
    )  # [1, 5, 16], [1, heads, 5, 5]
    unpadded = layer(x, key_value=x[:, :2])  # the same queries over the two real keys
    assert padded.dtype == policy.removeprefix("mixed_")
    padded, unpadded = (np.asarray(tf.cast(t, tf.float32)) for t in (padded, unpadded))
    assert np.all(np.isfinite(padded))
    np.testing.assert_array_equal(np.asarray(weights)[..., 2:], 0.0)  # none on padding
    np.testing.assert_allclose(padded, unpadded, atol=2e-2)


@pytest.mark.parametrize(
    ("device", "native_bfloat16", "expected"),
    [
        ("/JOB:LOCALHOST/REPLICA:0/TASK:0/DEVICE:GPU:0", False, "mixed_float16"),
        ("/JOB:LOCALHOST/REPLICA:0/TASK:0/DEVICE:TPU:0", False, "mixed_bfloat16"),
        ("/JOB:LOCALHOST/REPLICA:0/TASK:0/DEVICE:CPU:0", True, "mixed_bfloat16"),
        ("/JOB:LOCALHOST/REPLICA:0/TASK:0/DEVICE:CPU:0", False, "float32"),
    ],
)
def test_auto_precision_is_as_documented(monkeypatch, device, native_bfloat16, expected):
    monkeypatch.setattr(strategy_module, "_first_device", lambda strategy: device)
    monkeypatch.setattr(strategy_module, "cpu_has_native_bfloat16", lambda: native_bfloat16)
    assert strategy_module.select_precision("auto", tf.distribute.get_strategy()) == expected
    assert keras.config.dtype_policy().name == expected
    assert strategy_module.select_precision("float32", tf.distribute.get_strategy()) == "float32"
