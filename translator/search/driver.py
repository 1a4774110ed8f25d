"""The one decoding loop, shared by greedy and beam search.

A `Strategy` says which tokens go in, how logits update its state and which sentences
are done; `decode` runs it. Strategies never see a model, only

    step_fn(token_ids [rows], cache, index) -> (logits float32 [rows, vocab], cache)

(`Transformer.decode_step`), its `DecodingCache`, the special ids and the length limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from keras import ops

from translator.backends import kernels
from translator.search.common import SearchResult, SpecialIds
from translator.search.config import SearchConfig

if TYPE_CHECKING:  # pragma: no cover
    from translator.tensors import Tensor

# The decoder's cache: a nest of tensors whose axis 0 is the row (`Transformer.init_cache`).
Cache = Any


class StepFn(Protocol):
    """One decoder step (`Transformer.decode_step`), the search's only view of a model."""

    def __call__(self, token_ids: Tensor, cache: Cache, index: Tensor) -> tuple[Tensor, Cache]:
        """int32 [rows] tokens at int32 scalar `index` -> (float32 [rows, vocab] logits, cache)."""


class SearchInputs(NamedTuple):
    """What a strategy searches over, for a batch of `batch` sentences."""

    # The decoder step (`Transformer.decode_step`).
    step_fn: StepFn
    # The decoding cache of the batch (`Transformer.init_cache`), one row per sentence.
    cache: Cache
    # The most tokens sentence i may produce, EOS included: int32 [batch].
    max_lengths: Tensor
    # Static length of the cache (>= every limit): int32 scalar.
    cache_length: Tensor
    # Target prefixes to begin with: int32 [batch, width >= 1], pieces then PAD; or None.
    prefix_ids: Tensor | None = None


class Strategy(Protocol):
    """How one search moves its state through the loop of `decode`.

    The state is a NamedTuple with `step`, `done` (bool [active]) and `cache`; fields
    not named in `fixed` are indexed by the active sentences along axis 0.
    """

    fixed: tuple[str, ...]

    def initial_state(self, inputs: SearchInputs) -> NamedTuple:
        """The state before the first step."""

    def step_inputs(self, state: NamedTuple) -> Tensor:
        """The tokens fed at `state.step`: int32 [rows]."""

    def update(self, state: NamedTuple, logits: Tensor, cache: Cache) -> NamedTuple:
        """The state after a step's logits (`done` set; nothing dropped yet)."""

    def select(self, state: NamedTuple, stay: Tensor, compact: bool) -> NamedTuple:
        """Keeps the active sentences at positions `stay` (all of them without compaction)."""

    def finalize(self, state: NamedTuple) -> SearchResult:
        """The result of the final state."""


class StrategyBase:
    """What greedy and beam search are built from.

    Args:
        config: The `SearchConfig`.
        max_lengths: int32 `[batch]`, each sentence's length limit.
        special_ids: The special ids.
        prefix_ids: int32 `[batch, width]`, target prefixes to force (`SearchInputs`), or
            None.
        max_from_top: `common.next_token_candidates`' choice of normalizer: True but in
            an XLA-compiled search (one that does not compact).
    """

    def __init__(
        self,
        config: SearchConfig,
        max_lengths,
        special_ids: SpecialIds,
        prefix_ids=None,
        max_from_top: bool = True,
    ):
        self.config = config
        self.max_lengths = max_lengths  # [batch]
        self.special_ids = special_ids
        self.prefix_ids = prefix_ids
        self.max_from_top = max_from_top


def decode(
    strategy: Strategy, inputs: SearchInputs, compact: bool = kernels.DYNAMIC_SHAPES
) -> SearchResult:
    """Runs `strategy` as one while loop over positions (`kernels.search_loop`).

    Ends when every sentence is done, at the latest at `cache_length`. With `compact`,
    done sentences leave the loop (XLA keeps every row); the result is the same.

    Args:
        strategy: Greedy or beam search.
        inputs: The step function, cache and limits.
        compact: Drop done sentences from the loop.

    Returns:
        The strategy's `SearchResult`.
    """
    initial = strategy.initial_state(inputs)

    def keep_going(state):
        not_all_done = ops.logical_not(ops.all(state.done))
        return ops.logical_and(state.step < inputs.cache_length, not_all_done)

    def body(state) -> tuple[NamedTuple]:
        logits, cache = inputs.step_fn(strategy.step_inputs(state), state.cache, state.step)
        state = strategy.update(state, logits, cache)
        return (strategy.select(state, kernels.remaining(state.done, compact), compact),)

    (final,) = kernels.search_loop(keep_going, body, (initial,), compact, strategy.fixed)
    return strategy.finalize(final)


def gather_rows(nest: Cache, rows, count) -> Cache:
    """The rows `rows` (int32 `[kept]`, increasing) of a nest, of `count` rows now."""
    return kernels.gather_rows_if_fewer(nest, rows, count)
