"""The compiled search of this process' Keras backend: the one place that picks it."""

from __future__ import annotations

from translator.backends import BACKEND
from translator.search.config import SearchConfig


def compiled_search(model, config: SearchConfig, jit_compile: bool = False):
    """`model`'s search as one compiled program on this backend.

    TensorFlow: `Decoder` (a `tf.function`, XLA when `jit_compile`); JAX: `JaxDecoder`
    (`jax.jit`, XLA always). Both take the same batches and return a `SearchResult`.
    """
    if BACKEND == "jax":
        from translator.backends.jax_decoder import JaxDecoder

        return JaxDecoder(model, config)
    from translator.backends.tf_decoder import Decoder

    return Decoder(model, config, jit_compile=jit_compile)


def saves_as_graph() -> bool:
    """Whether this backend's search can be saved and reloaded as a graph.

    That is the search cache (`translator.engines.search_cache`): TensorFlow's; JAX
    compiles anew.
    """
    return BACKEND == "tensorflow"
