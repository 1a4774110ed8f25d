"""`PipelineConfig`: the frozen, typed settings of the tf.data input pipeline.

Lengths count special tokens: `max_source_length=256` keeps sources of at most 255 pieces.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import NamedTuple

from translator.config_base import DictConfig
from translator.constants import DEFAULT_BATCH_TOKENS
from translator.errors import ConfigError


class Bucket(NamedTuple):
    """One length bucket of the token-based batching."""

    # Longest sequence of the bucket: batches are padded to at most this length
    # (exactly this length with static shapes).
    length: int
    # Sentence pairs per batch: batch_tokens // length, rounded down to batch_size_multiple.
    batch_size: int


@dataclasses.dataclass(frozen=True)
class PipelineConfig(DictConfig):
    """How `make_dataset` turns two text files into batches.

    Token-based batching: a length bucket L makes batches of `batch_tokens // L` pairs, so
    a batch holds at most `batch_tokens` tokens per side *counting padding*.
    """

    # Token budget of one batch, padding included, for source and for target separately
    # (batch_size * padded_length <= batch_tokens on each side). With tf.distribute and
    # an input_context, this is the budget *per replica*.
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    # Longest source sequence kept, EOS included; longer pairs are skipped and counted.
    max_source_length: int = 256
    # Longest target sequence kept, BOS (decoder input) or EOS (labels) included.
    max_target_length: int = 256
    # Bucket lengths are multiples of this: 4 -> buckets 4, 8, 12, ... Narrower buckets
    # mean less padding but more distinct shapes and partial batches (decision D4). With
    # static_shapes every bucket is one compiled shape: prefer 16 or explicit
    # bucket_boundaries there.
    bucket_width: int = 4
    # Explicit bucket lengths (ascending), replacing bucket_width; the longest length
    # max(max_source_length, max_target_length) is appended when missing.
    bucket_boundaries: tuple[int, ...] = ()
    # Static shapes for TPUs / XLA: pad every batch to its bucket length (source and
    # target alike), so a batch has one of len(buckets()) shapes. In training a bucket
    # that fills a batch leaves its incomplete last batch to later epochs' shuffles
    # (counted in CorpusStats); one that fills none is one batch padded with rows of
    # padding, so every pair is trained on.
    static_shapes: bool = False
    # Round each bucket's batch size down to a multiple of this (8 suits TPUs and tensor
    # cores).
    batch_size_multiple: int = 1
    # Pairs held by the shuffle buffer when training (0 or 1: no shuffling). The default
    # holds all of Multi30k (a full shuffle); larger corpora get a windowed shuffle.
    shuffle_buffer_size: int = 100_000
    # Seed of the shuffle: with a seed, epoch k has the same order in every run (each
    # epoch still differs from the last). None: a different order every run.
    seed: int | None = 1234
    # Lines sent to the tokenizer per call: tokenizing in batches is much faster than
    # per sentence.
    tokenize_batch_size: int = 1024
    # Keep the tokenized corpus in memory after the first epoch (for corpora that fit).
    # With subword sampling the text is kept instead, and segmented anew each epoch.
    cache: bool = False
    # Subword regularization (Kudo 2018): each training sentence, each epoch, is segmented
    # by a seeded draw among its `subword_nbest` most probable segmentations (a unigram
    # vocabulary); 0 or 1: off, the one best segmentation, as validation, evaluation,
    # export and serving always use. The draws follow `seed`, so a resumed run segments
    # as an uninterrupted one. Length limits apply to the drawn lengths; the corpus
    # counts (and the planner's epochs) are of the one best, which is no longer.
    subword_nbest: int = 0
    # The draw's smoothing: a segmentation x is drawn with probability ~ P(x) ** alpha
    # (0: uniformly among the n best; larger: closer to the best; decision D5).
    subword_alpha: float = 0.5

    def __post_init__(self) -> None:
        problems = []
        for name in ("batch_tokens", "max_source_length", "max_target_length", "bucket_width"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("batch_size_multiple", "tokenize_batch_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_source_length < 2 or self.max_target_length < 2:
            problems.append(
                "max_source_length and max_target_length must be >= 2 (a piece + EOS/BOS)"
            )
        if self.subword_nbest < 0:
            problems.append(f"subword_nbest must be >= 0, got {self.subword_nbest}")
        if self.subword_alpha < 0:
            problems.append(f"subword_alpha must be >= 0, got {self.subword_alpha}")
        if self.shuffle_buffer_size < 0:
            problems.append(f"shuffle_buffer_size must be >= 0, got {self.shuffle_buffer_size}")
        bounds = tuple(self.bucket_boundaries)
        if any(b < 1 for b in bounds) or any(a >= b for a, b in itertools.pairwise(bounds)):
            problems.append(f"bucket_boundaries must be positive and ascending, got {bounds}")
        longest = self.max_length
        if not problems and self.batch_tokens < longest * self.batch_size_multiple:
            problems.append(
                f"batch_tokens ({self.batch_tokens}) must hold at least batch_size_multiple "
                f"({self.batch_size_multiple}) sequences of the longest length ({longest})"
            )
        if problems:
            raise ConfigError("Invalid PipelineConfig: " + "; ".join(problems))
        object.__setattr__(self, "bucket_boundaries", bounds)

    @property
    def samples_subwords(self) -> bool:
        """Whether training segments each sentence anew (`subword_nbest` > 1)."""
        return self.subword_nbest > 1

    @property
    def max_length(self) -> int:
        """The longest sequence on either side: the length of the last bucket."""
        return max(self.max_source_length, self.max_target_length)

    def buckets(self) -> tuple[Bucket, ...]:
        """The length buckets, shortest first; a pair goes to the first that fits it.

        Returns:
            `Bucket(length, batch_size)` tuples; the last has length `max_length`.
        """
        longest = self.max_length
        if self.bucket_boundaries:
            lengths = [b for b in self.bucket_boundaries if b < longest]
        else:
            lengths = list(range(self.bucket_width, longest, self.bucket_width))
        lengths.append(longest)
        buckets = []
        for length in lengths:
            size = bucket_batch_size(self.batch_tokens, length, self.batch_size_multiple)
            buckets.append(Bucket(length=length, batch_size=size))
        return tuple(buckets)


def bucket_batch_size(batch_tokens: int, length: int, multiple: int) -> int:
    """Rows of a length bucket's batch: as many as `batch_tokens` hold, a multiple of `multiple`.

    `PipelineConfig.buckets` sizes its batches by it; the planner counts an epoch's batches.
    """
    size = batch_tokens // length
    return size - size % multiple
