"""The decoding benchmark's explanation of a missed beam target, from its step counts."""

import re

from bench.decoding import (
    BEAM,
    BEAM_GOAL,
    TOP_BEAM,
    Measurement,
    StepCount,
    top_beam_row,
    why_beam_misses,
)


def measurement(name: str, xla: bool, tokens: int, seconds: float, sentences=None):
    outputs = sentences or [[[5] * tokens]]  # per batch, per sentence: ids
    return Measurement(name, xla, [0], [seconds], [seconds], outputs)


def test_a_missed_target_is_explained_by_the_steps_that_return_nothing():
    results = {("beam 4", True): measurement("beam 4", True, 7000, 10.0)}  # 700 tok/s
    steps = {"beam 4": StepCount(tokens=1000, compact=1140, static=1520)}
    text = why_beam_misses(results, ("beam 4", True), steps)
    assert f"misses by {BEAM_GOAL - 700} tok/s" in text
    assert "one in 1.52" in text  # XLA: the static count
    assert "1,064 sentence-steps per second" in text and "(meets 750)" in text
    assert "top-beam" not in text  # not measured

    results = {("beam 4", False): measurement("beam 4", False, 6000, 10.0)}  # 600 tok/s
    text = why_beam_misses(results, ("beam 4", False), steps)
    assert "one in 1.14" in text and "684 tok/s (still misses 750)" in text


def test_no_explanation_when_met_and_the_step_cost_when_nothing_is_wasted():
    steps = {"beam 4": StepCount(tokens=1000, compact=1000, static=1010)}
    met = {("beam 4", True): measurement("beam 4", True, 8000, 10.0)}
    assert why_beam_misses(met, ("beam 4", True), steps) == ""
    slow = {("beam 4", True): measurement("beam 4", True, 5000, 10.0)}
    text = why_beam_misses(slow, ("beam 4", True), steps)
    assert "1.01 steps per returned token" in text and "cost of a step" in text


def test_top_beam_row_counts_the_translations_it_changes():
    exact = [[[4, 5, 3], [6, 3], [7, 7, 3]]]  # one batch of three sentences
    top = [[[4, 5, 3], [6, 6, 3], [7, 7, 3]]]
    results = {
        BEAM: measurement(*BEAM, 0, 2.0, exact),
        TOP_BEAM: measurement(*TOP_BEAM, 0, 1.0, top),
    }
    row = top_beam_row(results)
    assert "changes 1/3 translations" in row
    ratio = float(re.search(r"\| ([\d.]+)x tokens/s", row).group(1))
    assert ratio == round((9 / 1.0) / (8 / 2.0), 2)
    assert top_beam_row({BEAM: results[BEAM]}) == ""
