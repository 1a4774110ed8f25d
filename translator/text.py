"""The text -> ids -> text path, in the graph: written once for `Translator` and export.

`prepare` turns lines into sorted, padded sources; `finish` turns the search's ids back
into texts in input order. A whitespace-only line or one with no pieces is *empty*: not
searched, translated to "" with score 0 (-inf in the other n-best slots).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from translator.constants import EOS_ID, PAD_ID
from translator.host_text import HostPrepared
from translator.text_rules import (  # noqa: F401 (the path's rules, imported from here too)
    LENGTH_MULTIPLE,
    UNBOUNDED_SOURCE_CUT,
    WHITESPACE_PATTERN,
    batch_ranges,
    default_max_source_length,
    padded_length,
)


class Prepared(NamedTuple):
    """A batch of lines made ready for the search."""

    # Pieces + EOS of the searched lines, shortest first, then PAD: int32 [searched, width].
    source_ids: tf.Tensor
    # The input line of each searched row: int32 [searched].
    rows: tf.Tensor
    # Source tokens (EOS included) of each searched row: int32 [searched].
    lengths: tf.Tensor
    # Per input line: empty (not searched): bool [batch].
    empty: tf.Tensor
    # Per input line: cut to the length limit: bool [batch].
    truncated: tf.Tensor


def tag_sources(pieces: tf.RaggedTensor, tag_ids: int | tf.Tensor | None) -> tf.RaggedTensor:
    """Source pieces `[n, (s)]` with a tag id first on every non-empty row.

    An empty line stays empty. Tagging at the id level keeps the tag one id however the
    tokenizer would split the text around it.

    Args:
        pieces: int `[n, (s)]`.
        tag_ids: One id for every row; or int `[n]`, one per row, -1 for none; or None.
    """
    if tag_ids is None:
        return pieces
    rows = pieces.nrows()
    tag_ids = tf.broadcast_to(tf.cast(tag_ids, pieces.dtype), [rows])  # [n]
    tagged = tf.logical_and(tag_ids >= 0, pieces.row_lengths() > 0)  # [n]
    tags = tf.RaggedTensor.from_row_lengths(
        tf.boolean_mask(tag_ids, tagged), tf.cast(tagged, pieces.row_splits.dtype)
    )  # [n, (0 or 1)]
    return tf.concat([tags, pieces], axis=1)  # [n, (s + 0 or 1)]


def prepare(
    lines, tokenizer, max_source_length: int, tag_ids: int | tf.Tensor | None = None
) -> Prepared:
    """Lines -> the sorted, padded sources of the lines that are searched.

    Args:
        lines: tf.string `[batch]`.
        tokenizer: The source `SentencePieceTokenizer`.
        max_source_length: Most source tokens, EOS included (>= 2); a tag counts.
        tag_ids: Prepended to the non-empty sources, as training did: one id, int32
            `[batch]` (-1: none), or None (`tag_sources`).

    Returns:
        The `Prepared` batch.
    """
    lines = tf.strings.regex_replace(lines, "\n+$", "")  # [batch]
    pieces = tag_sources(tokenizer.tokenize(lines), tag_ids)  # [batch, (pieces)]
    truncated = pieces.row_lengths() > max_source_length - 1  # [batch]
    pieces = pieces[:, : max_source_length - 1]  # room for EOS
    counts = tf.cast(pieces.row_lengths(), tf.int32)  # [batch]
    empty = tf.logical_or(counts == 0, tf.strings.regex_full_match(lines, WHITESPACE_PATTERN))
    searched = tf.cast(tf.where(tf.logical_not(empty))[:, 0], tf.int32)  # [searched]
    order = tf.argsort(tf.gather(counts, searched), stable=True)
    rows = tf.gather(searched, order)  # [searched], shortest first
    sources = tf.gather(pieces, rows)  # [searched, (pieces)]
    count = tf.shape(rows)[0]
    eos = tf.RaggedTensor.from_tensor(tf.fill([count, 1], EOS_ID))  # [searched, 1]
    sources = tf.concat([sources, eos], axis=1)  # [searched, (pieces + 1)]
    lengths = tf.cast(sources.row_lengths(), tf.int32)  # [searched]
    width = padded_length(tf.reduce_max(tf.concat([[0], lengths], 0)))  # 0 if none
    shape = tf.stack([tf.cast(count, tf.int64), tf.cast(width, tf.int64)])
    source_ids = sources.to_tensor(default_value=PAD_ID, shape=shape)  # [searched, width]
    return Prepared(source_ids, rows, lengths, empty, tf.logical_and(truncated, ~empty))


def target_prefixes(prefixes, tokenizer, rows) -> tf.Tensor:
    """The target prefixes of the searched lines, as the search continues them.

    Args:
        prefixes: tf.string `[batch]`, one per input line ("" for none); a trailing
            newline is dropped.
        tokenizer: The target `SentencePieceTokenizer`.
        rows: int32 `[searched]`, `Prepared.rows`.

    Returns:
        int32 `[searched, width]`: each searched line's prefix pieces, then PAD.
    """
    prefixes = tf.strings.regex_replace(prefixes, "\n+$", "")  # [batch]
    pieces = tf.gather(tokenizer.tokenize(prefixes), rows)  # [searched, (pieces)]
    return tf.cast(pieces.to_tensor(default_value=PAD_ID), tf.int32)


def finish(ids, scores, rows, batch, tokenizer) -> tuple[tf.Tensor, tf.Tensor]:
    """The search's hypotheses -> texts and scores per input line, in input order.

    Args:
        ids: int32 `[searched, n_best, length]` (EOS, then PAD), rows as in `Prepared`.
        scores: float32 `[searched, n_best]`; -inf marks an empty slot.
        rows: int32 `[searched]`, `Prepared.rows`.
        batch: int32 scalar, the number of input lines.
        tokenizer: The target `SentencePieceTokenizer`.

    Returns:
        `(texts, scores)`: tf.string and float32 `[batch, n_best]`, best first; an empty
        line's first slot is "" with score 0, its others "" with -inf.
    """
    count, dynamic_n_best, length = tf.unstack(tf.shape(ids))
    n_best = ids.shape[1] or dynamic_n_best  # static where the search's result has it
    flat = tf.reshape(ids, [count * n_best, length])  # [searched * n, length]
    texts = tf.reshape(tokenizer.detokenize(flat), [count, n_best])  # [searched, n]
    # One extra row for the empty lines: "" with score 0 (log P of nothing), then -inf.
    empty_scores = tf.concat([[0.0], tf.fill([n_best - 1], float("-inf"))], 0)  # [n]
    texts = tf.concat([texts, tf.fill([1, n_best], "")], 0)  # [searched + 1, n]
    scores = tf.concat([scores, empty_scores[None, :]], 0)  # [searched + 1, n]
    # Row of each input line among the searched ones (the extra row if it is empty).
    where = tf.tensor_scatter_nd_update(tf.fill([batch], count), rows[:, None], tf.range(count))
    return tf.gather(texts, where), tf.gather(scores, where)  # [batch, n] x2


class GraphText:
    """This module's path as a `translator.text_path.TextPath`: compiled once, NumPy out.

    Args:
        vocabulary: The model's `translator.pipelines.Vocabulary`.
        max_source_length: Longer sources are cut (EOS included).
        tag_id: Prepended to every non-empty source; None: none.
    """

    def __init__(self, vocabulary, max_source_length: int, tag_id: int | None):
        lines = tf.TensorSpec([None], tf.string)
        self._prepare = tf.function(
            lambda texts: prepare(texts, vocabulary.source, max_source_length, tag_id),
            input_signature=[lines],
            autograph=False,
        )
        self._prefixes = tf.function(
            lambda texts, rows: target_prefixes(texts, vocabulary.target, rows),
            input_signature=[lines, tf.TensorSpec([None], tf.int32)],
            autograph=False,
        )
        self._finish = tf.function(
            lambda ids, scores, rows, batch: finish(ids, scores, rows, batch, vocabulary.target),
            input_signature=[
                tf.TensorSpec([None, None, None], tf.int32),
                tf.TensorSpec([None, None], tf.float32),
                tf.TensorSpec([None], tf.int32),
                tf.TensorSpec([], tf.int32),
            ],
            autograph=False,
        )

    def prepare(self, lines: Sequence[str]) -> HostPrepared:
        prepared = self._prepare(tf.constant(list(lines), tf.string))
        return HostPrepared(*(tensor.numpy() for tensor in prepared))

    def prefixes(self, prefixes: Sequence[str], rows: np.ndarray) -> np.ndarray:
        return self._prefixes(tf.constant(list(prefixes), tf.string), rows).numpy()

    def finish(self, ids, scores, rows, batch: int) -> tuple[list[list[str]], np.ndarray]:
        texts, scores = self._finish(ids, scores, rows, batch)
        return [[text.decode("utf-8") for text in row] for row in texts.numpy()], scores.numpy()
