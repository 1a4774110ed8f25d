"""How Grappler optimizes a search's graph: the same rewrites, in one pass, not two.

Grappler dominates a restored search's first call (decision D7); its second, layout and
memory passes change nothing in a search, so `lean_graph_options` turns them off. The
setting rides on per-thread call options (a private API) that key a function's
instantiation: every call of a search must use them.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator

import tensorflow as tf

try:
    from tensorflow.python.eager import context as _context
except ImportError:  # pragma: no cover (a TensorFlow without it: the defaults)
    _context = None


@functools.lru_cache(maxsize=8)
def _lean_config(serialized: bytes) -> tf.compat.v1.ConfigProto:
    """The call options' `ConfigProto` with one meta-optimizer pass, no layout or memory pass."""
    config = tf.compat.v1.ConfigProto()
    config.ParseFromString(serialized)
    rewrite = config.graph_options.rewrite_options
    rewrite.meta_optimizer_iterations = rewrite.ONE
    rewrite.layout_optimizer = rewrite.OFF
    rewrite.memory_optimization = rewrite.NO_MEM_OPT
    return config


@functools.lru_cache(maxsize=8)
def _no_grappler_config(serialized: bytes) -> tf.compat.v1.ConfigProto:
    """The call options' `ConfigProto` with Grappler off (cached as `_lean_config`)."""
    config = tf.compat.v1.ConfigProto()
    config.ParseFromString(serialized)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def lean_config() -> tf.compat.v1.ConfigProto:
    """This thread's `ConfigProto` under `lean_graph_options`: what Grappler runs with."""
    if _context is None:  # pragma: no cover
        return tf.compat.v1.ConfigProto()
    return _lean_config(_context.context().function_call_options.config_proto_serialized)


@contextlib.contextmanager
def lean_graph_options() -> Iterator[None]:
    """Calls of `tf.function`s in this scope, on this thread, use the lean Grappler setting."""
    with _call_config(_lean_config):
        yield


@contextlib.contextmanager
def optimized_graph_options() -> Iterator[None]:
    """Calls in this scope, on this thread, skip Grappler: for a graph it already rewrote."""
    with _call_config(_no_grappler_config):
        yield


@contextlib.contextmanager
def _call_config(rewrite: Callable[[bytes], tf.compat.v1.ConfigProto]) -> Iterator[None]:
    """This thread's function call options with `rewrite` of their `ConfigProto`."""
    if _context is None:  # pragma: no cover
        yield
        return
    ctx = _context.context()
    saved = ctx.function_call_options
    changed = copy.copy(saved)
    changed.config_proto_serialized = rewrite(saved.config_proto_serialized)
    ctx.function_call_options = changed
    try:
        yield
    finally:
        ctx.function_call_options = saved
