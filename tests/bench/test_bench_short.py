"""`python -m bench --short`: every benchmark's short mode, end to end, as a user runs it.

Marked `bench` (minutes of CPU): not in the default run; CI's second phase runs it with the
slow tests (`python -m pytest -q -n 2 -m "slow or bench"`), as the README's Development
section says.
"""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS
from bench.harness import RESULTS_PATH, parse_targets

REPO = Path(__file__).resolve().parents[2]

# The targets each short run must measure (names as `report_target` prints them).
EXPECTED_TARGETS = {
    "pipeline": [r"pipeline target tokens/s over the training goal"],
    "training": [],  # step variants side by side: figures, no target (peers has the ratio)
    "peers": [],  # the short mode runs our side only: the ratio needs the peer
    "decoding": [r"decoding beam 4.* target tokens/s", r"decoding beam 4.* over the naive decoder"],
    "serving": [r"serving sentences/s, batching on / off at 16 clients"],
    "quality": [],  # a tiny model trained for seconds: plumbing only, no figure
    "backends": [],  # JAX against TensorFlow: a report, no target
    # The speed ratios only: a random model's BLEU is ~0, so int8's BLEU loss says nothing.
    "engines": [
        r"decoding ours, beam 4.* over CTranslate2 float32 beam 4",
        r"first translation, ours \(search cached\) over CTranslate2 float32",
    ],
}


@pytest.mark.bench
@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_runs_in_short_mode_and_measures_its_targets(name, multi30k):
    """`python -m bench --short --only NAME`: one benchmark a test, so that two workers
    run them side by side (each in its own process, as `python -m bench` runs them)."""
    results_before = RESULTS_PATH.read_bytes()
    process = subprocess.run(
        [sys.executable, "-m", "bench", "--short", "--only", name, "--data", str(multi30k)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=20 * 60,
    )
    out = process.stdout
    assert process.returncode == 0, out[-8000:] + process.stderr[-4000:]
    # It ran, in its own process, and succeeded; no other benchmark ran.
    exits = re.findall(r"^=== bench\.(\w+): exit (-?\d+) after", out, re.MULTILINE)
    assert exits == [(name, "0")]

    # Every target was measured, as a positive finite figure, and nothing else.
    targets = parse_targets(out)
    names = [target["name"] for target in targets]
    expected = EXPECTED_TARGETS[name]
    assert len(names) == len(expected), names
    for pattern, target in zip(expected, targets, strict=True):
        assert re.fullmatch(pattern, target["name"]), (pattern, target["name"])
        assert math.isfinite(target["measured"]) and target["measured"] > 0, target
    if name == "quality":  # the recipe ran every stage and scored its 50 test sentences
        assert re.search(r"^BLEU [\d.]+ .* on 50 sentences", out, re.MULTILINE), out[-2000:]
    # Short mode writes nothing.
    assert RESULTS_PATH.read_bytes() == results_before


def test_every_benchmark_has_its_expected_targets():
    assert set(EXPECTED_TARGETS) == set(BENCHMARKS)
