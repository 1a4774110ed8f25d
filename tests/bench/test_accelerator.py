"""`bench.accelerator` end to end on this CPU: prepare with TensorFlow, run without it.

The run is what the lent GPU machines execute (no TensorFlow there): `translator recipe`
on the bundle's work directory, here in a process whose TensorFlow imports raise
(`tests.support.no_tensorflow`), on a tiny budget, so a module that still needs
TensorFlow, or a bundle that lacks something, fails here before any device time is spent.
Marked `bench` (a few minutes of CPU).
"""

import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from bench import harness
from bench.accelerator import MANIFEST, RESULTS_FILE, SPEEDS_FILE, WHEELS, WORK
from bench.accelerator.prepare import LIMIT_BYTES
from tests.support.paths import REPO
from tests.support.scores import sacrebleu_scores

LINES = 24  # test lines translated


def _python(*arguments: str, timeout: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.run(
        [sys.executable, *map(str, arguments)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-3000:]
    return process.stdout


def _project(name: str) -> str:
    """A distribution's normalized name (a wheel's file name spells '-' as '_')."""
    return name.lower().replace("_", "-")


@pytest.mark.bench
def test_the_bundle_runs_the_recipe_without_tensorflow_and_publishes_what_it_left(
    multi30k, tmp_path
):
    """Prepared here, the recipe runs there from the prepared corpus with no TensorFlow;
    the figures published are those of its own files (and the test BLEU sacreBLEU's)."""
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    _python("-m", "bench.accelerator", "prepare", "--bundle", bundle, "--data", multi30k,
            timeout=900)  # fmt: skip
    manifest = json.loads((bundle / MANIFEST).read_text())
    wheels = {_project(name.split("-")[0]): name for name in manifest["wheels"]}
    assert set(wheels) == {_project(name) for name in (*WHEELS, "translator")}  # one each
    assert "-cp312-" in wheels["optree"] and "manylinux" in wheels["optree"]  # its Python
    assert sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) < LIMIT_BYTES
    assert (bundle / WORK / "prepared" / "valid" / "manifest.json").is_file()

    # (`--set`, passed on to the recipe: a progress line after each of the few updates.)
    _python("-m", "tests.support.no_tensorflow", "bench.accelerator", "run", "--bundle",
            bundle, "--out", out, "--minutes", "0.3", "--test-sentences", LINES,
            "--set", "train.log_every_steps=1", timeout=1500)  # fmt: skip
    result = json.loads((out / RESULTS_FILE).read_text())
    log = (out / "recipe.log").read_text()
    assert "(prepared before)" in log and "skipped: a SavedModel" in log  # no TensorFlow
    # Its figures are the run's own: the updates its summary line says; its rate, from
    # TensorBoard's points, where the run logged a progress line after each update.
    assert "train.log_every_steps=1" in result["command"]
    trained = re.search(r"trained ([\d,]+) updates", log)
    assert trained and result["updates"] == int(trained.group(1).replace(",", "")) > 0
    assert re.search(r"\| [\d,]+ target tok/s", log), log[-3000:]
    assert result["tokens_per_second"] > 0
    assert result["compile_seconds"] is not None and result["test_sentences"] == LINES
    # The compiling figure is the run's own, after its plan (whose timings compile too).
    assert f"in {result['compile_seconds']:.1f} s, before" in log[log.index("plan: saved") :]
    plan = json.loads((out / "plan.json").read_text())
    assert result["plan"] == plan

    # The test BLEU is sacreBLEU's own, from its command line, on the recipe's translations.
    with gzip.open(multi30k / harness.TEST_REFERENCE, "rt", encoding="utf-8") as lines:
        references = [next(lines).rstrip("\n") for _ in range(LINES)]
    (tmp_path / "test.ref").write_text("\n".join(references) + "\n", "utf-8")
    (hypotheses,) = out.glob("translations.*")
    assert len(hypotheses.read_text("utf-8").splitlines()) == LINES
    oracle = sacrebleu_scores(tmp_path / "test.ref", hypotheses)
    assert result["test_bleu"] == pytest.approx(oracle["bleu"][0], abs=1e-3)

    # `speeds` times the shapes the plan timed, at the plan's batches, as a run trains.
    _python("-m", "tests.support.no_tensorflow", "bench.accelerator", "speeds", "--bundle",
            bundle, "--out", out, "--plan", out / "plan.json", "--seconds", "1",
            "--matmul-size", "256", timeout=900)  # fmt: skip
    speeds = json.loads((out / SPEEDS_FILE).read_text())
    timed = {name: speed for name, speed in plan["speeds"].items() if speed["measured"]}
    assert timed and set(speeds["shapes"]) == set(timed)
    for name, speed in speeds["shapes"].items():
        assert speed["batch_tokens"] == timed[name]["batch_tokens"]
        assert speed["tokens_per_second"] > 0 and 0 < speed["mfu"] < 1

    results_md = tmp_path / "RESULTS.md"
    _python("-m", "bench.accelerator", "publish", out / RESULTS_FILE, "--speeds",
            out / SPEEDS_FILE, "--results-md", results_md, timeout=120)  # fmt: skip
    section = harness.read_section("accelerator-recipe", results_md)
    assert result["device"] in section and f"{result['test_bleu']:.2f}" in section
    assert f"{result['updates']:,}" in section
    for name, speed in speeds["shapes"].items():  # each beside the plan's
        row = next(line for line in section.splitlines() if line.startswith(f"| {name} |"))
        assert f"{speed['tokens_per_second']:,.0f} (at {speed['batch_tokens']:,})" in row
