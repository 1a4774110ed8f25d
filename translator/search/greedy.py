"""Greedy search: the most probable next token, step by step, for a batch at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from keras import ops

from translator.backends import kernels
from translator.search.common import (
    DEFAULT_IDS,
    SearchResult,
    SpecialIds,
    forced_tokens,
    length_penalty,
    next_token_candidates,
    trim,
)
from translator.search.config import SearchConfig
from translator.search.driver import Cache, SearchInputs, StrategyBase, decode, gather_rows

if TYPE_CHECKING:  # pragma: no cover
    from translator.tensors import Tensor


class GreedyState(NamedTuple):
    """The loop variables of greedy search (`active`: the sentences still decoding)."""

    # Position being generated next (0 = first token after BOS): int32 scalar.
    step: Tensor
    # The batch index of each active sentence: int32 [active].
    sentence: Tensor
    # Token fed to the decoder at `step` (BOS at 0, PAD once done): int32 [active].
    last_ids: Tensor
    # EOS produced: bool [active] (all False between steps with compaction).
    done: Tensor
    # Tokens generated so far, EOS included, then PAD: int32 [batch, cache_length].
    ids: Tensor
    # log P of `ids`: float32 [batch].
    log_probs: Tensor
    # Decoder keys/values: `DecodingCache` with active rows.
    cache: Cache


class Greedy(StrategyBase):
    """The greedy strategy of `driver.decode`, built as `StrategyBase` (n_best = 1)."""

    fixed = ("step", "ids", "log_probs")

    def initial_state(self, inputs: SearchInputs) -> GreedyState:
        batch = ops.shape(inputs.max_lengths)[0]
        return GreedyState(
            step=ops.convert_to_tensor(0, "int32"),
            sentence=ops.arange(batch, dtype="int32"),
            last_ids=ops.full((batch,), self.special_ids.bos, "int32"),
            done=ops.zeros((batch,), "bool"),
            ids=ops.zeros((batch, inputs.cache_length), "int32"),
            log_probs=ops.zeros((batch,), "float32"),
            cache=inputs.cache,
        )

    def step_inputs(self, state: GreedyState):
        return state.last_ids  # [active]

    def choose(self, state: GreedyState, logits) -> tuple[Tensor, Tensor]:
        """The next token of each active row and its log P: int32, float32 `[active]`."""
        log_probs, tokens = next_token_candidates(
            logits,
            state.step,
            kernels.gather(self.max_lengths, state.sentence),
            1,
            self.config.min_length,
            self.special_ids,
            forced_tokens(self.prefix_ids, state.sentence, state.step),
            self.max_from_top,
        )  # [active, 1] x2
        return tokens[:, 0], log_probs[:, 0]

    def update(self, state: GreedyState, logits, cache) -> GreedyState:
        sentence, ids = state.sentence, self.special_ids  # [active]
        chosen, chosen_log_prob = self.choose(state, logits)  # [active] x2
        # Done rows (only without compaction) emit PAD and add nothing.
        token = ops.where(state.done, ids.pad, chosen)  # [active]
        token_log_prob = ops.where(state.done, 0.0, chosen_log_prob)  # [active]
        positions = ops.stack([sentence, ops.full_like(sentence, state.step)], axis=1)
        return state._replace(
            step=state.step + 1,
            last_ids=token,
            done=ops.logical_or(state.done, ops.equal(token, ids.eos)),
            ids=ops.scatter_update(state.ids, positions, token),  # ids[s, step]
            log_probs=ops.scatter_update(
                state.log_probs, sentence[:, None], token_log_prob, reduction="add"
            ),
            cache=cache,
        )

    def select(self, state: GreedyState, stay, compact: bool) -> GreedyState:
        active = ops.shape(state.sentence)[0]
        return state._replace(
            sentence=kernels.gather(state.sentence, stay),
            last_ids=kernels.gather(state.last_ids, stay),
            done=kernels.gather(state.done, stay),
            cache=gather_rows(state.cache, stay, active) if compact else state.cache,
        )

    def finalize(self, state: GreedyState) -> SearchResult:
        # Tokens are never PAD, so a hypothesis' length is its count of non-PAD ids.
        lengths = ops.sum(
            ops.cast(ops.not_equal(state.ids, self.special_ids.pad), "int32"), axis=1
        )  # [batch]
        scores = state.log_probs / length_penalty(
            lengths, self.config.length_penalty, self.config.length_penalty_form
        )
        return SearchResult(
            ids=trim(state.ids[:, None, :], lengths[:, None]),  # [batch, 1, length]
            scores=scores[:, None],  # [batch, 1]
            lengths=lengths[:, None],  # [batch, 1]
        )


def greedy_search(
    inputs: SearchInputs,
    config: SearchConfig,
    compact: bool = kernels.DYNAMIC_SHAPES,
    special_ids: SpecialIds = DEFAULT_IDS,
) -> SearchResult:
    """Translates a batch by always taking the most probable allowed token.

    Stops once every sentence has produced EOS; the same as beam search with one beam.

    Args:
        inputs: The step function, cache and length limits (`search.prepare`).
        config: A `SearchConfig`; `beam_size` and `n_best` are ignored (n_best = 1).
        compact: Drop done sentences from the loop (`driver.decode`); False for XLA.
        special_ids: The special ids.

    Returns:
        A `SearchResult` with `n_best = 1`.
    """
    # XLA compiles the search that does not compact; its fused softmax wants its own max.
    strategy = Greedy(config, inputs.max_lengths, special_ids, inputs.prefix_ids, compact)
    return decode(strategy, inputs, compact)
