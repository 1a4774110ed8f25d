"""`prepare_corpus`: tokenize a training corpus once, into a prepared corpus on disk.

The tf.data pipeline's own tokenizer, tag and filter (`tokenized_corpus`) run over the
corpus once, streamed; the kept pairs go to shards of at most `shard_pairs` pairs, each
written as it fills, so memory does not grow with the corpus. The directory is written
beside its destination and renamed into place when complete: an interrupted preparation
leaves no corpus that reads. `translator.pipelines.prepared` reads it without TensorFlow.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from translator.io import count_characters
from translator.pipelines.config import PipelineConfig
from translator.pipelines.dataset import check_learnable, scan_corpus, tokenized_corpus
from translator.pipelines.prepared import (
    MANIFEST_FILE,
    SIDES,
    PreparedCorpus,
    PreparedManifest,
    choose_bucket_boundaries,
    shard_name,
)
from translator.pipelines.vocabulary import Vocabulary

# Pairs per shard: about 10 MB of ids per side for sentence-length pairs.
SHARD_PAIRS = 500_000


class _ShardWriter:
    """Buffers kept pairs and writes a shard each time `shard_pairs` of them are in."""

    def __init__(self, directory: Path, dtype: np.dtype, shard_pairs: int):
        self.directory, self.dtype, self.shard_pairs = directory, dtype, shard_pairs
        self.written: list[int] = []  # pairs per shard written
        self.longest: list[np.ndarray] = []  # each pair's longer side, for the buckets
        self._ids: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
        self._lengths: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
        self._buffered = 0

    def add(self, *sides: np.ndarray) -> int:
        """Appends a line batch's kept pairs; returns how many.

        Args:
            *sides: Each side's ids and row lengths: source ids [pieces], source lengths
                [k], label ids [pieces], label lengths [k].
        """
        for index, side in enumerate(SIDES):
            self._ids[side].append(sides[2 * index].astype(self.dtype))
            self._lengths[side].append(sides[2 * index + 1].astype(np.int64))
        kept = len(sides[1])
        self._buffered += kept
        while self._buffered >= self.shard_pairs:
            self._flush(self.shard_pairs)
        return kept

    def close(self) -> None:
        """Writes the last, partial shard."""
        if self._buffered:
            self._flush(self._buffered)

    def _flush(self, pairs: int) -> None:
        """Writes the first `pairs` buffered pairs as the next shard; keeps the rest."""
        out = self.directory / shard_name(len(self.written))
        out.mkdir()
        rest: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        written = []
        for side in SIDES:
            ids, lengths = np.concatenate(self._ids[side]), np.concatenate(self._lengths[side])
            rows = np.concatenate([[0], np.cumsum(lengths[:pairs])]).astype(np.int64)
            np.save(out / f"{side}.npy", ids[: rows[-1]])
            np.save(out / f"{side}_rows.npy", rows)
            rest[side], written = (ids[rows[-1] :], lengths[pairs:]), [*written, lengths[:pairs]]
        self.longest.append(np.maximum(*written).astype(np.int16))
        for side, (ids, lengths) in rest.items():
            self._ids[side], self._lengths[side] = [ids], [lengths]
        self._buffered -= pairs
        self.written.append(pairs)


def prepare_corpus(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    out: str | os.PathLike[str],
    config: PipelineConfig | None = None,
    *,
    tag: str = "",
    shard_pairs: int = SHARD_PAIRS,
    progress: Callable[[int], None] | None = None,
) -> PreparedManifest:
    """Tokenizes a training corpus once into `out` (replaced when it exists).

    Args:
        source_path: Source-language text file (plain or gzip).
        target_path: Target-language text file, aligned line by line.
        vocabulary: From `load_vocabulary`.
        out: The prepared corpus' directory.
        config: Its length limits and tokenizing batch (`PipelineConfig()` if None);
            batching is chosen when training reads it.
        tag: Prepended to every source as one id, as `make_dataset` does.
        shard_pairs: Kept pairs per shard file.
        progress: Called with the pairs written so far after each line batch.

    Returns:
        The manifest written.

    Raises:
        CorpusError: as `make_dataset` (line counts, UTF-8, no pair kept).
    """
    config = config or PipelineConfig()
    stats = scan_corpus(source_path, target_path, vocabulary, config, tag=tag)
    check_learnable(stats, training=False)
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    dtype = np.dtype(np.int16 if max(sizes) <= np.iinfo(np.int16).max + 1 else np.int32)
    writer = _ShardWriter(partial, dtype, shard_pairs)
    kept = 0
    pairs = tokenized_corpus(source_path, target_path, vocabulary, config, tag).map(
        lambda source, labels: (*_flat(source), *_flat(labels))
    )
    for sides in pairs.as_numpy_iterator():
        kept += writer.add(*sides)
        if progress is not None:
            progress(kept)
    writer.close()
    if kept != stats.kept:  # pragma: no cover - the scan and the pipeline share one filter
        raise RuntimeError(f"prepared {kept} pairs, but the scan kept {stats.kept}")
    longest = np.concatenate(writer.longest) if writer.longest else np.zeros(0, np.int64)
    manifest = PreparedManifest(
        source_path=str(source_path),
        target_path=str(target_path),
        source_sha256=vocabulary.source_sha256,
        target_sha256=vocabulary.target_sha256,
        source_vocab_size=sizes[0],
        target_vocab_size=sizes[1],
        max_source_length=config.max_source_length,
        max_target_length=config.max_target_length,
        tag=tag,
        pairs=stats.pairs,
        kept=stats.kept,
        empty=stats.empty,
        too_long=stats.too_long,
        source_tokens=stats.source_tokens,
        target_tokens=stats.target_tokens,
        characters=count_characters(source_path, target_path),
        shard_pairs=tuple(writer.written),
        bucket_boundaries=choose_bucket_boundaries(longest),
        dtype=dtype.name,
    )
    (partial / MANIFEST_FILE).write_text(manifest.to_json(), "utf-8")
    PreparedCorpus(partial)  # reads back whole, or raises before anything is replaced
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return manifest


def _flat(ragged):
    """A ragged `[k, (n)]` as its values `[pieces]` and row lengths `[k]`."""
    return ragged.flat_values, ragged.row_lengths()
