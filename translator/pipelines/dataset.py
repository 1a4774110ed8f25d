"""The tf.data pipeline: from two aligned text files to token-budgeted, teacher-forced batches.

    lines (streamed) -> shard -> tokenize in-graph, filter, add BOS/EOS
      -> [cache] -> [shuffle, training only] -> bucket by length -> pad -> batch

Every element is `(features, labels)`:

    features["source_ids"]         int32 [batch, src_len]   pieces + EOS, then PAD (0)
    features["decoder_input_ids"]  int32 [batch, tgt_len]   BOS + pieces, then PAD
    labels                         int32 [batch, tgt_len]   pieces + EOS, then PAD

A pair with a side empty or over its maximum length is skipped, in validation too (the
model cannot take it), and counted by `scan_corpus`; corpus errors never come mid-epoch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.errors import ConfigError
from translator.pipelines.config import PipelineConfig
from translator.pipelines.corpus import ParallelCorpus
from translator.pipelines.errors import CorpusError
from translator.pipelines.vocabulary import Vocabulary
from translator.text import tag_sources

logger = logging.getLogger("translator.pipelines")

# Why a pair is skipped (codes of `_classify`).
KEPT, EMPTY, TOO_LONG = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class CorpusStats:
    """Exact counts of one corpus and config: `pairs == kept + empty + too_long`."""

    # The two files.
    source_path: str
    target_path: str
    # Lines in each file (= sentence pairs).
    pairs: int
    # Pairs that reach the batches.
    kept: int
    # Pairs skipped because the source or target line has no pieces (empty or blank).
    empty: int
    # Non-empty pairs skipped because a side exceeds its maximum length.
    too_long: int
    # The limits applied (special tokens included).
    max_source_length: int
    max_target_length: int
    # Real (non-padding) source and target tokens of the kept pairs, EOS included.
    source_tokens: int
    target_tokens: int
    # Kept pairs per length bucket (`config.buckets()` order), all shards together.
    bucket_counts: tuple[int, ...]
    # Input pipelines the counts below are split over (1 without sharding).
    num_shards: int
    # Kept pairs per shard.
    kept_per_shard: tuple[int, ...]
    # Kept pairs per shard and length bucket: [num_shards][buckets].
    shard_bucket_counts: tuple[tuple[int, ...], ...]
    # With static_shapes: kept pairs per shard an epoch leaves to later epochs' shuffles
    # (the incomplete last batches of buckets that fill a batch).
    static_remainder: tuple[int, ...]

    @property
    def skipped(self) -> int:
        """Pairs skipped for any reason."""
        return self.empty + self.too_long

    def summary(self) -> str:
        """One line for the log: the files, then `counts()`."""
        return f"{self.source_path} | {self.target_path}: {self.counts()}"

    def counts(self) -> str:
        """Pairs, kept pairs and tokens, and the reason of every skipped pair."""
        text = (
            f"{self.pairs:,} pairs, {self.kept:,} kept ({self.source_tokens:,} source / "
            f"{self.target_tokens:,} target tokens); skipped {self.empty:,} with an empty "
            f"line, {self.too_long:,} longer than {self.max_source_length} source / "
            f"{self.max_target_length} target tokens"
        )
        if any(self.static_remainder):
            text += (
                f"; static shapes leave {sum(self.static_remainder):,} kept pairs to a later "
                "epoch each epoch (incomplete last batches of buckets that fill a batch)"
            )
        return text


def _classify(
    source_pieces: tf.Tensor, target_pieces: tf.Tensor, config: PipelineConfig
) -> tf.Tensor:
    """Why each pair is skipped (KEPT, EMPTY or TOO_LONG).

    Args:
        source_pieces: int [n] pieces per source line (no specials).
        target_pieces: int [n] pieces per target line.
        config: Gives the maximum lengths, which include one special token per side.

    Returns:
        int32 [n].
    """
    empty = tf.equal(source_pieces, 0) | tf.equal(target_pieces, 0)  # [n]
    too_long = (source_pieces + 1 > config.max_source_length) | (
        target_pieces + 1 > config.max_target_length
    )  # [n]
    return tf.where(empty, EMPTY, tf.where(too_long, TOO_LONG, KEPT))  # [n] int32


def _bucket_of(
    source_pieces: tf.Tensor, target_pieces: tf.Tensor, config: PipelineConfig
) -> tf.Tensor:
    """Index of the first bucket whose length fits both sequences (specials included).

    Returns:
        int64 [n]; len(buckets) for pairs longer than every bucket (they are skipped).
    """
    lengths = tf.constant([b.length for b in config.buckets()], tf.int64)  # [buckets]
    longest = tf.maximum(source_pieces, target_pieces) + 1  # [n] with EOS/BOS
    return tf.searchsorted(lengths, tf.cast(longest, tf.int64), side="left", out_type=tf.int64)


def _tokenizer_fn(
    vocabulary: Vocabulary, config: PipelineConfig, tag_id: int | None = None, sample=False
) -> Callable[..., Any]:
    """The per-line-batch map: tokenize, tag, filter, add specials, assign buckets.

    With `sample`, the map also takes an int64 seed per line batch and draws each side's
    segmentation (`SentencePieceTokenizer.sample`), so buckets and token budgets count
    the drawn lengths.
    """

    def segment(sources: tf.Tensor, targets: tf.Tensor, seed: tf.Tensor | None):
        if seed is None:
            return vocabulary.source.tokenize(sources), vocabulary.target.tokenize(targets)
        nbest, alpha = config.subword_nbest, config.subword_alpha
        source = vocabulary.source.sample(sources, seed, nbest, alpha)
        target = vocabulary.target.sample(targets, seed + 1, nbest, alpha)  # another draw
        return source, target

    def encode(sources: tf.Tensor, targets: tf.Tensor, seed=None) -> tuple[tf.RaggedTensor, ...]:
        source, target = segment(sources, targets, seed if sample else None)
        source = tag_sources(source, tag_id)  # [n, (s)] int32
        source_pieces = source.row_lengths()  # [n] int64
        target_pieces = target.row_lengths()  # [n] int64
        keep = tf.equal(_classify(source_pieces, target_pieces, config), KEPT)  # [n]
        bucket = tf.boolean_mask(_bucket_of(source_pieces, target_pieces, config), keep)  # [k]
        source = tf.ragged.boolean_mask(source, keep)  # [k, (s)]
        target = tf.ragged.boolean_mask(target, keep)  # [k, (t)]
        kept = tf.shape(bucket)[0]
        eos = tf.RaggedTensor.from_tensor(tf.fill([kept, 1], EOS_ID))  # [k, 1]
        bos = tf.RaggedTensor.from_tensor(tf.fill([kept, 1], BOS_ID))  # [k, 1]
        source_ids = tf.concat([source, eos], axis=1)  # [k, (s+1)]: pieces + EOS
        decoder_input_ids = tf.concat([bos, target], axis=1)  # [k, (t+1)]: BOS + pieces
        labels = tf.concat([target, eos], axis=1)  # [k, (t+1)]: pieces + EOS
        return source_ids, decoder_input_ids, labels, bucket

    return encode


def make_dataset(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    config: PipelineConfig | None = None,
    *,
    training: bool,
    input_context: tf.distribute.InputContext | None = None,
    tag: str = "",
) -> tf.data.Dataset:
    """Builds the batched dataset of one epoch over a parallel corpus.

    Before returning, validates the files (equal line counts, UTF-8) and counts what the
    filter will skip (`scan_corpus`, cached; the summary is logged once).

    Args:
        source_path: Source-language text file, plain or gzip.
        target_path: Target-language text file, aligned line by line.
        vocabulary: From `load_vocabulary`.
        config: Batching, lengths, shuffling; `PipelineConfig()` if None.
        training: True: shuffled with `config.seed`, a new order each time the dataset is
            iterated again (call `.repeat()` for several epochs, or let Keras re-iterate).
            False: the same order every time (file order, grouped by bucket).
        input_context: From `tf.distribute`; shards the corpus by
            `input_pipeline_id` / `num_input_pipelines`. `config.batch_tokens` is the
            per-replica budget.
        tag: Prepended to every source sentence as one id (`tag_sources`); it must be
            one of the vocabulary's tags (`build-vocab --user-symbols`).

    Returns:
        A dataset of `(features, labels)`: features `{"source_ids": int32 [batch, src_len],
        "decoder_input_ids": int32 [batch, tgt_len]}`, labels int32 `[batch, tgt_len]`,
        padded with PAD=0 at the end of each row. With `config.static_shapes`, src_len ==
        tgt_len == the bucket's length and batch == the bucket's batch size.

    Raises:
        CorpusError: line counts differ (naming both files and counts), a line is not
            UTF-8 (naming file and line), or no pair is kept (naming the files and the
            skip counts).
    """
    config = config or PipelineConfig()
    pairs, stats = _pairs(
        source_path, target_path, vocabulary, config, training, input_context, tag
    )
    short_kept = None  # every short batch kept: evaluation, or without static shapes
    if training and config.static_shapes:
        shard = input_context.input_pipeline_id if input_context else 0
        sizes = [b.batch_size for b in config.buckets()]
        counts = stats.shard_bucket_counts[shard]
        short_kept = [count < size for count, size in zip(counts, sizes, strict=True)]
    return _batch_by_bucket(pairs, config, short_kept).prefetch(tf.data.AUTOTUNE)


def tokenized_corpus(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    config: PipelineConfig,
    tag: str = "",
) -> tf.data.Dataset:
    """The kept pairs of a corpus in file order, tokenized as training tokenizes them.

    The same tokenizer, tag and filter as `make_dataset` (no shuffling, no sampling), a
    line batch at a time: what `translator data prepare` writes once.

    Returns:
        A dataset of `(source_ids, labels)`: int32 RaggedTensors `[k, (s)]` (pieces + EOS)
        and `[k, (t)]` (pieces + EOS), the kept pairs of `config.tokenize_batch_size` lines.
    """
    tag_id = vocabulary.tag_id(tag) if tag else None
    encode = _tokenizer_fn(vocabulary, config, tag_id)

    def pair_ids(sources: tf.Tensor, targets: tf.Tensor) -> tuple[tf.RaggedTensor, ...]:
        source_ids, _, labels, _ = encode(sources, targets)  # the decoder input is derived
        return source_ids, labels

    dataset = ParallelCorpus(source_path, target_path).text_dataset()
    dataset = dataset.batch(config.tokenize_batch_size)
    dataset = dataset.map(pair_ids, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass(frozen=True)
class WeightedCorpus:
    """One corpus of a training mix."""

    source_path: str
    target_path: str
    # Share of the drawn pairs, relative to the other corpora's weights (> 0).
    weight: float = 1.0
    # Prepended to its sources as one id ("" for none), e.g. <bt> or <2de>.
    tag: str = ""


def make_mixed_dataset(
    corpora: Sequence[WeightedCorpus],
    vocabulary: Vocabulary,
    config: PipelineConfig | None = None,
    *,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """Endless training batches whose pairs are drawn from several corpora by weight.

    Each corpus is checked, tagged, shuffled and repeated on its own; pairs are drawn by
    weight before bucketing, so a batch mixes corpora. The order depends on `config.seed`
    only, so a resumed run that skips its consumed batches continues the same mix.

    Returns:
        Batches as `make_dataset` makes them, plus `features["corpus"]`: int32 `[batch]`,
        the index in `corpora` each pair was drawn from.

    Raises:
        CorpusError: as `make_dataset`, per corpus.
        ValueError: no corpus, or a weight that is not positive.
    """
    config = config or PipelineConfig()
    if not corpora:
        raise ValueError("make_mixed_dataset needs at least one corpus")
    streams = []
    for index, corpus in enumerate(corpora):
        if not corpus.weight > 0:
            raise ValueError(f"corpus {index} ({corpus.source_path}): weight must be > 0")
        pairs, _ = _pairs(
            corpus.source_path,
            corpus.target_path,
            vocabulary,
            dataclasses.replace(config, seed=config.seed + index),  # its own shuffle order
            True,
            input_context,
            corpus.tag,
        )
        # Zipped, not mapped: a map would turn the ragged rows into dense tensors.
        which = tf.data.Dataset.from_tensors(tf.constant(index, tf.int32)).repeat()
        streams.append(tf.data.Dataset.zip((pairs.repeat(), which)))
    total = sum(corpus.weight for corpus in corpora)
    mixed = tf.data.Dataset.sample_from_datasets(
        streams, weights=[corpus.weight / total for corpus in corpora], seed=config.seed
    )  # (([s], [t], [t], []), []) one pair and its corpus
    return _batch_by_bucket(mixed, config).prefetch(tf.data.AUTOTUNE)


def drawn_shares(mix: tf.data.Dataset, corpora: int, batches: int) -> list[float]:
    """The share of the pairs each corpus had in the first `batches` batches of a mix.

    Args:
        mix: From `make_mixed_dataset` (its `features["corpus"]`).
        corpora: How many corpora it mixes.
        batches: Batches to count.
    """
    counts = np.zeros(corpora, np.int64)
    for features, _ in mix.take(batches):
        counts += np.bincount(features["corpus"].numpy(), minlength=corpora)
    return list(counts / max(counts.sum(), 1))


def _pairs(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    config: PipelineConfig,
    training: bool,
    input_context: tf.distribute.InputContext | None,
    tag: str,
) -> tuple[tf.data.Dataset, CorpusStats]:
    """One checked corpus's kept pairs `([s], [t], [t], bucket)`, shuffled when training.

    Returns them with the corpus' counts (`scan_corpus`'s, per shard).
    """
    tag_id = vocabulary.tag_id(tag) if tag else None
    num_shards = input_context.num_input_pipelines if input_context else 1
    shard = input_context.input_pipeline_id if input_context else 0
    stats = _scan(
        source_path, target_path, vocabulary, config, num_shards, log=shard == 0, tag_id=tag_id
    )
    check_learnable(stats, training)

    sample = training and config.samples_subwords
    if sample:
        _check_samples(vocabulary)
    dataset = ParallelCorpus(source_path, target_path).text_dataset()  # (str, str) scalars
    if num_shards > 1:
        dataset = dataset.shard(num_shards, shard)
    if config.cache and sample:
        dataset = dataset.cache()  # the text: segmented anew each epoch
    dataset = dataset.batch(config.tokenize_batch_size)  # ([n], [n]) lines
    if sample:  # a seed per line batch, another each epoch, the same in every run
        seeds = tf.data.Dataset.random(seed=config.seed, rerandomize_each_iteration=True)
        dataset = tf.data.Dataset.zip(dataset, seeds).map(lambda lines, seed: (*lines, seed))
    dataset = dataset.map(
        _tokenizer_fn(vocabulary, config, tag_id, sample), num_parallel_calls=tf.data.AUTOTUNE
    )  # ([k, (s)], [k, (t)], [k, (t)], [k]) kept pairs
    dataset = dataset.unbatch()  # ([s], [t], [t], []) one pair
    if config.cache and not sample:
        dataset = dataset.cache()
    if training and config.shuffle_buffer_size > 1:
        dataset = dataset.shuffle(
            config.shuffle_buffer_size, seed=config.seed, reshuffle_each_iteration=True
        )
    return dataset, stats


def _check_samples(vocabulary: Vocabulary) -> None:
    """Refuses subword sampling with a vocabulary that has no n-best segmentations."""
    if not (vocabulary.source.samples and vocabulary.target.samples):
        raise ConfigError(
            "data.pipeline.subword_nbest: subword sampling draws among a unigram model's "
            "n best segmentations; this vocabulary is BPE (build-vocab --model-type unigram)"
        )


def _batch_by_bucket(
    dataset: tf.data.Dataset, config: PipelineConfig, short_kept: list[bool] | None = None
) -> tf.data.Dataset:
    """Pairs `([s], [t], [t], bucket)` -> padded batches of one length bucket each.

    With static shapes a bucket's incomplete last batch is padded with rows of padding to
    the bucket's batch size (the same shapes). `short_kept`, per bucket (training under
    static shapes): whether its incomplete batch is kept; None: every one is. Training
    keeps it only for a bucket that fills no batch (else it would never be trained on)
    and leaves the others' remainders to later epochs, whose shuffles differ: a padded
    batch costs a full one's time, and padding every remainder lost 1.5 validation BLEU
    (bench/RESULTS.md, "Static shapes").

    Returns:
        `(features, labels)` batches, as `make_dataset` describes them.
    """
    buckets = config.buckets()
    batch_sizes = tf.constant([b.batch_size for b in buckets], tf.int64)  # [buckets]
    lengths = tf.constant([b.length for b in buckets], tf.int64)  # [buckets]

    def bucket_of(*element: tf.Tensor) -> tf.Tensor:  # a pair, or (a pair, its corpus)
        return element[0][3] if len(element) == 2 else element[3]

    def batch_bucket(bucket: tf.Tensor, window: tf.data.Dataset) -> tf.data.Dataset:
        # Ragged batches (padded_batch refuses them), padded once per batch in `to_features`.
        return window.batch(tf.gather(batch_sizes, bucket))

    def to_features(*element: tf.Tensor) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        # [b, (s)], [b, (t)], [b, (t)], [b], and for a mix the corpus of each pair, [b]
        (source, decoder_input, labels, bucket), corpus = (
            element if len(element) == 2 else (element, None)
        )
        # Static shapes: the bucket's batch size and length; else the longest row's length.
        shape = None
        if config.static_shapes:
            size = tf.gather(batch_sizes, bucket[0])
            shape = tf.stack([size, tf.gather(lengths, bucket[0])])  # [2]: (b, bucket length)
        features = {
            "source_ids": source.to_tensor(PAD_ID, shape=shape),  # [b, S]
            "decoder_input_ids": decoder_input.to_tensor(PAD_ID, shape=shape),  # [b, T]
        }
        if corpus is not None:  # a mix: where each pair was drawn from, [b]
            features["corpus"] = corpus
        return features, labels.to_tensor(PAD_ID, shape=shape)  # [b, T]

    dataset = dataset.group_by_window(
        key_func=bucket_of,
        reduce_func=batch_bucket,
        window_size_func=lambda bucket: tf.gather(batch_sizes, bucket),
    )  # ([b, (s)], [b, (t)], [b, (t)], [b]) one bucket's pairs
    if short_kept is not None:
        kept = tf.constant(short_kept, tf.bool)  # [buckets]

        def full_or_kept(*element: tf.Tensor) -> tf.Tensor:
            bucket = bucket_of(*element)  # [b]
            rows = tf.shape(bucket, out_type=tf.int64)[0]
            return tf.logical_or(rows == tf.gather(batch_sizes, bucket[0]), kept[bucket[0]])

        dataset = dataset.filter(full_or_kept)
    return dataset.map(to_features, num_parallel_calls=tf.data.AUTOTUNE)


def check_learnable(stats: CorpusStats, training: bool) -> None:
    """Refuses a corpus of which no pair reaches the batches.

    Raises:
        CorpusError: naming the files and the skip counts.
    """
    if stats.kept <= 0:  # an empty dataset trains nothing
        raise CorpusError(
            f"{stats.source_path} | {stats.target_path}: no pair to "
            f"{'train' if training else 'validate'} on; {stats.counts()}"
        )


def scan_corpus(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    config: PipelineConfig | None = None,
    *,
    num_shards: int = 1,
    tag: str = "",
) -> CorpusStats:
    """Validates a parallel corpus and counts exactly what `make_dataset` keeps and skips.

    Tokenizes with the same code and filter as `make_dataset`; cached per files, vocabulary
    and settings, so calling this after `make_dataset` costs nothing.

    Args:
        source_path: Source-language text file.
        target_path: Target-language text file.
        vocabulary: From `load_vocabulary`.
        config: The `PipelineConfig` the dataset uses.
        num_shards: `input_context.num_input_pipelines`, to count per shard.
        tag: The corpus' tag, as `make_dataset` takes it (it counts as a source token).

    Returns:
        The `CorpusStats`.

    Raises:
        CorpusError: as `make_dataset`.
    """
    tag_id = vocabulary.tag_id(tag) if tag else None
    config = config or PipelineConfig()
    return _scan(source_path, target_path, vocabulary, config, num_shards, log=False, tag_id=tag_id)


# Cache of scans per process: key -> [stats, logged].
_SCANS: dict[tuple[Any, ...], list[Any]] = {}


def _file_key(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    resolved = Path(path).resolve()
    try:
        status = resolved.stat()
    except OSError:
        return (str(resolved), -1, -1)  # missing: validate() reports it
    return (str(resolved), status.st_size, status.st_mtime_ns)


def _scan(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    config: PipelineConfig,
    num_shards: int,
    *,
    log: bool,
    tag_id: int | None = None,
) -> CorpusStats:
    key = (
        tag_id,
        _file_key(source_path),
        _file_key(target_path),
        vocabulary.source_sha256,
        vocabulary.target_sha256,
        config.max_source_length,
        config.max_target_length,
        config.buckets(),
        config.static_shapes,
        num_shards,
    )
    entry = _SCANS.get(key)
    if entry is None:
        entry = _SCANS[key] = [
            _compute_stats(source_path, target_path, vocabulary, config, num_shards, tag_id),
            False,
        ]
    stats: CorpusStats = entry[0]
    if log and not entry[1]:
        entry[1] = True
        # A warning when pairs were skipped (nothing is dropped silently), else info.
        logger.log(logging.WARNING if stats.skipped else logging.INFO, "%s", stats.summary())
    return stats


def _compute_stats(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    vocabulary: Vocabulary,
    config: PipelineConfig,
    num_shards: int,
    tag_id: int | None,
) -> CorpusStats:
    corpus = ParallelCorpus(source_path, target_path)
    pairs = corpus.validate()  # raises CorpusError naming file and line / both counts
    buckets = config.buckets()

    def count(index: tf.Tensor, lines: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, ...]:
        source = tag_sources(vocabulary.source.tokenize(lines[0]), tag_id).row_lengths()  # [n]
        target = vocabulary.target.tokenize(lines[1]).row_lengths()  # [n] pieces
        reason = _classify(source, target, config)  # [n]
        bucket = _bucket_of(source, target, config)  # [n]
        return reason, bucket, index % num_shards, source + 1, target + 1

    dataset = corpus.text_dataset().enumerate().batch(max(config.tokenize_batch_size, 4096))
    dataset = dataset.map(count, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
    reasons = np.zeros(3, np.int64)
    per_bucket = np.zeros((num_shards, len(buckets)), np.int64)
    tokens = np.zeros(2, np.int64)
    for reason, bucket, shard, source_len, target_len in dataset.as_numpy_iterator():
        reasons += np.bincount(reason, minlength=3)
        kept = reason == KEPT
        np.add.at(per_bucket, (shard[kept], bucket[kept]), 1)
        tokens += (source_len[kept].sum(), target_len[kept].sum())
    if int(reasons.sum()) != pairs:  # pragma: no cover - would mean TF and Python disagree
        raise RuntimeError(f"scanned {int(reasons.sum())} pairs, but the files have {pairs} lines")
    sizes = np.array([b.batch_size for b in buckets], np.int64)
    fills = per_bucket >= sizes  # [shards, buckets]
    remainder = (
        (per_bucket % sizes * fills).sum(axis=1) if config.static_shapes else [0] * num_shards
    )
    return CorpusStats(
        source_path=str(source_path),
        target_path=str(target_path),
        pairs=pairs,
        kept=int(reasons[KEPT]),
        empty=int(reasons[EMPTY]),
        too_long=int(reasons[TOO_LONG]),
        max_source_length=config.max_source_length,
        max_target_length=config.max_target_length,
        source_tokens=int(tokens[0]),
        target_tokens=int(tokens[1]),
        bucket_counts=tuple(int(c) for c in per_bucket.sum(axis=0)),
        num_shards=num_shards,
        kept_per_shard=tuple(int(c) for c in per_bucket.sum(axis=1)),
        shard_bucket_counts=tuple(tuple(int(c) for c in row) for row in per_bucket),
        static_remainder=tuple(int(r) for r in remainder),
    )
