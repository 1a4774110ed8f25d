"""The decoding benchmark's section: the words from its template, the figures from the run."""

import argparse
import re
from pathlib import Path

import pytest

from bench.decoding import (
    BEAM_GOAL,
    NAIVE,
    NAIVE_COMPILED,
    TOP_BEAM,
    Measurement,
    StepCount,
    render,
    section_markdown,
)

REPO = Path(__file__).resolve().parents[2]


def measurement(name, xla, tokens, seconds, batches=(0, 1)):
    per_sentence = tokens // (2 * len(batches))
    outputs = [[[5] * per_sentence, [6] * per_sentence] for _ in batches]  # 2 a batch
    count = len(batches)
    times = [seconds / count] * count  # wall = CPU seconds
    m = Measurement(name, xla, list(batches), times, list(times), outputs)
    m.first_call, m.warm = 1.5, {0: seconds / count + 0.5}
    return m


def run_results(top_beam: bool) -> dict:
    results = {
        NAIVE: measurement(*NAIVE, 400, 4.0, batches=(1,)),
        NAIVE_COMPILED: measurement(*NAIVE_COMPILED, 800, 2.0),
        ("greedy", False): measurement("greedy", False, 800, 0.4),
        ("beam 4", False): measurement("beam 4", False, 800, 2.0),  # 400 tok/s: misses
        ("greedy", True): measurement("greedy", True, 800, 0.2),
        ("beam 4", True): measurement("beam 4", True, 800, 1.6),
    }
    if top_beam:
        results[TOP_BEAM] = measurement(*TOP_BEAM, 800, 1.0)
    return results


@pytest.fixture(autouse=True)
def _footer(fixed_footer):
    pass


def section(top_beam: bool = False) -> str:
    args = argparse.Namespace(
        model="runs/x" if top_beam else None, naive_batches=1, repeats=2, batch_tokens=640
    )
    steps = {
        "greedy": StepCount(tokens=800, compact=800, static=840),
        "beam 4": StepCount(tokens=800, compact=900, static=1200),
    }
    if top_beam:
        steps[TOP_BEAM[0]] = StepCount(tokens=800, compact=808, static=1100)
    results = run_results(top_beam)
    best = ("beam 4", False)
    return section_markdown(args, results, best, (3, 4), steps, "MODEL")


def test_the_section_holds_the_run_figures_and_no_unfilled_field():
    text = section()
    assert text.startswith("## Decoding (`bench/decoding.py`)")
    assert "4 sentences in 2 length-sorted batches of at most 640 padded source" in text
    assert "up to 2 sentences each, padded to a multiple of 8" in text
    assert "(default 640)" in text and "4,096" in text  # the bench's and the library's
    assert "| **beam 4, target tokens/s** | **400** (MISSES 750); 400 per CPU-second |" in text
    assert "**4.0x** (MISSES 20x)" in text
    assert "| greedy over beam 4, tokens/s | 5.0x without XLA, 8.0x with XLA |" in text
    assert "| XLA over no XLA, tokens/s | greedy 2.00x, beam 4 1.25x |" in text
    assert "| greedy search = naive decoders (same ids) | 3/4 sentences |" in text
    assert "| naive | no | 1 | 400 | 4.00 | **100** | 1.0x | 0.2x | 100 | 1.00 | 1.50 | 0.50 |" in (
        text
    )
    assert "| beam 4 | yes | 2 | 800 | 1.60 | **500** |" in text and "(1 shapes) |" in text
    assert "| beam 4 | 800 | 1.12 | 1.50 |" in text  # steps per returned token
    assert f"misses by {BEAM_GOAL - 400} tok/s" in text and "one in 1.12" in text
    assert "the eager one runs 1 spread" in text and "the best of 2 pass(es)" in text
    assert "no peer figure is\n  quoted here from another run" in text
    assert "- Command: `" in text and "- Date: " in text
    assert "; load average 0.1/0.2/0.3 at the start" in text
    assert "top-beam" not in text
    assert not re.search(r"[{}]", text), "a field was left unfilled"


def test_the_trained_model_section_has_the_top_beam_row_and_sentence():
    text = section(top_beam=True)
    assert text.startswith("## Decoding, trained model (`bench/decoding.py`)")
    row = "| beam 4, top-beam stop over beam 4 (exact stop), no XLA | 2.00x tokens/s;"
    assert row in text and "changes 0/4 translations |\n\n| decoder |" in text
    assert "to 1.01 steps per returned token with compaction (1.38 without)" in text


def test_render_fills_format_specs():
    assert render("xla-gain", name="greedy", ratio=1.825) == "greedy 1.82x"
    count = StepCount(tokens=15642, compact=15642, static=16268)
    assert render("steps-row", name="g", c=count) == ("| g | 15,642 | 1.00 | 1.04 |")
