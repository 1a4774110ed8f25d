"""Tiny models and their inputs: a random Transformer, and a hand-set stand-in for searches."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from translator import Transformer, TransformerConfig
from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.model import DecodingCache

FORBIDDEN = (PAD_ID, BOS_ID)  # never generated


def tiny_model(
    vocab: int,
    seed: int = 0,
    eos_bias: float = 0.0,
    logit_scale: float = 1.0,
    constant_eos: bool = False,
    **overrides,
):
    """A random tiny Transformer with an untied output layer we can bias.

    `logit_scale` sharpens the next-token distributions; `eos_bias` is added to the EOS
    logit, to make hypotheses end early (positive) or never (very negative). With
    `constant_eos` the EOS logit is exactly `eos_bias` (its kernel column is zeroed), so
    EOS stays plausible at every position instead of depending on the prefix at random.
    """
    keras.utils.set_random_seed(seed)
    fields = dict(dropout=0.0, d_model=32, ffn_dim=64, num_heads=4, tie_output_projection=False)
    fields.update(overrides)
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=vocab, **fields))
    model.build()
    projection = model.output_projection
    kernel = projection.kernel * logit_scale  # [d_model, vocab]
    if constant_eos:
        kernel = kernel * (1.0 - tf.one_hot(EOS_ID, vocab))[None, :]
    projection.kernel.assign(kernel)
    projection.bias.assign(tf.one_hot(EOS_ID, vocab) * eos_bias)
    return model


def random_sources(rng: np.random.Generator, lengths, vocab: int) -> np.ndarray:
    """int32 [batch, max(lengths)]: random pieces + EOS, then PAD."""
    source = np.zeros((len(lengths), max(lengths)), "int32")
    for row, length in enumerate(lengths):
        source[row, : length - 1] = rng.integers(4, vocab, size=length - 1)
        source[row, length - 1] = EOS_ID
    return source


class MarkovModel:
    """A stand-in for the Transformer with hand-set probabilities, for search-only tests.

    The next-token distribution depends only on the position and the previous token:
    `probs[step, previous_token]` is a distribution over the vocabulary. It has the
    model's incremental interface (`encode`, `init_cache`, `decode_step`, `config`).
    """

    built = True

    def __init__(self, probs: np.ndarray):
        with np.errstate(divide="ignore"):  # a probability of 0: log P = -inf
            self.log_probs = tf.constant(np.log(probs), tf.float32)  # [steps, vocab, vocab]
        self.config = TransformerConfig.preset("tiny", vocab_size=probs.shape[-1])

    def encode(self, source_ids, training=None):
        return tf.zeros([tf.shape(source_ids)[0], tf.shape(source_ids)[1], 1])

    def init_cache(self, encoder_output, source_ids, max_length):
        return DecodingCache(
            self_attention=(tf.zeros([tf.shape(source_ids)[0], 1]),),
            cross_attention=(),
            source_mask=tf.not_equal(source_ids, 0),
        )

    def decode_step(self, token_ids, cache, index):
        index = tf.fill(tf.shape(token_ids), index)  # [rows]
        logits = tf.gather_nd(self.log_probs, tf.stack([index, token_ids], axis=1))
        return logits, cache  # [rows, vocab]

    def sequence_log_prob(self, tokens) -> float:
        """log P(tokens), EOS included, straight from the table."""
        previous = (BOS_ID, *tokens[:-1])
        table = self.log_probs.numpy().astype("float64")
        return sum(table[s, p, t] for s, (p, t) in enumerate(zip(previous, tokens, strict=True)))


def markov_probs(vocab: int, steps: int, rows: dict) -> np.ndarray:
    """`[steps, vocab, vocab]` distributions: uniform over generatable tokens unless given.

    `rows[(step, previous)] = {token: probability}`; PAD and BOS get 1e-6 each.
    """
    probs = np.full((steps, vocab, vocab), 1.0)
    probs[:, :, list(FORBIDDEN)] = 0.0
    for (step, previous), row in rows.items():
        probs[step, previous] = 0.0
        for token, p in row.items():
            probs[step, previous, token] = p
    probs /= probs.sum(-1, keepdims=True)
    probs[:, :, list(FORBIDDEN)] = 1e-6
    return probs / probs.sum(-1, keepdims=True)
