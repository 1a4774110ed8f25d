"""The Transformer model: invariants of the full pass and of incremental decoding."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from translator import Transformer, TransformerConfig
from translator.errors import ConfigError
from translator.losses import MaskedCrossEntropy, masked_cross_entropy

VOCAB = 50
RNG = np.random.default_rng(5)


def tiny(**overrides):
    fields = dict(dropout=0.0, d_model=32, ffn_dim=64, num_heads=4)
    fields.update(overrides)
    return TransformerConfig.preset("tiny", vocab_size=VOCAB, **fields)


def ids(batch, length, pad_from=None):
    x = RNG.integers(4, VOCAB, size=(batch, length)).astype("int32")
    if pad_from is not None:
        for row, start in enumerate(pad_from):
            x[row, start:] = 0
    return x


VARIANTS = {
    "sinusoidal-prenorm": {},
    "learned": dict(position_encoding="learned"),
    "rotary": dict(position_encoding="rotary"),
    "postnorm-swiglu-untied": dict(
        norm_first=False, activation="swiglu", share_embeddings=False, tie_output_projection=False
    ),
}


@pytest.fixture(params=list(VARIANTS), scope="module")
def model(request):
    keras.utils.set_random_seed(7)
    model = Transformer(tiny(**VARIANTS[request.param]))
    model((ids(1, 3), ids(1, 3)))
    return model


def test_output_shape_and_dtype(model):
    logits = model((ids(3, 7), ids(3, 5)))
    assert tuple(logits.shape) == (3, 5, VOCAB)
    assert logits.dtype == "float32"
    as_dict = model({"source_ids": ids(2, 4), "decoder_input_ids": ids(2, 3)})
    assert tuple(as_dict.shape) == (2, 3, VOCAB)


def test_no_information_from_future_positions(model):
    source, target = ids(2, 6), ids(2, 8)
    base = np.asarray(model((source, target)))
    for t in range(7):
        changed = target.copy()
        changed[:, t + 1 :] = RNG.integers(4, VOCAB, size=(2, 7 - t))
        out = np.asarray(model((source, changed)))
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-6)
        assert not np.allclose(out[:, t + 1 :], base[:, t + 1 :])  # the future does matter


def test_source_padding_is_invisible(model):
    source, target = ids(2, 6, pad_from=[6, 4]), ids(2, 5)
    base = np.asarray(model((source, target)))
    padded = np.concatenate([source, np.zeros((2, 9), "int32")], axis=1)
    np.testing.assert_allclose(model((padded, target)), base, atol=1e-5)


def test_target_padding_leaves_real_positions_unchanged(model):
    source, target = ids(2, 6), ids(2, 5)
    base = np.asarray(model((source, target)))
    padded = np.concatenate([target, np.zeros((2, 4), "int32")], axis=1)
    np.testing.assert_allclose(np.asarray(model((source, padded)))[:, :5], base, atol=1e-5)


def test_a_full_pass_on_packed_rows_matches_the_padded_grid(model):
    """The encoder and decoder run on the real tokens alone (packed rows): the same
    states as on the padded grid at those tokens, and the same gradients."""
    source = ids(3, 7, pad_from=[7, 3, 5])
    target = ids(3, 6, pad_from=[2, 6, 4])
    source_layout, target_layout = model.packed_layout(source), model.packed_layout(target)
    if model.config.position_encoding == "rotary":  # RoPE: the padded grid only
        assert source_layout is None
        return
    weight = tf.constant(RNG.standard_normal((2 + 6 + 4, 32)), "float32")  # real targets

    def states(packed):
        with tf.GradientTape() as tape:
            if packed:
                memory = model.encode(source, layout=source_layout)
                assert tuple(memory.shape) == (7 + 3 + 5, 32)  # real source tokens only
                out = model.decoder_states(
                    target, memory, source, layout=target_layout, encoder_layout=source_layout
                )
            else:
                out = model.decoder_states(target, model.encode(source), source)
                out = tf.gather_nd(out, tf.where(target != 0))  # the real target tokens
            loss = tf.reduce_sum(out * weight)
        return out, tape.gradient(loss, model.trainable_variables)

    (packed, packed_grads), (padded, padded_grads) = states(True), states(False)
    assert tuple(packed.shape) == (2 + 6 + 4, 32)
    np.testing.assert_allclose(packed, padded, atol=1e-5)
    # Packed target rows may read a padded encoder output.
    mixed = model.decoder_states(target, model.encode(source), source, layout=target_layout)
    np.testing.assert_allclose(mixed, padded, atol=1e-5)
    for variable, a, b in zip(model.trainable_variables, packed_grads, padded_grads, strict=True):
        if b is None:  # (the output projection: not on this path)
            assert a is None
            continue
        np.testing.assert_allclose(
            tf.convert_to_tensor(a),
            tf.convert_to_tensor(b),
            rtol=1e-4,  # (sums over other orders of the same terms)
            atol=1e-5,
            err_msg=variable.path,
        )


@pytest.mark.parametrize("max_length", [9, None], ids=["static", "growing"])
def test_decode_step_with_cache_matches_full_pass(model, max_length):
    source, target = ids(3, 7, pad_from=[7, 3, 5]), ids(3, 6)
    full = np.asarray(model((source, target)))
    encoder_output = model.encode(source)
    cache = model.init_cache(encoder_output, source, max_length=max_length)
    for t in range(6):
        logits, cache = model.decode_step(target[:, t], cache, t)
        np.testing.assert_allclose(np.asarray(logits), full[:, t], atol=1e-5)


def test_beams_share_the_cross_attention_cache(model):
    """decode_step with `beam` rows per cross-attention row == with the rows repeated."""
    beam, source, target = 4, ids(2, 6, pad_from=[6, 2]), ids(8, 5)
    shared = model.init_cache(model.encode(source), source, max_length=7).for_beams(beam)
    repeated_source = np.repeat(source, beam, axis=0)
    repeated = model.init_cache(model.encode(repeated_source), repeated_source, max_length=7)
    for t in range(5):
        got, shared = model.decode_step(target[:, t], shared, t)
        want, repeated = model.decode_step(target[:, t], repeated, t)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_for_inference_stores_weights_in_the_compute_dtype():
    keras.utils.set_random_seed(3)
    mixed = Transformer(tiny(), dtype="mixed_bfloat16")
    mixed.build()
    plain = Transformer(tiny())
    plain.build()
    assert plain.for_inference() is plain  # float32 variables already compute in float32
    copy = mixed.for_inference()
    assert copy is not mixed and copy.dtype_policy.name == "bfloat16"
    assert {w.dtype for w in copy.weights} == {"bfloat16"}
    assert {w.dtype for w in mixed.weights} == {"float32"}  # the original is untouched
    for got, want in zip(copy.get_weights(), mixed.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    # Same computation: the matmuls already saw bfloat16 weights; only the norms' scales
    # and offsets are rounded now.
    source, target = ids(3, 7), ids(3, 6)
    got, want = copy((source, target)), mixed((source, target))
    assert got.dtype == want.dtype == "float32"
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=0.05)
    # float32 on request: the weights as trained, computed in float32.
    full = mixed.for_inference("float32")
    assert full.dtype_policy.name == "float32" and plain.for_inference("float32") is plain
    for got, want in zip(full.get_weights(), mixed.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ConfigError, match="precision must be one of"):
        mixed.for_inference("float16")


def test_cache_has_static_shapes(model):
    source = ids(2, 5)
    cache = model.init_cache(model.encode(source), source, max_length=11)
    c = model.config
    assert len(cache.self_attention) == c.num_decoder_layers
    for keys, values in cache.self_attention:
        assert tuple(keys.shape) == tuple(values.shape) == (2, c.num_heads, 11, c.head_dim)
    for keys, values in cache.cross_attention:
        assert tuple(keys.shape) == tuple(values.shape) == (2, c.num_heads, 5, c.head_dim)
    _, after = model.decode_step(np.array([2, 2], "int32"), cache, 0)
    shapes = [tuple(x.shape) for x in tf.nest.flatten(after.self_attention)]
    assert shapes == [tuple(x.shape) for x in tf.nest.flatten(cache.self_attention)]


def test_keras_file_round_trip_and_config(model, tmp_path):
    source, target = ids(2, 6), ids(2, 5)
    expected = np.asarray(model((source, target)))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, Transformer)
    assert loaded.config == model.config
    np.testing.assert_array_equal(np.asarray(loaded((source, target))), expected)
    rebuilt = Transformer.from_config(model.get_config())
    assert rebuilt.config == model.config


def test_shared_and_tied_weights():
    model = Transformer(tiny())
    model((ids(1, 2), ids(1, 2)))
    assert model.target_embedding is model.source_embedding
    assert model.output_projection is None
    names = [w.path for w in model.weights]
    assert len(names) == len(set(names))
    untied = Transformer(tiny(share_embeddings=False, tie_output_projection=False))
    untied((ids(1, 2), ids(1, 2)))
    assert untied.count_params() == model.count_params() + 2 * VOCAB * 32 + VOCAB


@pytest.mark.parametrize(("preset", "low", "high"), [("base", 60e6, 66e6), ("big", 200e6, 220e6)])
def test_paper_parameter_counts(preset, low, high):
    config = TransformerConfig.preset(preset, vocab_size=37000)
    model = Transformer(config)
    model.build()
    assert low <= model.count_params() <= high
    assert sum(model.parameter_breakdown().values()) == model.count_params()


def test_loss_ignores_padding():
    labels = ids(2, 5, pad_from=[5, 3])
    logits = RNG.standard_normal((2, 5, VOCAB)).astype("float32")
    total, count = masked_cross_entropy(labels, logits, 0.1)
    padded_labels = np.concatenate([labels, np.zeros((2, 3), "int32")], axis=1)
    padded_logits = np.concatenate(
        [logits, RNG.standard_normal((2, 3, VOCAB)).astype("float32")], axis=1
    )
    total2, count2 = masked_cross_entropy(padded_labels, padded_logits, 0.1)
    assert float(count) == float(count2) == 8
    np.testing.assert_allclose(float(total), float(total2), rtol=1e-6)
    # Without smoothing it is the mean negative log-likelihood of the real tokens.
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    real = labels != 0
    nll = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0][real].mean()
    np.testing.assert_allclose(float(MaskedCrossEntropy()(labels, logits)), nll, rtol=1e-5)
    # With smoothing: the cross-entropy against (1 - ls) onehot + ls / V, per real token.
    smoothed = np.full(logits.shape, 0.1 / VOCAB)
    np.put_along_axis(smoothed, labels[..., None], 0.9 + 0.1 / VOCAB, -1)
    expected = -(smoothed * log_probs).sum(-1)[real].sum()
    np.testing.assert_allclose(float(total), expected, rtol=1e-5)


def test_tiny_model_overfits_a_handful_of_pairs():
    """The parts learn together: loss on 8 fixed pairs falls below 0.1."""
    keras.utils.set_random_seed(11)
    source = ids(8, 7, pad_from=[7, 6, 5, 7, 4, 6, 7, 5])
    labels = ids(8, 6, pad_from=[6, 5, 6, 4, 6, 3, 6, 5])
    decoder_inputs = np.concatenate([np.full((8, 1), 2, "int32"), labels[:, :-1]], axis=1)
    decoder_inputs[labels == 0] = 0
    model = Transformer(tiny())
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=MaskedCrossEntropy())

    class StopBelow(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.stop_training = logs["loss"] < 0.1

    history = model.fit(
        (source, decoder_inputs),
        labels,
        batch_size=8,
        epochs=300,
        verbose=0,
        callbacks=[StopBelow()],
    )
    losses = history.history["loss"]
    assert losses[-1] < 0.1, losses[-10:]
    assert losses[-1] < losses[0] / 30
    predictions = np.argmax(model((source, decoder_inputs), training=False), axis=-1)
    assert np.all(predictions[labels != 0] == labels[labels != 0])


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        tiny(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="share_embeddings"):
        TransformerConfig.preset("tiny", source_vocab_size=10, target_vocab_size=12)
    with pytest.raises(ValueError, match="Unknown preset"):
        TransformerConfig.preset("huge", vocab_size=10)
    with pytest.raises(ValueError, match="dropuot"):
        TransformerConfig.preset("tiny", vocab_size=10, dropuot=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny().d_model = 8  # type: ignore[misc]
    assert TransformerConfig.from_dict(tiny().to_dict()) == tiny()


def test_presets_match_the_paper():
    base = TransformerConfig.preset("base", vocab_size=100)
    assert (base.num_encoder_layers, base.num_decoder_layers, base.d_model) == (6, 6, 512)
    assert (base.num_heads, base.ffn_dim, base.dropout) == (8, 2048, 0.1)
    big = TransformerConfig.preset("big", vocab_size=100)
    assert (big.d_model, big.num_heads, big.ffn_dim, big.dropout) == (1024, 16, 4096, 0.3)
    assert set(TransformerConfig.presets()) == {"base", "big", "small", "tiny"}
