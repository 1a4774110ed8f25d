"""Decoding strategies over the model's incremental step function.

One while loop (`driver.decode`, no custom ops, so it fits a SavedModel or an XLA program)
runs `greedy_search`, `beam_search` or `sample`; `search` picks one by `SearchConfig`.
Conventions are in `translator.search.common`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from translator.backends.jax_decoder import JaxDecoder
    from translator.backends.tf_decoder import Decoder
    from translator.search.beam import BeamState, beam_search
    from translator.search.common import (
        SearchResult,
        SpecialIds,
        length_penalty,
        output_length_limits,
    )
    from translator.search.config import SearchConfig
    from translator.search.decoder import prepare, search
    from translator.search.driver import SearchInputs
    from translator.search.greedy import GreedyState, greedy_search
    from translator.search.sampling import sample

# Imported on first use, so reading `SearchConfig` for `--help` does not start TensorFlow.
_LAZY = {
    "BeamState": "beam",
    "beam_search": "beam",
    "SearchResult": "common",
    "length_penalty": "common",
    "output_length_limits": "common",
    "SearchConfig": "config",
    "Decoder": "translator.backends.tf_decoder",
    "JaxDecoder": "translator.backends.jax_decoder",
    "prepare": "decoder",
    "search": "decoder",
    "SearchInputs": "driver",
    "SpecialIds": "common",
    "GreedyState": "greedy",
    "greedy_search": "greedy",
    "sample": "sampling",
}

__all__ = [
    "BeamState",
    "Decoder",
    "GreedyState",
    "JaxDecoder",
    "SearchConfig",
    "SearchInputs",
    "SearchResult",
    "SpecialIds",
    "beam_search",
    "greedy_search",
    "length_penalty",
    "output_length_limits",
    "prepare",
    "sample",
    "search",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = _LAZY[name]  # a module of the search, or of a backend (its decoder)
        module = module if "." in module else f"translator.search.{module}"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'translator.search' has no attribute {name!r}")
