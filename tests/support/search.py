"""Slow reference implementations of the search, and helpers to run and read the real one.

The references are deliberately simple: Python loops over hypotheses and a full
teacher-forced forward pass for every prefix (no cache, no while_loop), so that they
share no code with `translator.search` beyond the special ids.
"""

from __future__ import annotations

import itertools

import numpy as np
import tensorflow as tf

from tests.support.models import FORBIDDEN
from translator.constants import BOS_ID, EOS_ID
from translator.search.decoder import prepare


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
