"""The entry points of any backend: `prepare` a batch, then `search` it.

`translator.backends.tf_decoder.Decoder` compiles `search` into a saveable TensorFlow
function, `translator.backends.jax_decoder.JaxDecoder` into an XLA program on JAX.
"""

from __future__ import annotations

from keras import ops

from translator.backends import kernels
from translator.search.beam import beam_search
from translator.search.common import SearchResult, output_length_limits
from translator.search.config import SearchConfig
from translator.search.driver import SearchInputs
from translator.search.greedy import greedy_search
from translator.search.sampling import sample


def prepare(
    model,
    source_ids,
    config: SearchConfig,
    compact: bool = kernels.DYNAMIC_SHAPES,
    prefix_ids=None,
) -> SearchInputs:
    """Encodes a batch once and gives the search its step function, cache and limits.

    Args:
        model: A built `translator.model.Transformer` (`encode`, `init_cache`,
            `decode_step`, `config`).
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: The `SearchConfig` (its length limits).
        compact: For a compacting search: the self-attention cache then grows (faster);
            else it has the static `cache_length` XLA needs.
        prefix_ids: int32 `[batch, width]`, target pieces each output must begin with,
            then PAD; or None. Length limits are raised to hold the prefix and EOS.

    Returns:
        The `SearchInputs` of the batch.
    """
    source_ids = ops.convert_to_tensor(source_ids, "int32")
    max_lengths, cache_length = output_length_limits(
        source_ids, config, model.config.position_limit
    )  # [batch], scalar
    if prefix_ids is not None:
        cap = min(config.max_output_length, model.config.position_limit or (1 << 30))
        prefix_ids = ops.convert_to_tensor(prefix_ids, "int32")[:, : cap - 1]  # room for EOS
        prefix_ids = ops.pad(prefix_ids, [[0, 0], [0, 1]])  # [batch, width + 1]: never empty
        prefix_lengths = ops.sum(ops.cast(ops.not_equal(prefix_ids, 0), "int32"), 1)
        max_lengths = ops.maximum(max_lengths, prefix_lengths + 1)  # [batch]
        # From the padded width, not the lengths: a shape, as XLA's static cache needs.
        width = prefix_ids.shape[1]
        cache_length = (
            max(cache_length, width)
            if isinstance(cache_length, int) and width is not None
            else ops.maximum(cache_length, ops.shape(prefix_ids)[1])
        )
    encoder_output = model.encode(source_ids, training=False)  # [batch, src, d_model]
    cache = model.init_cache(encoder_output, source_ids, None if compact else cache_length)
    return SearchInputs(model.decode_step, cache, max_lengths, cache_length, prefix_ids)


def search(
    model,
    source_ids,
    config: SearchConfig,
    compact: bool = kernels.DYNAMIC_SHAPES,
    prefix_ids=None,
) -> SearchResult:
    """Sampling when `config.sampling` is set, greedy search for `beam_size == 1`, else beam.

    Works eagerly (slowly) and compiled; `Decoder` or `JaxDecoder` avoid retracing.

    Args:
        model: A built `translator.model.Transformer`.
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: A `SearchConfig`.
        compact: Drop finished sentences from the loop (False under XLA); the result is
            the same either way.
        prefix_ids: int32 `[batch, width]`, target prefixes to continue (see `prepare`).

    Returns:
        A `SearchResult`: ids `[batch, n, length]`, scores and lengths `[batch, n]`, with
        n = `config.hypotheses`.
    """
    strategy = greedy_search if config.beam_size == 1 else beam_search
    if config.sampled:
        strategy = sample
    return strategy(prepare(model, source_ids, config, compact, prefix_ids), config, compact)
