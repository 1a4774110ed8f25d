"""A model cut from another: the encoder whole, the decoder blocks asked for."""

import keras
import numpy as np
import pytest

from translator import Transformer, TransformerConfig
from translator.pruning import evenly_spaced_blocks, keep_decoder_blocks

VOCAB = 40
RNG = np.random.default_rng(3)


@pytest.fixture(scope="module")
def model() -> Transformer:
    keras.utils.set_random_seed(9)
    config = TransformerConfig.preset(
        "tiny",
        vocab_size=VOCAB,
        dropout=0.0,
        d_model=32,
        ffn_dim=64,
        num_heads=4,
        num_decoder_layers=3,
    )
    model = Transformer(config)
    model.build()
    return model


def _ids(batch: int, length: int) -> np.ndarray:
    return RNG.integers(4, VOCAB, size=(batch, length)).astype("int32")


def test_keeping_every_block_in_order_is_the_same_model(model):
    source, target = _ids(2, 6), _ids(2, 5)
    whole = keep_decoder_blocks(model, (0, 1, 2))
    np.testing.assert_allclose(whole((source, target)), model((source, target)), atol=1e-6)
    # Control: the same blocks in another order are another model.
    shuffled = keep_decoder_blocks(model, (2, 1, 0))
    assert not np.allclose(shuffled((source, target)), model((source, target)), atol=1e-3)


def test_a_cut_keeps_the_encoder_and_the_blocks_asked_for(model):
    cut = keep_decoder_blocks(model, (0, 2))
    assert cut.config.num_decoder_layers == 2
    assert cut.config.num_encoder_layers == model.config.num_encoder_layers
    source = _ids(2, 7)
    np.testing.assert_allclose(cut.encode(source), model.encode(source), atol=1e-6)
    for index, kept in enumerate((0, 2)):
        ours, theirs = cut.decoder_blocks[index].weights, model.decoder_blocks[kept].weights
        assert [w.shape for w in ours] == [w.shape for w in theirs]
        for mine, original in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(np.asarray(mine), np.asarray(original))
    np.testing.assert_array_equal(
        np.asarray(cut.decoder_norm.weights[0]), np.asarray(model.decoder_norm.weights[0])
    )
    with pytest.raises(ValueError, match="the model has 3"):
        keep_decoder_blocks(model, (3,))
    with pytest.raises(ValueError, match="the model has 3"):
        keep_decoder_blocks(model, ())


def test_blocks_are_spread_from_the_first_to_the_last():
    assert evenly_spaced_blocks(4, 1) == (3,)
    assert evenly_spaced_blocks(4, 2) == (0, 3)
    assert evenly_spaced_blocks(6, 2) == (0, 5)
    assert evenly_spaced_blocks(4, 4) == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="cannot keep 5 of 4"):
        evenly_spaced_blocks(4, 5)
