"""`Decoder`: a model and a `SearchConfig` compiled into one saveable TensorFlow function."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from translator.alignment import forced_attention
from translator.backends.graph_options import lean_graph_options
from translator.search.common import SearchResult
from translator.search.config import SearchConfig
from translator.search.decoder import search


class Decoder(tf.Module):
    """A model and a `SearchConfig` bound into one compiled search function.

    `decoder(source_ids)` runs `translate`, a `tf.function` over int32 `[None, None]`
    traced once, under `lean_graph_options`; saveable with `tf.saved_model.save`.

    Args:
        model: A `translator.model.Transformer`; built here if needed.
        config: The `SearchConfig`; fixed for the life of the function.
        jit_compile: Compile the whole search with XLA (one compile per input shape).
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

        self._attention = tf.function(
            lambda source_ids, target_ids: forced_attention(self.model, source_ids, target_ids),
            input_signature=[
                tf.TensorSpec([None, None], tf.int32, name="source_ids"),
                tf.TensorSpec([None, None], tf.int32, name="target_ids"),
            ],
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

    def cross_attention(self, source_ids, target_ids) -> np.ndarray:
        """The attention word alignments read (`translator.alignment.forced_attention`)."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        return self._attention(source_ids, tf.convert_to_tensor(target_ids, tf.int32)).numpy()

    def __call__(self, source_ids, prefix_ids=None) -> SearchResult:
        """Translates a batch, each output continuing its prefix if given; see `search`."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        with lean_graph_options():  # every call alike: the options key its instantiation
            if prefix_ids is None:
                return self.translate(source_ids)
            prefix_ids = tf.convert_to_tensor(prefix_ids, tf.int32)
            return self.translate_prefixed(source_ids, prefix_ids)
