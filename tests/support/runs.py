"""Training runs on the copy task: their configs, and training in a process of its own.

The configs expect a task mapping as the `copy_task` fixture makes it (train and valid
file pairs and a vocabulary); the processes run `scripts/train_run.py`.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from tests.support.paths import REPO, SCRIPTS
from training.config import RunConfig, build_section, dump_config
from training.planning.rules import SHAPES, Budget, CorpusCounts, Speed, make_plan

# Runs `training.run.train` in its own process: CONFIG RUN_DIR WEIGHTS.npz.
TRAIN_SCRIPT = SCRIPTS / "train_run.py"


def script_env() -> dict[str, str]:
    """The environment of a test's training process: this checkout first, quiet TF."""
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}


def train_to_end(
    config_path: Path, run_dir: Path, weights_path: Path, env: dict[str, str] | None = None
) -> str:
    """Trains (or resumes) `run_dir` to its end in a new process; returns its stdout."""
    result = subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), str(config_path), str(run_dir), str(weights_path)],
        env={**script_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def latest_step(run_dir: Path) -> int:
    """Step of the newest complete checkpoint in `run_dir` (either backend's), or -1."""
    from training.checkpoints import checkpoint_number, kept_checkpoints

    kept = kept_checkpoints(run_dir / "checkpoints")
    return checkpoint_number(kept[-1]) if kept else -1


def signal_after_checkpoint(process: subprocess.Popen, run_dir: Path, step: int, signum) -> None:
    """Sends `signum` to a training process once its checkpoint of `step` is complete.

    Complete: the `checkpoint` state file names it, so the run is interrupted
    mid-training with a real checkpoint to resume from. Watching for the `.index` file
    instead races with the state-file update, which correctly still names the previous
    checkpoint at that moment.
    """
    deadline = time.monotonic() + 300
    while latest_step(run_dir) < step:
        assert process.poll() is None, "finished before the signal could be sent"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signum)


def assert_same_weights(expected_path: Path, actual_path: Path) -> None:
    """The weights saved by two `train_to_end` runs are equal."""
    expected, actual = np.load(expected_path), np.load(actual_path)
    for key in expected.files:
        np.testing.assert_allclose(actual[key], expected[key], atol=1e-5, err_msg=key)


def tiny_run_config(task, **sections) -> RunConfig:
    """A `RunConfig` for a tiny model on the copy task; sections override by key."""
    return build_section(RunConfig, tiny_raw_config(task, **sections), "")


def tiny_raw_config(task, **sections) -> dict:
    """The mapping (as YAML holds it) of `tiny_run_config`."""
    raw = {
        "model": {"preset": "tiny", "overrides": {"dropout": 0.0}},
        "data": {
            "train_source": str(task["train"][0]),
            "train_target": str(task["train"][1]),
            "valid_source": str(task["valid"][0]),
            "valid_target": str(task["valid"][1]),
            "vocabulary": str(task["vocab"]),
            "pipeline": {"batch_tokens": 512, "max_source_length": 32, "max_target_length": 32},
        },
        "optimizer": {"peak_learning_rate": 0.002, "warmup_fraction": 0.1},
        "train": {"max_steps": 30, "precision": "float32", "strategy": "one_device"},
        "eval": {"every_steps": 0, "bleu": False},
        "checkpoint": {"every_steps": 10, "keep_last": 3},
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return raw


def replace(config: RunConfig, section: str, **fields) -> RunConfig:
    """`config` with fields of one section replaced."""
    return dataclasses.replace(
        config, **{section: dataclasses.replace(getattr(config, section), **fields)}
    )


def killed_and_resumed_equals_straight(
    config: RunConfig,
    tmp_path: Path,
    kill_at: int,
    signum: int | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Trains `config` straight, and again killed (SIGKILL, or `signum`) after the
    checkpoint of step `kill_at` then resumed by the same command: asserts the same final
    weights. `env` adds to every process' environment."""
    import signal

    steps = config.train.max_steps
    config_path = tmp_path / "config.yaml"
    dump_config(config, config_path)
    train_to_end(config_path, tmp_path / "straight", tmp_path / "a.npz", env)
    killed = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, str(TRAIN_SCRIPT), str(config_path), str(killed), str(tmp_path / "x.npz")],
        env={**script_env(), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    signal_after_checkpoint(process, killed, kill_at, signum or signal.SIGKILL)
    process.wait()
    assert latest_step(killed) in range(kill_at, steps)
    assert not (killed / "model").exists()
    assert f"steps={steps}" in train_to_end(config_path, killed, tmp_path / "b.npz", env)
    assert_same_weights(tmp_path / "a.npz", tmp_path / "b.npz")


def planned_shape(inputs: dict) -> str:
    """The shape `make_plan` chooses for `inputs`.

    `inputs`: a corpus' counts, a time budget and a speed per shape (`SHAPES` order).
    """
    counts = CorpusCounts(pairs=inputs["pairs"], characters=inputs["characters"])
    speeds = {
        shape.name: Speed(rate, inputs["tokens_per_update"], inputs["batch_tokens"], True)
        for shape, rate in zip(SHAPES, inputs["rates"], strict=True)
    }
    return make_plan(counts, Budget(seconds=inputs["seconds"]), speeds).shape.name
