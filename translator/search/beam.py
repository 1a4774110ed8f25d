"""Beam search with the GNMT length penalty, finished-hypothesis set and early stopping.

Per sentence, at each step:

1. The `beam_size` extensions with the highest log P (equal lengths: best scores) are kept.
2. Those ending in EOS join the finished set (log P / lp, the `n_best` best kept).
3. Early stop: log P only falls and lp grows, so once the `n_best`-th finished score
   reaches `max(alive log P) / lp(max_length_i)` the sentence is done, exactly
   (`exact_stop=False`: OpenNMT-py's and CTranslate2's top-beam rule instead).
4. The loop ends when every sentence is done.
5. Done sentences leave the loop by the gather that reorders the cache (not under XLA).

Decoder rows are sentence-major (row i * beam + k); finished hypotheses are kept per
sentence of the whole batch (`BeamState.sentence` maps active position -> sentence).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import keras
from keras import ops

from translator.backends import kernels
from translator.search.common import (
    DEFAULT_IDS,
    NEG_INF,
    SearchResult,
    SpecialIds,
    forced_tokens,
    length_penalty,
    next_token_candidates,
    trim,
    write_at,
)
from translator.search.config import SearchConfig
from translator.search.driver import Cache, SearchInputs, StrategyBase, decode, gather_rows

if TYPE_CHECKING:  # pragma: no cover
    from translator.tensors import Tensor


class BeamState(NamedTuple):
    """The loop variables of beam search (`active`: the sentences still searching)."""

    # Position being generated next (0 = first token after BOS): int32 scalar.
    step: Tensor
    # The batch index of each active sentence: int32 [active].
    sentence: Tensor
    # Alive hypotheses' tokens (positions < step), then PAD: int32 [active, beam, cache_length].
    alive_ids: Tensor
    # log P of the alive hypotheses; -inf = empty slot: float32 [active, beam].
    alive_log_probs: Tensor
    # The beam each alive hypothesis extends: int32 [active, beam].
    origins: Tensor
    # Finished hypotheses, EOS included, then PAD: int32 [batch, n_best, cache_length].
    finished_ids: Tensor
    # Their scores log P / lp, descending; -inf = empty slot: float32 [batch, n_best].
    finished_scores: Tensor
    # Their lengths |Y|, EOS included: int32 [batch, n_best].
    finished_lengths: Tensor
    # Sentence can no longer change (early stop): bool [active].
    done: Tensor
    # Decoder keys/values for the alive hypotheses: `DecodingCache` with active * beam rows.
    cache: Cache


class Candidates(NamedTuple):
    """The `beam` best extensions of each active sentence at one step."""

    # log P of each extension: float32 [active, beam].
    log_probs: Tensor
    # Its beam of origin: int32 [active, beam].
    origins: Tensor
    # Its tokens so far, the new one at `step` included: int32 [active, beam, cache_length].
    sequences: Tensor
    # Whether it ends with EOS (and is a real candidate, not -inf): bool [active, beam].
    ends: Tensor


class Beam(StrategyBase):
    """The beam strategy of `driver.decode` (module docstring), built as `StrategyBase`."""

    fixed = ("step", "finished_ids", "finished_scores", "finished_lengths")

    @property
    def beam(self) -> int:
        return self.config.beam_size

    def penalty(self, lengths):
        """lp(|Y|) of the config's length penalty (float32, the shape of `lengths`)."""
        return length_penalty(lengths, self.config.length_penalty, self.config.length_penalty_form)

    def initial_state(self, inputs: SearchInputs) -> BeamState:
        beam, n_best = self.beam, self.config.n_best
        # Each sentence's largest penalty, for the early stop's bound: once, before the loop.
        self.best_possible_penalty = self.penalty(self.max_lengths)  # [batch]
        batch, length = ops.shape(inputs.max_lengths)[0], inputs.cache_length
        cache = inputs.cache.for_beams(beam)  # the beams share the cross-attention part
        # Only beam 0 starts alive, so the first step yields no `beam` copies of candidates.
        first_alive = ops.where(ops.arange(beam) == 0, 0.0, NEG_INF)  # [beam]
        return BeamState(
            step=ops.convert_to_tensor(0, "int32"),
            sentence=ops.arange(batch, dtype="int32"),
            alive_ids=ops.zeros((batch, beam, length), "int32"),
            alive_log_probs=ops.tile(ops.cast(first_alive, "float32")[None, :], (batch, 1)),
            origins=ops.zeros((batch, beam), "int32"),
            finished_ids=ops.zeros((batch, n_best, length), "int32"),
            finished_scores=ops.full((batch, n_best), NEG_INF, "float32"),
            finished_lengths=ops.zeros((batch, n_best), "int32"),
            done=ops.zeros((batch,), "bool"),
            cache=cache,
        )

    def step_inputs(self, state: BeamState):
        t = state.step
        previous = ops.take(state.alive_ids, ops.maximum(t - 1, 0), axis=2)  # [active, beam]
        return ops.reshape(ops.where(t > 0, previous, self.special_ids.bos), (-1,))  # [rows]

    def update(self, state: BeamState, logits, cache) -> BeamState:
        found = self.top_candidates(state, logits)
        finished = self.merge_finished(state, found)
        done = self.early_stop(state, found, finished.finished_scores)
        alive = ops.where(ops.logical_or(found.ends, done[:, None]), NEG_INF, found.log_probs)
        return finished._replace(
            step=state.step + 1,
            alive_ids=found.sequences,
            alive_log_probs=alive,  # [active, beam]
            origins=found.origins,
            done=done,
            cache=cache,
        )

    def top_candidates(self, state: BeamState, logits) -> Candidates:
        """Step 1: the `beam` best extensions of each sentence's alive hypotheses."""
        t, beam, active = state.step, self.beam, ops.shape(state.sentence)[0]
        # A sentence's best `beam` extensions are among each hypothesis' best `beam`.
        row_limits = ops.repeat(kernels.gather(self.max_lengths, state.sentence), beam)  # [rows]
        forced = forced_tokens(self.prefix_ids, state.sentence, t)  # [active] or None
        log_probs, ids = next_token_candidates(
            logits,
            t,
            row_limits,
            beam,
            self.config.min_length,
            self.special_ids,
            None if forced is None else ops.repeat(forced, beam),
            self.max_from_top,
        )  # [rows, k]
        k = log_probs.shape[-1]
        candidates = state.alive_log_probs[:, :, None] + ops.reshape(
            log_probs, (active, beam, k)
        )  # [active, beam, k]
        top_log_probs, top_indices = ops.top_k(
            ops.reshape(candidates, (active, beam * k)), k=beam
        )  # [active, beam]
        origins = top_indices // k  # [active, beam]
        tokens = kernels.gather_batch(ops.reshape(ids, (active, beam * k)), top_indices)
        sequences = write_at(kernels.gather_batch(state.alive_ids, origins), t, tokens)
        # -inf candidates (fewer allowed extensions than beams) are neither alive nor finished.
        ends = ops.logical_and(ops.equal(tokens, self.special_ids.eos), top_log_probs > NEG_INF)
        return Candidates(top_log_probs, origins, sequences, ends)

    def merge_finished(self, state: BeamState, found: Candidates) -> BeamState:
        """Step 2: candidates ending in EOS join the `n_best` finished hypotheses kept."""
        t, n_best, sentence = state.step, self.config.n_best, state.sentence
        active = ops.shape(sentence)[0]
        scores = ops.where(
            found.ends, found.log_probs / self.penalty(t + 1), NEG_INF
        )  # [active, beam]
        pooled_scores = ops.concatenate(
            [kernels.gather(state.finished_scores, sentence), scores], axis=1
        )
        best, kept = ops.top_k(pooled_scores, k=n_best)  # [active, n_best]
        pooled_ids = ops.concatenate(
            [kernels.gather(state.finished_ids, sentence), found.sequences], axis=1
        )  # [active, n_best + beam, cache_length]
        pooled_lengths = ops.concatenate(
            [
                kernels.gather(state.finished_lengths, sentence),
                ops.full((active, self.beam), t + 1, "int32"),
            ],
            axis=1,
        )  # [active, n_best + beam]
        at = sentence[:, None]  # [active, 1]: rows of the whole-batch sets
        return state._replace(
            finished_ids=ops.scatter_update(
                state.finished_ids, at, kernels.gather_batch(pooled_ids, kept)
            ),
            finished_scores=ops.scatter_update(state.finished_scores, at, best),
            finished_lengths=ops.scatter_update(
                state.finished_lengths, at, kernels.gather_batch(pooled_lengths, kept)
            ),
        )

    def early_stop(self, state: BeamState, found: Candidates, finished_scores):
        """Step 3: sentences no alive hypothesis can still improve: bool [active].

        `finished_scores`: the merged `[batch, n_best]` set. Nothing alive: done.
        """
        n_best, sentence = self.config.n_best, state.sentence
        worst_kept = kernels.gather(finished_scores, sentence)[:, n_best - 1]  # [active]
        alive = ops.where(found.ends, NEG_INF, found.log_probs)  # [active, beam]
        bound = ops.max(alive, axis=1) / kernels.gather(self.best_possible_penalty, sentence)
        done = ops.logical_or(state.done, worst_kept >= bound)  # [active]
        if not self.config.exact_stop:  # or: the top candidate ended, n_best are finished
            top_ended = ops.logical_and(found.ends[:, 0], worst_kept > NEG_INF)
            done = ops.logical_or(done, top_ended)
        return done

    def select(self, state: BeamState, stay, compact: bool) -> BeamState:
        """Step 5: one gather reorders the self-attention cache and drops left sentences."""
        beam, active = self.beam, ops.shape(state.sentence)[0]
        rows = ops.reshape(kernels.gather(state.origins, stay) + stay[:, None] * beam, (-1,))
        cache = state.cache
        cache = cache._replace(
            self_attention=keras.tree.map_structure(
                lambda x: kernels.gather(x, rows), cache.self_attention
            )
        )
        if compact:  # the per-sentence parts only change when a sentence leaves
            per_sentence = gather_rows((cache.cross_attention, cache.source_mask), stay, active)
            cache = cache._replace(cross_attention=per_sentence[0], source_mask=per_sentence[1])
        return state._replace(
            sentence=kernels.gather(state.sentence, stay),
            alive_ids=kernels.gather(state.alive_ids, stay),
            alive_log_probs=kernels.gather(state.alive_log_probs, stay),
            origins=kernels.gather(state.origins, stay),
            done=kernels.gather(state.done, stay),
            cache=cache,
        )

    def finalize(self, state: BeamState) -> SearchResult:
        filled = state.finished_scores > NEG_INF  # [batch, n_best]
        lengths = ops.where(filled, state.finished_lengths, 0)  # [batch, n_best]
        ids = ops.where(filled[:, :, None], state.finished_ids, self.special_ids.pad)
        return SearchResult(ids=trim(ids, lengths), scores=state.finished_scores, lengths=lengths)


def beam_search(
    inputs: SearchInputs,
    config: SearchConfig,
    compact: bool = kernels.DYNAMIC_SHAPES,
    special_ids: SpecialIds = DEFAULT_IDS,
) -> SearchResult:
    """Translates a batch with beam search (see the module docstring for the algorithm).

    Args:
        inputs: The step function, cache and length limits (`search.prepare`).
        config: A `SearchConfig` (beam_size, n_best, length_penalty, length limits).
        compact: Drop done sentences from the loop (`driver.decode`); False for XLA.
        special_ids: The special ids.

    Returns:
        A `SearchResult` with `config.n_best` hypotheses per sentence.
    """
    # XLA compiles the search that does not compact; its fused softmax wants its own max.
    strategy = Beam(config, inputs.max_lengths, special_ids, inputs.prefix_ids, compact)
    return decode(strategy, inputs, compact)
