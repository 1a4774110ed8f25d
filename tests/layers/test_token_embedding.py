import math

import numpy as np

from tests.support.layers import run_layer_test
from translator.layers import TokenEmbedding


def test_contract_scaling_and_tied_projection(tmp_path):
    ids = np.array([[1, 5, 0], [7, 2, 3]], "int32")
    output = run_layer_test(
        TokenEmbedding,
        dict(vocab_size=10, d_model=8),
        ids,
        expected_output_shape=(2, 3, 8),
        tmp_path=tmp_path,
    )
    layer = TokenEmbedding(10, 8)
    vectors = np.asarray(layer(ids))
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(vectors, table[ids] * math.sqrt(8), rtol=1e-6)
    hidden = np.random.default_rng(3).standard_normal((2, 3, 8)).astype("float32")
    np.testing.assert_allclose(layer.project(hidden), hidden @ table.T, rtol=1e-5, atol=1e-5)
    assert output.shape == (2, 3, 8)
    unscaled = TokenEmbedding(10, 8, scale=False)
    np.testing.assert_allclose(unscaled(ids), np.asarray(unscaled.embeddings)[ids])
