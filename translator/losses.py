"""Token-level cross-entropy that ignores padding."""

from __future__ import annotations

import keras
from keras import ops

from translator.backends import kernels


def masked_cross_entropy(labels, logits, label_smoothing: float = 0.0, compiled: bool = True):
    """Mean label-smoothed cross-entropy over real (non-zero) label tokens.

    Args:
        labels: int `[..., length]`, 0 = padding.
        logits: float `[..., length, vocab]`.
        label_smoothing: Mass spread uniformly over the vocabulary (the paper uses 0.1).
        compiled: On TensorFlow, run it as its own XLA program. False inside a step that
            XLA compiles whole, which a nested XLA function would make recompile on every
            update (decision D13).

    Returns:
        `(loss_sum, token_count)`: float32 scalars; the mean is their ratio (apart, so
        callers can average over a global batch).
    """
    return kernels.cross_entropy_terms(labels, logits, float(label_smoothing), compiled)


@keras.saving.register_keras_serializable(package="translator")
class MaskedCrossEntropy(keras.losses.Loss):
    """Keras loss: cross-entropy averaged over real target tokens of the batch.

    Args:
        label_smoothing: See `masked_cross_entropy`.
        **kwargs: Standard `keras.losses.Loss` arguments.
    """

    def __init__(self, label_smoothing: float = 0.0, name: str = "masked_cross_entropy", **kwargs):
        kwargs.setdefault("reduction", None)
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        total, count = masked_cross_entropy(y_true, y_pred, self.label_smoothing)
        return total / ops.maximum(count, 1.0)

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing})
        return config
