"""Our traced search, kept beside the model so a later process neither builds nor traces it.

Building and tracing dominate the time to a first translation (decision D7), so the
first load writes the search as one frozen, optimized
graph, `<model dir>/search-cache/<key>/search.pb`, that later loads call by name. The key
covers everything the graph depends on. Prefixed and XLA searches are not cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.framework import function_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.python.eager import context

from translator import __version__
from translator.backends.graph_options import (
    lean_config,
    lean_graph_options,
    optimized_graph_options,
)
from translator.engines.base import SEARCH_CACHE_ENTRIES
from translator.io import atomic_directory
from translator.layers.layer_norm import fuses_here
from translator.search.common import SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from translator.artifacts import ModelFiles
    from translator.config import TransformerConfig
    from translator.search import Decoder, SearchConfig

logger = logging.getLogger(__name__)

# Where a model directory keeps its cached searches.
CACHE_DIR = "search-cache"
# An entry's files: the graph (a serialized `FunctionDef`), and what `describe` reports.
GRAPH = "search.pb"
FACTS = "search.json"
# The traced graph's revision, in the key: raise it when a code change alters the ops a
# search runs, so new graphs replace entries written under the same version number.
GRAPH_REVISION = 7
# Where the runtime places a search's ops without a GPU; Grappler's CPU rewrites need it.
CPU_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"
# The signature of a cached graph: source ids in; ids, scores, lengths out.
INPUTS, OUTPUTS = 1, len(SearchResult._fields)
# The graph's mark that Grappler's pass is done (removed before the runtime sees it).
_OPTIMIZED = "_translator_grappler_done"


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
        "gpu": _has_gpu(),
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

    Raises:
        ValueError: The graph file is not a search's.
        tf.errors.OpError: TensorFlow's runtime refused it.
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
        self._function, self._optimized = _register((entry / GRAPH).read_bytes())
        self._decoder: Decoder | None = None
        self._building = threading.Lock()  # batches may arrive on several threads at once
        # Most recently used (see `_evict`); a read-only directory only loses the order.
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
            options = optimized_graph_options if self._optimized else lean_graph_options
            with options():  # every call alike: the options key the instantiation
                outputs = context.context().call_function(self._function, [source_ids], OUTPUTS)
            return SearchResult(*outputs)
        return self._built()(source_ids, prefix_ids)

    def cross_attention(self, source_ids, target_ids) -> np.ndarray:
        """The model's attention for alignments, from its `Decoder` (not cached)."""
        return self._built().cross_attention(source_ids, target_ids)

    def _built(self) -> Decoder:
        with self._building:  # built once, by the first call that needs the model
            if self._decoder is None:
                self._decoder = self._build()
        return self._decoder

    def describe(self) -> dict[str, Any]:
        return {**self._described, "search_cache": str(self.entry)}


def _register(serialized: bytes) -> tuple[bytes, bool]:
    """Adds a cached graph, named by its content: (its name, Grappler's pass done)."""
    try:
        function = function_pb2.FunctionDef.FromString(serialized)
    except DecodeError as error:
        raise ValueError(f"not a search's graph: {error}") from error
    signature = function.signature
    if (len(signature.input_arg), len(signature.output_arg)) != (INPUTS, OUTPUTS):
        raise ValueError(f"not a search's graph: {signature.name}")
    # A file cut between two of its nodes still parses: its outputs' returns, written after
    # every node, are then missing (and TensorFlow would fail only when it is called).
    if not function.node_def or any(arg.name not in function.ret for arg in signature.output_arg):
        raise ValueError(f"not a whole search graph: {signature.name} lacks its returns")
    optimized = function.attr[_OPTIMIZED].b
    del function.attr[_OPTIMIZED]
    signature.name = "translator_search_" + hashlib.sha256(serialized).hexdigest()[:16]
    ctx = context.context()
    if not ctx.has_function(signature.name):
        ctx.add_function_def(function)
    return signature.name.encode(), optimized


def load_cached(
    entry: Path,
    config: SearchConfig,
    model_config: TransformerConfig,
    build: Callable[[], Decoder],
) -> CachedSearch | None:
    """The cached search at `entry` (args as `CachedSearch`), or None: none, or unreadable."""
    if not (entry / FACTS).is_file():
        return None
    try:
        return CachedSearch(entry, config, model_config, build)
    except (OSError, ValueError, tf.errors.OpError) as error:
        logger.warning("%s: unreadable search cache, rebuilding it (%s)", entry, error)
        return None


def save_search(decoder: Decoder, entry: Path) -> None:
    """Saves `optimized_search(decoder)` as the cache entry `entry`; a failure is only logged."""
    try:
        function = optimized_search(decoder)
        with atomic_directory(entry) as staging:
            (staging / GRAPH).write_bytes(function.SerializeToString())
            (staging / FACTS).write_text(json.dumps(decoder.describe()) + "\n")
    except (OSError, ValueError, tf.errors.OpError) as error:
        logger.warning("%s: cannot write the search cache, going on without it (%s)", entry, error)
        return
    _evict(entry.parent, keep=SEARCH_CACHE_ENTRIES)


def optimized_search(decoder: Decoder) -> function_pb2.FunctionDef:
    """`decoder.translate` as one function: weights frozen, Grappler's pass done (no GPU).

    Without a GPU, every op is placed on the CPU and Grappler runs the pass of
    `lean_graph_options`, marked so a restored search runs under `optimized_graph_options`;
    with a GPU, placement and the pass are left to the runtime.

    Returns:
        A `FunctionDef`: int32 `[batch, width]` source ids in, `SearchResult`'s tensors out.
    """
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )
    from tensorflow.python.grappler import tf_optimizer

    frozen = convert_variables_to_constants_v2(decoder.translate.get_concrete_function())
    (source,), outputs = [t.name for t in frozen.inputs], [t.name for t in frozen.outputs]
    graph_def = frozen.graph.as_graph_def()
    optimize = not _has_gpu()
    if optimize:
        for node in graph_def.node:
            node.device = CPU_DEVICE
        meta_graph = meta_graph_pb2.MetaGraphDef(graph_def=graph_def)
        # What Grappler must keep: the fetches, in the collection it reads them from.
        meta_graph.collection_def["train_op"].node_list.value.extend(outputs)
        graph_def = tf_optimizer.OptimizeGraph(lean_config(), meta_graph)

    def imported(source_ids):
        return tf.graph_util.import_graph_def(
            graph_def, input_map={source: source_ids}, return_elements=outputs, name=""
        )

    spec = tf.TensorSpec([None, None], tf.int32, name="source_ids")
    function = tf.compat.v1.wrap_function(imported, [spec]).function_def
    function.attr[_OPTIMIZED].b = optimize
    return function


def _has_gpu() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


def _evict(cache: Path, keep: int) -> None:
    """Removes all but the `keep` most recently used entries of a model's cache."""
    entries = sorted(
        (path for path in cache.iterdir() if path.is_dir() and not path.name.startswith(".")),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    for stale in entries[keep:]:
        shutil.rmtree(stale, ignore_errors=True)
