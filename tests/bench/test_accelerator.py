"""`bench.accelerator` end to end on this CPU: prepare with TensorFlow, run without it.

The run is what the lent GPU machines execute (no TensorFlow there): here in a process
whose TensorFlow imports raise (`tests.support.no_tensorflow`), on a tiny budget, so a
module that still needs TensorFlow, or a bundle that lacks something, fails here before
any device time is spent. Marked `bench` (about 5 minutes of CPU).
"""

import gzip
import json
import os
import subprocess
import sys

import pytest

from bench import harness
from bench.accelerator import MANIFEST, RESULTS_FILE
from bench.accelerator.prepare import LIMIT_BYTES
from tests.support.paths import REPO
from tests.support.scores import sacrebleu_scores
from training.plan import Budget, CorpusCounts, Plan, Speed, make_plan

LINES = 24  # validation and test lines decoded


def _python(*arguments: str, timeout: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.run(
        [sys.executable, *arguments],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-3000:]
    return process.stdout


@pytest.mark.bench
def test_prepared_bundle_runs_without_tensorflow_and_reports_what_it_measured(multi30k, tmp_path):
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    _python(
        "-m",
        "bench.accelerator",
        "prepare",
        "--bundle",
        str(bundle),
        "--data",
        str(multi30k),
        "--batch-tokens",
        "1024",
        "2048",
        timeout=900,
    )
    manifest = json.loads((bundle / MANIFEST).read_text())
    wheels = {name.split("-")[0]: name for name in manifest["wheels"]}
    assert set(wheels) == {"keras", "optree", "namex"}  # what the GPU image lacks
    assert "-cp312-" in wheels["optree"] and "manylinux" in wheels["optree"]  # its Python
    assert sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) < LIMIT_BYTES
    # One epoch per batch size: every pair not left out by the static shapes is there once.
    for counts in manifest["batches"].values():
        assert counts["real_target_tokens"] <= manifest["corpus"]["target_tokens"]
        assert counts["real_target_tokens"] > 0.9 * manifest["corpus"]["target_tokens"]

    _python(
        "-m",
        "tests.support.no_tensorflow",
        "bench.accelerator",
        "run",
        "--bundle",
        str(bundle),
        "--out",
        str(out),
        "--minutes",
        "0.5",
        "--matmul-size",
        "256",
        "--eval-limit",
        str(LINES),
        timeout=900,
    )
    result = json.loads((out / RESULTS_FILE).read_text())
    assert result["tensorflow_loaded"] is False
    training = result["training"]
    assert training["updates"] > 0 and result["tokens_per_second"] > 0 and result["mfu"] > 0
    (_, first), *_, (_, last) = training["losses"]
    assert last < first, training["losses"]  # it learned

    # The plan is the planner's: the same inputs choose the same values. (The plan keeps
    # the chosen batch's own speed, so the reasons' figures may differ from the first
    # pass, which chose on the timing batch's.)
    plan = Plan.from_json(json.dumps(result["plan"]))
    speeds = {name: Speed(**speed) for name, speed in result["plan"]["speeds"].items()}
    again = make_plan(
        CorpusCounts(**manifest["corpus"]),
        Budget(**result["plan"]["budget"]),
        speeds,
        memory_batch_tokens={name: 65536 for name in speeds},
    )
    assert again.shape == plan.shape
    assert [(c.key, c.value) for c in again.choices] == [(c.key, c.value) for c in plan.choices]
    assert result["batch_tokens"] == plan.value("data.pipeline.batch_tokens")

    # The scores are sacreBLEU's own, from its command line, on the written translations.
    for split, name in (("valid", "val.de.gz"), ("test", harness.TEST_REFERENCE)):
        with gzip.open(multi30k / name, "rt", encoding="utf-8") as lines:
            references = [next(lines).rstrip("\n") for _ in range(LINES)]
        (tmp_path / f"{split}.ref").write_text("\n".join(references) + "\n", "utf-8")
        hypotheses = (out / f"{split}.hyp").read_text("utf-8").splitlines()
        assert len(hypotheses) == LINES and sum(map(bool, hypotheses)) > LINES // 2
        oracle = sacrebleu_scores(tmp_path / f"{split}.ref", out / f"{split}.hyp")
        assert result["scores"][split]["bleu"] == pytest.approx(oracle["bleu"][0], abs=1e-3)

    results_md = tmp_path / "RESULTS.md"
    _python(
        "-m",
        "bench.accelerator",
        "publish",
        str(out / RESULTS_FILE),
        "--results-md",
        str(results_md),
        timeout=120,
    )
    section = harness.read_section("accelerator", results_md)
    assert result["device"] in section and f"{result['tokens_per_second']:,.0f}" in section
    assert f"{result['scores']['test']['bleu']:.2f}" in section
