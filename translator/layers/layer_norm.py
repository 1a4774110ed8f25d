"""Layer normalization that oneDNN runs as one kernel outside training (TensorFlow)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import keras

from translator.backends import kernels

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
    (tests/layers/test_layer_norm.py). The kernel is `kernels.fused_layer_norm`; other
    backends than TensorFlow keep Keras' ops.

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
        return kernels.fused_layer_norm(
            inputs, self.gamma, self.beta, self.epsilon, self.compute_dtype
        )

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

    Where the backend's kernel fuses (`kernels.fuses_here`: TensorFlow with oneDNN's
    rewrites, on a host with no GPU), and not under `portable_layer_norms`. Checked when
    a function is traced, not per step.
    """
    return not _PORTABLE.get() and kernels.fuses_here()


@contextlib.contextmanager
def portable_layer_norms() -> Iterator[None]:
    """`LayerNorm`s traced in this scope use Keras' ops, for a graph any device can run."""
    token = _PORTABLE.set(True)
    try:
        yield
    finally:
        _PORTABLE.reset(token)
