"""Files, written once: atomic writes of files and directories, sha256, text lines.

Whatever `translator` writes (vocabularies, downloads, translations, reports, model
directories, SavedModel versions) goes through a temporary sibling renamed into place on
success, so a crash or Ctrl-C leaves the old file (or none), never half of a new one; a
failure removes the temporary.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

PathLike = str | os.PathLike[str]


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

    Raising inside the block (e.g. a failed checksum) discards the file and leaves `path`
    as it was.

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

    An existing `path` is replaced only once the new one is complete: it is renamed
    aside, the staging directory renamed in, and the old one removed.

    Args:
        path: The directory to create or replace; its parent is created.
        prefix: Name prefix of the staging directory (default `.<name>.`); TF Serving,
            for one, ignores a version directory whose name is not a number.

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


def read_lines(path: PathLike, limit: int = 0) -> list[str]:
    """The lines of a UTF-8 text file, plain or gzip, without line ends.

    Lines are split as `tf.data.TextLineDataset` splits them
    (`translator.pipelines.corpus.iter_lines`).

    Args:
        path: The file.
        limit: Read at most this many lines; 0 reads all.

    Raises:
        translator.pipelines.errors.CorpusError: a missing or unreadable file, or the
            line number of the first line that is not valid UTF-8.
    """
    from translator.pipelines.corpus import iter_lines

    lines = []
    for line in iter_lines(path):
        if limit and len(lines) >= limit:
            break
        lines.append(line)
    return lines
