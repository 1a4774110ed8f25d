"""`JaxDecoder`: a model and a `SearchConfig` compiled into one XLA program on JAX."""

from __future__ import annotations

import jax
import keras
import numpy as np

from translator.alignment import forced_attention
from translator.search.common import SearchResult, trim_host
from translator.search.config import SearchConfig
from translator.search.decoder import search


class JaxDecoder:
    """The search of `translator.search.search` as a `jax.jit` program.

    The weights are arguments, so one compile serves every call of one input shape.

    Args:
        model: A `translator.model.Transformer` under the JAX backend; built if needed.
        config: The `SearchConfig`; fixed for the life of the program.
    """

    def __init__(self, model, config: SearchConfig | None = None):
        if not model.built:
            model.build()
        self.model = model
        self.config = config or SearchConfig()
        # What reports name this engine (as `Decoder.engine`).
        self.engine = "jax"
        self._variables = list(model.variables)
        self._search = jax.jit(self._run)
        self._attention = jax.jit(self._attend)

    @property
    def model_config(self):
        """The searched model's `TransformerConfig`."""
        return self.model.config

    def describe(self) -> dict:
        """How the search runs, for a report: XLA and the dtype it computes in."""
        return {"xla": True, "compute_dtype": self.model.compute_dtype}

    def _run(self, values, source_ids, prefix_ids):
        mapping = list(zip(self._variables, values, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            result = search(self.model, source_ids, self.config, False, prefix_ids)
        return tuple(result)

    def _attend(self, values, source_ids, target_ids):
        mapping = list(zip(self._variables, values, strict=True))
        with keras.StatelessScope(state_mapping=mapping):
            return forced_attention(self.model, source_ids, target_ids)

    def cross_attention(self, source_ids, target_ids) -> np.ndarray:
        """The attention word alignments read (`translator.alignment.forced_attention`)."""
        values = [variable.value for variable in self._variables]
        source_ids = np.asarray(source_ids, np.int32)
        return np.asarray(self._attention(values, source_ids, np.asarray(target_ids, np.int32)))

    def __call__(self, source_ids, prefix_ids=None) -> SearchResult:
        """Translates a batch (int32 `[batch, source_length]`), as `search` does.

        Returns:
            A `SearchResult` of NumPy arrays, trimmed to the longest hypothesis.
        """
        values = [variable.value for variable in self._variables]
        source_ids = np.asarray(source_ids, np.int32)
        prefix = None if prefix_ids is None else np.asarray(prefix_ids, np.int32)
        return trim_host(SearchResult(*self._search(values, source_ids, prefix)))
