"""Word alignments: which source words each target word was translated from.

Read from one decoder layer's cross-attention, heads averaged (fairseq's and OpenNMT's
method), over a teacher-forced pass on the chosen translation: each target piece links
to the source piece it attends to most, and words link where their pieces do. The layer
and the step read were chosen by alignment error rate (decision D12).

A word is what the user sees: a whitespace-separated token of the detokenized text, and
in Chinese and Japanese a character (`translator.languages.word_count`). Pieces map to
words by tables of the vocabulary (`PieceWords`), so the same rule runs on NumPy, on any
Keras backend and inside the SavedModel's graph. Pairs print as Pharaoh `i-j` (source
word i, target word j, from 0), sorted.

    echo "Ein Hund rennt über die Wiese." | translator translate --model runs/de-en --alignments
    # A dog runs through the grass. ||| 0-0 1-1 2-2 3-3 5-4 5-5
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from keras import ops

from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.languages import UNSPACED_CHARACTER, word_count

if TYPE_CHECKING:  # pragma: no cover
    from translator.documents import Layout

# The decoder layer read: the one three quarters of the way up (3 of 4, 2 of 2, 5 of 6),
# and the step: the one that predicts a target piece (fairseq's), not the one it is the
# input of ("shifted", Chen et al. 2020). Both chosen by alignment error rate (D12).
ALIGNMENT_DEPTH = 0.75
SHIFTED = False


@dataclasses.dataclass(frozen=True)
class PieceWords:
    """Per piece id of one vocabulary side: how its text opens and continues words.

    Arrays int32 `[vocabulary size]`. A character starts a word when it is not a space
    and it is unspaced (Chinese, Japanese) or follows a space, an unspaced character or
    the start of the text. Control pieces and tags are not text.
    """

    # 1 for a piece of text (not BOS, EOS, PAD or a tag).
    text: np.ndarray
    # Word starts after its first character: they depend on this piece alone.
    inner: np.ndarray
    # Its first character is unspaced: a word starts there whatever came before.
    head_unspaced: np.ndarray
    # Its first character is plain (not a space, not unspaced): a word starts there
    # when the text before ends a word (`breaks`).
    head_plain: np.ndarray
    # Its first non-space character starts a word whatever came before (the first is a
    # space, or unspaced).
    opens: np.ndarray
    # It ends in a space or an unspaced character, or is not text: a plain character
    # after it starts a word.
    breaks: np.ndarray
    # It holds no character but spaces (or is not text): it belongs to no word.
    blank: np.ndarray

    @classmethod
    def of(cls, surfaces: Sequence[str | None]) -> PieceWords:
        """The tables of pieces whose texts are `surfaces` (None: not text).

        Args:
            surfaces: Per id, the piece's text with its word-start mark as a space.
        """
        size = len(surfaces)
        columns = {name: np.zeros(size, np.int32) for name in _COLUMNS}
        for index, surface in enumerate(surfaces):
            if surface is None or not surface:
                columns["breaks"][index] = 1
                columns["blank"][index] = 1
                continue
            columns["text"][index] = 1
            first = surface[0]
            columns["head_unspaced"][index] = _unspaced(first)
            columns["head_plain"][index] = not first.isspace() and not _unspaced(first)
            columns["blank"][index] = not surface.strip()
            columns["opens"][index] = bool(surface.strip()) and (
                first.isspace() or _unspaced(first)
            )
            columns["breaks"][index] = surface[-1].isspace() or _unspaced(surface[-1])
            columns["inner"][index] = sum(
                _starts(previous, character) for previous, character in itertools.pairwise(surface)
            )
        return cls(**columns)

    @classmethod
    def of_sentencepiece(cls, processor, not_text: Sequence[int] = ()) -> PieceWords:
        """The tables of a `sentencepiece.SentencePieceProcessor`'s pieces.

        A byte piece (byte fallback) is one byte of a character: an ASCII space is a
        space, the first byte of a Chinese or Japanese character starts a word, other
        first bytes are plain, and continuation bytes continue the word they are in. (A
        byte sequence that is not UTF-8 decodes to U+FFFD per byte; its words may then
        differ from the text's.)

        Args:
            processor: The model of one side.
            not_text: Ids that are never text (the vocabulary's tags).
        """
        skipped = set(not_text)
        surfaces: list[str | None] = []
        byte_values = {}
        for index in range(processor.get_piece_size()):
            if index in skipped or processor.is_control(index):
                surfaces.append(None)
            elif processor.is_unknown(index):
                surfaces.append(" \u2047 ")  # what decoding writes for it
            elif processor.is_byte(index):
                surfaces.append("b")
                byte_values[index] = int(processor.id_to_piece(index)[1:-1], 16)
            else:
                surfaces.append(processor.id_to_piece(index).replace("\u2581", " "))
        table = cls.of(surfaces)
        for index, value in byte_values.items():
            if chr(value).isspace():  # an ASCII space: as any space
                table.head_plain[index], table.blank[index], table.breaks[index] = 0, 1, 1
                continue
            unspaced = _UNSPACED_LEAD_BYTES[0] <= value <= _UNSPACED_LEAD_BYTES[1]
            continuation = 0x80 <= value < 0xC0
            table.head_unspaced[index] = table.opens[index] = unspaced
            table.head_plain[index] = not unspaced and not continuation
            table.breaks[index] = 0  # a character's bytes run on
        return table


# The first bytes of UTF-8's U+3000 .. U+9FFF: CJK punctuation, kana and ideographs.
_UNSPACED_LEAD_BYTES = (0xE3, 0xE9)


_COLUMNS = tuple(field.name for field in dataclasses.fields(PieceWords))


def _unspaced(character: str) -> bool:
    return UNSPACED_CHARACTER.fullmatch(character) is not None


def _starts(previous: str, character: str) -> bool:
    """Whether `character` starts a word after `previous` (the rule of `PieceWords`)."""
    if character.isspace():
        return False
    return _unspaced(character) or previous.isspace() or _unspaced(previous)


def word_ranges(ids, table: PieceWords):
    """Each piece's words: the first and last word its text touches.

    Args:
        ids: int `[batch, length]` pieces of one side (PAD, EOS, tags allowed).
        table: That side's `PieceWords`.

    Returns:
        `(first, last, words)`: int32 `[batch, length]` twice (first > last for a piece
        in no word), and int32 `[batch]`, the words of each row.
    """
    ids = ops.convert_to_tensor(ids, "int32")

    def column(values):
        return ops.take(ops.convert_to_tensor(values, "int32"), ids, axis=0)

    breaks = column(table.breaks)
    # What comes before each piece ends a word: the start of the text, or `breaks`.
    before = ops.concatenate([ops.ones_like(breaks[:, :1]), breaks[:, :-1]], axis=1)
    plain_start = column(table.head_plain) * before
    starts = column(table.inner) + column(table.head_unspaced) + plain_start
    ends = ops.cumsum(starts, axis=1)  # words that start in or before each piece
    opens = ops.maximum(column(table.opens), plain_start)
    first = ends - starts - 1 + opens
    in_word = (1 - column(table.blank)) * column(table.text)
    last = ops.where(in_word > 0, ends - 1, first - 1)
    return first, last, ends[:, -1]


def word_links(weights, source_ids, target_ids, source_table, target_table):
    """Word alignments from attention: which source word each target word links to.

    Each target piece links to the source piece it attends to most (of those in a
    word); words link where any of their pieces do.

    Args:
        weights: float `[batch, target_length, source_length]`: row t is read for target
            piece t (`forced_attention`).
        source_ids: int `[batch, source_length]` as the model read them (tag, EOS, PAD).
        target_ids: int `[batch, target_length]`, the translation's pieces, EOS, PAD.
        source_table: The source side's `PieceWords`.
        target_table: The target side's.

    Returns:
        bool `[batch, source_length, target_length]`: source word i links to target word j
        (words from 0; there are never more words than pieces).
    """
    source_first, source_last, _ = word_ranges(source_ids, source_table)
    target_first, target_last, _ = word_ranges(target_ids, target_table)
    source_words = _membership(source_first, source_last)  # [b, S pieces, S words]
    target_words = _membership(target_first, target_last)  # [b, T pieces, T words]
    in_word = ops.any(source_words, axis=2)  # [b, S]
    scores = ops.where(in_word[:, None, :], ops.cast(weights, "float32"), -1.0)
    chosen = ops.argmax(scores, axis=2)  # [b, T]
    links = ops.one_hot(chosen, ops.shape(source_ids)[1])  # [b, T, S]
    links = links * ops.cast(ops.any(target_words, axis=2), "float32")[:, :, None]
    source_words = ops.cast(source_words, "float32")
    target_words = ops.cast(target_words, "float32")
    # [b, S words, T pieces] then [b, S words, T words].
    by_source = ops.matmul(ops.transpose(source_words, (0, 2, 1)), ops.transpose(links, (0, 2, 1)))
    return ops.matmul(by_source, target_words) > 0


def _membership(first, last):
    """Whether piece p is in word w: bool `[batch, pieces, words]` (words: as many)."""
    words = ops.arange(ops.shape(first)[1], dtype="int32")[None, None, :]
    return ops.logical_and(words >= first[:, :, None], words <= last[:, :, None])


def layer_index(depth: int) -> int:
    """The decoder block read in a decoder of `depth` blocks, from 0 (`ALIGNMENT_DEPTH`)."""
    return max(math.ceil(ALIGNMENT_DEPTH * depth) - 1, 0)


def forced_attention(
    model, source_ids, target_ids, layer: int | None = None, shifted: bool = SHIFTED
):
    """`model`'s attention on given translations, one row per target piece.

    Args:
        model: A `translator.model.Transformer`.
        source_ids: int32 `[batch, source_length]`, EOS ended, 0 = padding.
        target_ids: int32 `[batch, target_length]`, the pieces and EOS, then PAD.
        layer: The decoder block read, from 0 (None: `layer_index`'s).
        shifted: Read the step a piece is the input of, not the one that predicts it.

    Returns:
        float32 `[batch, target_length, source_length]`: row t for target piece t.
    """
    target_ids = ops.convert_to_tensor(target_ids, "int32")
    bos = ops.full((ops.shape(target_ids)[0], 1), BOS_ID, "int32")
    inputs = ops.concatenate([bos, target_ids], axis=1)  # [batch, target_length + 1]
    # Teacher forcing's input, one step longer when shifted (piece t is the input of
    # step t + 1); EOS is never an input.
    decoder_input = inputs if shifted else inputs[:, :-1]
    decoder_input = ops.where(ops.equal(decoder_input, EOS_ID), PAD_ID, decoder_input)
    if layer is None:
        layer = layer_index(len(model.decoder_blocks))
    weights = model.cross_attention(source_ids, decoder_input, layer)
    return weights[:, 1:] if shifted else weights


def pharaoh(links: np.ndarray) -> str:
    """One sentence's `[source words, target words]` bool links as "i-j i-j ..."."""
    return " ".join(f"{i}-{j}" for i, j in np.argwhere(np.asarray(links)))


def joined_alignment(
    layout: Layout, sources: Sequence[str], targets: Sequence[str], parts: Sequence[str]
) -> str:
    """A line's alignment from its segments': pairs moved to the line's word positions.

    Args:
        layout: How the line was split (`translator.documents.Layout`).
        sources: Its segments' source texts, in order.
        targets: Their translations ("" for none).
        parts: Their alignments ("" for none).
    """
    pairs: set[tuple[int, int]] = set()  # a word cut in two is linked once
    source_offset = target_offset = 0
    for k, (part, (_, after)) in enumerate(zip(parts, layout.segments, strict=True)):
        pairs.update(shift_words(part, source_offset, target_offset))
        source_offset += word_count(sources[k])
        target_offset += word_count(targets[k])
        if not after and k + 1 < len(sources):  # cut inside a word: it counts once
            source_offset -= joins_word(sources[k], sources[k + 1])
            target_offset -= joins_word(targets[k], targets[k + 1])
    return " ".join(f"{i}-{j}" for i, j in sorted(pairs))


def shift_words(pairs: str, source_offset: int, target_offset: int) -> list[tuple[int, int]]:
    """Pharaoh pairs of a segment moved to where its words sit in the line."""
    moved = []
    for pair in pairs.split():
        i, _, j = pair.partition("-")
        moved.append((int(i) + source_offset, int(j) + target_offset))
    return moved


def joins_word(left: str, right: str) -> bool:
    """Whether `left + right` joins a word across the cut (plain characters both sides)."""
    if not left or not right:
        return False
    return not _starts(left[-1], right[0]) and not right[0].isspace()
