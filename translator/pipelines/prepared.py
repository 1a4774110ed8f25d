"""A prepared corpus: training pairs tokenized once, read back with numpy alone.

`translator data prepare` (`translator.pipelines.prepare`) runs the tf.data pipeline's
tokenizer and filter over a training corpus once and writes what it keeps as id arrays,
as fairseq-preprocess and sockeye-prepare-data do. Training then reads those arrays with
no TensorFlow (a JAX-only accelerator machine) and no tokenizing:

    DIR/manifest.json              what was prepared, with what, and the counts
    DIR/shard-00000/source.npy     int16|int32 [pieces]  every kept source, EOS included
    DIR/shard-00000/source_rows.npy  int64 [pairs + 1]   where each source starts
    DIR/shard-00000/labels.npy     int16|int32 [pieces]  every kept target, EOS included
    DIR/shard-00000/labels_rows.npy  int64 [pairs + 1]
    DIR/shard-00001/...            (a shard holds at most `shard_pairs` pairs)

The arrays are memory-mapped. Batches are made here, as the pipeline makes them: a pair
goes to the first length bucket that fits it, a bucket of length L holds
`batch_tokens // L` pairs, and the decoder input is the label shifted right behind BOS
(teacher forcing). Each epoch is a seeded permutation of all pairs (a full shuffle, where
tf.data shuffles within a buffer), so an epoch's batches depend on the seed and the
epoch only, and a resumed run continues at the batch it stopped at.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from translator.constants import BOS_ID, PAD_ID
from translator.errors import ConfigError
from translator.pipelines.config import Bucket, PipelineConfig
from translator.pipelines.errors import CorpusError

log = logging.getLogger("translator.pipelines")

FORMAT = 1
MANIFEST_FILE = "manifest.json"
# A validation set prepared beside the training corpus (`data prepare --valid`), inside it.
VALIDATION_DIR = "valid"
# The arrays of one shard, each side's ids and the row starts into them.
SIDES = ("source", "labels")
# Buckets chosen from the corpus for static shapes: each is one compiled step.
CHOSEN_BUCKETS = 5
# Bucket lengths are multiples of this (tensor cores, and fewer candidates to weigh).
BUCKET_ALIGN = 8

# (features {"source_ids", "decoder_input_ids"}, labels): int32 [batch, length] each.
Batch = tuple[dict[str, np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class PreparedManifest:
    """What a prepared corpus holds, and what it was made with."""

    # The text files it was prepared from (for messages only: they are not read again).
    source_path: str
    target_path: str
    # The vocabulary's SentencePiece models (sha256) and sizes: ids mean nothing without.
    source_sha256: str
    target_sha256: str
    source_vocab_size: int
    target_vocab_size: int
    # The pipeline's length limits (special tokens included) and the sources' tag ("").
    max_source_length: int
    max_target_length: int
    tag: str
    # Lines of each file; pairs kept; pairs skipped with an empty side, and over-long.
    pairs: int
    kept: int
    empty: int
    too_long: int
    # Real tokens of the kept pairs (EOS included), and characters of both files.
    source_tokens: int
    target_tokens: int
    characters: int
    # Kept pairs per shard, in order (shard-00000, shard-00001, ...).
    shard_pairs: tuple[int, ...]
    # Bucket lengths chosen from the kept pairs' lengths for static shapes (few, wide).
    bucket_boundaries: tuple[int, ...]
    # The ids' numpy dtype on disk.
    dtype: str
    format: int = FORMAT

    def summary(self) -> str:
        """One line: what the corpus holds, what was skipped and why, its buckets."""
        return (
            f"{self.pairs:,} pairs, {self.kept:,} kept ({self.source_tokens:,} source / "
            f"{self.target_tokens:,} target tokens) in {len(self.shard_pairs)} shard(s); "
            f"skipped {self.empty:,} with an empty line, {self.too_long:,} longer than "
            f"{self.max_source_length} source / {self.max_target_length} target tokens; "
            f"buckets {', '.join(map(str, self.bucket_boundaries))}"
        )

    def to_json(self) -> str:
        """The manifest file's text."""
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> PreparedManifest:
        """Reads a manifest; `where` names the file in errors.

        Raises:
            CorpusError: not a manifest of this format.
        """
        try:
            fields = json.loads(text)
            if fields.get("format") != FORMAT:
                raise CorpusError(
                    f"{where}: a prepared corpus of format {fields.get('format')}; this "
                    f"version reads format {FORMAT}: prepare it again (translator data prepare)"
                )
            fields["shard_pairs"] = tuple(fields["shard_pairs"])
            fields["bucket_boundaries"] = tuple(fields["bucket_boundaries"])
            return cls(**fields)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise CorpusError(f"{where}: not a prepared corpus manifest ({error})") from error


def shard_name(index: int) -> str:
    """The directory of shard `index`."""
    return f"shard-{index:05d}"


def choose_bucket_boundaries(
    longest: np.ndarray, count: int = CHOSEN_BUCKETS, align: int = BUCKET_ALIGN
) -> tuple[int, ...]:
    """The `count` bucket lengths (multiples of `align`) that pad the corpus least.

    Args:
        longest: int [pairs]: each pair's longer side, special tokens included.
        count: How many buckets (compiled shapes) at most.
        align: Bucket lengths are multiples of this.

    Returns:
        Ascending lengths; the last holds the longest pair. Exact by dynamic programming
        over the candidate lengths (a padded batch costs its bucket's length per row).
    """
    if not len(longest):
        return ()
    top = math.ceil(int(longest.max()) / align)
    candidates = np.arange(1, top + 1) * align  # [c]
    # pairs[i]: pairs whose longest side fits candidates[i] but not candidates[i - 1].
    pairs = np.bincount(np.searchsorted(candidates, longest, side="left"), minlength=top)
    below = np.concatenate([[0], np.cumsum(pairs)])  # [c + 1]: pairs fitting before i
    inf = float("inf")
    # cost[k][i]: the least padded length of the pairs up to candidates[i], k + 1 buckets.
    cost = np.full((count, top), inf)
    back = np.zeros((count, top), np.int64)
    cost[0] = below[1:] * candidates
    for k in range(1, count):
        for i in range(top):
            for j in range(i):  # the previous bucket ends at candidates[j]
                value = cost[k - 1][j] + (below[i + 1] - below[j + 1]) * candidates[i]
                if value < cost[k][i]:
                    cost[k][i], back[k][i] = value, j
    k = int(np.argmin(cost[:, top - 1]))
    chosen, i = [], top - 1
    while True:
        chosen.append(int(candidates[i]))
        if k == 0:
            break
        i, k = int(back[k][i]), k - 1
    return tuple(sorted(chosen))


class PreparedCorpus:
    """A prepared corpus on disk, memory-mapped, and the batches of each epoch.

    Args:
        path: The directory `translator data prepare` wrote.

    Raises:
        CorpusError: no such directory, or not a prepared corpus (naming the file).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        manifest_file = self.path / MANIFEST_FILE
        if not manifest_file.is_file():
            raise CorpusError(
                f"{self.path}: not a prepared corpus (no {MANIFEST_FILE}); make one with "
                "translator data prepare"
            )
        self.manifest = PreparedManifest.from_json(
            manifest_file.read_text("utf-8"), str(manifest_file)
        )
        self._shards = [self._open_shard(i) for i in range(len(self.manifest.shard_pairs))]
        starts = np.cumsum([0, *self.manifest.shard_pairs])
        self._shard_starts = starts  # [shards + 1]: the first global index of each shard
        # int64 [pairs]: each kept pair's source and label lengths, EOS included.
        self.source_lengths, self.target_lengths = (
            np.concatenate([np.diff(s[f"{side}_rows"]) for s in self._shards] or [[]]).astype(
                np.int64
            )
            for side in SIDES
        )

    def _open_shard(self, index: int) -> dict[str, np.ndarray]:
        directory = self.path / shard_name(index)
        arrays = {}
        for side in SIDES:
            for name in (side, f"{side}_rows"):
                file = directory / f"{name}.npy"
                try:
                    arrays[name] = np.load(file, mmap_mode="r")
                except (OSError, ValueError) as error:
                    raise CorpusError(f"{file}: cannot read it: {error}") from error
        expected = self.manifest.shard_pairs[index] + 1
        for side in SIDES:
            rows = arrays[f"{side}_rows"]
            if len(rows) != expected or int(rows[-1]) != len(arrays[side]):
                raise CorpusError(
                    f"{directory}: its {side} arrays do not match the manifest (damaged or "
                    "from another preparation); prepare the corpus again"
                )
        return arrays

    @property
    def pairs(self) -> int:
        """Kept pairs: the rows an epoch draws from."""
        return int(self._shard_starts[-1])

    def check(
        self,
        source_sha256: str,
        target_sha256: str,
        max_source_length: int,
        max_target_length: int,
        key: str = "data.prepared",
    ) -> None:
        """Refuses a corpus prepared with another vocabulary or other length limits.

        Raises:
            ConfigError: one line naming `key`, what differs and how to prepare again.
        """
        manifest = self.manifest
        found = {
            "vocabulary": (manifest.source_sha256, manifest.target_sha256),
            "max lengths": (manifest.max_source_length, manifest.max_target_length),
        }
        wanted = {
            "vocabulary": (source_sha256, target_sha256),
            "max lengths": (max_source_length, max_target_length),
        }
        for what, value in found.items():
            if value != wanted[what]:
                raise ConfigError(
                    f"{key}: {self.path} was prepared with {what} {_pair(value)}, this run "
                    f"has {_pair(wanted[what])}; prepare it again with the run's "
                    "(translator data prepare)"
                )

    def buckets_for(self, config: PipelineConfig) -> PipelineConfig:
        """`config`, with the corpus' own bucket lengths under static shapes when it sets none.

        Static shapes compile one step per bucket: a few buckets fitted to the corpus pad
        less than evenly spaced ones, with fewer programs.
        """
        if not config.static_shapes or config.bucket_boundaries:
            return config
        chosen = tuple(b for b in self.manifest.bucket_boundaries if b < config.max_length)
        return dataclasses.replace(config, bucket_boundaries=chosen)

    def batch_shapes(self, config: PipelineConfig) -> tuple[tuple[int, int], ...]:
        """Under static shapes, `(rows, length)` of every bucket holding a pair."""
        pairs = zip(config.buckets(), self.bucket_counts(config), strict=True)
        return tuple((bucket.batch_size, bucket.length) for bucket, count in pairs if count)

    def bucket_counts(self, config: PipelineConfig) -> tuple[int, ...]:
        """Pairs per bucket of `config.buckets()`, in their order."""
        buckets = config.buckets()
        counts = np.bincount(self._buckets_of(buckets), minlength=len(buckets))
        return tuple(int(c) for c in counts)

    def commonest_bucket(self, config: PipelineConfig) -> Bucket | None:
        """The bucket holding the most target tokens (None without static shapes)."""
        if not config.static_shapes:
            return None
        buckets = config.buckets()
        tokens = np.bincount(
            self._buckets_of(buckets), weights=self.target_lengths, minlength=len(buckets)
        )
        return buckets[int(np.argmax(tokens))]

    def epoch(self, config: PipelineConfig, epoch: int) -> list[tuple[Bucket, np.ndarray]]:
        """The batches of one epoch, in order: each its bucket and its pairs' indices.

        A pair joins its bucket in the epoch's seeded order, and a bucket's batch is
        emitted when it fills, as tf.data's `group_by_window` does; each bucket's
        incomplete last batch at the end. Under static shapes (`batches` pads its rows)
        only a bucket that fills no batch keeps it; the others leave theirs to later
        epochs' shuffles, as tf.data's training batches do (`_batch_by_bucket`).
        """
        buckets = config.buckets()
        sizes = np.array([b.batch_size for b in buckets])
        bucket_of = self._buckets_of(buckets)  # [pairs]
        order = np.arange(self.pairs)
        if config.shuffle_buffer_size > 1:
            order = _rng(config.seed, epoch).permutation(self.pairs)
        ends, batches = [], []
        in_order = bucket_of[order]  # [pairs]: the bucket of each pair, in epoch order
        for index, bucket in enumerate(buckets):
            positions = np.flatnonzero(in_order == index)  # where its pairs come, in order
            size = int(sizes[index])
            if size < 1 or not len(positions):
                continue
            full = len(positions) // size
            for k in range(full):
                chunk = positions[k * size : (k + 1) * size]
                ends.append(int(chunk[-1]))
                batches.append((bucket, order[chunk]))
            if len(positions) % size and not (config.static_shapes and full):
                ends.append(self.pairs + index)  # after every full batch, bucket by bucket
                batches.append((bucket, order[positions[full * size :]]))
        return [batches[i] for i in np.argsort(ends, kind="stable")]

    def _buckets_of(self, buckets: tuple[Bucket, ...]) -> np.ndarray:
        """Each pair's bucket, the first whose length holds its longer side: int [pairs]."""
        lengths = np.array([b.length for b in buckets])
        longest = np.maximum(self.source_lengths, self.target_lengths)
        return np.searchsorted(lengths, longest, side="left")

    def validation(self) -> PreparedCorpus | None:
        """The validation set prepared with it (`VALIDATION_DIR`), or None."""
        if not (self.path / VALIDATION_DIR / MANIFEST_FILE).is_file():
            return None
        return PreparedCorpus(self.path / VALIDATION_DIR)

    def evaluation_batches(self, config: PipelineConfig) -> Iterator[Batch]:
        """Every pair once, in file order within its bucket, bucket after bucket.

        As tf.data's evaluation batches: under static shapes a bucket's last batch is
        padded with rows of padding to the bucket's batch size (`_batch_of`); otherwise
        it is shorter.
        """
        buckets = config.buckets()
        bucket_of = self._buckets_of(buckets)  # [pairs]
        for index, bucket in enumerate(buckets):
            rows = np.flatnonzero(bucket_of == index)
            size = max(bucket.batch_size, 1)
            for start in range(0, len(rows), size):
                yield self._batch_of(rows[start : start + size], bucket, config.static_shapes)

    def batches(
        self, config: PipelineConfig, skip: int = 0, only: Bucket | None = None
    ) -> Iterator[Batch]:
        """Endless training batches from the `skip`-th on (epoch after epoch).

        `only`: just that bucket's batches (the planner times one batch shape). Under
        static shapes a short batch (`epoch`) is padded with rows of padding.
        """
        per_epoch = len(self.epoch(config, 0))  # (a prepared corpus holds a pair at least)
        epoch, offset = divmod(skip, per_epoch)
        while True:
            for bucket, rows in self.epoch(config, epoch)[offset:]:
                if only is not None and bucket != only:
                    continue
                yield self._batch_of(rows, bucket, config.static_shapes)
            epoch, offset = epoch + 1, 0

    def _batch_of(self, rows: np.ndarray, bucket: Bucket, static: bool) -> Batch:
        """`batch(rows)`; under static shapes the bucket's shape, rows of padding added."""
        if not static:
            return self.batch(rows)
        batch = self.batch(rows, bucket.length)
        return _pad_batch(batch, bucket.batch_size) if len(rows) < bucket.batch_size else batch

    def batch(self, rows: np.ndarray, length: int | None = None) -> Batch:
        """The padded, teacher-forced batch of some pairs.

        Args:
            rows: int [batch]: pair indices.
            length: Pad both sides to this (static shapes); None: each side to its
                longest row, as tf.data pads.
        """
        source = self._gather("source", rows, length)  # [batch, S]
        labels = self._gather("labels", rows, length)  # [batch, T]
        decoder_input = np.concatenate(
            [np.full((len(rows), 1), BOS_ID, np.int32), labels[:, :-1]], axis=1
        )  # [batch, T]: BOS + the label shifted right (its EOS falls off the end)
        decoder_input[labels == PAD_ID] = PAD_ID  # the row's own EOS position becomes PAD
        return {"source_ids": source, "decoder_input_ids": decoder_input}, labels

    def _gather(self, side: str, rows: np.ndarray, length: int | None) -> np.ndarray:
        """int32 [batch, length]: the rows' ids of one side, padded with PAD_ID."""
        shard_of = np.searchsorted(self._shard_starts, rows, side="right") - 1  # [batch]
        lengths = (self.source_lengths if side == "source" else self.target_lengths)[rows]
        width = int(lengths.max()) if length is None else length
        out = np.full((len(rows), width), PAD_ID, np.int32)
        columns = np.arange(width)  # [width]
        for shard in np.unique(shard_of):
            which = np.flatnonzero(shard_of == shard)  # [b]
            arrays = self._shards[shard]
            local = rows[which] - self._shard_starts[shard]
            starts = np.asarray(arrays[f"{side}_rows"][local])  # [b]
            flat = arrays[side]
            positions = starts[:, None] + columns[None, :]  # [b, width]
            real = columns[None, :] < lengths[which][:, None]  # [b, width]
            values = np.asarray(flat[np.minimum(positions, len(flat) - 1)])
            out[which] = np.where(real, values, PAD_ID)
        return out


def _pad_batch(batch: Batch, rows: int) -> Batch:
    """A batch with rows of padding added up to `rows` (they carry no loss)."""
    features, labels = batch

    def pad(array: np.ndarray) -> np.ndarray:
        return np.pad(array, [(0, rows - len(array)), (0, 0)], constant_values=PAD_ID)

    return {name: pad(value) for name, value in features.items()}, pad(labels)


def _rng(seed: int | None, epoch: int) -> np.random.Generator:
    """The epoch's shuffle: a function of the seed and the epoch (fresh without a seed)."""
    return np.random.default_rng(None if seed is None else [seed, epoch])


def _pair(value: tuple) -> str:
    """`a/b`, a sha256 shortened to its first 12 digits."""
    return "/".join(str(v)[:12] for v in value)
