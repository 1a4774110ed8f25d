r"""Files: atomic writes of files and directories, sha256, and the one text-line reader.

Writes go through a temporary sibling renamed into place, so a crash never leaves half a
file. Text is read exactly as `tf.data.TextLineDataset` reads it (lines end at `\n`,
every `\r` is removed), so Python checks and the pipeline agree on "line N".
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from translator.errors import CorpusError

PathLike = str | os.PathLike[str]

_GZIP_MAGIC = b"\x1f\x8b"
# Read size of block-wise reads; any size works, 1 MiB keeps Python overhead low.
BLOCK_BYTES = 1 << 20


def _open_permissions(path: PathLike) -> None:
    # mkstemp/mkdtemp make private files (0600/0700); give what open()/mkdir() would.
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~mask)


@contextlib.contextmanager
def atomic_file(
    path: PathLike, *, compress: bool = False, sync: bool = False
) -> Iterator[IO[bytes]]:
    """A binary sink that becomes `path` only when the block ends without an error.

    Args:
        path: The file to write; its directory must exist.
        compress: Gzip what is written (mtime 0: same content, same bytes).
        sync: fsync before the rename (for downloads that must survive a power cut).

    Yields:
        The open binary file.
    """
    target = Path(path)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as raw:
            if compress:
                with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as sink:
                    yield sink
            else:
                yield raw
            if sync:
                raw.flush()
                os.fsync(raw.fileno())
        _open_permissions(temporary)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_atomic(path: PathLike, data: bytes | str) -> None:
    """Writes `data` (str as UTF-8) to `path` through `atomic_file`."""
    with atomic_file(path) as sink:
        sink.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def atomic_directory(path: PathLike, *, prefix: str | None = None) -> Iterator[Path]:
    """A staging directory that replaces `path` when the block ends without an error.

    Args:
        path: The directory to create or replace; its parent is created.
        prefix: Name prefix of the staging directory (default `.<name>.`).

    Yields:
        The staging directory to fill.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix or f".{target.name}.", dir=target.parent))
    try:
        yield staging
        _open_permissions(staging)
        if target.exists():
            retired = target.with_name(f".{target.name}.old")
            shutil.rmtree(retired, ignore_errors=True)
            target.rename(retired)
            staging.rename(target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: PathLike) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def stream_lines(
    stream: IO[bytes], name: str, on_invalid: Callable[[int], None] | None = None
) -> Iterator[str]:
    """Yields the lines of a binary stream (a file, stdin) as `str`, without line ends.

    Args:
        stream: Open for binary reading.
        name: What errors call it (a path, or "<stdin>").
        on_invalid: None: invalid UTF-8 is an error. Else such a line is decoded with
            U+FFFD for each bad byte, and `on_invalid(line_number)` is called.

    Raises:
        CorpusError: naming `name` and the 1-based line number of the first line that is
            not valid UTF-8 (without `on_invalid`).
    """
    for number, raw in enumerate(stream, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if b"\r" in line:
            line = line.replace(b"\r", b"")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            if on_invalid is None:
                raise _utf8_error(name, number, line, error.start) from None
            on_invalid(number)
            text = line.decode("utf-8", errors="replace")
        yield text


def iter_lines(path: PathLike, on_invalid: Callable[[int], None] | None = None) -> Iterator[str]:
    """Yields the lines of a UTF-8 text file, plain or gzip, streaming (see module doc).

    Args:
        path: The file.
        on_invalid: As `stream_lines`': None makes invalid UTF-8 an error.

    Raises:
        CorpusError: naming the file and the 1-based line number of the first line that is
            not valid UTF-8, or naming the file if it is missing or a broken gzip.
    """
    number = 0
    try:
        with open_binary(path) as file:
            for line in stream_lines(file, str(path), on_invalid):
                number += 1
                yield line
    except (OSError, EOFError, zlib.error) as error:
        raise CorpusError(f"{path}: cannot read after line {number}: {error}") from error


def machine_cache_dir() -> Path:
    """The toolkit's cache on this machine: measured speeds, and compiled programs on JAX.

    `$TRANSLATOR_CACHE_DIR`, else `$XDG_CACHE_HOME/translator`, else
    `~/.cache/translator`.
    """
    root = os.environ.get("TRANSLATOR_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "translator")
    return Path(root)


def count_characters(source: PathLike, target: PathLike) -> int:
    """Characters of both sides of a parallel corpus (streamed; line ends not counted)."""
    return sum(len(line) for path in (source, target) for line in iter_lines(path))


def count_lines(path: PathLike) -> int:
    r"""Counts the lines of a text file and checks that all of it is valid UTF-8.

    Reads block by block, decoding up to each block's last `\n` (never inside a UTF-8
    character).

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
            while block := file.read(BLOCK_BYTES):
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


def _utf8_error(name: PathLike, number: int, line: bytes, column: int) -> CorpusError:
    snippet = line[max(0, column - 20) : column + 20]
    return CorpusError(
        f"{name}, line {number}: not valid UTF-8 (byte 0x{line[column]:02x} at byte offset "
        f"{column}, near {snippet!r}); re-encode the file as UTF-8"
    )


def read_lines(path: PathLike, limit: int = 0) -> list[str]:
    """The lines of a UTF-8 text file, plain or gzip, without line ends (`iter_lines`).

    Args:
        path: The file.
        limit: Read at most this many lines; 0 reads all.

    Raises:
        CorpusError: a missing or unreadable file, or the line number of the first line
            that is not valid UTF-8.
    """
    lines = []
    for line in iter_lines(path):
        if limit and len(lines) >= limit:
            break
        lines.append(line)
    return lines


def one_line(text: str) -> str:
    """A translation made safe for line-based output (no line breaks inside)."""
    if "\n" in text or "\r" in text:
        return text.replace("\r", " ").replace("\n", " ")
    return text
