"""The entry points: `search` (any context) and `Decoder` (a compiled, saveable module)."""

from __future__ import annotations

import tensorflow as tf

from translator.search.beam import beam_search
from translator.search.common import SearchResult, output_length_limits
from translator.search.config import SearchConfig
from translator.search.driver import SearchInputs
from translator.search.graph_options import lean_graph_options
from translator.search.greedy import greedy_search
from translator.search.sampling import sample


def prepare(
    model, source_ids, config: SearchConfig, compact: bool = True, prefix_ids=None
) -> SearchInputs:
    """Encodes a batch once and gives the search its step function, cache and limits.

    Args:
        model: A built `translator.model.Transformer` (`encode`, `init_cache`,
            `decode_step`, `config`).
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: The `SearchConfig` (its length limits).
        compact: For a compacting search, whose loop allows changing shapes: the
            self-attention cache then grows with the written positions (faster); else
            it has the static `cache_length` XLA needs.
        prefix_ids: int32 `[batch, width]`, target pieces each output must begin with,
            then PAD; or None. A sentence's length limit is raised to hold its prefix and
            EOS; a prefix longer than the output cap allows is cut to it.

    Returns:
        The `SearchInputs` of the batch.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    max_lengths, cache_length = output_length_limits(
        source_ids, config, model.config.position_limit
    )  # [batch], scalar
    if prefix_ids is not None:
        cap = min(config.max_output_length, model.config.position_limit or (1 << 30))
        prefix_ids = tf.convert_to_tensor(prefix_ids, tf.int32)[:, : cap - 1]  # room for EOS
        prefix_ids = tf.pad(prefix_ids, [[0, 0], [0, 1]])  # [batch, width + 1]: never empty
        prefix_lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix_ids, 0), tf.int32), 1)
        max_lengths = tf.maximum(max_lengths, prefix_lengths + 1)  # [batch]
        # From the padded width, not the lengths: a shape, as XLA's static cache needs.
        cache_length = tf.maximum(cache_length, tf.shape(prefix_ids)[1])
    encoder_output = model.encode(source_ids, training=False)  # [batch, src, d_model]
    cache = model.init_cache(encoder_output, source_ids, None if compact else cache_length)
    return SearchInputs(model.decode_step, cache, max_lengths, cache_length, prefix_ids)


def search(
    model, source_ids, config: SearchConfig, compact: bool = True, prefix_ids=None
) -> SearchResult:
    """Sampling when `config.sampling` is set, greedy search for `beam_size == 1`, else beam.

    Works eagerly (slowly: the loop then runs in Python) and inside a `tf.function`; use
    `Decoder` for a compiled function that does not retrace per batch.

    Args:
        model: A built `translator.model.Transformer`.
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: A `SearchConfig`.
        compact: Drop finished sentences from the loop, so a step only costs what the
            sentences still decoding cost; the loop's batch then shrinks, which XLA
            cannot compile (pass False there). The result is the same either way.
        prefix_ids: int32 `[batch, width]`, target prefixes to continue (see `prepare`).

    Returns:
        A `SearchResult`: ids `[batch, n, length]`, scores and lengths `[batch, n]`, with
        n = `config.hypotheses`.
    """
    strategy = greedy_search if config.beam_size == 1 else beam_search
    if config.sampled:
        strategy = sample
    return strategy(prepare(model, source_ids, config, compact, prefix_ids), config, compact)


class Decoder(tf.Module):
    """A model and a `SearchConfig` bound into one compiled search function.

    `decoder(source_ids)` runs `decoder.translate`, a `tf.function` with the input
    signature int32 `[None, None]`: it is traced once, whatever the batch size and source
    length (with `jit_compile=True`, XLA still compiles once per distinct input shape, so
    feed length buckets). Being a `tf.Module` with no Python-side state in the function,
    it can be saved with `tf.saved_model.save(decoder, path)`; the restored object has a
    `translate` function returning the same `SearchResult` structure. Calling the decoder
    runs its function under `lean_graph_options` (one Grappler pass; the same results).

    Args:
        model: A `translator.model.Transformer`; built here if needed.
        config: The `SearchConfig`; fixed for the life of the function.
        jit_compile: Compile the whole search with XLA (then one compile per input shape,
            and finished sentences stay in the loop: XLA needs static shapes).
        name: Module name.
    """

    def __init__(
        self,
        model,
        config: SearchConfig | None = None,
        jit_compile: bool = False,
        name: str | None = None,
    ):
        super().__init__(name=name)
        if not model.built:
            model.build()  # weights must exist before tracing (tf.function creates none)
        self.model = model
        self.config = config or SearchConfig()
        self.jit_compile = jit_compile
        # What reports name this engine (`translator.engines.BatchDecoder`).
        self.engine = "tensorflow"
        self.translate = tf.function(
            self._translate,
            input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")],
            jit_compile=jit_compile,
        )
        self.translate_prefixed = tf.function(
            self._translate_prefixed,
            input_signature=[
                tf.TensorSpec([None, None], tf.int32, name="source_ids"),
                tf.TensorSpec([None, None], tf.int32, name="prefix_ids"),
            ],
            jit_compile=jit_compile,
        )

    @property
    def model_config(self):
        """The searched model's `TransformerConfig`."""
        return self.model.config

    def describe(self) -> dict:
        """How the search runs, for a report: XLA and the dtype it computes in."""
        return {"xla": self.jit_compile, "compute_dtype": self.model.compute_dtype}

    def _translate(self, source_ids) -> SearchResult:
        return search(self.model, source_ids, self.config, compact=not self.jit_compile)

    def _translate_prefixed(self, source_ids, prefix_ids) -> SearchResult:
        compact = not self.jit_compile
        return search(self.model, source_ids, self.config, compact, prefix_ids)

    def __call__(self, source_ids, prefix_ids=None) -> SearchResult:
        """Translates a batch, each output continuing its prefix if given; see `search`."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        with lean_graph_options():  # every call alike: the options key its instantiation
            if prefix_ids is None:
                return self.translate(source_ids)
            prefix_ids = tf.convert_to_tensor(prefix_ids, tf.int32)
            return self.translate_prefixed(source_ids, prefix_ids)
