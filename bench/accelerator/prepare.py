"""`prepare`: what the GPU run needs, made here with TensorFlow, into `.accelerator/`.

Everything the accelerator trains on comes out of the same tf.data pipeline and text path
as a run here: `make_dataset` (static shapes, one epoch per batch size) and
`translator.text.prepare` (sorted, EOS-ended, padded sources).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from bench import harness
from bench.accelerator import (
    BATCH_SIZE_MULTIPLE,
    BUCKET_BOUNDARIES,
    EVAL_FILE,
    MANIFEST,
    MAX_LENGTH,
    WHEELS,
    bundle_file,
)
from training.plan import CorpusCounts, choose_vocab_size
from training.planning import count_characters
from translator import text
from translator.io import iter_lines
from translator.pipelines import PipelineConfig
from translator.pipelines.dataset import make_dataset, scan_corpus
from translator.pipelines.tokenizer import Vocabulary, load_vocabulary
from translator.pipelines.vocab import build_vocabulary

VALID = ("val.en.gz", "val.de.gz")
TEST = (harness.TEST_SOURCE, harness.TEST_REFERENCE)
# The image's Python and the platform tags its pip accepts (the device tool's README).
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# What a device call may carry.
LIMIT_BYTES = 64 * 2**20


def pipeline(batch_tokens: int) -> PipelineConfig:
    """The training pipeline of the bundle: static shapes over a few wide buckets."""
    return PipelineConfig(
        batch_tokens=batch_tokens,
        max_source_length=MAX_LENGTH,
        max_target_length=MAX_LENGTH,
        bucket_boundaries=BUCKET_BOUNDARIES,
        static_shapes=True,
        batch_size_multiple=BATCH_SIZE_MULTIPLE,
    )


def write_batches(data: Path, vocabulary: Vocabulary, batch_tokens: int, out: Path) -> dict:
    """One shuffled epoch of training batches, grouped by shape, with the epoch's order.

    The file holds, per bucket length L, `L/source`, `L/decoder`, `L/labels`: int16 (or
    int32) `[batches, rows, L]`, and `order`: int32 `[batches, 2]`, (L, index) in the
    order tf.data made them.

    Returns:
        Counts for the manifest: batches, padded and real target tokens.
    """
    dataset = make_dataset(
        data / harness.TRAIN[0],
        data / harness.TRAIN[1],
        vocabulary,
        pipeline(batch_tokens),
        training=True,
    )
    dtype = np.int16 if vocabulary.target_vocab_size < 2**15 else np.int32
    groups: dict[int, list[tuple[np.ndarray, ...]]] = {}
    order = []
    for features, labels in dataset.as_numpy_iterator():
        length = labels.shape[1]
        group = groups.setdefault(length, [])
        order.append((length, len(group)))
        group.append((features["source_ids"], features["decoder_input_ids"], labels))
    arrays = {"order": np.asarray(order, np.int32)}
    for length, batches in groups.items():
        for index, name in enumerate(("source", "decoder", "labels")):
            arrays[f"{length}/{name}"] = np.stack([b[index] for b in batches]).astype(dtype)
    np.savez_compressed(out, **arrays)
    labels = [arrays[f"{length}/labels"] for length in groups]
    return {
        "batches": len(order),
        "shapes": sorted([list(arrays[f"{n}/labels"].shape[1:]) for n in groups]),
        "real_target_tokens": int(sum((x > 0).sum() for x in labels)),
        "padded_target_tokens": int(sum(x.size for x in labels)),
    }


def write_eval(data: Path, vocabulary: Vocabulary, out: Path) -> dict:
    """Validation and test sources as the text path prepares them, and their references."""
    arrays, counts = {}, {}
    for split, (source, reference) in {"valid": VALID, "test": TEST}.items():
        lines = list(iter_lines(data / source))
        prepared = text.prepare(tf.constant(lines), vocabulary.source, text.UNBOUNDED_SOURCE_CUT)
        arrays[f"{split}/source"] = prepared.source_ids.numpy().astype(np.int32)
        arrays[f"{split}/rows"] = prepared.rows.numpy()
        arrays[f"{split}/references"] = np.asarray(list(iter_lines(data / reference)))
        counts[split] = {"lines": len(lines), "searched": int(prepared.rows.shape[0])}
    np.savez_compressed(out, **arrays)
    return counts


def download_wheels(out: Path) -> list[str]:
    """The image's missing wheels, at this environment's versions, for its Python 3.12."""
    out.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]
    platforms = [arg for tag in WHEEL_PLATFORMS for arg in ("--platform", tag)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    subprocess.run([*command, *platforms, "-d", str(out), *pins], check=True)
    return sorted(path.name for path in out.glob("*.whl"))


def prepare(bundle: Path, data: Path, batch_sizes: tuple[int, ...], wheels: bool = True) -> dict:
    """Writes the bundle; returns its manifest.

    Raises:
        SystemExit: the bundle is larger than a device call carries.
    """
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    source, target = (data / name for name in harness.TRAIN)
    characters = count_characters(source, target)
    vocab_size = choose_vocab_size(characters)
    print(f"vocabulary: {vocab_size:,} pieces, joint, from {source} and {target}", flush=True)
    build_vocabulary([source], [target], bundle / "vocab", vocab_size=vocab_size)
    vocabulary = load_vocabulary(bundle / "vocab")
    stats = scan_corpus(source, target, vocabulary, pipeline(batch_sizes[0]))
    corpus = CorpusCounts(stats.pairs, characters, stats.target_tokens)
    batches = {}
    for batch_tokens in batch_sizes:
        batches[batch_tokens] = write_batches(
            data, vocabulary, batch_tokens, bundle_file(bundle, batch_tokens)
        )
        print(f"batches at {batch_tokens:,} tokens: {batches[batch_tokens]}", flush=True)
    manifest = {
        "prepared": harness.today(),
        "data": str(data),
        "vocab_size": vocabulary.target_vocab_size,
        "corpus": dataclasses.asdict(corpus),
        "skipped": {"empty": stats.empty, "too_long": stats.too_long},
        "pipeline": dataclasses.asdict(pipeline(batch_sizes[0])) | {"batch_tokens": None},
        "batches": batches,
        "eval": write_eval(data, vocabulary, bundle / EVAL_FILE),
        "wheels": download_wheels(bundle / "wheels") if wheels else [],
    }
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=2, default=list) + "\n")
    size = sum(path.stat().st_size for path in bundle.rglob("*") if path.is_file())
    print(f"{bundle}: {size / 2**20:.1f} MiB (a device call carries {LIMIT_BYTES >> 20})")
    if size > LIMIT_BYTES:
        raise SystemExit(f"bench.accelerator: {bundle} is {size / 2**20:.1f} MiB, over 64 MiB")
    return manifest


def device_command() -> str:
    """The command to give the device tool (with carry: [".accelerator"])."""
    return (
        "python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "
        ".accelerator/wheels/*.whl && PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 "
        "python3 -m bench.accelerator run --out $OUT"
    )
