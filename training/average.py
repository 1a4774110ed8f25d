"""Averaging a finished or interrupted run's last checkpoints into a model directory."""

from __future__ import annotations

from pathlib import Path

from training.checkpoints import average_checkpoints, kept_checkpoints
from training.config import RUN_CONFIG_FILE, load_config
from translator.artifacts import save_model_dir
from translator.errors import ConfigError
from translator.model import Transformer
from translator.pipelines.vocabulary import load_vocabulary


def average_run(
    run_dir: str | Path, last: int, out: str | Path | None = None
) -> tuple[Path, list[str]]:
    """Averages the last `last` checkpoints of `run_dir`.

    Returns:
        The model directory written and the checkpoints averaged.

    Raises:
        FileNotFoundError: the run has no config, vocabulary or checkpoints.
        ConfigError: `last` < 1.
    """
    run_dir = Path(run_dir)
    if last < 1:
        raise ConfigError(f"--last must be >= 1, got {last}")
    for needed in (RUN_CONFIG_FILE, "vocab"):
        if not (run_dir / needed).exists():
            raise FileNotFoundError(f"{run_dir}: no {needed}; is this a training run directory?")
    paths = kept_checkpoints(run_dir / "checkpoints")[-last:]
    if not paths:
        raise FileNotFoundError(f"{run_dir / 'checkpoints'}: no checkpoints")
    config = load_config(run_dir / RUN_CONFIG_FILE)
    vocabulary = load_vocabulary(run_dir / "vocab")
    model = Transformer(
        config.model.transformer_config(vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    )
    model.build()
    average_checkpoints(model, paths)
    out = Path(out) if out else run_dir / "averaged"
    save_model_dir(
        out,
        model,
        run_dir / "vocab",
        {"averaged_checkpoints": [Path(p).name for p in paths], "config": config.to_dict()},
    )
    return out, paths
