import numpy as np
import pytest

from tests.support.layers import run_layer_test
from translator.layers import FeedForward

RNG = np.random.default_rng(2)


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu", "swish", "gelu_sigmoid"])
def test_contract(tmp_path, activation):
    run_layer_test(
        FeedForward,
        dict(hidden_dim=12, activation=activation, dropout=0.1),
        RNG.standard_normal((2, 5, 8)).astype("float32"),
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
    )


def test_relu_is_the_paper_formula_and_position_wise():
    layer = FeedForward(hidden_dim=12)
    x = RNG.standard_normal((2, 5, 8)).astype("float32")
    output = np.asarray(layer(x))
    w1, b1 = np.asarray(layer.inner_dense.kernel), np.asarray(layer.inner_dense.bias)
    w2, b2 = np.asarray(layer.outer_dense.kernel), np.asarray(layer.outer_dense.bias)
    np.testing.assert_allclose(output, np.maximum(x @ w1 + b1, 0) @ w2 + b2, atol=1e-5)
    permuted = np.asarray(layer(x[:, ::-1]))
    np.testing.assert_allclose(permuted, output[:, ::-1], atol=1e-6)


@pytest.mark.parametrize(
    "activation, formula",
    [
        ("swish", lambda h: h / (1 + np.exp(-h))),
        ("gelu_sigmoid", lambda h: h / (1 + np.exp(-1.702 * h))),  # Marian's gelu
    ],
)
def test_marians_activations_are_their_formulas(activation, formula):
    layer = FeedForward(hidden_dim=12, activation=activation)
    x = RNG.standard_normal((2, 5, 8)).astype("float32")
    output = np.asarray(layer(x))
    w1, b1 = np.asarray(layer.inner_dense.kernel), np.asarray(layer.inner_dense.bias)
    w2, b2 = np.asarray(layer.outer_dense.kernel), np.asarray(layer.outer_dense.bias)
    np.testing.assert_allclose(output, formula(x @ w1 + b1) @ w2 + b2, atol=1e-5)


def test_swiglu_has_a_gate_and_relu_has_none():
    swiglu, relu = FeedForward(12, activation="swiglu"), FeedForward(12)
    x = np.ones((1, 1, 8), "float32")
    swiglu(x), relu(x)
    assert len(swiglu.trainable_weights) == len(relu.trainable_weights) + 2


def test_unknown_activation_is_rejected():
    with pytest.raises(ValueError, match="activation must be one of"):
        FeedForward(8, activation="tanh")


def test_swiglu_gate_and_inner_projection_start_different():
    layer = FeedForward(8, activation="swiglu")
    layer.build((None, None, 4))
    gate, inner = np.asarray(layer.gate_dense.kernel), np.asarray(layer.inner_dense.kernel)
    assert not np.allclose(gate, inner)
