"""Token-level cross-entropy that ignores padding."""

from __future__ import annotations

import keras
import tensorflow as tf
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
    logits = tf.cast(logits, tf.float32)  # [batch, length, vocab]
    labels = tf.cast(labels, tf.int32)  # [batch, length]
    vocab = tf.shape(logits)[-1]
    # Label smoothing as a target distribution q = (1 - ls) onehot + ls / V: the cross-
    # entropy against q equals (1 - ls) nll + ls mean(-log p), and the fused kernel gives
    # it and its gradient (softmax - q) in one pass, with no gather/scatter over the
    # vocabulary (a take_along_axis and its UnsortedSegmentSum gradient cost ~12% of a
    # training step on CPU).
    spread = label_smoothing / tf.cast(vocab, tf.float32)
    target = tf.one_hot(
        labels, vocab, on_value=1.0 - label_smoothing + spread, off_value=spread
    )  # [batch, length, vocab]
    nll = tf.nn.softmax_cross_entropy_with_logits(target, logits)  # [batch, length]
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
