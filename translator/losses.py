"""Token-level cross-entropy that ignores padding."""

from __future__ import annotations

import keras
from keras import ops


def masked_cross_entropy(labels, logits, label_smoothing: float = 0.0):
    """Mean label-smoothed cross-entropy over real (non-zero) label tokens.

    Args:
        labels: int `[batch, length]`, 0 = padding.
        logits: float `[batch, length, vocab]`.
        label_smoothing: Mass spread uniformly over the vocabulary (the paper uses 0.1).

    Returns:
        `(loss_sum, token_count)`: float32 scalars; the mean is their ratio. Returned
        apart so callers can average over a global batch (several replicas or
        accumulated micro-batches) instead of averaging per-part means.
    """
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # [batch, length, vocab]
    labels = ops.cast(labels, "int32")
    nll = -ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]  # [batch, length]
    if label_smoothing:
        uniform = -ops.mean(log_probs, axis=-1)  # [batch, length]
        nll = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    mask = ops.cast(ops.not_equal(labels, 0), "float32")
    return ops.sum(nll * mask), ops.sum(mask)


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
