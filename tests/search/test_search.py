"""Invariants of greedy and beam search on tiny random models."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from bench.counting import CountingModel
from tests.search.conftest import LENGTHS, VOCAB
from tests.support.models import random_sources, tiny_model
from tests.support.search import compiled, hypotheses_of
from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.search import (
    SearchConfig,
    beam_search,
    greedy_search,
    length_penalty,
    output_length_limits,
)
from translator.search.common import log_sum_exp, next_token_candidates, top_k


def limits(source, config):
    max_lengths, _ = output_length_limits(tf.constant(source), config)
    return np.asarray(max_lengths)


@pytest.mark.parametrize("exact_stop", [True, False])
def test_beam_size_one_is_greedy(model, source, exact_stop):
    # alpha > 0 matters: a beam search that kept searching after the first EOS (while an
    # alive hypothesis could still win under the length penalty) would differ from greedy.
    config = SearchConfig(
        beam_size=1, length_penalty=0.6, max_length_a=1.0, max_length_b=2, exact_stop=exact_stop
    )
    greedy = compiled(greedy_search, model, config)(source)
    beam = compiled(beam_search, model, config)(source)
    lengths = np.asarray(greedy.lengths)
    assert len(set(lengths[:, 0])) > 1, "want sentences of several lengths"
    assert (lengths[:, 0] < limits(source, config)).any(), "want EOS before the limit"
    np.testing.assert_array_equal(beam.ids, greedy.ids)
    np.testing.assert_array_equal(beam.lengths, greedy.lengths)
    np.testing.assert_allclose(beam.scores, greedy.scores, rtol=1e-6)


@pytest.mark.parametrize("strategy", [greedy_search, beam_search])
def test_output_format(model, source, strategy):
    config = SearchConfig(
        beam_size=4, n_best=3 if strategy is beam_search else 1, max_length_a=1.0, max_length_b=3
    )
    result = compiled(strategy, model, config)(source)
    ids, scores, lengths = (np.asarray(x) for x in result)
    assert ids.dtype == np.int32 and scores.dtype == np.float32 and lengths.dtype == np.int32
    assert ids.shape == (len(LENGTHS), config.n_best, lengths.max())
    assert scores.shape == lengths.shape == (len(LENGTHS), config.n_best)
    max_lengths = limits(source, config)
    np.testing.assert_array_equal(max_lengths, np.array(LENGTHS) + 3)
    for b in range(len(LENGTHS)):
        assert np.all(np.diff(scores[b]) <= 0), "n-best must be sorted, best first"
        seen = set()
        for k in range(config.n_best):
            n = lengths[b, k]
            assert 1 <= n <= max_lengths[b]
            assert ids[b, k, n - 1] == EOS_ID
            assert np.all(ids[b, k, n:] == PAD_ID)
            body = ids[b, k, : n - 1]
            assert not np.isin(body, [PAD_ID, BOS_ID, EOS_ID]).any()
            seen.add(tuple(ids[b, k, :n]))
        assert len(seen) == config.n_best, "n-best hypotheses must be distinct"


@pytest.mark.parametrize("strategy", [greedy_search, beam_search])
def test_length_limit_is_per_sentence_and_ends_with_forced_eos(strategy):
    never_ends = tiny_model(VOCAB, seed=2, eos_bias=-30.0)
    source = random_sources(np.random.default_rng(4), LENGTHS, VOCAB)
    config = SearchConfig(beam_size=3, max_length_a=1.5, max_length_b=-1, max_output_length=8)
    result = compiled(strategy, never_ends, config)(source)
    expected = np.minimum(np.floor(1.5 * np.array(LENGTHS) - 1), 8).astype(int)
    np.testing.assert_array_equal(np.asarray(result.lengths)[:, 0], expected)
    ids = np.asarray(result.ids)
    assert ids.shape[-1] == 8
    for b, n in enumerate(expected):
        assert ids[b, 0, n - 1] == EOS_ID and EOS_ID not in ids[b, 0, : n - 1]


@pytest.mark.parametrize("strategy", [greedy_search, beam_search])
def test_batch_result_does_not_depend_on_the_other_sentences(model, source, strategy):
    config = SearchConfig(beam_size=4, n_best=2 if strategy is beam_search else 1)
    run = compiled(strategy, model, config)
    batched = run(source)
    for b, length in enumerate(LENGTHS):
        alone = run(source[b : b + 1, :length])  # also without padding
        expected = hypotheses_of(batched, b)
        actual = hypotheses_of(alone, 0)
        assert [t for _, t in actual] == [t for _, t in expected]
        np.testing.assert_allclose([s for s, _ in actual], [s for s, _ in expected], atol=1e-5)


@pytest.mark.parametrize("strategy", [greedy_search, beam_search])
def test_loop_stops_when_every_sentence_is_finished(strategy):
    source = random_sources(np.random.default_rng(5), LENGTHS, VOCAB)
    config = SearchConfig(beam_size=3, length_penalty=1.0, max_length_a=1.0, max_length_b=2)
    # EOS almost certain at once: one step (two when EOS may only come second), although
    # the limits allow up to 9.
    for min_length in (0, 1):
        ends_at_once = CountingModel(tiny_model(VOCAB, seed=4, eos_bias=40.0))
        config_min = dataclasses.replace(config, min_length=min_length)
        result = compiled(strategy, ends_at_once, config_min)(source)
        assert int(ends_at_once.steps.numpy()) == min_length + 1
        np.testing.assert_array_equal(np.asarray(result.lengths)[:, 0], min_length + 1)
    # EOS never chosen: as many steps as the longest limit of the batch, not the cache.
    never_ends = CountingModel(tiny_model(VOCAB, seed=4, eos_bias=-40.0))
    run = compiled(strategy, never_ends, config)
    run(source[1:2, :2])  # limit 4, cache_length 4
    assert int(never_ends.steps.numpy()) == 4
    never_ends.steps.assign(0)
    short_and_padded = source[[1, 4]]  # lengths 2 and 3, padded to 7: cache_length 9
    result = run(short_and_padded)
    assert int(never_ends.steps.numpy()) == 5
    np.testing.assert_array_equal(np.asarray(result.lengths)[:, 0], [4, 5])


@pytest.mark.parametrize("strategy", [greedy_search, beam_search])
def test_compaction_drops_finished_sentences_and_changes_nothing(model, strategy):
    """`compact=True` (finished sentences leave the loop) == `compact=False` (XLA's way)."""
    source = random_sources(np.random.default_rng(7), [9, 2, 7, 3, 8, 2, 5, 4], VOCAB)
    beam = 1 if strategy is greedy_search else 3
    config = SearchConfig(
        beam_size=beam, n_best=beam, length_penalty=0.6, max_length_a=1.0, max_length_b=2
    )
    counted, results = {}, {}
    for compact in (True, False):
        counting = CountingModel(model)
        results[compact] = compiled(strategy, counting, config, compact)(source)
        counted[compact] = (int(counting.steps.numpy()), int(counting.rows.numpy()))
    np.testing.assert_array_equal(results[True].ids, results[False].ids)
    np.testing.assert_array_equal(results[True].lengths, results[False].lengths)
    np.testing.assert_allclose(results[True].scores, results[False].scores, rtol=1e-6)

    lengths = np.asarray(results[True].lengths)[:, 0]  # [batch] best hypotheses' |Y|
    assert len(set(lengths)) > 1, "want sentences that finish at different steps"
    (steps, rows), (static_steps, static_rows) = counted[True], counted[False]
    assert steps == static_steps  # the loop ends at the same step
    assert static_rows == steps * len(source) * beam  # every row, every step
    if strategy is greedy_search:
        # Each sentence is decoded exactly while it is generating: one row per token.
        assert rows == lengths.sum() < static_rows
    else:
        # Each sentence's beams run at least until its best hypothesis ended.
        assert beam * lengths.sum() <= rows < static_rows


def test_top_beam_stop_runs_no_more_rows_and_finds_no_better(model):
    """`exact_stop=False` only ever ends a sentence earlier, on the same search path."""
    source = random_sources(np.random.default_rng(8), [9, 2, 7, 3, 8, 2, 5, 4], VOCAB)
    config = SearchConfig(beam_size=3, length_penalty=1.0, max_length_a=1.0, max_length_b=3)
    rows, results = {}, {}
    for exact in (True, False):
        counting = CountingModel(model)
        search = compiled(beam_search, counting, dataclasses.replace(config, exact_stop=exact))
        results[exact] = search(source)
        rows[exact] = int(counting.rows.numpy())
    assert rows[False] < rows[True]  # here it does save steps
    # Every 1-best of the top-beam rule is a finished hypothesis scored like the exact
    # search's, so it can only be as good or worse.
    scores = {exact: np.asarray(r.scores)[:, 0] for exact, r in results.items()}
    assert np.all(scores[False] <= scores[True] + 1e-5)


def test_length_penalty_values():
    lengths = tf.constant([1, 5, 10])
    np.testing.assert_allclose(length_penalty(lengths, 0.0), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(
        length_penalty(lengths, 0.6), ((5 + np.array([1, 5, 10])) / 6) ** 0.6, rtol=1e-6
    )


@pytest.mark.parametrize(("width", "k"), [(8003, 4), (8003, 1), (1100, 5), (1100, 17), (40, 3)])
def test_top_k_equals_tf_top_k(width, k):
    rng = np.random.default_rng(width + k)
    values = rng.standard_normal((6, width)).astype("float32")
    values[0, :] = values[0, 0]  # every value tied
    values[1, ::3] = -np.inf
    values[2, 100:] = -np.inf  # fewer finite values than some chunk counts
    got_values, got_ids = top_k(tf.constant(values), k)
    want_values, _ = tf.math.top_k(values, k)
    np.testing.assert_array_equal(got_values, want_values)
    got_ids = np.asarray(got_ids)
    assert got_ids.dtype == np.int32 and got_ids.min() >= 0 and got_ids.max() < width
    np.testing.assert_array_equal(np.take_along_axis(values, got_ids, axis=1), want_values)
    for row in got_ids:
        assert len(set(row.tolist())) == k  # k distinct positions, ties included


@pytest.mark.parametrize("max_from_top", [True, False])
@pytest.mark.parametrize("min_length", [0, 3])
def test_next_token_candidates_equal_the_masked_log_softmax(min_length, max_from_top):
    """The k best allowed ids even when PAD, BOS and EOS have the largest logits."""
    rng, k, step = np.random.default_rng(min_length), 4, 1
    logits = (rng.standard_normal((5, 1200)) * 4).astype("float32")
    logits[:, [PAD_ID, BOS_ID, EOS_ID]] = 50.0  # above every other id
    logits[3, 700:] = 60.0  # many ties among allowed ids
    max_lengths = np.array([9, 9, 2, 9, 9], "int32")  # row 2 is at its limit (step + 1)
    got, got_ids = next_token_candidates(
        tf.constant(logits), step, max_lengths, k, min_length, max_from_top=max_from_top
    )
    got, got_ids = np.asarray(got), np.asarray(got_ids)
    log_probs = (
        logits
        - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1))[:, None]
        - logits.max(1, keepdims=True)
    )
    banned = [PAD_ID, BOS_ID] + ([EOS_ID] if step < min_length else [])
    for row in range(5):
        if row == 2:  # at the limit: EOS alone
            assert got_ids[row, 0] == EOS_ID and np.isneginf(got[row, 1:]).all()
            np.testing.assert_allclose(got[row, 0], log_probs[row, EOS_ID], rtol=1e-5)
            continue
        allowed = np.delete(np.arange(1200), banned)
        want = np.sort(log_probs[row, allowed])[::-1][:k]
        np.testing.assert_allclose(got[row], want, rtol=1e-5, atol=1e-5)
        assert not np.isin(got_ids[row], banned).any()
        np.testing.assert_allclose(log_probs[row, got_ids[row]], got[row], rtol=1e-5, atol=1e-5)


def test_log_sum_exp_equals_reduce_logsumexp():
    rng = np.random.default_rng(1)
    for scale in (0.01, 1.0, 100.0, 1e4):
        values = (rng.standard_normal((7, 3000)) * scale).astype("float32")
        values[0, 100:110] = values[0].max() + 1.0  # a tied maximum
        want = tf.reduce_logsumexp(values, axis=-1, keepdims=True)
        np.testing.assert_allclose(log_sum_exp(tf.constant(values)), want, rtol=1e-6, atol=1e-5)
        # With each row's largest value and its position given, bit for bit the same.
        at = np.argmax(values, axis=1)[:, None].astype("int32")  # [rows, 1]
        largest = np.take_along_axis(values, at, axis=1)
        np.testing.assert_array_equal(
            log_sum_exp(tf.constant(values), (tf.constant(largest), tf.constant(at))),
            log_sum_exp(tf.constant(values)),
        )


@pytest.mark.parametrize("k", [1, 4])
def test_next_token_candidates_normalizers_agree_bit_for_bit(k):
    """The top-k's max (the default) and the separate reductions (XLA's) give equal scores."""
    rng = np.random.default_rng(k)
    logits = (rng.standard_normal((64, 8000)) * 5).astype("float32")
    logits[5, 3000:3004] = logits[5].max() + 2.0  # a tie at the top
    max_lengths = np.full([64], 20, "int32")
    shared = next_token_candidates(tf.constant(logits), 2, max_lengths, k)
    separate = next_token_candidates(tf.constant(logits), 2, max_lengths, k, max_from_top=False)
    for a, b in zip(shared, separate, strict=True):
        np.testing.assert_array_equal(a, b)


def test_next_token_candidates_cast_the_logits_once():
    """After Grappler, the bfloat16 logits are cast to float32 once, not once per reader.

    Its cast reordering would give the top-k's pad and reshape a cast of their own beside
    the softmax's: a second pass over `[rows, vocab]` every decoding step.
    """
    graph = tf.Graph()
    with graph.as_default():
        logits = tf.compat.v1.placeholder(tf.bfloat16, [None, 1024])
        rows = tf.shape(logits)[0]
        found = next_token_candidates(tf.cast(logits, tf.float32), 1, tf.fill([rows], 9), 4)
        with tf.compat.v1.Session(graph=graph) as session:
            options = tf.compat.v1.RunOptions(output_partition_graphs=True)
            metadata = tf.compat.v1.RunMetadata()
            feed = {logits: np.zeros([8, 1024], "float32")}
            session.run(found, feed, options=options, run_metadata=metadata)
    nodes = [node for part in metadata.partition_graphs for node in part.node]
    bfloat16 = tf.bfloat16.as_datatype_enum
    casts = [n.name for n in nodes if n.op == "Cast" and n.attr["SrcT"].type == bfloat16]
    assert len(casts) == 1, casts
