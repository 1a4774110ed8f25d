"""What greedy and beam search share: special ids, scoring, length limits, the result.

Definitions used throughout (and by the tests that check them):

- A hypothesis Y is the list of generated tokens after BOS, up to and including EOS.
  Every returned hypothesis ends with EOS (EOS is forced at the length limit), and
  |Y| counts its tokens *including* EOS.
- log P(Y) = sum over Y's tokens of the model's log-softmax over the full vocabulary
  (EOS included; PAD and BOS are never generated, but their probability mass is not
  redistributed: scores are the model's own log-probabilities).
- score(Y) = log P(Y) / lp(Y) with the GNMT length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha
  (Wu et al. 2016, eq. 14).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from translator.search.config import SearchConfig

# The vocabulary convention of every model trained here (translator.pipelines.vocab).
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

NEG_INF = float("-inf")


class SearchResult(NamedTuple):
    """Best hypotheses per sentence, best first."""

    # Generated tokens, EOS included, then PAD (0): int32 [batch, n_best, length], where
    # length is the longest returned hypothesis of the batch.
    ids: Any
    # log P(Y) / lp(Y), descending along n_best; -inf marks an empty slot (fewer than
    # n_best hypotheses exist, e.g. a 1-token limit): float32 [batch, n_best].
    scores: Any
    # |Y|: tokens of each hypothesis, EOS included; 0 for empty slots: int32 [batch, n_best].
    lengths: Any


def length_penalty(lengths, alpha: float):
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha.

    Args:
        lengths: int or float tensor of any shape, |Y| with EOS counted.
        alpha: The exponent; 0 gives 1 everywhere.

    Returns:
        float32 tensor of the shape of `lengths`.
    """
    lengths = tf.cast(lengths, tf.float32)
    return tf.pow((5.0 + lengths) / 6.0, alpha)


def output_length_limits(source_ids, config: SearchConfig, model_max_length: int | None = None):
    """Per-sentence output length limits and the static cache length of a batch.

    Args:
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: The `SearchConfig` (a, b and the static cap).
        model_max_length: Extra cap, for models with a learned position table.

    Returns:
        `(max_lengths, cache_length)`: int32 `[batch]`, the most tokens (EOS included)
        sentence i may produce, and an int32 scalar >= every limit, a function of the
        padded source width only (so one value per input-shape bucket).
    """
    cap = config.max_output_length
    if model_max_length is not None:
        cap = min(cap, model_max_length)

    def limit(length):  # float32 source length(s) -> int32 limit(s) in [1, cap]
        value = tf.floor(config.max_length_a * length + float(config.max_length_b))
        return tf.cast(tf.clip_by_value(value, 1.0, float(cap)), tf.int32)

    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.float32), 1)
    padded_width = tf.cast(tf.shape(source_ids)[1], tf.float32)
    # The limit grows with the source length, so the padded width bounds every sentence.
    return limit(source_lengths), limit(padded_width)  # [batch], scalar


def next_token_log_probs(logits, step, max_lengths):
    """Log-probabilities of the next token, with impossible tokens at -inf.

    PAD and BOS are never generated. At the last position a sentence may fill
    (`step + 1 == max_lengths`), everything but EOS is removed. The remaining values are
    the model's own log-softmax, not renormalized.

    Args:
        logits: float32 `[rows, vocab]` from `decode_step`.
        step: int32 scalar, the position being generated (0 = first token after BOS).
        max_lengths: int32 `[rows]`, the length limit of each row's sentence.

    Returns:
        float32 `[rows, vocab]`.
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)  # [rows, vocab]
    vocab_ids = tf.range(tf.shape(log_probs)[-1])  # [vocab]
    never = tf.logical_or(tf.equal(vocab_ids, PAD_ID), tf.equal(vocab_ids, BOS_ID))  # [vocab]
    at_limit = tf.greater_equal(step + 1, max_lengths)  # [rows]
    removed = tf.logical_or(
        never[None, :],
        tf.logical_and(at_limit[:, None], tf.not_equal(vocab_ids, EOS_ID)[None, :]),
    )  # [rows, vocab]
    return tf.where(removed, NEG_INF, log_probs)


def write_at(ids, step, values):
    """Returns `ids` with `ids[..., step] = values` (a select, no scatter).

    Args:
        ids: int32 `[..., length]`.
        step: int32 scalar.
        values: int32 `[...]`.

    Returns:
        int32 `[..., length]`.
    """
    positions = tf.range(tf.shape(ids)[-1])  # [length]
    return tf.where(tf.equal(positions, step), values[..., None], ids)


def trim(ids, lengths):
    """Drops the all-padding columns after the longest hypothesis.

    Args:
        ids: int32 `[batch, n, cache_length]`.
        lengths: int32 `[batch, n]`.

    Returns:
        int32 `[batch, n, max(lengths)]`.
    """
    return ids[:, :, : tf.maximum(tf.reduce_max(lengths), 0)]  # 0 for an empty batch


def model_position_limit(model) -> int | None:
    """The longest target a model can embed: the learned table size, else unbounded."""
    config = model.config
    return config.max_length if config.position_encoding == "learned" else None
