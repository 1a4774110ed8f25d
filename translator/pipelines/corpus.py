"""Parallel corpora: two aligned text files, plain or gzip, one sentence a line.

Everything streams, so corpora larger than RAM work. Lines are read as
`tf.data.TextLineDataset` reads them (`translator.io`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from translator.errors import CorpusError
from translator.io import BLOCK_BYTES, PathLike, count_lines, is_gzip, iter_lines

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """Two aligned text files: line i of `source_path` translates to line i of `target_path`.

    Example:
        >>> corpus = ParallelCorpus("train.en.gz", "train.de.gz")
        >>> corpus.validate()  # line counts equal, all UTF-8, else CorpusError
        29000
        >>> for source, target in corpus: ...
    """

    # The source-language file.
    source_path: Path
    # The target-language file, aligned line by line with the source.
    target_path: Path

    def __init__(self, source_path: PathLike, target_path: PathLike) -> None:
        object.__setattr__(self, "source_path", Path(source_path))
        object.__setattr__(self, "target_path", Path(target_path))

    def validate(self) -> int:
        """Streams both files once: checks UTF-8 and that the line counts match.

        Returns:
            The number of sentence pairs (lines in each file).

        Raises:
            CorpusError: naming both files and both counts when the counts differ, or
                naming the file and line number of invalid UTF-8.
        """
        source_lines = count_lines(self.source_path)
        target_lines = count_lines(self.target_path)
        if source_lines != target_lines:
            raise self._mismatch(source_lines, target_lines)
        return source_lines

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """Yields `(source, target)` line pairs, streaming both files in step.

        Raises:
            CorpusError: on invalid UTF-8 (file and line), or, when one file ends before
                the other, naming both files and both line counts.
        """
        return self.pairs()

    def pairs(self, on_invalid: Callable[[int], None] | None = None) -> Iterator[tuple[str, str]]:
        """`iter(corpus)`, optionally reading invalid UTF-8 as U+FFFD (`iter_lines`).

        Args:
            on_invalid: Called with each invalid line's number (either file); None: an
                invalid line is an error.
        """
        sources = iter_lines(self.source_path, on_invalid)
        targets = iter_lines(self.target_path, on_invalid)
        count = 0
        for source in sources:
            target = next(targets, None)
            if target is None:
                raise self._mismatch(count + 1 + sum(1 for _ in sources), count)
            count += 1
            yield source, target
        rest = sum(1 for _ in targets)
        if rest:
            raise self._mismatch(count, count + rest)

    def text_dataset(self) -> tf.data.Dataset:
        """The pairs as a streaming dataset of tf.string scalars, unchecked: `validate` first."""
        import tensorflow as tf

        return tf.data.Dataset.zip(
            (text_line_dataset(self.source_path), text_line_dataset(self.target_path))
        )

    def _mismatch(self, source_lines: int, target_lines: int) -> CorpusError:
        return CorpusError(
            f"parallel files have different line counts: {self.source_path} has "
            f"{source_lines:,} lines, {self.target_path} has {target_lines:,}; "
            "line i of one must translate line i of the other"
        )


def text_line_dataset(path: PathLike) -> tf.data.Dataset:
    """A streaming dataset of the lines of one text file (plain or gzip), tf.string scalars."""
    import tensorflow as tf

    compression = "GZIP" if is_gzip(path) else ""
    # A 1 MiB read buffer: TextLineDataset's default (256 KiB) is slower on gzip input.
    return tf.data.TextLineDataset(str(path), compression_type=compression, buffer_size=BLOCK_BYTES)
