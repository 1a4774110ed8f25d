"""Decoding strategies over the model's incremental step function.

The model exposes `encode`, `init_cache` and `decode_step` (`translator.model`); the
strategies here consume them, OpenNMT-tf style, as TensorFlow loops (`tf.while_loop`, no
Python loop per token, no custom ops) that fit in a SavedModel:

- `greedy_search`: the most probable token at each step.
- `beam_search`: beam search with the GNMT length penalty and n-best output.
- `search`: picks one by `SearchConfig.beam_size`; `Decoder` compiles it once, as a
  `tf.Module` ready for `tf.saved_model.save`.

Scoring and length conventions are in `translator.search.common`.
"""

from translator.search.beam import BeamState, beam_search
from translator.search.common import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SearchResult,
    length_penalty,
    output_length_limits,
)
from translator.search.config import SearchConfig
from translator.search.decoder import Decoder, search
from translator.search.greedy import GreedyState, greedy_search

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "BeamState",
    "Decoder",
    "GreedyState",
    "SearchConfig",
    "SearchResult",
    "beam_search",
    "greedy_search",
    "length_penalty",
    "output_length_limits",
    "search",
]
