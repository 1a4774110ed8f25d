import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support.layers import run_layer_test
from translator.backends import tensorflow as tensorflow_kernels
from translator.layers import LayerNorm
from translator.layers.layer_norm import fuses_here, portable_layer_norms


def _pair(shape, dtype="float32", seed=0):
    """Keras' layer norm and ours, built for `shape`, with the same random gamma and beta."""
    rng = np.random.default_rng(seed)
    keras_norm = keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    ours = LayerNorm(epsilon=1e-6, dtype=dtype)
    for layer in (keras_norm, ours):
        layer.build(shape)
    gamma, beta = rng.standard_normal((2, shape[-1])).astype("float32")
    for layer in (keras_norm, ours):
        layer.set_weights([gamma, beta])
    return keras_norm, ours


def _inputs(shape, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3 + 1).astype("float32")  # a non-zero mean


def test_contract(tmp_path):
    x = _inputs((2, 5, 8))
    output = run_layer_test(
        LayerNorm, dict(epsilon=1e-6), x, expected_output_shape=(2, 5, 8), tmp_path=tmp_path
    )
    np.testing.assert_allclose(output.mean(-1), 0.0, atol=1e-5)  # gamma 1, beta 0
    np.testing.assert_allclose(output.std(-1), 1.0, atol=1e-4)


@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 32), (1200, 1, 128), (2, 3, 4, 8)])
@pytest.mark.parametrize("traced", [False, True])
def test_inference_equals_keras(shape, traced):
    keras_norm, ours = _pair(shape)
    x = tf.constant(_inputs(shape))
    ours_call = tf.function(lambda t: ours(t, training=False)) if traced else ours
    np.testing.assert_allclose(ours_call(x), keras_norm(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("traced", [False, True])
def test_mixed_bfloat16_within_its_rounding(traced):
    shape = (64, 3, 128)
    keras_norm, ours = _pair(shape, "mixed_bfloat16")
    x = tf.cast(_inputs(shape), "bfloat16")
    ours_call = tf.function(lambda t: ours(t, training=False)) if traced else ours
    expected, got = keras_norm(x), ours_call(x)
    assert got.dtype == tf.bfloat16
    expected, got = (tf.cast(t, tf.float32).numpy() for t in (expected, got))
    # Ours rounds the normalized rows, gamma, beta, the product and the sum to bfloat16
    # (8 significant bits, each rounding within 2**-8 of its value); Keras rounds the
    # float32 result once. So they agree within a few roundings of the terms' size.
    x32 = tf.cast(x, tf.float32).numpy()
    centered = x32 - x32.mean(-1, keepdims=True)
    x_hat = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + 1e-6)
    gamma, beta = keras_norm.get_weights()
    terms = np.abs(x_hat * gamma) + np.abs(beta)
    assert (np.abs(got - expected) <= 2**-6 * terms).all()


def test_training_uses_keras_ops_and_gradients():
    keras_norm, ours = _pair((4, 6, 16))
    x = tf.constant(_inputs((4, 6, 16)))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        theirs, mine = keras_norm(x), ours(x, training=True)
        weights = tf.range(16, dtype=tf.float32)  # a loss that weighs each feature apart
        loss_theirs = tf.reduce_sum(theirs * weights)
        loss_mine = tf.reduce_sum(mine * weights)
    np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(tape.gradient(loss_mine, x), tape.gradient(loss_theirs, x))
    for a, b in zip(
        tape.gradient(loss_mine, ours.trainable_weights),
        tape.gradient(loss_theirs, keras_norm.trainable_weights),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


ONEDNN = pytest.mark.skipif(
    not fuses_here(), reason="oneDNN's rewrites are off here (AVX2 only, or turned off)"
)


@ONEDNN
def test_an_inference_graph_runs_one_fused_kernel_per_norm():
    # The reason the layer exists: Grappler's remapper turns each norm into _MklLayerNorm.
    # Counted from the ops a TensorFlow 1 session ran, the one API that lists them.
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, None, 32])
        y = x
        for index in range(3):
            norm = LayerNorm(epsilon=1e-6, name=f"norm{index}")
            y = norm(y, training=False)
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.global_variables_initializer())
        metadata = tf.compat.v1.RunMetadata()
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        session.run(y, {x: _inputs((5, 4, 32))}, options=options, run_metadata=metadata)
    ran = collections.Counter(
        node.timeline_label.split(" = ")[-1].split("(")[0]
        for device in metadata.step_stats.dev_stats
        for node in device.node_stats
    )
    assert ran["_MklLayerNorm"] == 3, ran
    assert ran["Mean"] == ran["FusedBatchNormV3"] == 0, ran


def _traced_op_types(fn, shape):
    graph = tf.function(fn).get_concrete_function(tf.TensorSpec(shape, tf.float32)).graph
    return {op.type for op in graph.get_operations()}


def test_portable_scope_traces_keras_ops():
    # Exports trace under it: TF Serving may place them on a GPU, whose batch norm
    # refuses an epsilon under 1e-5.
    fused_here = fuses_here()
    norm = LayerNorm(epsilon=1e-6)
    norm.build((None, None, 8))
    here = _traced_op_types(lambda x: norm(x, training=False), (None, None, 8))
    with portable_layer_norms():
        assert not fuses_here()
        portable = _traced_op_types(lambda x: norm(x, training=False), (None, None, 8))
    assert fuses_here() == fused_here  # the scope ends with its block
    assert "FusedBatchNormV3" not in portable and "Mean" in portable
    assert ("FusedBatchNormV3" in here) == fused_here and ("Mean" in here) != fused_here


def test_no_fusion_without_onednn(monkeypatch):
    # An AVX2-only CPU: oneDNN's rewrites are off, the batch norm would stay unfused and
    # slower than Keras' ops, so the layer keeps Keras' ops.
    monkeypatch.setattr(tensorflow_kernels, "_onednn_enabled", lambda: False)
    assert not fuses_here()
    norm = LayerNorm(epsilon=1e-6)
    norm.build((None, None, 8))
    ops_run = _traced_op_types(lambda x: norm(x, training=False), (None, None, 8))
    assert "FusedBatchNormV3" not in ops_run and "Mean" in ops_run
