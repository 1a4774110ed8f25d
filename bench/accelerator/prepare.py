"""`prepare`: what the GPU run needs, made here with TensorFlow by the same tf.data pipeline
and text path as a run here, into `.accelerator/`."""

import dataclasses
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from bench import accelerator as bundle_layout
from bench import harness
from training.plan import CorpusCounts, choose_vocab_size
from translator import text
from translator.io import count_characters, iter_lines
from translator.pipelines import PipelineConfig
from translator.pipelines.dataset import make_dataset, scan_corpus
from translator.pipelines.tokenizer import Vocabulary

VALID, TEST = ("val.en.gz", "val.de.gz"), (harness.TEST_SOURCE, harness.TEST_REFERENCE)
# The image's platform tags its pip accepts (the device tool's README), for its Python 3.12.
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_BYTES = 64 * 2**20  # what a device call may carry
DEVICE_COMMAND = (
    "python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "
    ".accelerator/wheels/*.whl && PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 "
    "python3 -m bench.accelerator run --out $OUT"
)


def pipeline(batch_tokens: int) -> PipelineConfig:
    """The training pipeline of the bundle: static shapes over a few wide buckets."""
    return PipelineConfig(
        batch_tokens=batch_tokens,
        max_source_length=bundle_layout.MAX_LENGTH,
        max_target_length=bundle_layout.MAX_LENGTH,
        bucket_boundaries=bundle_layout.BUCKET_BOUNDARIES,
        static_shapes=True,
        batch_size_multiple=bundle_layout.BATCH_SIZE_MULTIPLE,
    )


def write_batches(data: Path, vocabulary: Vocabulary, batch_tokens: int, out: Path) -> dict:
    """One shuffled epoch of training batches: per bucket length L, int16 (or int32)
    `L/source`, `L/decoder`, `L/labels` `[batches, rows, L]`, and `order`, (L, index) in
    tf.data's order. Returns the counts for the manifest."""
    files, config = [data / name for name in harness.TRAIN], pipeline(batch_tokens)
    dataset = make_dataset(*files, vocabulary, config, training=True)
    dtype = np.int16 if vocabulary.target_vocab_size < 2**15 else np.int32
    groups: dict[int, list[tuple[np.ndarray, ...]]] = {}
    order = []
    for features, labels in dataset.as_numpy_iterator():
        group = groups.setdefault(labels.shape[1], [])
        order.append((labels.shape[1], len(group)))
        group.append((features["source_ids"], features["decoder_input_ids"], labels))
    arrays = {"order": np.asarray(order, np.int32)}
    for length, batches in groups.items():
        for index, name in enumerate(("source", "decoder", "labels")):
            arrays[f"{length}/{name}"] = np.stack([b[index] for b in batches]).astype(dtype)
    np.savez_compressed(out, **arrays)
    labels = [arrays[f"{length}/labels"] for length in groups]
    return {
        "batches": len(order),
        "shapes": sorted([list(x.shape[1:]) for x in labels]),
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
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in bundle_layout.WHEELS]
    platforms = [arg for tag in WHEEL_PLATFORMS for arg in ("--platform", tag)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(out)]
    command += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    subprocess.run([*command, *platforms, *pins], check=True)
    return sorted(path.name for path in out.glob("*.whl"))


def prepare(bundle: Path, data: Path, batch_sizes: tuple[int, ...], wheels: bool = True) -> dict:
    """Writes the bundle; returns its manifest. SystemExit if it is over what a call carries."""
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir(parents=True)
    source, target = (data / name for name in harness.TRAIN)
    characters = count_characters(source, target)
    vocabulary = harness.vocabulary(bundle / "vocab", data, choose_vocab_size(characters))
    print(f"vocabulary: {vocabulary.target_vocab_size:,} pieces, joint", flush=True)
    stats = scan_corpus(source, target, vocabulary, pipeline(batch_sizes[0]))
    batches = {}
    for tokens in batch_sizes:
        batches[tokens] = write_batches(
            data, vocabulary, tokens, bundle_layout.bundle_file(bundle, tokens)
        )
        print(f"batches at {tokens:,} tokens: {batches[tokens]}", flush=True)
    manifest = {
        "prepared": harness.today(),
        "data": str(data),
        "vocab_size": vocabulary.target_vocab_size,
        "corpus": dataclasses.asdict(CorpusCounts(stats.pairs, characters, stats.target_tokens)),
        "skipped": {"empty": stats.empty, "too_long": stats.too_long},
        "pipeline": dataclasses.asdict(pipeline(batch_sizes[0])) | {"batch_tokens": None},
        "batches": batches,
        "eval": write_eval(data, vocabulary, bundle / bundle_layout.EVAL_FILE),
        "wheels": download_wheels(bundle / "wheels") if wheels else [],
    }
    (bundle / bundle_layout.MANIFEST).write_text(
        json.dumps(manifest, indent=2, default=list) + "\n"
    )
    size = sum(path.stat().st_size for path in bundle.rglob("*") if path.is_file())
    print(f"{bundle}: {size / 2**20:.1f} MiB (a device call carries {LIMIT_BYTES >> 20})")
    if size > LIMIT_BYTES:
        raise SystemExit(f"bench.accelerator: {bundle} is {size / 2**20:.1f} MiB, over 64 MiB")
    return manifest
