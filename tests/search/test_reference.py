"""The search against slow references: full recompute, exhaustive enumeration, rescoring."""

import dataclasses

import numpy as np
import pytest

from tests.support.models import MarkovModel, markov_probs, random_sources, tiny_model
from tests.support.search import (
    all_hypotheses,
    compiled,
    hypotheses_of,
    penalty,
    reference_beam_search,
    sequence_log_probs,
)
from translator.search import SearchConfig, beam_search, greedy_search, output_length_limits

# The full-pass references decode 1-token prefixes, where Keras warns about a softmax over
# a single key.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis")


def per_sentence_limits(source, config):
    return np.asarray(output_length_limits(source, config)[0])


@pytest.mark.parametrize(
    ("beam", "alpha", "n_best", "min_length", "exact_stop"),
    [
        (2, 0.0, 1, 0, True),
        (3, 0.6, 2, 1, True),
        (5, 1.5, 4, 2, True),
        (3, 0.6, 1, 1, False),
        (5, 1.5, 2, 0, False),
    ],
)
def test_cached_beam_search_matches_full_recompute_reference(
    beam, alpha, n_best, min_length, exact_stop
):
    vocab = 12
    model = tiny_model(vocab, seed=beam, logit_scale=2.0, eos_bias=1.5)
    source = random_sources(np.random.default_rng(beam), [6, 3, 8], vocab)
    config = SearchConfig(
        beam_size=beam,
        n_best=n_best,
        length_penalty=alpha,
        max_length_a=0.5,
        max_length_b=4,
        min_length=min_length,
        exact_stop=exact_stop,
    )
    result = compiled(beam_search, model, config)(source)
    limits = per_sentence_limits(source, config)
    ended_early = 0
    for b in range(len(source)):
        expected = reference_beam_search(
            model, source[b], beam, alpha, n_best, limits[b], vocab, min_length, exact_stop
        )
        assert all(len(t) > min(min_length, limits[b] - 1) for _, t in expected)
        actual = hypotheses_of(result, b)
        assert [t for _, t in actual] == [t for _, t in expected], b
        np.testing.assert_allclose([s for s, _ in actual], [s for s, _ in expected], atol=1e-5)
        ended_early += sum(len(t) < limits[b] for _, t in actual)
    assert ended_early, "the test should exercise hypotheses finishing before the limit"


# Optimality: vocabulary 6, so tokens 1, 4, 5 and EOS can be generated (PAD and BOS never);
# length limits 4 and 3 (a = 1, b = 0 on sources of 4 and 3 tokens): 40 and 13 hypotheses,
# one fewer each ("EOS" alone) with min_length 1.
ENUMERATION_VOCAB = 6
ENUMERATION_LENGTHS = [4, 3]


@pytest.fixture(scope="module")
def enumeration_case():
    # A seed where the optimum's length depends on alpha (checked below).
    model = tiny_model(ENUMERATION_VOCAB, seed=6, logit_scale=1.5)
    source = random_sources(np.random.default_rng(11), ENUMERATION_LENGTHS, ENUMERATION_VOCAB)
    return model, source


def enumerated_scores(model, source_row, max_length, alpha, min_length=0):
    """Every possible hypothesis and its score, by brute force."""
    candidates = all_hypotheses(ENUMERATION_VOCAB, max_length, min_length)
    log_probs = sequence_log_probs(model, source_row, candidates)
    return candidates, log_probs / np.array([penalty(len(y), alpha) for y in candidates])


def test_enumeration_optimum_depends_on_alpha(enumeration_case):
    """Guards the optimality test: the length penalty changes which hypothesis is best."""
    model, source = enumeration_case
    for row, limit in enumerate(ENUMERATION_LENGTHS):
        bests = set()
        for alpha in (0.0, 0.6, 2.0):
            candidates, scores = enumerated_scores(model, source[row], limit, alpha)
            bests.add(candidates[int(np.argmax(scores))])
        assert len({len(best) for best in bests}) > 1, bests


@pytest.mark.parametrize("min_length", [0, 1])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_is_exact_with_a_beam_covering_every_hypothesis(
    enumeration_case, alpha, min_length
):
    model, source = enumeration_case
    config = SearchConfig(
        beam_size=40,
        n_best=5,
        length_penalty=alpha,
        max_length_a=1.0,
        max_length_b=0,
        min_length=min_length,
    )
    limits = per_sentence_limits(source, config)
    np.testing.assert_array_equal(limits, ENUMERATION_LENGTHS)
    result = compiled(beam_search, model, config)(source)
    for row, limit in enumerate(limits):
        candidates, scores = enumerated_scores(model, source[row], limit, alpha, min_length)
        assert len(candidates) == {4: 40, 3: 13}[limit] - min_length <= config.beam_size
        order = np.argsort(-scores)[: config.n_best]
        actual = hypotheses_of(result, row)
        assert [t for _, t in actual] == [candidates[i] for i in order]
        np.testing.assert_allclose([s for s, _ in actual], scores[order], atol=1e-5)


@pytest.mark.parametrize("alpha", [0.6])
def test_smaller_beams_return_real_hypotheses_no_better_than_the_optimum(enumeration_case, alpha):
    model, source = enumeration_case
    candidates, scores = enumerated_scores(model, source[0], 4, alpha)
    by_tokens = dict(zip(candidates, scores, strict=True))
    for beam in (2, 3):
        config = SearchConfig(
            beam_size=beam, length_penalty=alpha, max_length_a=1.0, max_length_b=0
        )
        ((score, tokens),) = hypotheses_of(compiled(beam_search, model, config)(source[:1]), 0)
        np.testing.assert_allclose(score, by_tokens[tokens], atol=1e-5)
        assert score <= scores.max() + 1e-6


VARIANTS = {
    "sinusoidal": {},
    "rotary-postnorm": dict(position_encoding="rotary", norm_first=False),
    "learned-swiglu": dict(position_encoding="learned", activation="swiglu", max_length=9),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("strategy", [greedy_search, beam_search])
def test_scores_are_teacher_forced_log_probs_with_length_penalty(variant, strategy):
    vocab = 20
    alpha = 0.8
    model = tiny_model(
        vocab, seed=5, logit_scale=2.0, eos_bias=2.0, constant_eos=True, **VARIANTS[variant]
    )
    source = random_sources(np.random.default_rng(12), [7, 4, 9, 2], vocab)
    n_best = 3 if strategy is beam_search else 1
    config = SearchConfig(
        beam_size=4, n_best=n_best, length_penalty=alpha, max_length_a=1.0, max_length_b=2
    )
    result = compiled(strategy, model, config)(source)
    lengths = set()
    for b in range(len(source)):
        hypotheses = hypotheses_of(result, b)
        assert len(hypotheses) == n_best
        log_probs = sequence_log_probs(model, source[b], [t for _, t in hypotheses])
        expected = log_probs / [penalty(len(t), alpha) for _, t in hypotheses]
        np.testing.assert_allclose([s for s, _ in hypotheses], expected, atol=1e-5)
        lengths.update(len(t) for _, t in hypotheses)
    assert len(lengths) > 1
    if variant.startswith("learned"):
        assert max(lengths) <= 9  # capped by the learned position table


def test_early_stop_keeps_searching_while_a_longer_hypothesis_can_still_win():
    """Under the length penalty a longer hypothesis can overtake a finished short one.

    Here "EOS" (probability .5) finishes first, while "4" (.45) continues almost surely to
    "4 4 4 EOS" (log P = -0.92; with alpha = 2: -0.92 / 2.25 = -0.41 > log .5 = -0.69).
    Stopping when the finished score beats the best alive log P / lp(current length) would
    return "EOS"; the bound with lp(max length) must keep going.
    """
    vocab, eos, four = 6, 3, 4
    probs = markov_probs(
        vocab,
        steps=4,
        rows={
            (0, 2): {eos: 0.5, four: 0.45, 1: 0.03, 5: 0.02},  # after BOS
            (1, four): {four: 0.99, eos: 0.005, 1: 0.003, 5: 0.002},
            (2, four): {four: 0.99, eos: 0.005, 1: 0.003, 5: 0.002},
            (3, four): {eos: 0.9, four: 0.05, 1: 0.03, 5: 0.02},
        },
    )
    model = MarkovModel(probs)
    source = np.array([[5, 3]], "int32")
    expected = {0.0: (eos,), 2.0: (four, four, four, eos)}
    for alpha, best in expected.items():
        candidates = all_hypotheses(vocab, 4)
        scores = [model.sequence_log_prob(y) / penalty(len(y), alpha) for y in candidates]
        assert candidates[int(np.argmax(scores))] == best
        for beam in (2, 40):
            config = SearchConfig(
                beam_size=beam,
                length_penalty=alpha,
                max_length_a=0.0,
                max_length_b=4,
                min_length=0,  # "EOS" alone is one of the contenders
            )
            ((score, tokens),) = hypotheses_of(compiled(beam_search, model, config)(source), 0)
            assert tokens == best, (alpha, beam)
            np.testing.assert_allclose(score, max(scores), atol=1e-5)
            # The top-beam rule stops at step 0, where the best candidate is "EOS": the
            # documented price of its saved steps.
            config = dataclasses.replace(config, exact_stop=False)
            ((_, tokens),) = hypotheses_of(compiled(beam_search, model, config)(source), 0)
            assert tokens == (eos,), (alpha, beam)
