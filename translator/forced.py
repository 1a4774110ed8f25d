"""The model's score of given translations: teacher-forced log P(target | source).

    from translator.forced import PairScorer
    scorer = PairScorer.from_model_dir("runs/m30k")
    scored = scorer.score(["A man."], ["Ein Mann."])    # scored.scores[0].total

The score is the search's log P, length penalty off; a pair with a blank side is not scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

from translator.constants import BOS_ID, DEFAULT_BATCH_TOKENS, EOS_ID, PAD_ID
from translator.search.common import log_sum_exp
from translator.text import batch_ranges, default_max_source_length, padded_length, prepare

if TYPE_CHECKING:  # pragma: no cover
    from translator.model import Transformer
    from translator.pipelines.vocabulary import Vocabulary


def token_log_probs(model: Transformer, source_ids, target_ids) -> tf.Tensor:
    """The log P of each target token given the source and the tokens before it.

    Args:
        model: A `translator.model.Transformer`.
        source_ids: int32 `[batch, source_length]`, EOS ended, 0 = padding.
        target_ids: int32 `[batch, target_length]`, the target pieces and EOS, then PAD.

    Returns:
        float32 `[batch, target_length]`: the model's log-softmax of each target token
        (the search's definition), 0 on padding.
    """
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    batch = tf.shape(target_ids)[0]
    decoder_input = tf.concat([tf.fill([batch, 1], BOS_ID), target_ids[:, :-1]], axis=1)
    decoder_input = tf.where(tf.equal(decoder_input, EOS_ID), PAD_ID, decoder_input)
    logits = tf.cast(model((source_ids, decoder_input), training=False), tf.float32)
    chosen = tf.gather(logits, target_ids[:, :, None], batch_dims=2)[:, :, 0]  # [b, t]
    normalizer = log_sum_exp(tf.reshape(logits, [-1, tf.shape(logits)[-1]]))  # [b * t, 1]
    log_probs = chosen - tf.reshape(normalizer, tf.shape(chosen))
    return tf.where(tf.equal(target_ids, PAD_ID), 0.0, log_probs)


@dataclasses.dataclass(frozen=True)
class PairScore:
    """The model's score of one target given its source."""

    # The target's pieces, then the EOS piece.
    pieces: tuple[str, ...]
    # log P of each piece given the source and the pieces before it.
    log_probs: tuple[float, ...]

    @property
    def total(self) -> float:
        """The log P(target | source), EOS included."""
        return float(sum(self.log_probs))

    @property
    def mean(self) -> float:
        """The per-token mean of log P (minus the cross-entropy in nats)."""
        return self.total / len(self.log_probs)


@dataclasses.dataclass
class ScoreStats:
    """Counts of one `PairScorer.score` call."""

    pairs: int = 0
    # Pairs with a blank source or target: not scored.
    blank: int = 0
    # Sources cut to the source limit, targets cut to the model's position table.
    truncated_sources: int = 0
    truncated_targets: int = 0
    batches: int = 0


@dataclasses.dataclass(frozen=True)
class ScoredPairs:
    """What `PairScorer.score` returns: a score per pair (None if blank), and counts."""

    scores: list[PairScore | None]
    stats: ScoreStats


class PairScorer:
    """Scores (source, target) pairs with a model, teacher-forced, in length batches.

    Args:
        model: A `translator.model.Transformer`.
        vocabulary: Its vocabulary.
        batch_tokens: Source tokens per batch, padding included.
        max_source_length: The source cut (default: as `Translator`).
        tag: Prepended to every source, as training tagged a corpus; "": none.
    """

    def __init__(
        self,
        model: Transformer,
        vocabulary: Vocabulary,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        max_source_length: int | None = None,
        tag: str = "",
    ):
        self.model = model
        self.vocabulary = vocabulary
        self.batch_tokens = batch_tokens
        config = model.config
        self.max_source_length = max_source_length or default_max_source_length(config)
        # The most target tokens (EOS included) the decoder's positions hold.
        self.max_target_length = config.position_limit
        tag_id = vocabulary.tag_id(tag) if tag else None
        lines = tf.TensorSpec([None], tf.string)
        self._prepare = tf.function(
            lambda texts: prepare(texts, vocabulary.source, self.max_source_length, tag_id),
            input_signature=[lines],
        )
        ids = tf.TensorSpec([None, None], tf.int32)
        self._log_probs = tf.function(
            lambda source, target: token_log_probs(model, source, target),
            input_signature=[ids, ids],
        )

    @classmethod
    def from_model_dir(cls, path: str, **options) -> PairScorer:
        """A scorer of a model or run directory (`translator.artifacts.load_model_dir`)."""
        from translator.artifacts import load_model_dir

        trained = load_model_dir(path)
        return cls(trained.model.for_inference(), trained.vocabulary, **options)

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        progress: Callable[[int], None] | None = None,
    ) -> ScoredPairs:
        """Scores each target given its source, in input order.

        Args:
            sources: Source sentences.
            targets: Their targets, aligned.
            progress: Called with the number of pairs finished after each batch.

        Raises:
            ValueError: sources and targets of different lengths.
        """
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
        stats = ScoreStats(pairs=len(sources))
        scores: list[PairScore | None] = [None] * len(sources)
        if not sources:
            return ScoredPairs(scores, stats)
        prepared = self._prepare(tf.constant(list(sources), tf.string))
        rows, lengths = prepared.rows.numpy(), prepared.lengths.numpy()  # [searched]
        target_ids = self._target_ids([targets[row] for row in rows], stats)
        kept = [i for i, ids in enumerate(target_ids) if ids]  # a blank target: not scored
        stats.blank = len(sources) - len(kept)
        stats.truncated_sources = int(np.sum(prepared.truncated.numpy()))
        source_ids = prepared.source_ids.numpy()
        kept_lengths = lengths[kept]
        for start, end, width in batch_ranges(kept_lengths, self.batch_tokens):
            positions = kept[start:end]
            batch_targets = [target_ids[i] for i in positions]
            longest = padded_length(max(len(ids) for ids in batch_targets))
            target = np.zeros((len(positions), longest), np.int32)
            for row, ids in enumerate(batch_targets):
                target[row, : len(ids)] = ids
            log_probs = self._log_probs(source_ids[positions, :width], target).numpy()
            for row, position in enumerate(positions):
                ids = batch_targets[row]
                pieces = tuple(self.vocabulary.target.id_to_piece(i) for i in ids)
                values = tuple(float(v) for v in log_probs[row, : len(ids)])
                scores[int(rows[position])] = PairScore(pieces, values)
            stats.batches += 1
            if progress is not None:
                progress(end - start)
        return ScoredPairs(scores, stats)

    def _target_ids(self, targets: list[str], stats: ScoreStats) -> list[list[int]]:
        """Each target's pieces and EOS ([] for a blank one), cut to the position table."""
        encoded = self.vocabulary.target.encode([t.rstrip("\n") for t in targets])
        result = []
        for text, ids in zip(targets, encoded, strict=True):
            if not text.strip() or not ids:
                result.append([])
                continue
            ids = [*ids, EOS_ID]
            if self.max_target_length and len(ids) > self.max_target_length:
                ids = [*ids[: self.max_target_length - 1], EOS_ID]
                stats.truncated_targets += 1
            result.append(ids)
        return result
