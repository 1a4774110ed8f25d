"""EncoderBlock and DecoderBlock."""

import numpy as np
import pytest

from tests.support.layers import run_layer_test
from translator.layers import DecoderBlock, EncoderBlock
from translator.layers.masks import cache_mask, causal_mask

RNG = np.random.default_rng(4)
BLOCK = dict(num_heads=2, ffn_dim=16, dropout=0.1)


def _x(*shape):
    return RNG.standard_normal(shape).astype("float32")


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("rotary", [False, True])
def test_encoder_contract(tmp_path, norm_first, rotary):
    mask = np.ones((2, 1, 5), bool)
    mask[1, 0, 3:] = False
    run_layer_test(
        EncoderBlock,
        dict(**BLOCK, norm_first=norm_first, rotary_embedding=rotary, activation="gelu"),
        _x(2, 5, 8),
        dict(attention_mask=mask),
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_contract(tmp_path, norm_first):
    run_layer_test(
        DecoderBlock,
        dict(**BLOCK, norm_first=norm_first),
        _x(2, 4, 8),
        dict(encoder_output=_x(2, 6, 8), self_attention_mask=np.asarray(causal_mask(4))),
        expected_output_shape=(2, 4, 8),
        tmp_path=tmp_path,
    )


def test_post_norm_output_is_normalized_and_pre_norm_is_not():
    x = _x(2, 5, 8) * 5 + 3
    post = np.asarray(EncoderBlock(**BLOCK, norm_first=False)(x))
    np.testing.assert_allclose(post.mean(-1), 0.0, atol=1e-4)
    np.testing.assert_allclose(post.std(-1), 1.0, atol=1e-2)
    pre = np.asarray(EncoderBlock(**BLOCK, norm_first=True)(x))
    assert np.abs(pre.mean(-1)).max() > 0.1  # residual stream passes through unnormalized


def test_dropout_only_in_training():
    block = EncoderBlock(num_heads=2, ffn_dim=16, dropout=0.5)
    x = _x(2, 5, 8)
    np.testing.assert_array_equal(block(x, training=False), block(x, training=False))
    assert not np.allclose(block(x, training=True), block(x, training=False))


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_cached_steps_match_full_pass(norm_first):
    block = DecoderBlock(num_heads=2, ffn_dim=16, norm_first=norm_first, rotary_embedding=True)
    x, memory = _x(2, 4, 8), _x(2, 6, 8)
    source_mask = np.ones((2, 1, 6), bool)
    source_mask[0, 0, 4:] = False
    full = np.asarray(
        block(
            x,
            encoder_output=memory,
            self_attention_mask=causal_mask(4),
            cross_attention_mask=source_mask,
        )
    )
    cross = block.cross_attention.compute_key_value(memory)
    cache = block.self_attention.empty_cache(2, 6)
    for t in range(4):
        step, cache = block(
            x[:, t : t + 1],
            self_attention_mask=cache_mask(t, 6),
            cross_attention_mask=source_mask,
            self_attention_cache=cache,
            cross_attention_cache=cross,
            cache_index=t,
        )
        np.testing.assert_allclose(np.asarray(step)[:, 0], full[:, t], atol=1e-5)
