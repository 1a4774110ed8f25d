"""The seam between the text path and the engines: two protocols and the run options.

What searches a batch for `Translator` is a `BatchDecoder` (ours or CTranslate2's); what
was loaded is a `LoadedModel`. Reports and commands read only what these protocols name.
This module imports no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from translator.config import PRECISIONS
from translator.constants import DEFAULT_BATCH_TOKENS
from translator.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import tensorflow as tf

    from translator.config import TransformerConfig
    from translator.pipelines.vocabulary import Vocabulary
    from translator.search.common import SearchResult
    from translator.search.config import SearchConfig

# What can run the search of `translate` and `evaluate` (--engine): auto picks by the
# model directory.
ENGINES = ("auto", "tensorflow", "ctranslate2")
# Weight types of a CTranslate2 export (`--quantization`); here, so `--help` needs no
# CTranslate2 code.
CTRANSLATE2_QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16")
# Batches a CTranslate2 engine translates at once by default (its replicas, which share
# the cores; decision D6).
CTRANSLATE2_REPLICAS = 1
# Cached searches a model directory keeps (each copies the weights); here for `--help`.
SEARCH_CACHE_ENTRIES = 2


@dataclasses.dataclass(frozen=True)
class InferenceOptions:
    """How a loaded model runs: batching and engine, not what the search computes."""

    # Source tokens per batch, padding included.
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    # Batches decoded at once (same translations for any value); None: the engine's default.
    parallel_batches: int | None = None
    # Longer sources are cut to this many tokens, EOS included; None: the model's limit.
    max_source_length: int | None = None
    # Compile our search with XLA (one compile per batch shape).
    xla: bool = False
    # One of ENGINES.
    engine: str = "auto"
    # What our search computes in (`translator.config.PRECISIONS`).
    precision: str = "model"
    # Prepended to every source as one id (e.g. <2de>), one of the vocabulary's tags; "": none.
    tag: str = ""
    # Keep our traced search in the model directory for later loads (`search_cache`).
    cache_search: bool = True
    # Split each line into sentences (and one over the model's limit again), translated
    # apart and rejoined; False: a line is one segment, cut at the limit, as the
    # SavedModel's signatures take a string.
    split: bool = True
    # The language whose rules split sentences; "": the one the model's record states.
    source_lang: str = ""

    def __post_init__(self) -> None:
        if self.batch_tokens < 1:
            raise ConfigError(f"--batch-tokens must be >= 1, got {self.batch_tokens}")
        if self.parallel_batches is not None and self.parallel_batches < 1:
            raise ConfigError(f"--parallel-batches must be >= 1, got {self.parallel_batches}")
        check_max_source_length(self.max_source_length)
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {ENGINES}, got {self.engine!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"--precision must be one of {PRECISIONS}, got {self.precision!r}")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as `nproc` counts)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover (no affinity API, e.g. macOS)


def check_max_source_length(value: int | None) -> None:
    """Raises `ConfigError` unless a source cut leaves room for a piece and EOS (or None)."""
    if value is not None and value < 2:
        raise ConfigError(f"--max-source-length must be >= 2, got {value}")


@runtime_checkable
class BatchDecoder(Protocol):
    """Searches one batch of source ids; what a `Translator` calls per batch."""

    # What reports name the engine: "tensorflow" or "ctranslate2".
    engine: str

    @property
    def config(self) -> SearchConfig:
        """The search that runs (an engine may run other rules than asked for)."""

    @property
    def model_config(self) -> TransformerConfig:
        """The architecture searched (its position limit bounds the sources)."""

    def __call__(
        self, source_ids: tf.Tensor | np.ndarray, prefix_ids: tf.Tensor | np.ndarray | None = None
    ) -> SearchResult:
        """int32 `[batch, width]` source ids (0 = padding, EOS ended) -> a `SearchResult`.

        `prefix_ids`: int32 `[batch, prefix width]`, target pieces each output must begin
        with, then PAD (None: none). The result: ids `[batch, n, length]`, scores and
        lengths `[batch, n]`.
        """

    def cross_attention(
        self, source_ids: tf.Tensor | np.ndarray, target_ids: tf.Tensor | np.ndarray
    ) -> np.ndarray:
        """The attention word alignments are read from, over given translations.

        `source_ids` as for a search, `target_ids` int32 `[batch, length]`: pieces, EOS,
        PAD. Returns float32 `[batch, length, source width]`, a row per target piece
        (`translator.alignment.forced_attention`).

        Raises:
            ConfigError: the engine cannot give it (what to do instead named).
        """

    def describe(self) -> dict[str, Any]:
        """Facts of how it runs, for a report (e.g. XLA, compute dtype, quantization)."""


@runtime_checkable
class LoadedModel(Protocol):
    """A loaded model: a model directory of ours, or an export another engine runs."""

    @property
    def directory(self) -> Path:
        """Where it was loaded from."""

    @property
    def vocabulary(self) -> Vocabulary:
        """Its source and target tokenizers."""

    @property
    def metadata(self) -> dict[str, Any]:
        """The facts recorded with the model (metadata.json)."""

    @property
    def model_file(self) -> Path:
        """The weights file (for a report's checksum)."""

    @property
    def model_config(self) -> TransformerConfig:
        """The architecture."""
