"""Prefix decoding: the output begins with the given target prefix and continues from it."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.search.conftest import LENGTHS, VOCAB
from tests.support.search import sequence_log_probs
from translator.constants import EOS_ID
from translator.search import SearchConfig, search

GREEDY = SearchConfig(beam_size=1, length_penalty=0.0, max_length_a=1.0, max_length_b=3)
BEAM = dataclasses.replace(GREEDY, beam_size=3, n_best=2)
SAMPLED = dataclasses.replace(GREEDY, sampling="topk:4", num_samples=2, seed=5)


def run(model, source, config, prefix=None, compact=True):
    function = tf.function(lambda s, p: search(model, s, config, compact, p))
    if prefix is None:
        function = tf.function(lambda s: search(model, s, config, compact))
        return [np.asarray(x) for x in function(tf.constant(source))]
    return [np.asarray(x) for x in function(tf.constant(source), tf.constant(prefix))]


def prefixes_of(ids, lengths, cut):
    """int32 [batch, width]: the first `cut[i]` tokens of each sentence's best output."""
    prefix = np.zeros((len(ids), max(max(cut), 1)), "int32")
    for row, count in enumerate(cut):
        count = min(count, int(lengths[row, 0]) - 1)  # never the EOS
        prefix[row, :count] = ids[row, 0, :count]
    return prefix


def test_greedy_continuing_its_own_prefix_gives_its_whole_output(model, source):
    ids, scores, lengths = run(model, source, GREEDY)
    for compact in (True, False):
        prefix = prefixes_of(ids, lengths, [3, 0, 1, 2, 5, 1])
        got = run(model, source, GREEDY, prefix, compact)
        np.testing.assert_array_equal(got[0], ids)
        np.testing.assert_allclose(got[1], scores, rtol=1e-5)


@pytest.mark.parametrize("config", [GREEDY, BEAM, SAMPLED], ids=["greedy", "beam", "sampling"])
def test_an_empty_prefix_is_the_plain_search(model, source, config):
    plain = run(model, source, config)
    empty = run(model, source, config, np.zeros((len(LENGTHS), 3), "int32"))
    for a, b in zip(plain, empty, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("config", [GREEDY, BEAM, SAMPLED], ids=["greedy", "beam", "sampling"])
def test_every_output_begins_with_its_prefix_scored_as_the_whole(model, source, config):
    rng = np.random.default_rng(8)
    width = 12  # longer than some sentences' limits: the limit makes room for it
    prefix = np.zeros((len(LENGTHS), width), "int32")
    for row, count in enumerate([4, 0, 12, 1, 2, 7]):
        prefix[row, :count] = rng.integers(4, VOCAB, size=count)
    ids, scores, lengths = run(model, source, config, prefix)
    for row in range(len(LENGTHS)):
        count = int(np.count_nonzero(prefix[row]))
        hypotheses = []
        for k in range(ids.shape[1]):
            length = int(lengths[row, k])
            if length == 0 and k > 0:  # an empty n-best slot (one way left to go on)
                assert scores[row, k] == -np.inf
                continue
            assert length > count, "room for the prefix and EOS"
            tokens = ids[row, k, :length].tolist()
            assert tokens[:count] == prefix[row, :count].tolist() and tokens[-1] == EOS_ID
            hypotheses.append(tokens)
        # Scores are the model's log P of the whole output, prefix included.
        want = sequence_log_probs(model, source[row], hypotheses)
        np.testing.assert_allclose(scores[row, : len(hypotheses)], want, rtol=1e-4, atol=1e-4)


def test_prefixes_compile_with_xla_and_decode_alike(model, source):
    prefix = np.zeros((len(LENGTHS), 4), "int32")
    prefix[0, :3], prefix[3, :1] = [5, 6, 7], [9]
    plain = run(model, source, GREEDY, prefix)
    function = tf.function(
        lambda s, p: search(model, s, GREEDY, False, p), jit_compile=True, reduce_retracing=True
    )
    compiled = [np.asarray(x) for x in function(tf.constant(source), tf.constant(prefix))]
    np.testing.assert_array_equal(compiled[0], plain[0])
    np.testing.assert_allclose(compiled[1], plain[1], rtol=1e-5)
