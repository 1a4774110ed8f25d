import numpy as np
import pytest
import tensorflow as tf

from tests.support.layers import run_layer_test
from translator.layers import FastDropout


def test_contract(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
    output = run_layer_test(
        FastDropout, dict(rate=0.3, seed=4), x, expected_output_shape=(2, 5, 8), tmp_path=tmp_path
    )
    np.testing.assert_array_equal(output, x)  # inference: the identity


@pytest.mark.parametrize("shape", [(64, 50, 128), (3, 7, 33)])  # even and odd last axes
def test_drops_the_rate_and_keeps_the_expectation(shape):
    layer = FastDropout(0.1, seed=1)
    x = tf.ones(shape)
    first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    dropped = first == 0
    tolerance = 4 * np.sqrt(0.1 * 0.9 / first.size)  # four standard deviations
    assert abs(dropped.mean() - 0.1) < tolerance
    kept = np.unique(first[~dropped])
    np.testing.assert_allclose(kept, [65536 / (65536 - 6554)], rtol=1e-6)  # 1 / keep prob
    assert abs(first.mean() - 1.0) < tolerance * 1.2
    assert (dropped != (second == 0)).any()  # a new draw per call


def test_positions_are_dropped_independently():
    # The two 16-bit halves of a random word decide neighbouring elements: they must not
    # agree more often than chance.
    dropped = FastDropout(0.5, seed=2)(tf.ones((200, 256)), training=True).numpy() == 0
    neighbours_agree = (dropped[:, 0::2] == dropped[:, 1::2]).mean()
    assert abs(neighbours_agree - 0.5) < 4 * np.sqrt(0.25 / dropped[:, 0::2].size)


def test_bfloat16_keeps_the_dtype():
    layer = FastDropout(0.2, dtype="mixed_bfloat16")
    output = layer(tf.ones((4, 6)), training=True)
    assert output.dtype == tf.bfloat16
