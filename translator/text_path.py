"""The text path around `Translator`'s search, chosen in one place (`text_path`).

Where TensorFlow is installed, the graph's (`translator.text.GraphText`: the ops the
SavedModel runs); else the host's (`translator.host_text.HostText`: sentencepiece and
NumPy), which gives the same ids and text (tests/test_host_text.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from translator.host_text import HostPrepared, HostText, tensorflow_installed

if TYPE_CHECKING:  # pragma: no cover
    from translator.pipelines.vocabulary import Vocabulary


class TextPath(Protocol):
    """Lines -> sorted, padded ids; the search's ids -> texts: around `Translator`'s search."""

    def prepare(self, lines: Sequence[str]) -> HostPrepared:
        """The searched lines' sources (`translator.text.prepare`), as NumPy arrays."""
        ...

    def prefixes(self, prefixes: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """int32 `[searched, width]`: the target prefix pieces of the searched rows."""
        ...

    def finish(self, ids, scores, rows, batch: int) -> tuple[list[list[str]], np.ndarray]:
        """The search's hypotheses -> texts and scores per input line (`HostText.finish`)."""
        ...


def text_path(vocabulary: Vocabulary, max_source_length: int, tag_id: int | None) -> TextPath:
    """The text path `Translator` runs: the graph's (the SavedModel's ops), else the host's.

    The host's (`HostText`) gives the same ids and text; it runs where TensorFlow is not
    installed.

    Args:
        vocabulary: The model's vocabulary.
        max_source_length: Longer sources are cut (EOS included).
        tag_id: Prepended to every non-empty source; None: none.
    """
    if tensorflow_installed():
        from translator.text import GraphText

        return GraphText(vocabulary, max_source_length, tag_id)
    return HostTextPath(vocabulary.host, max_source_length, tag_id)


class HostTextPath:
    """`HostText` as a `TextPath`: its length limit and tag bound."""

    def __init__(self, host: HostText, max_source_length: int, tag_id: int | None):
        self.host, self.max_source_length, self.tag_id = host, max_source_length, tag_id

    def prepare(self, lines: Sequence[str]) -> HostPrepared:
        return self.host.prepare(lines, self.max_source_length, self.tag_id)

    def prefixes(self, prefixes: Sequence[str], rows: np.ndarray) -> np.ndarray:
        return self.host.prefixes(prefixes, rows)

    def finish(self, ids, scores, rows, batch: int) -> tuple[list[list[str]], np.ndarray]:
        return self.host.finish(ids, scores, rows, batch)
