"""Layer normalization that oneDNN runs as one kernel outside training."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import keras
import tensorflow as tf

# Set while tracing a graph that may run on another host (`portable_layer_norms`).
_PORTABLE = contextvars.ContextVar("portable_layer_norms", default=False)


@keras.saving.register_keras_serializable(package="translator")
class LayerNorm(keras.layers.LayerNormalization):
    """Keras' `LayerNormalization` of the last axis, in the form oneDNN fuses at inference.

    Keras computes a layer norm as a dozen small ops (mean, variance, rsqrt, the scale and
    shift, casts), and a decoding step runs one per sublayer on `[rows, 1, d_model]`, so
    their launches add up (bench/RESULTS.md, "Decoding: where our beam search's time
    goes"). TensorFlow's graph optimizer, with oneDNN's rewrites on (`fuses_here`),
    rewrites one spelling of a layer norm into a single `_MklLayerNorm` kernel: the rows
    reshaped into the channels of a training-mode `FusedBatchNormV3` with unit scale and
    zero offset, then `* gamma + beta`. Outside training this layer writes exactly that,
    in the compute dtype: a cast to float32 first would be moved past the reshape by
    Grappler and hide the pattern. The statistics are float32 either way. So it equals
    Keras' layer norm to float32 rounding in float32, and within bfloat16's rounding
    under mixed_bfloat16, whose matmuls read bfloat16 weights too
    (tests/layers/test_layer_norm.py).

    Training keeps Keras' ops: its gradient reads the batch norm's saved statistics, so
    the rewrite does not apply there, and a fused batch norm measured no faster than
    Keras' ops forward and backward. So does a graph that may run on a GPU, whose
    batch-norm kernels refuse an epsilon under 1e-5 (ours is 1e-6): one traced on a
    host with a GPU, or under `portable_layer_norms` (SavedModel exports, which TF
    Serving may place anywhere); and any graph traced with oneDNN's rewrites off.
    Weights, names and config are Keras' (old checkpoints load); only `axis=-1` with
    both `gamma` and `beta` takes the fused form.

    Call arguments:
        inputs: `[..., d]`.
        training: Keras' ops when True.

    Returns:
        The inputs' shape, in the compute dtype.
    """

    def call(self, inputs, training=None):
        if training or not self._fusable(len(inputs.shape)):
            return super().call(inputs)
        inputs = tf.cast(inputs, self.compute_dtype)
        shape = tf.shape(inputs)
        rows = tf.reduce_prod(shape[:-1])
        # [1, rows, d, 1] in NCHW: each row a channel, normalized over its d values.
        grid = tf.reshape(inputs, tf.stack([1, rows, shape[-1], 1]))
        ones = tf.fill(tf.reshape(rows, [1]), 1.0)
        zeros = tf.fill(tf.reshape(rows, [1]), 0.0)
        empty = tf.constant([], tf.float32)  # no running statistics: training mode
        normalized = tf.raw_ops.FusedBatchNormV3(
            x=grid,
            scale=ones,
            offset=zeros,
            mean=empty,
            variance=empty,
            epsilon=self.epsilon,
            data_format="NCHW",
            is_training=True,
        )[0]  # statistics in float32 whatever the dtype
        gamma = tf.cast(self.gamma, self.compute_dtype)
        beta = tf.cast(self.beta, self.compute_dtype)
        return tf.reshape(normalized, shape) * gamma + beta

    def _fusable(self, rank: int) -> bool:
        axes = self.axis if isinstance(self.axis, list | tuple) else [self.axis]
        return (
            [axis % rank for axis in axes] == [rank - 1]
            and self.scale
            and self.center
            and not self.rms_scaling
            and fuses_here()
        )


def fuses_here() -> bool:
    """Whether layer norms traced now, in this scope, take the fused form.

    Only where oneDNN's rewrites are on (TensorFlow's default on x86 CPUs with AVX512
    VNNI, BF16 or AMX; `TF_ENABLE_ONEDNN_OPTS` overrides): elsewhere the batch norm stays
    unfused, slower than Keras' ops. Not under `portable_layer_norms`, nor where
    TensorFlow sees a GPU. Checked when a function is traced, not per step.
    """
    return _onednn_enabled() and not _PORTABLE.get() and not tf.config.list_logical_devices("GPU")


def _onednn_enabled() -> bool:
    """Whether TensorFlow runs with oneDNN's graph rewrites (a private API: False without)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # pragma: no cover (another TensorFlow: Keras' ops)
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


@contextlib.contextmanager
def portable_layer_norms() -> Iterator[None]:
    """`LayerNorm`s traced in this scope use Keras' ops, for a graph any device can run."""
    token = _PORTABLE.set(True)
    try:
        yield
    finally:
        _PORTABLE.reset(token)
