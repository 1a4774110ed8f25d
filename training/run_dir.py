"""The run directory before training.

The inputs a config names, checked; the resolved config and the vocabulary written, or
checked against the run being resumed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from training.config import RUN_CONFIG_FILE, ConfigError, RunConfig, dump_config, load_config
from translator.pipelines.vocabulary import Vocabulary, load_vocabulary


def check_inputs(config: RunConfig) -> None:
    """Fails early, naming the key, for missing data files or vocabulary directory.

    Pure Python: it runs before the strategy is made, which for MultiWorkerMirrored
    must happen before TensorFlow starts.
    """
    data = config.data
    if data.train and (data.train_source or data.train_target):
        raise ConfigError("data.train and data.train_source/train_target: give one of them")
    if data.prepared and (data.train or data.train_source or data.train_target):
        raise ConfigError(
            "data.prepared and data.train/train_source/train_target: give one of them (a "
            "prepared corpus holds the training pairs)"
        )
    if data.prepared and not Path(data.prepared).is_dir():
        raise ConfigError(
            f"data.prepared: directory not found: {data.prepared} (make one with "
            "`translator data prepare`)"
        )
    files = {"data.valid_source": data.valid_source, "data.valid_target": data.valid_target}
    for index, corpus in enumerate(data.corpora()):
        where = f"data.train[{index}]." if data.train else "data.train_"
        if not corpus.weight > 0:
            raise ConfigError(
                f"{where}weight: must be > 0, got {corpus.weight} (remove the corpus to leave "
                "it out)"
            )
        for side in ("source", "target"):
            if not getattr(corpus, side):
                raise ConfigError(f"{where}{side}: required")
            files[f"{where}{side}"] = getattr(corpus, side)
    if bool(data.valid_source) != bool(data.valid_target):
        raise ConfigError("data.valid_source and data.valid_target: give both or neither")
    for key, path in files.items():
        if path and not Path(path).is_file():
            raise ConfigError(f"{key}: file not found: {path}")
    if not data.vocabulary:
        raise ConfigError("data.vocabulary: required (a directory from `translator build-vocab`)")
    if not Path(data.vocabulary).is_dir():
        raise ConfigError(
            f"data.vocabulary: directory not found: {data.vocabulary} "
            "(build one with `translator build-vocab`)"
        )


def load_run_vocabulary(config: RunConfig) -> Vocabulary:
    """The vocabulary `data.vocabulary` names; a bad one is a `ConfigError` naming the key."""
    try:
        return load_vocabulary(config.data.vocabulary)
    except Exception as error:  # the vocabulary module names the file
        raise ConfigError(f"data.vocabulary: {error}") from error


def prepare_run_dir(run_dir: Path, config: RunConfig, vocabulary: Vocabulary) -> None:
    """Writes config and vocabulary, or checks them against a run being resumed."""
    vocab_copy = run_dir / "vocab"
    if vocab_copy.is_dir():
        previous = load_vocabulary(vocab_copy)
        if (previous.source_sha256, previous.target_sha256) != (
            vocabulary.source_sha256,
            vocabulary.target_sha256,
        ):
            raise ConfigError(
                f"data.vocabulary: {config.data.vocabulary} differs from the vocabulary of "
                f"the run being resumed ({vocab_copy}); use a new run directory"
            )
        previous_config = load_config(run_dir / RUN_CONFIG_FILE)
        began_on = previous_config.train.backend
        if began_on not in ("auto", config.train.backend):  # its checkpoints are that backend's
            raise ConfigError(
                f"train.backend: the run in {run_dir} began on {began_on}; resume it there "
                f"(--set train.backend={began_on}), or start a new run directory from its "
                "model with --init-from"
            )
        if previous_config.model != config.model:
            raise ConfigError(
                f"model: differs from the run being resumed ({run_dir / RUN_CONFIG_FILE}): "
                f"{previous_config.model} vs {config.model}; use a new run directory"
            )
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(config.data.vocabulary, vocab_copy)
    dump_config(config, run_dir / RUN_CONFIG_FILE)
