"""`translator train` as a user runs it: a real process, its exit status and what it prints."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import NOISE, REPO, translator
from tests.support.images import assert_png
from tests.support.runs import (
    assert_same_weights,
    latest_step,
    signal_after_checkpoint,
    tiny_run_config,
    train_to_end,
)
from training.config import dump_config
from training.summaries import CURVES_FILE, read_scalars


def write_config(tmp_path, task, **sections):
    path = tmp_path / "config.yaml"
    dump_config(tiny_run_config(task, **sections), path)
    return path


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), "utf-8")
    return path


def test_mismatched_files_are_one_error_line_and_a_traceback_only_with_v(copy_task, tmp_path):
    source = write(tmp_path / "a.src", ["ba ce", "di fo", "gu ka"])
    target = write(tmp_path / "a.tgt", ["ba ce", "di fo"])
    config = write_config(tmp_path, copy_task)
    args = ["train", "--config", config, "--run-dir", tmp_path / "run"]
    args += ["--set", f"data.train_source={source}", "--set", f"data.train_target={target}"]
    result = translator(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("translator train: error: ") and "Traceback" not in result.stderr
    assert str(source) in lines[-1] and "3" in lines[-1] and "2" in lines[-1]
    assert not NOISE.search(result.stderr), result.stderr
    verbose = translator(*args, "-v")
    assert verbose.returncode != 0 and "Traceback" in verbose.stderr
    assert "CorpusError" in verbose.stderr


@pytest.mark.parametrize(
    ("side", "source_lines", "target_lines", "counts"),
    [
        ("train", [], [], "0 pairs, 0 kept"),
        ("valid", ["", "  ", "\t"], ["", "ba", " "], "3 pairs, 0 kept"),
        ("train", ["ba " * 40] * 4, ["ce " * 40] * 4, "0 with an empty line, 4 longer than 32"),
    ],
    ids=["empty training files", "blank validation lines", "all training pairs over-long"],
)
def test_a_corpus_with_no_pair_to_learn_from_is_refused_before_any_step(
    copy_task, tmp_path, side, source_lines, target_lines, counts
):
    source = write(tmp_path / "x.src", source_lines)
    target = write(tmp_path / "x.tgt", target_lines)
    run_dir = tmp_path / "run"
    result = translator(
        "train",
        "--config",
        write_config(tmp_path, copy_task),
        "--run-dir",
        run_dir,
        "--set",
        f"data.{side}_source={source}",
        "--set",
        f"data.{side}_target={target}",
    )
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    purpose = "train" if side == "train" else "validate"
    assert line.startswith(f"translator train: error: {source} | {target}: no pair to ")
    assert f"no pair to {purpose} on" in line and counts in line, line
    assert not list(run_dir.glob("checkpoints/ckpt-*")) and not (run_dir / "model").exists()


@pytest.mark.slow  # ~47 s; test_finetune.py's in-process Ctrl-C resume is the default check
def test_ctrl_c_saves_the_step_and_the_resumed_run_equals_an_uninterrupted_one(copy_task, tmp_path):
    """SIGINT mid-training: checkpoint at that step, exit 130, resume = never interrupted.

    Not on a terminal, the run logs a progress line every `log_every_steps` updates, and
    TensorBoard gets a point at each of those updates, across the resume.
    """
    config = write_config(
        tmp_path,
        copy_task,
        model={"preset": "tiny", "overrides": {"dropout": 0.1}},  # RNG state must resume too
        train={"max_steps": 60, "log_every_steps": 5},
        eval={"every_steps": 20},
        checkpoint={"every_steps": 10, "keep_last": 10},
    )
    train_to_end(config, tmp_path / "straight", tmp_path / "a.npz")

    run_dir = tmp_path / "interrupted"
    command = [sys.executable, "-m", "translator", "train", "--config", config]
    process = subprocess.Popen(
        [*command, "--run-dir", run_dir],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    signal_after_checkpoint(process, run_dir, 20, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    stopped = latest_step(run_dir)
    assert 20 <= stopped < 60 and not (run_dir / "model").exists()
    assert f"translator train: interrupted: stopped at step {stopped}" in stderr
    assert f"ckpt-{stopped}" in stderr and "run the same command again" in stderr
    assert "Traceback" not in stderr and not NOISE.search(stderr), stderr
    # The log: a line every 5 updates, against the budget of 60 steps.
    progress = re.findall(r"step (\d+)/60 \((\d+)%\) \| loss ([\d.]+) \| lr ([\d.e+-]+) \|", stderr)
    assert [int(step) for step, *_ in progress] == list(range(5, stopped + 1, 5))
    assert all(int(percent) == round(int(step) * 100 / 60) for step, percent, *_ in progress)
    assert all(np.isfinite(float(loss)) and float(rate) > 0 for *_, loss, rate in progress)
    assert "target tok/s" in stderr and "elapsed, ~" in stderr and "Epoch" not in stdout

    assert "steps=60" in train_to_end(config, run_dir, tmp_path / "b.npz")
    assert_same_weights(tmp_path / "a.npz", tmp_path / "b.npz")
    # TensorBoard, against the updates: every logging interval once across the resume,
    # each tag's steps strictly increasing, the run's minutes growing.
    straight, resumed = (read_scalars(tmp_path / run / "logs") for run in ("straight", run_dir))
    assert set(resumed["train"]) == {"loss", "learning_rate", "tokens_per_second", "minutes"}
    for tag, points in resumed["train"].items():
        assert [step for step, _ in points] == list(range(5, 61, 5)), tag
    assert sorted(resumed["validation"]) == ["loss", "minutes"]
    # Validation at the updates of the uninterrupted run (every 20), plus where Ctrl-C
    # stopped; from the first period boundary on, the same losses as that run.
    validated = dict(resumed["validation"]["loss"])
    expected = dict(straight["validation"]["loss"])
    assert list(expected) == [20, 40, 60]
    assert list(validated) == sorted({*expected, stopped})
    for step in (40, 60):
        assert validated[step] == pytest.approx(expected[step], rel=1e-4), step
    losses = [dict(run["train"]["loss"]) for run in (straight, resumed)]
    for step in range(45, 61, 5):
        assert losses[1][step] == pytest.approx(losses[0][step], rel=1e-4), step
    minutes = [value for _, value in resumed["train"]["minutes"]]
    assert minutes == sorted(minutes) and minutes[0] > 0
    # The learning rate of an update does not depend on the interruption.
    rates = [[value for _, value in run["train"]["learning_rate"]] for run in (straight, resumed)]
    assert rates[1] == pytest.approx(rates[0])
    assert_png(run_dir / CURVES_FILE, min_bytes=20_000, min_size=600)


def test_a_run_resumes_with_its_own_config_without_config_again(copy_task, tmp_path, caplog):
    from translator.cli import main

    config = write_config(tmp_path, copy_task, train={"max_steps": 10})
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(config), "--run-dir", str(run_dir), "--no-plan"]) == 0
    config.unlink()  # nothing but the run directory is left to say how it was configured
    with caplog.at_level("INFO", logger="training.run"):
        resumed = ["train", "--run-dir", str(run_dir), "--no-plan", "--set", "train.max_steps=20"]
        assert main(resumed) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert f"config: {run_dir / 'config.yaml'} (the run's own)" in messages
    assert any(m.startswith(f"resumed from {run_dir / 'checkpoints'}") for m in messages)
    assert latest_step(run_dir) == 20


def test_without_tensorflow_train_says_in_one_line_what_it_needs(copy_task, tmp_path):
    """A JAX-only machine: text needs the prepare command; a prepared corpus is read (here
    a directory that is not one: the reader's own line)."""
    config = write_config(tmp_path, copy_task, train={"backend": "jax"})
    base = [sys.executable, "-m", "tests.support.no_tensorflow", "translator", "train"]
    base += ["--config", str(config), "--run-dir", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for extra, wanted in (
        (
            [],
            "data.train_source: training reads text files with tf.data, and TensorFlow is "
            "not installed here; prepare the corpus once where it is (translator data prepare",
        ),
        (["--set", f"data.prepared={tmp_path}"], f"{tmp_path}: not a prepared corpus"),
    ):
        done = subprocess.run(
            [*base, *extra], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
        )
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert done.returncode == 2 and len(errors) == 1, done.stderr[-2000:]
        assert errors[0].startswith(f"translator train: error: {wanted}")
    assert not (tmp_path / "run").exists()  # nothing written


def test_where_jax_trains_tensorflow_is_kept_off_the_gpus(tmp_path):
    """With both installed, choosing JAX hides the GPUs and TPUs from TensorFlow before its
    first op (it would take a GPU's memory beside JAX): the calls are recorded here, as
    this machine has no GPU to hide."""
    code = (
        "import tensorflow as tf\n"
        "hidden = []\n"
        "tf.config.set_visible_devices = lambda devices, kind: hidden.append((devices, kind))\n"
        "from training.engines.backend import choose_backend\n"
        "from training.config import DEFAULT_CONFIG, load_config\n"
        "backend = choose_backend(load_config(DEFAULT_CONFIG, ['train.backend=jax']))\n"
        "print(backend, hidden)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env["KERAS_BACKEND"] = "jax"  # (importing TensorFlow imports Keras)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] != "[]"
    assert done.stdout.strip() == "jax [([], 'GPU'), ([], 'TPU')]"
