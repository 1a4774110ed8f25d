"""Sampling: top-k / nucleus draws from the tempered distribution, in the one search loop."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.support.models import MarkovModel, markov_probs
from translator.constants import EOS_ID
from translator.search import SearchConfig, search

# The Markov table's first-token distribution (position 0, after BOS) over tokens 4..9.
FIRST = {4: 0.35, 5: 0.25, 6: 0.15, 7: 0.12, 8: 0.08, 9: 0.05}
# The 0.999 quantile of the chi-square distribution with 5 degrees of freedom (six
# categories): a correct sampler exceeds it with probability 0.001.
CHI_SQUARE_5_AT_0_999 = 20.515


@pytest.fixture(scope="module")
def markov():
    """Known first-token probabilities; later tokens: EOS likely."""
    rows = {(0, 2): FIRST}
    rows.update({(1, token): {EOS_ID: 0.6, 4: 0.2, 5: 0.2} for token in range(10)})
    rows.update({(2, token): {EOS_ID: 1.0} for token in range(10)})
    return MarkovModel(markov_probs(10, 3, rows))


def run(model, source, config, compact=True):
    function = tf.function(lambda s: search(model, s, config, compact))
    return [np.asarray(x) for x in function(tf.constant(source))]


def first_tokens(markov, config, draws):
    config = dataclasses.replace(config, num_samples=draws, max_length_b=3)
    ids, _, _ = run(markov, np.array([[5, EOS_ID]], "int32"), config)
    return ids[0, :, 0]  # [draws]


def test_top_1_is_greedy(model, source):
    greedy = SearchConfig(beam_size=1, max_length_a=1.0, max_length_b=2, min_length=2)
    sampled = dataclasses.replace(greedy, sampling="topk:1", temperature=3.0, seed=9)
    want, got = run(model, source, greedy), run(model, source, sampled)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_temperature_near_zero_is_greedy(model, source):
    greedy = SearchConfig(beam_size=1, max_length_a=1.0, max_length_b=2)
    cold = dataclasses.replace(greedy, sampling="topk:0", temperature=1e-4, seed=3)
    np.testing.assert_array_equal(run(model, source, cold)[0], run(model, source, greedy)[0])


def test_the_same_seed_draws_the_same_and_compaction_changes_nothing(model, source):
    config = SearchConfig(sampling="topk:0", max_length_a=1.0, max_length_b=4, num_samples=3)
    first, again = run(model, source, config), run(model, source, config)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    static = run(model, source, config, compact=False)  # XLA's shape: no row leaves
    np.testing.assert_array_equal(static[0], first[0])
    other = run(model, source, dataclasses.replace(config, seed=1))
    assert not np.array_equal(other[0], first[0])


def test_samples_are_sorted_and_scored_as_their_log_probability(markov):
    config = SearchConfig(sampling="topk:0", num_samples=6, length_penalty=0.0, max_length_b=3)
    ids, scores, lengths = run(markov, np.array([[5, EOS_ID], [6, EOS_ID]], "int32"), config)
    assert ids.shape[:2] == (2, 6)
    for sentence in range(2):
        assert list(scores[sentence]) == sorted(scores[sentence], reverse=True)
        for k in range(6):
            tokens = tuple(int(t) for t in ids[sentence, k, : lengths[sentence, k]])
            assert tokens[-1] == EOS_ID
            assert scores[sentence, k] == pytest.approx(markov.sequence_log_prob(tokens), 1e-5)


@pytest.mark.parametrize(("rule", "allowed"), [("topk:3", {4, 5, 6}), ("topp:0.7", {4, 5, 6})])
def test_no_draw_falls_outside_the_top_k_or_the_nucleus(markov, rule, allowed):
    # topp:0.7: 0.35 + 0.25 = 0.6 < 0.7, so the nucleus needs the third token (0.75).
    drawn = first_tokens(markov, SearchConfig(sampling=rule, seed=4), 2000)
    assert set(drawn.tolist()) == allowed  # all of them reached, nothing else


def test_first_token_frequencies_match_the_tempered_softmax(markov):
    """Pearson's chi-square test of 3,000 draws at temperature 0.7, significance 0.001."""
    temperature, draws = 0.7, 3000
    drawn = first_tokens(markov, SearchConfig(sampling="topk:0", temperature=temperature), draws)
    tokens = sorted(FIRST)
    tempered = np.array([FIRST[t] for t in tokens]) ** (1 / temperature)
    expected = draws * tempered / tempered.sum()
    observed = np.array([(drawn == t).sum() for t in tokens])
    assert observed.sum() == draws  # EOS is no candidate at position 0 (min_length 1)
    chi_square = float(((observed - expected) ** 2 / expected).sum())
    assert chi_square < CHI_SQUARE_5_AT_0_999, (observed, expected.round(1))
    # And the test has power: the untempered distribution fails it.
    plain = draws * np.array([FIRST[t] for t in tokens])
    assert float(((observed - plain) ** 2 / plain).sum()) > CHI_SQUARE_5_AT_0_999


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sampling": "top:3"}, "sampling must be topk:K"),
        ({"sampling": "topk:1.5"}, "sampling must be topk:K"),
        ({"sampling": "topp:0"}, "sampling must be topk:K"),
        ({"sampling": "topk:2", "temperature": 0}, "temperature must be > 0"),
        ({"sampling": "topk:2", "num_samples": 0}, "num_samples must be >= 1"),
        ({"sampling": "topk:2", "seed": -1}, r"seed must be in \[0, 2\*\*31\)"),
    ],
)
def test_bad_sampling_settings_name_the_field(fields, message):
    from translator.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        SearchConfig(**fields)
