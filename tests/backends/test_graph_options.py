"""The lean Grappler setting of search calls: in effect where asked, and the same results."""

import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

from tests.support.models import random_sources, tiny_model
from translator.backends.graph_options import lean_graph_options
from translator.search import Decoder, SearchConfig, SearchResult

VOCAB = 16


def rewrite_options() -> tf.compat.v1.ConfigProto:
    """The Grappler options this thread's function calls instantiate with."""
    config = tf.compat.v1.ConfigProto()
    config.ParseFromString(context.context().function_call_options.config_proto_serialized)
    return config.graph_options.rewrite_options


def test_lean_options_hold_in_the_scope_on_its_thread_only():
    before = rewrite_options()
    seen_by_other_thread = []
    with lean_graph_options():
        lean = rewrite_options()
        thread = threading.Thread(target=lambda: seen_by_other_thread.append(rewrite_options()))
        thread.start()
        thread.join()
    assert lean.meta_optimizer_iterations == lean.ONE
    assert lean.layout_optimizer == lean.OFF
    assert lean.memory_optimization == lean.NO_MEM_OPT
    # The rewrites that shape the running graph stay as they were.
    assert lean.remapping == before.remapping
    assert lean.arithmetic_optimization == before.arithmetic_optimization
    assert lean.constant_folding == before.constant_folding
    assert rewrite_options() == before  # restored after the scope
    assert seen_by_other_thread == [before]  # thread-local


@pytest.mark.parametrize("policy", ["float32", "bfloat16"])
def test_lean_search_translates_as_the_default_one(policy):
    """The decoder's calls (lean) equal calls of its function under the defaults.

    In bfloat16 too, where the remapper's fused kernels round differently from the ops
    they replace: the lean setting must keep the same rewrites, not only similar ones.
    """
    model = tiny_model(VOCAB, seed=5, logit_scale=2.0, eos_bias=2.0, constant_eos=True)
    decoder = Decoder(model.with_policy(policy), SearchConfig(beam_size=3, n_best=2))
    rng = np.random.default_rng(8)
    for lengths in ([6, 3, 9], [4] * 5):
        source = tf.constant(random_sources(rng, lengths, VOCAB))
        lean = decoder(source)
        default = decoder.translate(source)  # called outside `lean_graph_options`
        for name in SearchResult._fields:
            np.testing.assert_array_equal(getattr(lean, name), getattr(default, name))
