r"""Reading parallel corpora: two aligned text files, plain or gzip, one sentence a line.

Everything here streams: no function loads a whole file into memory, so corpora larger
than RAM work. Lines are read exactly as `tf.data.TextLineDataset` reads them, so the
Python checks (`ParallelCorpus.validate`) and the in-graph pipeline (`text_dataset`)
always agree on what "line N" is:

* a line ends at `\n`; the last line needs no `\n` (a file ending in `\n` has no extra
  empty line after it);
* every `\r` is removed (TextLineDataset drops them, so `\r\n` files read like `\n`
  files);
* nothing else is changed: no stripping of spaces, no Unicode normalization (that is
  the tokenizer's job).

Gzip is detected by the file's magic bytes, not its name.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from translator.pipelines.errors import CorpusError

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

_GZIP_MAGIC = b"\x1f\x8b"
# Read size of the block-wise validation; any size works, 1 MiB keeps Python overhead low.
_BLOCK = 1 << 20

PathLike = str | os.PathLike[str]


def is_gzip(path: PathLike) -> bool:
    """True when the file starts with the gzip magic bytes.

    Raises:
        CorpusError: if the file does not exist or cannot be read.
    """
    try:
        with open(path, "rb") as file:
            return file.read(2) == _GZIP_MAGIC
    except OSError as error:
        raise CorpusError(f"{path}: cannot read: {error.strerror or error}") from error


def open_binary(path: PathLike) -> IO[bytes]:
    """Opens a plain or gzip text file for binary reading (decompressing transparently)."""
    if is_gzip(path):
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_lines(path: PathLike) -> Iterator[str]:
    """Yields the lines of a text file as `str`, without line ends, streaming.

    Args:
        path: A UTF-8 text file, plain or gzip.

    Yields:
        One string per line, exactly as `tf.data.TextLineDataset` sees it (see module doc).

    Raises:
        CorpusError: naming the file and the 1-based line number of the first line that is
            not valid UTF-8, or naming the file if it is missing or a broken gzip.
    """
    number = 0
    try:
        with open_binary(path) as file:
            for number, raw in enumerate(file, start=1):
                line = raw[:-1] if raw.endswith(b"\n") else raw
                if b"\r" in line:
                    line = line.replace(b"\r", b"")
                try:
                    yield line.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise _utf8_error(path, number, line, error.start) from None
    except (OSError, EOFError, zlib.error) as error:
        raise CorpusError(f"{path}: cannot read after line {number}: {error}") from error


def count_lines(path: PathLike) -> int:
    r"""Counts the lines of a text file and checks that all of it is valid UTF-8.

    Reads block by block (fast, constant memory). Blocks are decoded up to their last
    `\n`, which is never part of a multi-byte UTF-8 sequence, so no character is split.

    Args:
        path: A text file, plain or gzip.

    Returns:
        The number of lines, as `tf.data.TextLineDataset` would yield them.

    Raises:
        CorpusError: naming the file and line number of the first invalid UTF-8 line, or
            naming the file if it is missing or a broken gzip.
    """
    lines = 0  # complete lines (ended by \n) before `pending`
    pending = b""  # bytes after the last \n seen so far
    try:
        with open_binary(path) as file:
            while block := file.read(_BLOCK):
                data = pending + block
                cut = data.rfind(b"\n") + 1
                complete, pending = data[:cut], data[cut:]
                _check_utf8(path, complete, lines)
                lines += complete.count(b"\n")
    except (OSError, EOFError, zlib.error) as error:
        raise CorpusError(f"{path}: cannot read after line {lines}: {error}") from error
    if pending:
        _check_utf8(path, pending, lines)
        lines += 1
    return lines


def _check_utf8(path: PathLike, data: bytes, lines_before: int) -> None:
    """Raises a CorpusError naming the line if `data` (whole lines) is not UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        start = data.rfind(b"\n", 0, error.start) + 1
        end = data.find(b"\n", error.start)
        line = data[start : end if end >= 0 else len(data)]
        number = lines_before + data.count(b"\n", 0, error.start) + 1
        raise _utf8_error(path, number, line, error.start - start) from None


def _utf8_error(path: PathLike, number: int, line: bytes, column: int) -> CorpusError:
    snippet = line[max(0, column - 20) : column + 20]
    return CorpusError(
        f"{path}, line {number}: not valid UTF-8 (byte 0x{line[column]:02x} at byte offset "
        f"{column}, near {snippet!r}); re-encode the file as UTF-8"
    )


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """Two aligned text files: line i of `source_path` translates to line i of `target_path`.

    Both may be plain text or gzip. Nothing is loaded up front; each method streams.

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
        sources, targets = iter_lines(self.source_path), iter_lines(self.target_path)
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
        """The pairs as a streaming `tf.data.Dataset` of `(source, target)` tf.string scalars.

        This does not check alignment or UTF-8 (the graph cannot name a line number):
        call `validate` first, as `make_dataset` does.
        """
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
    return tf.data.TextLineDataset(str(path), compression_type=compression, buffer_size=_BLOCK)
