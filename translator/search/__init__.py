"""Decoding strategies over the model's incremental step function.

The model exposes `encode`, `init_cache` and `decode_step` (`translator.model`);
`prepare` encodes a batch once and hands the strategies only the step function, the
cache and the length limits (`SearchInputs`). One loop (`driver.decode`: a while loop
with no Python loop per token and no custom ops, so it fits in a SavedModel, or an
XLA program on JAX) runs each strategy, OpenNMT-tf style; any of them can continue a given
target prefix (`SearchInputs.prefix_ids`):

- `greedy_search`: the most probable token at each step.
- `beam_search`: beam search with the GNMT length penalty and n-best output.
- `sample`: each next token drawn (top-k or nucleus, with a temperature), for
  back-translation.
- `search`: picks one by `SearchConfig`; `Decoder` compiles it once, as a
  `tf.Module` ready for `tf.saved_model.save`; `JaxDecoder` as an XLA program on JAX.

Scoring and length conventions are in `translator.search.common`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
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
    from translator.search.jax_decoder import JaxDecoder
    from translator.search.sampling import sample
    from translator.search.tf_decoder import Decoder

# Imported on first use, so that reading `SearchConfig` (the command-line defaults, for
# `--help`) does not start TensorFlow.
_LAZY = {
    "BeamState": "beam",
    "beam_search": "beam",
    "SearchResult": "common",
    "length_penalty": "common",
    "output_length_limits": "common",
    "SearchConfig": "config",
    "Decoder": "tf_decoder",
    "JaxDecoder": "jax_decoder",
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

        return getattr(importlib.import_module(f"translator.search.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'translator.search' has no attribute {name!r}")
