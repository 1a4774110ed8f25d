"""The text -> ids -> text path on the host: numpy and the `sentencepiece` package.

The same rules as `translator.text` (the graph's path, which `Translator` and the
SavedModel run), without TensorFlow, for processes that have none: training and
validation on a JAX-only accelerator machine. `tests/test_host_text.py` holds the two
paths equal, id for id and text for text.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import sentencepiece

from translator.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from translator.pipelines.vocab import (
    VocabularyFiles,
    VocabularyMetadata,
    read_vocabulary_files,
)
from translator.text_rules import padded_length


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here (a JAX-only GPU image has none)."""
    import importlib.util

    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:  # an import hook that refuses it
        return False


class HostPrepared(NamedTuple):
    """A batch of lines made ready for the search (`translator.text.Prepared`'s fields)."""

    # Pieces + EOS of the searched lines, shortest first, then PAD: int32 [searched, width].
    source_ids: np.ndarray
    # The input line of each searched row: int32 [searched].
    rows: np.ndarray
    # Source tokens (EOS included) of each searched row: int32 [searched].
    lengths: np.ndarray
    # Per input line: empty (not searched): bool [batch].
    empty: np.ndarray
    # Per input line: cut to the length limit: bool [batch].
    truncated: np.ndarray


class HostText:
    """A vocabulary directory's text path, without TensorFlow.

    Args:
        directory: A vocabulary directory (`translator build-vocab`).
        files: Its files, read and checked already (`Vocabulary.host`); None: read here.

    Raises:
        VocabularyError: as `load_vocabulary` (the same checks).
    """

    def __init__(self, directory: str | os.PathLike[str], files: VocabularyFiles | None = None):
        files = files or read_vocabulary_files(directory)
        self.metadata: VocabularyMetadata = files.metadata
        self._source = sentencepiece.SentencePieceProcessor(model_proto=files.source_proto)
        self._target = sentencepiece.SentencePieceProcessor(model_proto=files.target_proto)
        self._remap = {
            side: self._unknown_map(processor, self.metadata.unknown_ids.get(side, ()))
            for side, processor in (("source", self._source), ("target", self._target))
        }

    @staticmethod
    def _unknown_map(processor, unknown: Sequence[int]) -> np.ndarray | None:
        """Id -> id, UNK for the ids the network has no row for (None: no such id)."""
        if not unknown:
            return None
        remap = np.arange(processor.get_piece_size(), dtype=np.int32)
        remap[list(unknown)] = UNK_ID
        return remap

    def piece_to_id(self, piece: str) -> int:
        """The source id of a piece string (UNK_ID for an unknown piece)."""
        return self._source.piece_to_id(piece)

    def encode(self, lines: Sequence[str], side: str = "source") -> list[list[int]]:
        """Each line's pieces (no BOS or EOS), as training tokenized them."""
        processor = self._source if side == "source" else self._target
        rows = processor.encode([line.rstrip("\n") for line in lines], out_type=int)
        remap = self._remap[side]
        return rows if remap is None else [remap[row].tolist() for row in rows]

    def prepare(
        self, lines: Sequence[str], max_source_length: int, tag_id: int | None = None
    ) -> HostPrepared:
        """Lines -> the sorted, padded sources of the lines that are searched.

        As `translator.text.prepare`: a trailing newline dropped; a tag first on every
        non-empty source; cut to `max_source_length - 1` pieces (room for EOS); a line of
        whitespace or with no pieces is empty (not searched); shortest first, stable.
        """
        pieces = self.encode(lines)
        if tag_id is not None:
            pieces = [[tag_id, *row] if row else row for row in pieces]
        truncated = np.array([len(row) > max_source_length - 1 for row in pieces], bool)
        pieces = [row[: max_source_length - 1] for row in pieces]
        counts = np.array([len(row) for row in pieces], np.int32)
        blank = np.array([not line.rstrip("\n").strip() for line in lines], bool)
        empty = (counts == 0) | blank
        searched = np.flatnonzero(~empty).astype(np.int32)
        rows = searched[np.argsort(counts[searched], kind="stable")]
        lengths = (counts[rows] + 1).astype(np.int32)  # EOS included
        width = padded_length(int(lengths.max())) if len(rows) else 0
        source_ids = np.full((len(rows), width), PAD_ID, np.int32)
        for index, row in enumerate(rows):
            source_ids[index, : lengths[index]] = [*pieces[row], EOS_ID]
        return HostPrepared(source_ids, rows, lengths, empty, truncated & ~empty)

    def decode(self, ids) -> list[str]:
        """Target ids `[batch, length]` -> texts: stops at the first EOS, drops PAD and BOS."""
        texts = []
        for row in np.asarray(ids).tolist():
            if EOS_ID in row:
                row = row[: row.index(EOS_ID)]
            texts.append(self._target.decode([i for i in row if i not in (PAD_ID, BOS_ID)]))
        return texts

    def finish(self, ids, scores, rows, batch: int) -> tuple[list[list[str]], np.ndarray]:
        """The search's hypotheses -> texts and scores per input line, in input order.

        As `translator.text.finish`: `ids` int `[searched, n_best, length]`, `scores`
        float `[searched, n_best]`; an empty line's first slot is "" with score 0, its
        others "" with -inf.

        Returns:
            `(texts [batch][n_best], scores float32 [batch, n_best])`.
        """
        ids, scores = np.asarray(ids), np.asarray(scores, np.float32)
        n_best = ids.shape[1]
        texts = [[""] * n_best for _ in range(batch)]
        out = np.full((batch, n_best), -np.inf, np.float32)
        out[:, 0] = 0.0
        for index, row in enumerate(np.asarray(rows).tolist()):
            texts[row] = self.decode(ids[index])
            out[row] = scores[index]
        return texts, out

    def prefixes(self, prefixes: Sequence[str], rows) -> np.ndarray:
        """As `translator.text.target_prefixes`: int32 `[searched, width]`, PAD after."""
        pieces = self.encode(prefixes, side="target")
        chosen = [pieces[row] for row in np.asarray(rows).tolist()]
        width = max((len(row) for row in chosen), default=0)
        out = np.full((len(chosen), width), PAD_ID, np.int32)
        for index, row in enumerate(chosen):
            out[index, : len(row)] = row
        return out
