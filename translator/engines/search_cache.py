"""Our traced search, kept beside the model so a later process neither builds nor traces it.

Most of the time to a first translation went to building the Keras model and tracing
the search's `tf.function` (bench/RESULTS.md, "Time to the first translation"). So the
first load of a model with some search settings saves the traced search, with the
weights it reads, as a SavedModel in `<model dir>/search-cache/<key>/`, and later loads
restore it with `tf.saved_model.load`: no Keras model, no tracing.

The key covers everything the graph depends on: the search settings, the precision,
the weights file (size and modification time), the TensorFlow and translator versions,
the graph's revision and whether this host fuses layer norms (not with a GPU), so a
retrained model, an upgrade or a move to a GPU host misses and writes a new entry. Only
the `SEARCH_CACHE_ENTRIES` most recently used entries stay: each holds a copy of the
weights. A prefixed search (`--prefix-file`), rarely asked for, is not cached: it builds
the model when first used. Nor is an XLA search (it compiles per batch shape at run time
anyway).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from translator import __version__
from translator.engines.base import SEARCH_CACHE_ENTRIES
from translator.io import atomic_directory
from translator.layers.layer_norm import fuses_here
from translator.search.common import SearchResult
from translator.search.graph_options import lean_graph_options

if TYPE_CHECKING:  # pragma: no cover
    from translator.artifacts import ModelFiles
    from translator.config import TransformerConfig
    from translator.search import Decoder, SearchConfig

logger = logging.getLogger(__name__)

# Where a model directory keeps its cached searches.
CACHE_DIR = "search-cache"
# An entry's files: the SavedModel of `translate`, and what `describe` reports.
SAVED = "saved_model"
FACTS = "search.json"
# The traced graph's revision, in the key with the versions: raised when a change to the
# code alters the ops a search runs (2: the fused layer norm; 3: the normalizer's max
# taken from the top-k; 4: the logits cast once), so that a checkout's new graph
# replaces entries an older one wrote under the same version number.
GRAPH_REVISION = 4


def entry_path(files: ModelFiles, search: SearchConfig, precision: str) -> Path:
    """The cache entry of a model, search settings and precision."""
    stat = files.model_file.stat()
    facts = {
        "search": search.to_dict(),
        "precision": precision,
        "weights": [stat.st_size, stat.st_mtime_ns],
        "tensorflow": tf.__version__,
        "translator": __version__,
        "graph": GRAPH_REVISION,
        "fused_layer_norm": fuses_here(),
    }
    key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return files.directory / CACHE_DIR / key


class CachedSearch:
    """A `BatchDecoder` over a search restored from the cache.

    Args:
        entry: The cache entry (see `entry_path`), complete.
        config: The search settings it was saved with.
        model_config: The searched model's architecture.
        build: Builds the model's `Decoder`, for a prefixed search (not cached).
    """

    engine = "tensorflow"

    def __init__(
        self,
        entry: Path,
        config: SearchConfig,
        model_config: TransformerConfig,
        build: Callable[[], Decoder],
    ):
        self.entry = entry
        self._config = config
        self._model_config = model_config
        self._build = build
        self._described = json.loads((entry / FACTS).read_text())
        self._restored = tf.saved_model.load(str(entry / SAVED))
        self._decoder: Decoder | None = None
        # Most recently used (see `_evict`); in a read-only model directory, only the
        # eviction order suffers.
        with contextlib.suppress(OSError):
            os.utime(entry)

    @property
    def config(self) -> SearchConfig:
        return self._config

    @property
    def model_config(self) -> TransformerConfig:
        return self._model_config

    def __call__(self, source_ids, prefix_ids=None) -> SearchResult:
        """Searches a batch; see `translator.engines.BatchDecoder`."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)  # [batch, width]
        if prefix_ids is None:
            with lean_graph_options():  # as `Decoder` calls its search
                return SearchResult(*self._restored.translate(source_ids))
        if self._decoder is None:
            self._decoder = self._build()
        return self._decoder(source_ids, prefix_ids)

    def describe(self) -> dict[str, Any]:
        return {**self._described, "search_cache": str(self.entry)}


def load_cached(
    entry: Path,
    config: SearchConfig,
    model_config: TransformerConfig,
    build: Callable[[], Decoder],
) -> CachedSearch | None:
    """The cached search at `entry`, or None: there is none, or it cannot be read (a warning).

    Args: see `CachedSearch`.
    """
    if not (entry / FACTS).is_file():
        return None
    try:
        return CachedSearch(entry, config, model_config, build)
    except (OSError, ValueError, tf.errors.OpError) as error:
        logger.warning("%s: unreadable search cache, rebuilding it (%s)", entry, error)
        return None


def save_search(decoder: Decoder, entry: Path) -> None:
    """Saves `decoder.translate` and the weights it reads as the cache entry `entry`.

    A failure (a read-only model directory, a full disk) is reported and skipped: the
    search still runs, it only starts slower next time.
    """
    module = saveable_search(decoder)
    try:
        with atomic_directory(entry) as staging:
            # Without the checkpoint ops the SavedModel would carry for its own restoring
            # (`tf.saved_model.load` restores in Python): it saves and loads faster.
            options = tf.saved_model.SaveOptions(experimental_skip_saver=True)
            tf.saved_model.save(module, str(staging / SAVED), options=options)
            (staging / FACTS).write_text(json.dumps(decoder.describe()) + "\n")
    except (OSError, ValueError, tf.errors.OpError) as error:
        logger.warning("%s: cannot write the search cache, going on without it (%s)", entry, error)
        return
    _evict(entry.parent, keep=SEARCH_CACHE_ENTRIES)


def saveable_search(decoder: Decoder) -> tf.Module:
    """A module holding `decoder.translate`, traced, and the weights it reads, to save."""
    decoder.translate.get_concrete_function()  # traced once: the save and the run share it
    module = tf.Module()
    # Tracking the weights saves them (the Keras model itself, with its layers' own
    # functions, would take longer to save and to load).
    module.weights = [getattr(weight, "value", weight) for weight in decoder.model.weights]
    module.translate = decoder.translate
    return module


def _evict(cache: Path, keep: int) -> None:
    """Removes all but the `keep` most recently used entries of a model's cache."""
    entries = sorted(
        (path for path in cache.iterdir() if path.is_dir() and not path.name.startswith(".")),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    for stale in entries[keep:]:
        shutil.rmtree(stale, ignore_errors=True)
