"""Greedy search: the most probable next token, step by step, for a batch at once."""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from translator.model import DecodingCache
from translator.search.common import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SearchResult,
    length_penalty,
    model_position_limit,
    next_token_candidates,
    output_length_limits,
    trim,
    write_at,
)
from translator.search.config import SearchConfig


class GreedyState(NamedTuple):
    """The `tf.while_loop` variables of greedy search."""

    # Position being generated next (0 = first token after BOS): int32 scalar.
    step: Any
    # Tokens generated so far, EOS included, then PAD: int32 [batch, cache_length].
    ids: Any
    # Token fed to the decoder at `step` (BOS at 0, PAD once finished): int32 [batch].
    last_ids: Any
    # log P of `ids`: float32 [batch].
    log_probs: Any
    # Tokens generated so far, EOS included: int32 [batch].
    lengths: Any
    # EOS produced: bool [batch].
    finished: Any
    # Decoder keys/values: `DecodingCache` with batch rows.
    cache: DecodingCache


def greedy_search(model, source_ids, config: SearchConfig) -> SearchResult:
    """Translates a batch by always taking the most probable allowed token.

    Runs as one `tf.while_loop` over positions that stops once every sentence has
    produced EOS (forced at its length limit, see `SearchConfig`). Finished sentences
    keep their tokens and log-probability; their rows still go through the decoder (the
    batch has static shapes) but are ignored. Beam search with `beam_size=1` returns the
    same hypotheses and scores.

    Args:
        model: A built `translator.model.Transformer`.
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: A `SearchConfig`; `beam_size` and `n_best` are ignored (n_best = 1).

    Returns:
        A `SearchResult` with `n_best = 1`.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    max_lengths, cache_length = output_length_limits(
        source_ids, config, model_position_limit(model)
    )  # [batch], scalar
    encoder_output = model.encode(source_ids, training=False)  # [batch, src, d_model]
    initial = GreedyState(
        step=tf.constant(0, tf.int32),
        ids=tf.zeros([batch, cache_length], tf.int32),
        last_ids=tf.fill([batch], BOS_ID),
        log_probs=tf.zeros([batch], tf.float32),
        lengths=tf.zeros([batch], tf.int32),
        finished=tf.zeros([batch], tf.bool),
        cache=model.init_cache(encoder_output, source_ids, cache_length),
    )

    def keep_going(state: GreedyState):
        return tf.logical_and(
            state.step < cache_length, tf.logical_not(tf.reduce_all(state.finished))
        )

    def step(state: GreedyState) -> tuple[GreedyState]:
        logits, cache = model.decode_step(state.last_ids, state.cache, state.step)
        log_probs, tokens = next_token_candidates(
            logits, state.step, max_lengths, 1, config.min_length
        )
        token, token_log_prob = tokens[:, 0], log_probs[:, 0]  # [batch]
        # Finished rows are frozen: they emit PAD and keep their log-probability.
        token = tf.where(state.finished, PAD_ID, token)
        new = GreedyState(
            step=state.step + 1,
            ids=write_at(state.ids, state.step, token),
            last_ids=token,
            log_probs=tf.where(state.finished, state.log_probs, state.log_probs + token_log_prob),
            lengths=state.lengths + tf.cast(tf.logical_not(state.finished), tf.int32),
            finished=tf.logical_or(state.finished, tf.equal(token, EOS_ID)),
            cache=cache,
        )
        return (new,)

    (final,) = tf.while_loop(keep_going, step, (initial,))
    scores = final.log_probs / length_penalty(final.lengths, config.length_penalty)  # [batch]
    lengths = final.lengths[:, None]  # [batch, 1]
    return SearchResult(
        ids=trim(final.ids[:, None, :], lengths),  # [batch, 1, length]
        scores=scores[:, None],  # [batch, 1]
        lengths=lengths,
    )
