"""Paragraphs through the server: a request's strings as segments, their outputs rejoined.

`translate` splits a line into sentences and a sentence over the model's limit again
(`translator.documents`); the SavedModel's signatures take one segment per string and
cut it at the export's limit. So the server splits here, before its batcher: each
string's segments go to the model with other requests' in the same batches, and each
string's outputs are its segments' joined as `translator.inference.Translator` joins
them (the k-th of each, the source's whitespace between; the mean of their scores).
A string that is one segment, or blank, goes through as it came. The limit is counted
with the export's own source SentencePiece model, as the graph counts it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from serving.protocol import Row
from translator.alignment import joined_alignment
from translator.documents import Layout, SentenceSplitter, segment
from translator.signatures import PREFIXES_KEY, TAGS_KEY

log = logging.getLogger(__name__)

# The outputs a rejoined signature has: every signature `translator export` writes
# (alignments: the aligned signature's).
OUTPUT_KEYS = ("scores", "translations")
ALIGNMENTS_KEY = "alignments"


@dataclasses.dataclass(frozen=True)
class Planned:
    """One request's strings as the segments sent to the model, and how to rejoin them."""

    # The rows the batcher runs: each segment with the row's other inputs.
    rows: list[Row]
    # Per request string.
    layouts: list[Layout]

    def rejoined(self, future: concurrent.futures.Future) -> concurrent.futures.Future:
        """A future of the request's outputs, one row per string, from the segments'."""
        outer: concurrent.futures.Future = concurrent.futures.Future()

        def done(inner: concurrent.futures.Future) -> None:
            try:
                outer.set_result(self.join(inner.result()))
            except Exception as error:  # the model's failure, or the join's
                outer.set_exception(error)

        future.add_done_callback(done)
        return outer

    def join(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The strings' outputs from the segments'.

        `translations` and `scores`: [segments] or [segments, n] in, [strings] or
        [strings, n] out; `alignments` (1-best): [segments] in, [strings] out, over each
        string's words (`translator.alignment.joined_alignment`).
        """
        texts, scores = outputs["translations"], outputs["scores"]
        columns = texts.shape[1] if texts.ndim == 2 else None
        found = [_hypotheses(texts[i], scores[i]) for i in range(len(texts))]
        joined_texts = np.empty((len(self.layouts), columns or 1), dtype=object)
        joined_scores = np.full((len(self.layouts), columns or 1), -np.inf, np.float32)
        joined_texts[:] = b""
        for row, layout in enumerate(self.layouts):
            for k, chosen in enumerate(layout.ranks(found)):
                present = [hypothesis for hypothesis in chosen if hypothesis is not None]
                text = layout.text([h[0] if h else "" for h in chosen])
                joined_texts[row, k] = text.encode("utf-8")
                joined_scores[row, k] = sum(h[1] for h in present) / len(present)
        if columns is None:
            joined = {"translations": joined_texts[:, 0], "scores": joined_scores[:, 0]}
            if ALIGNMENTS_KEY in outputs:
                joined[ALIGNMENTS_KEY] = self._alignments(outputs[ALIGNMENTS_KEY], texts)
            return joined
        return {"translations": joined_texts, "scores": joined_scores}

    def _alignments(self, alignments: np.ndarray, texts: np.ndarray) -> np.ndarray:
        """Each string's alignment (bytes) from its segments' ([segments] each)."""
        joined = np.empty(len(self.layouts), dtype=object)
        for row, layout in enumerate(self.layouts):
            indices = [index for index, _ in layout.segments]
            sources = [_text(self.rows[index]) for index in indices]
            targets = [texts[index].decode("utf-8") for index in indices]
            parts = [alignments[index].decode("utf-8") for index in indices]
            joined[row] = joined_alignment(layout, sources, targets, parts).encode("utf-8")
        return joined


def _text(row: Row) -> str:
    """The sentence of a planned row (its first input)."""
    return (row[0] if isinstance(row, tuple) else row).decode("utf-8")


def _hypotheses(texts: np.ndarray, scores: np.ndarray) -> list[tuple[str, float]]:
    """A segment's filled hypotheses, best first.

    A 1-best output's one, or the n-best slots with a finite score.
    """
    if np.ndim(texts) == 0:
        return [(texts.decode("utf-8"), float(scores))]
    return [
        (text.decode("utf-8"), float(score))
        for text, score in zip(texts, scores, strict=True)
        if math.isfinite(float(score))
    ]


class Splitting:
    """How the server splits a request's strings (`plan`).

    Args:
        splitter: Splits a string into sentences.
        count_pieces: The source pieces of each text, as the graph tokenizes it; None:
            not known (nothing over the limit is split).
        max_source_length: The export's limit, EOS included.
        tagged: Whether the export prepends a tag of its own to every source.
    """

    def __init__(
        self,
        splitter: SentenceSplitter,
        count_pieces: Callable[[Sequence[str]], list[int]] | None,
        max_source_length: int | None,
        tagged: bool = False,
    ):
        self.splitter = splitter
        self.count_pieces = count_pieces if max_source_length else None
        self.max_source_length = max_source_length or 0
        self.tagged = tagged

    @classmethod
    def of_export(
        cls, version_dir: Path, metadata: dict, split: bool, source_lang: str
    ) -> Splitting | None:
        """The splitting of an export: its source model (assets/), limit and language.

        Args:
            version_dir: The SavedModel's directory.
            metadata: Its `assets.extra/translator.json`.
            split: Split strings (False: None, each string runs as the export takes it).
            source_lang: The language whose rules split ("": the model's record's).
        """
        from translator.artifacts import model_languages

        if not split:
            return None
        language = source_lang or model_languages(metadata.get("model", {}))[0]
        source_model = (metadata.get("vocabulary") or {}).get("source_model")
        count_pieces = None
        if source_model and (version_dir / "assets" / source_model).is_file():
            import sentencepiece

            processor = sentencepiece.SentencePieceProcessor(
                model_file=str(version_dir / "assets" / source_model)
            )

            def count_pieces(texts: Sequence[str]) -> list[int]:
                return [len(ids) for ids in processor.encode(list(texts))]

        else:  # an export of an earlier version: its sentences are split, not refitted
            log.warning(
                "%s: the export does not name its source SentencePiece model; a sentence "
                "over its limit is cut (export the model again to split it instead)",
                version_dir,
            )
        limit, tagged = metadata.get("max_source_length"), bool(metadata.get("tag"))
        return cls(SentenceSplitter(language), count_pieces, limit, tagged)

    def plan(self, rows: Sequence[Row], input_keys: tuple[str, ...]) -> Planned:
        """Each string's segments, as rows of the signature with `input_keys`.

        A tag goes with every segment of its string, a prefix with its first.
        """
        tags_at = input_keys.index(TAGS_KEY) if TAGS_KEY in input_keys else None
        prefix_at = input_keys.index(PREFIXES_KEY) if PREFIXES_KEY in input_keys else None
        planned_rows: list[Row] = []
        layouts: list[Layout] = []
        for row in rows:
            values = row if isinstance(row, tuple) else (row,)
            text = values[0].decode("utf-8")
            tagged = self.tagged or (tags_at is not None and bool(values[tags_at]))
            segmented = segment([text], self.splitter, self._fits(tagged))
            (layout,) = segmented.layouts
            if len(segmented.segments) <= 1:  # one segment, or blank: as it came
                layouts.append(Layout("", ((len(planned_rows), ""),)))
                planned_rows.append(row)
                continue
            indices = []
            for number, ((_, after), piece) in enumerate(
                zip(layout.segments, segmented.segments, strict=True)
            ):
                indices.append((len(planned_rows), after))
                column = list(values)
                column[0] = piece.encode("utf-8")
                if prefix_at is not None and number > 0:
                    column[prefix_at] = b""
                planned_rows.append(tuple(column) if isinstance(row, tuple) else column[0])
            layouts.append(Layout(layout.leading, tuple(indices)))
        return Planned(planned_rows, layouts)

    def _fits(self, tagged: bool) -> Callable[[Sequence[str]], list[bool]] | None:
        """Which texts fit the limit: pieces, a tag, and EOS."""
        if self.count_pieces is None:
            return None
        room = self.max_source_length - 1 - int(tagged)
        count = self.count_pieces
        return lambda texts: [pieces <= room for pieces in count(texts)]
