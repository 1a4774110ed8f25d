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

    Keras' dozen small ops add up in a decoding step (decision D11). Outside training,
    where `fuses_here`, this writes the spelling oneDNN fuses (`kernels.fused_layer_norm`);
    weights and config are Keras'.

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
    """Whether layer norms traced now take the fused form (not under `portable_layer_norms`)."""
    return not _PORTABLE.get() and kernels.fuses_here()


@contextlib.contextmanager
def portable_layer_norms() -> Iterator[None]:
    """`LayerNorm`s traced in this scope use Keras' ops, for a graph any device can run."""
    token = _PORTABLE.set(True)
    try:
        yield
    finally:
        _PORTABLE.reset(token)
