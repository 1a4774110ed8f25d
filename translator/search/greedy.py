"""Greedy search: the most probable next token, step by step, for a batch at once."""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.model import DecodingCache
from translator.search.common import (
    SearchResult,
    length_penalty,
    model_position_limit,
    next_token_candidates,
    output_length_limits,
    shrinking_invariants,
    staying,
    trim,
)
from translator.search.config import SearchConfig


class GreedyState(NamedTuple):
    """The `tf.while_loop` variables of greedy search.

    `active` is the number of sentences still decoding (the whole batch without
    compaction).
    """

    # Position being generated next (0 = first token after BOS): int32 scalar.
    step: Any
    # The batch index of each active sentence: int32 [active].
    sentence: Any
    # Token fed to the decoder at `step` (BOS at 0, PAD once finished): int32 [active].
    last_ids: Any
    # EOS produced: bool [active]. With compaction a finished sentence leaves at the end
    # of the step, so this is all False between steps.
    finished: Any
    # Tokens generated so far, EOS included, then PAD: int32 [batch, cache_length].
    ids: Any
    # log P of `ids`: float32 [batch].
    log_probs: Any
    # Decoder keys/values: `DecodingCache` with active rows.
    cache: DecodingCache


def greedy_search(model, source_ids, config: SearchConfig, compact: bool = True) -> SearchResult:
    """Translates a batch by always taking the most probable allowed token.

    Runs as one `tf.while_loop` over positions that stops once every sentence has
    produced EOS (forced at its length limit, see `SearchConfig`). With `compact` (the
    default) a finished sentence leaves the loop: its rows are dropped from the cache, so
    later steps only pay for the sentences still decoding. XLA needs static shapes: with
    `compact=False` finished rows stay to the end (they emit PAD and are ignored). Both
    give the same result, and beam search with `beam_size=1` returns the same hypotheses
    and scores.

    Args:
        model: A built `translator.model.Transformer`.
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: A `SearchConfig`; `beam_size` and `n_best` are ignored (n_best = 1).
        compact: Drop finished sentences from the loop; False for XLA.

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
        sentence=tf.range(batch),
        last_ids=tf.fill([batch], BOS_ID),
        finished=tf.zeros([batch], tf.bool),
        ids=tf.zeros([batch, cache_length], tf.int32),
        log_probs=tf.zeros([batch], tf.float32),
        cache=model.init_cache(encoder_output, source_ids, cache_length),
    )

    def keep_going(state: GreedyState):
        return tf.logical_and(
            state.step < cache_length, tf.logical_not(tf.reduce_all(state.finished))
        )

    def step(state: GreedyState) -> tuple[GreedyState]:
        sentence = state.sentence  # [active]
        logits, cache = model.decode_step(state.last_ids, state.cache, state.step)
        log_probs, tokens = next_token_candidates(
            logits, state.step, tf.gather(max_lengths, sentence), 1, config.min_length
        )
        token, token_log_prob = tokens[:, 0], log_probs[:, 0]  # [active]
        # Finished rows (only without compaction) emit PAD and add nothing.
        token = tf.where(state.finished, PAD_ID, token)
        token_log_prob = tf.where(state.finished, 0.0, token_log_prob)
        finished = tf.logical_or(state.finished, tf.equal(token, EOS_ID))  # [active]
        stay = staying(finished, compact)  # [stay]
        if compact:
            cache = tf.cond(
                tf.size(stay) < tf.size(sentence),  # a gather copies: only when one left
                lambda: tf.nest.map_structure(lambda x: tf.gather(x, stay), cache),
                lambda: cache,
            )
        positions = tf.stack([sentence, tf.fill(tf.shape(sentence), state.step)], axis=1)
        new = GreedyState(
            step=state.step + 1,
            sentence=tf.gather(sentence, stay),
            last_ids=tf.gather(token, stay),
            finished=tf.gather(finished, stay),
            ids=tf.tensor_scatter_nd_update(state.ids, positions, token),  # ids[s, step]
            log_probs=tf.tensor_scatter_nd_add(state.log_probs, sentence[:, None], token_log_prob),
            cache=cache,
        )
        return (new,)

    # Per-sentence results stay whole-batch; the rest shrinks with compaction.
    fixed = ("step", "ids", "log_probs")
    invariants = (shrinking_invariants(initial, fixed),) if compact else None
    (final,) = tf.while_loop(keep_going, step, (initial,), shape_invariants=invariants)
    # Tokens are never PAD, so a hypothesis' length is its count of non-PAD ids.
    lengths = tf.math.count_nonzero(final.ids, axis=1, dtype=tf.int32)  # [batch]
    scores = final.log_probs / length_penalty(lengths, config.length_penalty)  # [batch]
    return SearchResult(
        ids=trim(final.ids[:, None, :], lengths[:, None]),  # [batch, 1, length]
        scores=scores[:, None],  # [batch, 1]
        lengths=lengths[:, None],  # [batch, 1]
    )
