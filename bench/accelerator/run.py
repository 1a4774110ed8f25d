"""`run` and `speeds`: on the accelerator, the product on the bundle, and what it measured.

`run` is `translator recipe` in a process of its own, as a user runs it; the figures are
read from what it leaves (plan.json, the run's record, the test report, TensorBoard's
scalars, the log), never measured here.
"""

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import accelerator as layout
from bench import harness

# The recipe's line of the compiling before its clock (training/engines/jax_engine.py).
COMPILED = re.compile(r"compiled the training step for (\d+) batch shape\(s\) in ([\d.]+) s")
MULTI30K_TEST = "test_2016_flickr"


def device_name() -> str:
    """The GPU's name from nvidia-smi, else JAX's device kind and the processor."""
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, check=True, timeout=30).stdout
        if out.strip():
            return out.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    import jax

    return f"{jax.devices()[0].device_kind} ({platform.processor() or platform.machine()})"


def matmul_rate(size: int, repeats: int = 10) -> float:
    """bf16 FLOP/s of n^3 matrix products on the first device (MFU's denominator)."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((size, size), jnp.bfloat16)
    product = jax.jit(lambda x: x @ x)

    def products() -> None:
        for _ in range(repeats):
            out = product(a)
        out.block_until_ready()

    return harness.matmul_rate(products, size, repeats)


def recipe_command(
    work: Path, minutes: float, test_sentences: int, settings: tuple[str, ...] = ()
) -> list[str]:
    """`translator recipe` on the bundle's work directory, as a user types it.

    `settings`: more `KEY=VALUE` for its `--set` (a trial's batch or learning rate).
    """
    command = [sys.executable, "-m", "translator", "recipe", "--workdir", str(work)]
    values = (*layout.SETTINGS, *settings)
    command += ["--minutes", f"{minutes:g}", *(f"--set={value}" for value in values)]
    return command + (["--test-sentences", str(test_sentences)] if test_sentences else [])


def run_logged(command: list[str], log: Path) -> float:
    """Runs `command`, its output both shown and kept in `log`; returns its wall seconds.

    Raises:
        SystemExit: the command failed (its last lines are in the log).
    """
    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as kept:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        for line in process.stdout:
            print(line, end="", flush=True)
            kept.write(line)
    if process.wait():
        raise SystemExit(f"bench.accelerator: the recipe failed ({process.returncode}); {log}")
    return time.perf_counter() - started


def run(
    bundle: Path,
    out: Path,
    minutes: float,
    test_sentences: int = 0,
    settings: tuple[str, ...] = (),
) -> dict:
    """The recipe on a copy of the bundle's work directory; returns accelerator.json's data."""
    from training.planning.measure import PLAN_FILE
    from training.planning.rules import Plan
    from training.record import RunRecord
    from training.summaries import read_scalars

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="accelerator-")) / layout.WORK
    shutil.copytree(bundle / layout.WORK, work)  # the bundle stays as carried
    command = recipe_command(work, minutes, test_sentences, settings)
    wall = run_logged(command, out / "recipe.log")
    log = (out / "recipe.log").read_text("utf-8")
    plan = Plan.from_json((work / "run" / PLAN_FILE).read_text("utf-8"))
    record = RunRecord.read(work / "run" / "model")
    report = json.loads((work / "eval" / MULTI30K_TEST / "report.json").read_text("utf-8"))
    logged = read_scalars(work / "run" / "logs")["train"].get("tokens_per_second", [])
    rates = [value for _, value in logged]
    compiled = COMPILED.findall(log)  # the plan's timings compile first; the run's is last
    mean_rate = record.target_tokens / max(record.training_seconds, 1e-9)
    report_dir = work / "eval" / MULTI30K_TEST
    kept = [work / "run" / PLAN_FILE, work / "run" / "curves.png", report_dir / "report.md"]
    for path in [*kept, *report_dir.glob("translations.*")]:
        shutil.copy(path, out / path.name)
    import jax
    import keras

    result = {
        "device": device_name(),
        "versions": {"jax": jax.__version__, "keras": keras.__version__},
        "command": " ".join(["translator", *command[3:]]),
        "prepared": json.loads((bundle / layout.MANIFEST).read_text())["prepared"],
        "plan": json.loads(plan.to_json()),
        "plan_lines": plan.describe(),
        "updates": record.step,
        "target_tokens": record.target_tokens,
        "precision": record.precision,
        "training_seconds": record.training_seconds,
        "budget_seconds": record.budget_seconds,
        # Between the logged intervals (validation excluded), and over the whole run.
        "mean_tokens_per_second": mean_rate,
        "tokens_per_second": statistics.median(rates) if rates else mean_rate,
        "best_validation_bleu": record.best_validation_bleu,
        "test_bleu": report["scores"]["bleu"]["score"],
        "test_signature": report["scores"]["bleu"]["signature"],
        "test_sentences": report["sentences"],
        "compile_seconds": float(compiled[-1][1]) if compiled else None,
        "wall_seconds": wall,
    }
    (out / layout.RESULTS_FILE).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / layout.RESULTS_FILE} ({wall:.0f} s in the recipe)", flush=True)
    return result


def shape_speeds(
    bundle: Path,
    out: Path,
    batch_tokens: int,
    seconds: float,
    size: int,
    plan: Path | None = None,
) -> dict:
    """Planner shapes' speeds as a run trains them (the product's step on every bucket of
    the prepared corpus), and their MFU against the bf16 matmul rate.

    With `plan` (a run's plan.json), the shapes it timed, each at the batch it timed it
    at: what the plan estimated (on one bucket) beside what a run gets. Otherwise every
    shape at `batch_tokens`.
    """
    from training.config import DEFAULT_CONFIG, read_config
    from training.engines.backend import choose_backend
    from training.planning.rules import SHAPES
    from training.planning.timing import flops_per_token, measure_speed
    from training.recipe.corpus import prepare_data
    from training.recipe.run_config import run_request
    from training.recipe.settings import RecipePaths, RecipeSettings
    from training.run import on_backend
    from translator.pipelines.vocabulary import load_vocabulary

    paths = RecipePaths(bundle / layout.WORK)
    given = read_config(DEFAULT_CONFIG, layout.SETTINGS)  # the recipe's --set
    settings = RecipeSettings(3.0, None, None, config=given)
    corpus = prepare_data(paths, settings)
    config, _ = run_request(paths, settings, corpus, paths.workdir / "prepared")
    counts = json.loads((bundle / layout.MANIFEST).read_text())["corpus"]
    length = counts["target_tokens"] / counts["kept"]  # the mean target length (EOS included)
    choose_backend(config)
    config, strategy, precision = on_backend(config)  # adapted as a run's (static shapes)
    vocabulary = load_vocabulary(paths.vocabulary)
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    batches = {shape.name: batch_tokens for shape in SHAPES}
    if plan is not None:
        planned = json.loads(plan.read_text())["speeds"]
        batches = {n: s["batch_tokens"] for n, s in planned.items() if s["measured"]}
    rate = matmul_rate(size)
    rows = {}
    for shape in (shape for shape in SHAPES if shape.name in batches):
        batch = batches[shape.name]
        speed = measure_speed(
            shape, batch, config, vocabulary, strategy, seconds, every_bucket=True
        )
        flops = flops_per_token(shape, config, sizes, length)
        mfu = flops * speed.tokens_per_second / rate
        rows[shape.name] = {
            "tokens_per_second": speed.tokens_per_second,
            "mfu": mfu,
            "batch_tokens": batch,
            "compile_seconds": speed.compile_seconds,
        }
        print(
            f"{shape.name} at {batch:,} batch tokens: {speed.tokens_per_second:,.0f} target "
            f"tokens/s, MFU {mfu:.1%} ({speed.compile_seconds:.0f} s compiling)"
        )
        result = {"device": device_name(), "batch_tokens": batch_tokens, "precision": precision,
                  "matmul_flops_per_second": rate, "shapes": rows}  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)  # (after each shape: a cut run keeps some)
        (out / layout.SPEEDS_FILE).write_text(json.dumps(result, indent=2) + "\n")
    return result
