"""Token-level cross-entropy that ignores padding."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops


def masked_cross_entropy(labels, logits, label_smoothing: float = 0.0, compiled: bool = True):
    """Mean label-smoothed cross-entropy over real (non-zero) label tokens.

    Args:
        labels: int `[..., length]`, 0 = padding.
        logits: float `[..., length, vocab]`.
        label_smoothing: Mass spread uniformly over the vocabulary (the paper uses 0.1).
        compiled: Run it as its own XLA program (fused, see below). False inside a step
            that XLA compiles whole: the step fuses it anyway, and a nested XLA function
            first traced outside XLA makes the whole step recompile on every update
            (bench/RESULTS.md, "XLA training step").

    Returns:
        `(loss_sum, token_count)`: float32 scalars; the mean is their ratio. Returned
        apart so callers can average over a global batch (several replicas or
        accumulated micro-batches) instead of averaging per-part means.
    """
    terms = _fused_cross_entropy if compiled else _cross_entropy_terms
    return terms(labels, logits, float(label_smoothing))


def _cross_entropy_terms(labels, logits, label_smoothing):
    logits = tf.cast(logits, tf.float32)  # [..., vocab]
    labels = tf.cast(labels, tf.int32)  # [...]
    vocab = tf.shape(logits)[-1]
    # Label smoothing as a target distribution q = (1 - ls) onehot + ls / V: the cross-
    # entropy against q equals (1 - ls) nll + ls mean(-log p), and the fused kernel gives
    # it and its gradient (softmax - q) in one pass, with no gather/scatter over the
    # vocabulary (a take_along_axis and its UnsortedSegmentSum gradient were a large share
    # of a profiled training step on CPU).
    spread = label_smoothing / tf.cast(vocab, tf.float32)
    target = tf.one_hot(
        labels, vocab, on_value=1.0 - label_smoothing + spread, off_value=spread
    )  # [..., vocab]
    nll = tf.nn.softmax_cross_entropy_with_logits(target, logits)  # [...]
    mask = tf.cast(tf.not_equal(labels, 0), tf.float32)
    return tf.reduce_sum(nll * mask), tf.reduce_sum(mask)


# XLA fuses the float32 cast, the smoothed targets, the softmax and its gradient into a
# few passes over the `[tokens, vocab]` logits, the largest tensor of a training step:
# measured, the loss and its gradient take much less time than unfused (figures:
# bench/RESULTS.md, design measurements). Compiled once per logits shape, which is why
# `pad_rows` pads the scored rows to a multiple.
_fused_cross_entropy = tf.function(_cross_entropy_terms, jit_compile=True, reduce_retracing=True)


def real_positions(states, labels, multiple: int = 256):
    """The states and labels of the real (non-padding) target positions, as rows.

    Scoring only these skips the padding's share of the output projection and the loss
    (see `PipelineConfig.bucket_width`).

    Args:
        states: `[batch, length, d_model]` decoder states.
        labels: int `[batch, length]`, 0 = padding.
        multiple: Row count granularity (see `pad_rows`).

    Returns:
        `(states, labels)`: `[rows, d_model]` and int `[rows]`, rows a multiple of
        `multiple`.
    """
    index = tf.where(tf.not_equal(labels, 0))  # [real, 2]
    return pad_rows(tf.gather_nd(states, index), tf.gather_nd(labels, index), multiple)


def pad_rows(states, labels, multiple: int = 256):
    """Rows of states and their labels, padded to a multiple of `multiple` rows.

    The padding rows have label 0 (ignored by the loss), so that the fused loss sees a
    few shapes, not one per batch.

    Args:
        states: `[tokens, d_model]`.
        labels: int `[tokens]`.
        multiple: Row count granularity.

    Returns:
        `(states, labels)`: `[rows, d_model]` and int `[rows]`.
    """
    real = tf.shape(labels)[0]
    extra = (multiple - real % multiple) % multiple
    states = tf.pad(states, [[0, extra], [0, 0]])  # [rows, d_model]
    labels = tf.pad(labels, [[0, extra]])  # [rows]
    return states, labels


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
