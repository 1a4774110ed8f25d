"""Tiny models, inputs and slow reference implementations for the search tests.

The references are deliberately simple: Python loops over hypotheses and a full
teacher-forced forward pass for every prefix (no cache, no while_loop), so that they
share no code with `translator.search` beyond the special ids.
"""

from __future__ import annotations

import itertools

import keras
import numpy as np
import tensorflow as tf

from translator import Transformer, TransformerConfig
from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.model import DecodingCache
from translator.search.decoder import prepare

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


def compiled(strategy, model, config, compact: bool = True):
    """`strategy` (greedy_search or beam_search) over `model` as a tf.function."""
    return tf.function(
        lambda source_ids: strategy(prepare(model, source_ids, config, compact), config, compact),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )


def penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


def next_log_probs(model, source_row: np.ndarray, prefixes) -> np.ndarray:
    """float64 [len(prefixes), vocab]: log P(next | source, BOS + prefix), full recompute."""
    width = 1 + max(len(p) for p in prefixes)
    decoder_input = np.zeros((len(prefixes), width), "int32")
    for row, prefix in enumerate(prefixes):
        decoder_input[row, : 1 + len(prefix)] = (BOS_ID, *prefix)
    source = np.repeat(source_row[None, :], len(prefixes), axis=0)
    logits = np.asarray(model((source, decoder_input)), "float64")  # [n, width, vocab]
    last = logits[np.arange(len(prefixes)), [len(p) for p in prefixes]]  # [n, vocab]
    return last - np.logaddexp.reduce(last, axis=-1, keepdims=True)


def sequence_log_probs(model, source_row: np.ndarray, hypotheses) -> np.ndarray:
    """float64 [len(hypotheses)]: teacher-forced log P(Y | source), EOS included."""
    width = max(len(y) for y in hypotheses)
    decoder_input = np.zeros((len(hypotheses), width), "int32")
    for row, y in enumerate(hypotheses):
        decoder_input[row, : len(y)] = (BOS_ID, *y[:-1])
    source = np.repeat(source_row[None, :], len(hypotheses), axis=0)
    logits = np.asarray(model((source, decoder_input)), "float64")  # [n, width, vocab]
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    return np.array(
        [
            sum(log_probs[row, t, token] for t, token in enumerate(y))
            for row, y in enumerate(hypotheses)
        ]
    )


def allowed(token: int, step: int, max_length: int, min_length: int) -> bool:
    """Whether the search may generate `token` at position `step` (0 = after BOS)."""
    if step + 1 == max_length:  # the limit: EOS only, whatever min_length says
        return token == EOS_ID
    return token not in FORBIDDEN and (token != EOS_ID or step >= min_length)


def reference_beam_search(
    model, source_row, beam, alpha, n_best, max_length, vocab, min_length=0, exact_stop=True
):
    """The documented beam search, one sentence, whole prefix recomputed every step.

    No early stopping: it runs until no hypothesis is alive (at the latest at
    `max_length`, where only EOS is allowed), so agreeing with it also shows that the
    early stop of the real search never changes the result. With `exact_stop=False`, it
    stops as that rule says: once a step's best candidate ends in EOS and `n_best`
    hypotheses are finished.

    Returns:
        Up to n_best `(score, tokens)` pairs, best first; tokens end with EOS.
    """
    alive = [((), 0.0)]  # (tokens, log P)
    finished = []  # (score, tokens)
    for step in range(max_length):
        if not alive:
            break
        rows = next_log_probs(model, source_row, [tokens for tokens, _ in alive])
        candidates = []
        for (tokens, log_prob), row in zip(alive, rows, strict=True):
            for token in range(vocab):
                if not allowed(token, step, max_length, min_length):
                    continue
                candidates.append((log_prob + row[token], (*tokens, token)))
        candidates.sort(key=lambda c: -c[0])
        alive = []
        for log_prob, tokens in candidates[:beam]:
            if tokens[-1] == EOS_ID:
                finished.append((log_prob / penalty(len(tokens), alpha), tokens))
            else:
                alive.append((tokens, log_prob))
        if not exact_stop and candidates[0][1][-1] == EOS_ID and len(finished) >= n_best:
            break
    finished.sort(key=lambda c: -c[0])
    return finished[:n_best]


def all_hypotheses(vocab: int, max_length: int, min_length: int = 0):
    """Every sequence the search may return: allowed tokens, then EOS, |Y| <= max_length."""
    words = [t for t in range(vocab) if t not in (*FORBIDDEN, EOS_ID)]
    return [
        (*body, EOS_ID)
        for length in range(max_length)
        if allowed(EOS_ID, length, max_length, min_length)
        for body in itertools.product(words, repeat=length)
    ]


def hypotheses_of(result, sentence: int):
    """(score, tokens) pairs of one sentence of a SearchResult, filled slots only."""
    ids, scores, lengths = (np.asarray(x) for x in result)
    return [
        (
            float(scores[sentence, k]),
            tuple(int(t) for t in ids[sentence, k, : lengths[sentence, k]]),
        )
        for k in range(scores.shape[1])
        if lengths[sentence, k] > 0
    ]


class MarkovModel:
    """A stand-in for the Transformer with hand-set probabilities, for search-only tests.

    The next-token distribution depends only on the position and the previous token:
    `probs[step, previous_token]` is a distribution over the vocabulary. It has the
    model's incremental interface (`encode`, `init_cache`, `decode_step`, `config`).
    """

    built = True

    def __init__(self, probs: np.ndarray):
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
