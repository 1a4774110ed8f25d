"""A synthetic parallel corpus with a real SentencePiece vocabulary, for training runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from training.config import RunConfig, build_section

WORDS = [f"{a}{b}" for a in "bcdfgk" for b in "aeiou"][:24]  # 24 two-letter words


def write_copy_corpus(
    directory: Path, count: int, seed: int, reverse: bool = False
) -> tuple[Path, Path]:
    """Sentences of 3-8 random words; the target copies (or reverses) the source."""
    rng = np.random.default_rng(seed)
    sources, targets = [], []
    for _ in range(count):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(3, 9))]
        sources.append(" ".join(words))
        targets.append(" ".join(reversed(words) if reverse else words))
    directory.mkdir(parents=True, exist_ok=True)
    src, tgt = directory / f"{seed}.src", directory / f"{seed}.tgt"
    src.write_text("\n".join(sources) + "\n")
    tgt.write_text("\n".join(targets) + "\n")
    return src, tgt


@pytest.fixture(scope="session")
def copy_task(tmp_path_factory):
    """Train/validation files and a vocabulary where each word is one piece."""
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("copy_task")
    train = write_copy_corpus(root, 3000, seed=1)
    valid = write_copy_corpus(root, 200, seed=2)
    # 39 = the 24 words as whole pieces + letters + specials: no byte fallback needed.
    build_vocabulary([train[0]], [train[1]], root / "vocab", vocab_size=39, byte_fallback=False)
    return {"train": train, "valid": valid, "vocab": root / "vocab", "root": root}


def tiny_run_config(task, **sections) -> RunConfig:
    """A `RunConfig` for a tiny model on the copy task; sections override by key."""
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
    return build_section(RunConfig, raw, "")


def replace(config: RunConfig, section: str, **fields) -> RunConfig:
    """`config` with fields of one section replaced."""
    return dataclasses.replace(
        config, **{section: dataclasses.replace(getattr(config, section), **fields)}
    )
