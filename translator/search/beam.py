"""Beam search with the GNMT length penalty, finished-hypothesis set and early stopping.

The algorithm, per sentence, at step t (every candidate then has t + 1 tokens):

1. Each alive hypothesis is extended by every allowed token (see
   `common.next_token_candidates`); the `beam_size` candidates with the highest
   log P are kept (they are among the `beam_size` best extensions of each hypothesis,
   so only those are ranked). All candidates have the same length, so this is also the ranking by
   score (the length penalty is the same for all of them).
2. Kept candidates ending in EOS leave the beam for the finished set (scored
   log P / lp, the `n_best` best kept); the others are next step's alive hypotheses.
   A beam that lost hypotheses to EOS refills at the next step: the top `beam_size`
   extensions of the survivors are kept again. With `beam_size = 1` this is exactly
   greedy search.
3. Early stop: extending a hypothesis only lowers log P (<= 0), and lp grows with length,
   so no descendant of an alive hypothesis can score above
   `max(alive log P) / lp(max_length_i)` (the sentence's length limit). Once the
   `n_best`-th finished score is >= that bound (or no hypothesis is alive), the sentence
   is done: its beams are emptied and it no longer changes. Stopping never changes the
   result compared with running to the length limit (ties aside).
   With `SearchConfig.exact_stop=False` a sentence is also done as soon as the best
   candidate of a step (highest log P; all have the same length) ends in EOS and
   `n_best` hypotheses are finished: the rule of OpenNMT-py and CTranslate2. It saves
   the steps the bound needs to prove the finished hypothesis best, but returns a
   shorter hypothesis where a longer one would have scored higher under the length
   penalty (bench/RESULTS.md, "Decoding, trained model", measures both).
4. The `tf.while_loop` ends when every sentence is done; at the latest at the longest
   length limit, where only EOS is allowed.
5. Compaction (`compact=True`, the default): a done sentence leaves the loop. Its rows
   are dropped from the alive state and the cache by the same gather that reorders the
   cache, so each step costs what the sentences still searching cost, not what the
   whole batch costs until its longest sentence ends (a decoding step's time grows
   almost linearly with its rows beyond a few sentences). The active batch then has a
   dynamic size, which XLA cannot compile: `compact=False` keeps every row to the end
   (done sentences' beams are emptied and ignored) and is what `Decoder` uses with
   `jit_compile=True`. Both return the same hypotheses: rows never interact.

Layout: the `active * beam` decoder rows are sentence-major (row i * beam + k), so the
per-sentence `[active, beam]` tensors reshape to and from it without copies. Finished
hypotheses are kept per sentence of the whole batch (`[batch, ...]`), written in place
for the active sentences (`BeamState.sentence` maps active position -> sentence).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.model import DecodingCache
from translator.search.common import (
    NEG_INF,
    SearchResult,
    length_penalty,
    model_position_limit,
    next_token_candidates,
    output_length_limits,
    shrinking_invariants,
    staying,
    trim,
    write_at,
)
from translator.search.config import SearchConfig


class BeamState(NamedTuple):
    """The `tf.while_loop` variables of beam search.

    `active` is the number of sentences still searching (the whole batch without
    compaction).
    """

    # Position being generated next (0 = first token after BOS): int32 scalar.
    step: Any
    # The batch index of each active sentence: int32 [active].
    sentence: Any
    # Alive hypotheses' tokens (positions < step), then PAD: int32 [active, beam, cache_length].
    alive_ids: Any
    # log P of the alive hypotheses; -inf = empty slot: float32 [active, beam].
    alive_log_probs: Any
    # Finished hypotheses, EOS included, then PAD: int32 [batch, n_best, cache_length].
    finished_ids: Any
    # Their scores log P / lp, descending; -inf = empty slot: float32 [batch, n_best].
    finished_scores: Any
    # Their lengths |Y|, EOS included: int32 [batch, n_best].
    finished_lengths: Any
    # Sentence can no longer change (early stop): bool [active]. With compaction a done
    # sentence leaves at the end of the step, so this is all False between steps.
    done: Any
    # Decoder keys/values for the alive hypotheses: `DecodingCache` with active * beam rows.
    cache: DecodingCache


def beam_search(model, source_ids, config: SearchConfig, compact: bool = True) -> SearchResult:
    """Translates a batch with beam search (see the module docstring for the algorithm).

    Args:
        model: A built `translator.model.Transformer`.
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: A `SearchConfig` (beam_size, n_best, length_penalty, length limits).
        compact: Drop done sentences from the loop (module docstring, 5.); False for XLA.

    Returns:
        A `SearchResult` with `config.n_best` hypotheses per sentence.
    """
    beam, n_best, alpha = config.beam_size, config.n_best, config.length_penalty
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    max_lengths, cache_length = output_length_limits(
        source_ids, config, model_position_limit(model)
    )  # [batch], scalar
    best_possible_penalty = length_penalty(max_lengths, alpha)  # [batch]

    # The encoder and the cross-attention keys/values run once per sentence, then are
    # repeated for its beams. They are never reordered: a reorder only permutes rows
    # within a sentence, and those rows are identical.
    encoder_output = model.encode(source_ids, training=False)  # [batch, src, d_model]
    cache = model.init_cache(encoder_output, source_ids, cache_length)
    cache = tf.nest.map_structure(lambda x: tf.repeat(x, beam, axis=0), cache)  # batch*beam rows

    # Only beam 0 starts alive, so the first step does not yield `beam` copies of each
    # candidate.
    first_alive = tf.concat([[0.0], tf.fill([beam - 1], NEG_INF)], axis=0)  # [beam]
    initial = BeamState(
        step=tf.constant(0, tf.int32),
        sentence=tf.range(batch),
        alive_ids=tf.zeros([batch, beam, cache_length], tf.int32),
        alive_log_probs=tf.tile(first_alive[None, :], [batch, 1]),
        finished_ids=tf.zeros([batch, n_best, cache_length], tf.int32),
        finished_scores=tf.fill([batch, n_best], NEG_INF),
        finished_lengths=tf.zeros([batch, n_best], tf.int32),
        done=tf.zeros([batch], tf.bool),
        cache=cache,
    )

    def keep_going(state: BeamState):
        return tf.logical_and(state.step < cache_length, tf.logical_not(tf.reduce_all(state.done)))

    def step(state: BeamState) -> tuple[BeamState]:
        t = state.step
        sentence = state.sentence  # [active]
        active = tf.shape(sentence)[0]
        previous = tf.gather(state.alive_ids, tf.maximum(t - 1, 0), axis=2)  # [active, beam]
        tokens_in = tf.where(t > 0, previous, BOS_ID)
        logits, cache = model.decode_step(tf.reshape(tokens_in, [-1]), state.cache, t)
        # The best `beam` extensions of a sentence are among the best `beam` of each of
        # its hypotheses: k = min(beam, vocab) candidates per row.
        row_max_lengths = tf.repeat(tf.gather(max_lengths, sentence), beam)  # [active * beam]
        log_probs, ids = next_token_candidates(
            logits, t, row_max_lengths, beam, config.min_length
        )  # [active * beam, k]
        k = log_probs.shape[-1]
        candidates = state.alive_log_probs[:, :, None] + tf.reshape(
            log_probs, [active, beam, k]
        )  # [active, beam, k]
        top_log_probs, top_indices = tf.math.top_k(
            tf.reshape(candidates, [active, beam * k]), k=beam
        )  # [active, beam]
        origins = top_indices // k  # [active, beam]: the beam each candidate extends
        tokens = tf.gather(tf.reshape(ids, [active, beam * k]), top_indices, batch_dims=1)
        sequences = write_at(
            tf.gather(state.alive_ids, origins, batch_dims=1), t, tokens
        )  # [active, beam, cache_length]
        # -inf candidates (fewer allowed extensions than beams) are neither alive nor finished.
        ends = tf.logical_and(tf.equal(tokens, EOS_ID), top_log_probs > NEG_INF)  # [a, beam]

        # Merge the new finished hypotheses into the n_best kept so far.
        new_scores = tf.where(ends, top_log_probs / length_penalty(t + 1, alpha), NEG_INF)
        pooled_scores = tf.concat(
            [tf.gather(state.finished_scores, sentence), new_scores], axis=1
        )  # [active, n_best + beam]
        finished_scores, kept = tf.math.top_k(pooled_scores, k=n_best)  # [active, n_best]
        pooled_ids = tf.concat(
            [tf.gather(state.finished_ids, sentence), sequences], axis=1
        )  # [active, n_best + beam, cache_length]
        pooled_lengths = tf.concat(
            [tf.gather(state.finished_lengths, sentence), tf.fill([active, beam], t + 1)], axis=1
        )  # [active, n_best + beam]
        at = sentence[:, None]  # [active, 1]: scatter indices into the [batch, ...] sets

        # Early stop (module docstring, 3.): the best any alive hypothesis can still reach
        # is its log P over the largest penalty it can get. With nothing alive the bound is
        # -inf, so that sentence is done too. A done sentence's beams are emptied, so its
        # finished set no longer changes.
        alive_log_probs = tf.where(ends, NEG_INF, top_log_probs)  # [active, beam]
        bound = tf.reduce_max(alive_log_probs, axis=1) / tf.gather(
            best_possible_penalty, sentence
        )  # [active]
        done = tf.logical_or(state.done, finished_scores[:, n_best - 1] >= bound)  # [active]
        if not config.exact_stop:  # or (3.): the top candidate ended, n_best are finished
            top_ended = tf.logical_and(ends[:, 0], finished_scores[:, n_best - 1] > NEG_INF)
            done = tf.logical_or(done, top_ended)  # [active]
        alive_log_probs = tf.where(done[:, None], NEG_INF, alive_log_probs)

        # The sentences that stay (module docstring, 5.): positions in the active batch.
        stay = staying(done, compact)  # [stay]
        # One gather reorders the self-attention cache to follow each candidate's origin
        # beam and drops the rows of the sentences that leave.
        rows = tf.reshape(tf.gather(origins, stay) + stay[:, None] * beam, [-1])  # [stay*beam]
        cache = cache._replace(
            self_attention=tf.nest.map_structure(lambda x: tf.gather(x, rows), cache.self_attention)
        )
        if compact:  # the per-sentence parts only change when a sentence leaves
            cache = _drop_sentences(cache, stay, active, beam)
        new = BeamState(
            step=t + 1,
            sentence=tf.gather(sentence, stay),
            alive_ids=tf.gather(sequences, stay),
            alive_log_probs=tf.gather(alive_log_probs, stay),
            finished_ids=tf.tensor_scatter_nd_update(
                state.finished_ids, at, tf.gather(pooled_ids, kept, batch_dims=1)
            ),
            finished_scores=tf.tensor_scatter_nd_update(state.finished_scores, at, finished_scores),
            finished_lengths=tf.tensor_scatter_nd_update(
                state.finished_lengths, at, tf.gather(pooled_lengths, kept, batch_dims=1)
            ),
            done=tf.gather(done, stay),
            cache=cache,
        )
        return (new,)

    # Per-sentence results stay whole-batch; the rest shrinks with compaction.
    fixed = ("step", "finished_ids", "finished_scores", "finished_lengths")
    invariants = (shrinking_invariants(initial, fixed),) if compact else None
    (final,) = tf.while_loop(keep_going, step, (initial,), shape_invariants=invariants)
    filled = final.finished_scores > NEG_INF  # [batch, n_best]
    lengths = tf.where(filled, final.finished_lengths, 0)  # [batch, n_best]
    ids = tf.where(filled[:, :, None], final.finished_ids, PAD_ID)  # [batch, n_best, T]
    return SearchResult(ids=trim(ids, lengths), scores=final.finished_scores, lengths=lengths)


def _drop_sentences(cache: DecodingCache, stay, active, beam: int) -> DecodingCache:
    """The cross-attention keys/values and source mask of the staying sentences only.

    Args:
        cache: A `DecodingCache` with `active * beam` rows.
        stay: int32 `[stay]`, positions of the staying sentences among the active ones.
        active: int32 scalar, the number of active sentences.
        beam: Rows per sentence.

    Returns:
        The cache with `stay * beam` rows in its per-sentence parts (the self-attention
        part is left as it is).
    """
    per_sentence = (cache.cross_attention, cache.source_mask)
    rows = tf.reshape(stay[:, None] * beam + tf.range(beam), [-1])  # [stay * beam]
    cross_attention, source_mask = tf.cond(
        tf.size(stay) < active,  # a gather copies the whole tensor: only when one left
        lambda: tf.nest.map_structure(lambda x: tf.gather(x, rows), per_sentence),
        lambda: per_sentence,
    )
    return cache._replace(cross_attention=cross_attention, source_mask=source_mask)
