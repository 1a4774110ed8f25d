"""How Grappler optimizes a search's graph: the same rewrites, in one pass, not two.

A restored search's first call spends most of its time in Grappler, TensorFlow's graph
optimizer (bench/RESULTS.md, "Time to the first translation"). By default it runs its
meta-optimizer twice over the whole graph, the first time with a layout pass (data
formats for GPU kernels) and a memory pass (recomputing or swapping training's
activations). On a search, the second pass changes nothing that runs and the other two
have nothing to rewrite, so `lean_graph_options` turns them off for the calls
made in its scope: the rewrites that shape the running graph (constant folding,
arithmetic, the remapper's fused kernels) still run once, and the translations are the
same as under the defaults (tests/search/test_graph_options.py).

The setting rides on TensorFlow's per-thread function call options (a private API,
`tensorflow.python.eager.context`), which key a function's instantiation: every call
of one search must use the same options, or it is optimized and instantiated again.
`Decoder`, the search cache and the server therefore call their searches only through
it. Where the private API is missing (another TensorFlow), calls run with the defaults.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator

import tensorflow as tf

try:
    from tensorflow.python.eager import context as _context
except ImportError:  # pragma: no cover (a TensorFlow without it: the defaults)
    _context = None


@functools.lru_cache(maxsize=8)
def _lean_config(serialized: bytes) -> tf.compat.v1.ConfigProto:
    """The call options' `ConfigProto` with one meta-optimizer pass, no layout or memory pass.

    Cached: every search call asks for it, with the same few default options.
    """
    config = tf.compat.v1.ConfigProto()
    config.ParseFromString(serialized)
    rewrite = config.graph_options.rewrite_options
    rewrite.meta_optimizer_iterations = rewrite.ONE
    rewrite.layout_optimizer = rewrite.OFF
    rewrite.memory_optimization = rewrite.NO_MEM_OPT
    return config


@contextlib.contextmanager
def lean_graph_options() -> Iterator[None]:
    """Calls of `tf.function`s in this scope, on this thread, use the lean Grappler setting.

    Thread-local, so a server's threads do not see each other's setting. Nesting is fine.
    """
    if _context is None:  # pragma: no cover
        yield
        return
    ctx = _context.context()
    saved = ctx.function_call_options
    lean = copy.copy(saved)
    lean.config_proto_serialized = _lean_config(saved.config_proto_serialized)
    ctx.function_call_options = lean
    try:
        yield
    finally:
        ctx.function_call_options = saved
