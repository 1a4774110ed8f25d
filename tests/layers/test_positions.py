"""Sinusoidal, learned and rotary position layers."""

import numpy as np
import pytest

from tests.support.layers import run_layer_test
from tests.support.marian import marian_sinusoids
from translator.layers import LearnedPositionEmbedding, RotaryEmbedding, SinusoidalPositionEncoding

RNG = np.random.default_rng(1)


def test_sinusoidal_contract(tmp_path):
    run_layer_test(
        SinusoidalPositionEncoding,
        dict(max_wavelength=10000.0),
        RNG.standard_normal((2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )


def test_sinusoidal_matches_paper_formula():
    layer = SinusoidalPositionEncoding()
    table = np.asarray(layer.encoding(50, 16))
    pos, i = np.arange(50)[:, None], np.arange(8)[None, :]
    angle = pos / 10000 ** (2 * i / 16)
    np.testing.assert_allclose(table[:, 0::2], np.sin(angle), atol=1e-5)
    np.testing.assert_allclose(table[:, 1::2], np.cos(angle), atol=1e-5)


@pytest.mark.parametrize("d_model", [16, 512])
def test_the_marian_layout_is_marians_own_table(d_model):
    table = np.asarray(SinusoidalPositionEncoding(layout="marian").encoding(300, d_model))
    # float32 angles up to 300 (both sides), so a few ulps of 300 apart.
    np.testing.assert_allclose(table, marian_sinusoids(d_model, 300), atol=3e-4)
    # It is not the paper's table with its channels regrouped (Hugging Face's and
    # CTranslate2's Marian ports use that one): the frequencies differ.
    paper = np.asarray(SinusoidalPositionEncoding().encoding(300, d_model))
    regrouped = np.concatenate([paper[:, 0::2], paper[:, 1::2]], 1)
    assert np.abs(table - regrouped).max() > 0.1


@pytest.mark.parametrize("k", [1, 3, 17])
def test_sinusoidal_offset_is_a_fixed_rotation(k):
    """PE(pos + k) = M_k PE(pos) for every pos, M_k a block-diagonal rotation (section 3.5)."""
    d_model, length = 16, 200
    table = np.asarray(SinusoidalPositionEncoding().encoding(length + k, d_model), "float64")
    frequencies = 1.0 / 10000 ** (np.arange(0, d_model, 2) / d_model)
    rotation = np.zeros((d_model, d_model))
    for j, w in enumerate(frequencies):
        c, s = np.cos(k * w), np.sin(k * w)
        # [sin(a + kw), cos(a + kw)] = [[c, s], [-s, c]] @ [sin a, cos a]
        rotation[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = [[c, s], [-s, c]]
    predicted = table[:length] @ rotation.T
    np.testing.assert_allclose(predicted, table[k : length + k], atol=2e-4)
    # One matrix serves every pos (checked above over 200 of them), and it is a rotation.
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(d_model), atol=1e-12)


def test_sinusoidal_start_index_continues_the_table():
    layer = SinusoidalPositionEncoding()
    zeros = np.zeros((1, 10, 8), "float32")
    full = np.asarray(layer(zeros))
    np.testing.assert_allclose(layer(zeros[:, :3], start_index=7), full[:, 7:], atol=1e-6)


def test_learned_contract_and_start_index(tmp_path):
    inputs = RNG.standard_normal((2, 6, 8)).astype("float32")
    output = run_layer_test(
        LearnedPositionEmbedding,
        dict(max_length=16),
        inputs,
        expected_output_shape=(2, 6, 8),
        tmp_path=tmp_path,
    )
    layer = LearnedPositionEmbedding(max_length=16)
    layer(inputs)
    table = np.asarray(layer.position_embeddings)
    np.testing.assert_allclose(
        layer(inputs[:, 2:4], start_index=5), inputs[:, 2:4] + table[5:7], atol=1e-6
    )
    assert output.shape == inputs.shape


def test_rotary_contract_preserves_norms_and_relative_dot_products(tmp_path):
    x = RNG.standard_normal((1, 6, 2, 8)).astype("float32")
    rotated = run_layer_test(RotaryEmbedding, dict(max_wavelength=10000.0), x, tmp_path=tmp_path)
    np.testing.assert_allclose(
        np.linalg.norm(rotated, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5
    )
    layer = RotaryEmbedding()
    q = np.repeat(RNG.standard_normal((1, 1, 1, 8)).astype("float32"), 6, axis=1)
    k = np.repeat(RNG.standard_normal((1, 1, 1, 8)).astype("float32"), 6, axis=1)
    for offset in (0, 11):
        rq = np.asarray(layer(q, start_index=offset))[0, :, 0]
        rk = np.asarray(layer(k, start_index=offset))[0, :, 0]
        # <q at i, k at j> depends on i - j only: compare (3, 1) with (5, 3).
        np.testing.assert_allclose(rq[3] @ rk[1], rq[5] @ rk[3], rtol=1e-4)
    assert not np.allclose(rotated, x)  # it does rotate
