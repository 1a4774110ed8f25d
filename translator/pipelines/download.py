"""Fetching datasets: from the network or a local mirror, sha256-verified, written atomically.

`fetch_dataset` keeps a file already there with the right sha256, else copies it from a
mirror directory (for machines without internet), else downloads it; bytes are checked
before the rename into place.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

from translator.io import atomic_file, sha256_file
from translator.pipelines.errors import DownloadError

ENV_MIRROR = "TRANSLATOR_DATA_MIRROR"
_CHUNK = 1 << 16

Status = Literal["present", "copied", "downloaded"]


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset."""

    # File name, both under the base URL and in the destination.
    name: str
    # Expected hex sha256 of its bytes.
    sha256: str


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A dataset that `fetch_dataset` can fetch."""

    # Short name: the `translator data <name>` command and the mirror subdirectory.
    name: str
    # URL the file names are appended to (ends with "/").
    base_url: str
    # Every file of the dataset.
    files: tuple[RemoteFile, ...]
    # One line for `--help`.
    description: str = ""


# Multi30k task 1 (WMT16 multimodal translation), raw: 29,000 / 1,014 / 1,000 pairs.
MULTI30K = DatasetSpec(
    name="multi30k",
    base_url="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/",
    files=(
        RemoteFile(
            "train.en.gz", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"
        ),
        RemoteFile(
            "train.de.gz", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"
        ),
        RemoteFile("val.en.gz", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
        RemoteFile("val.de.gz", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
        RemoteFile(
            "test_2016_flickr.en.gz",
            "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
        ),
        RemoteFile(
            "test_2016_flickr.de.gz",
            "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
        ),
    ),
    description=(
        "Multi30k task 1, English-German image descriptions: train (29,000 pairs), "
        "val (1,014), test_2016_flickr (1,000)"
    ),
)

DATASETS: dict[str, DatasetSpec] = {MULTI30K.name: MULTI30K}


@dataclasses.dataclass(frozen=True)
class FetchResult:
    """What `fetch_dataset` did with one file."""

    # The verified file in the destination directory.
    path: Path
    # "present" (already there, verified), "copied" (from the mirror) or "downloaded".
    status: Status
    # Where the bytes came from (mirror path or URL; the path itself when present).
    origin: str


def resolve_mirror(mirror: str | os.PathLike[str] | None, dataset: str) -> Path | None:
    """The directory to copy `dataset`'s files from, or None to use the network.

    Args:
        mirror: Explicit mirror directory; when None, `$TRANSLATOR_DATA_MIRROR` if set.
        dataset: Dataset name: `<mirror>/<dataset>/` is used when it exists, else `<mirror>`.

    Raises:
        DownloadError: the mirror directory does not exist.
    """
    source = "--mirror"
    if mirror is None:
        mirror = os.environ.get(ENV_MIRROR) or None
        source = f"${ENV_MIRROR}"
    if mirror is None:
        return None
    root = Path(mirror).expanduser()
    if not root.is_dir():
        raise DownloadError(f"mirror directory {root} (from {source}) does not exist")
    return root / dataset if (root / dataset).is_dir() else root


def fetch_dataset(
    dataset: str | DatasetSpec,
    dest: str | os.PathLike[str],
    *,
    mirror: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    timeout: float = 60.0,
    log: Callable[[str], None] | None = None,
) -> list[FetchResult]:
    """Puts every file of a dataset into `dest`, verified against its sha256.

    Args:
        dataset: A name from `DATASETS` or a `DatasetSpec`.
        dest: Destination directory (created if needed).
        mirror: Local directory with byte-identical files; None: `$TRANSLATOR_DATA_MIRROR`
            if set, else the network.
        progress: Show a tqdm progress bar for downloads; None: only when stderr is a
            terminal.
        timeout: Seconds to wait for the server before giving up.
        log: Called with one line per file (e.g. `print`); None: silent.

    Returns:
        One `FetchResult` per file, in the spec's order.

    Raises:
        DownloadError: naming the file: missing from the mirror, sha256 mismatch (the
            file is not written), or a network failure (suggesting a mirror).
    """
    spec = DATASETS.get(dataset) if isinstance(dataset, str) else dataset
    if spec is None:
        raise DownloadError(f"unknown dataset {dataset!r}; known: {', '.join(sorted(DATASETS))}")
    if progress is None:
        progress = sys.stderr.isatty()
    root = resolve_mirror(mirror, spec.name)
    out = Path(dest).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    fetch = functools.partial(
        _fetch_file, out=out, root=root, base_url=spec.base_url, progress=progress, timeout=timeout
    )
    results = []
    for remote in spec.files:
        result, line = fetch(remote)
        results.append(result)
        if log:
            log(line)
    return results


def _fetch_file(
    remote: RemoteFile,
    *,
    out: Path,
    root: Path | None,
    base_url: str,
    progress: bool,
    timeout: float,
) -> tuple[FetchResult, str]:
    """One file into `out`: kept if its sha256 is right, else copied or downloaded.

    Returns:
        The result and the line that says what happened.
    """
    target = out / remote.name
    again = ""
    if target.is_file():
        if sha256_file(target) == remote.sha256:
            return FetchResult(target, "present", str(target)), (
                f"{remote.name}: already present, sha256 ok"
            )
        again = f"{remote.name}: present but its sha256 differs; fetching it again\n"
    if root is not None:
        origin = root / remote.name
        if not origin.is_file():
            raise DownloadError(
                f"{remote.name}: missing from the mirror directory {root} (expected {origin})"
            )
        with open(origin, "rb") as source:
            _write_verified(target, remote, source, str(origin))
        line = f"{again}{remote.name}: copied from {origin}, sha256 ok"
        return FetchResult(target, "copied", str(origin)), line
    url = base_url + remote.name
    _download(url, target, remote, progress=progress, timeout=timeout)
    line = f"{again}{remote.name}: downloaded from {url}, sha256 ok"
    return FetchResult(target, "downloaded", url), line


def _download(
    url: str, target: Path, remote: RemoteFile, *, progress: bool, timeout: float
) -> None:
    hint = (
        f"; without internet access, copy the files from a machine that has it and pass "
        f"--mirror DIR (or set {ENV_MIRROR}=DIR)"
    )
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=total, unit="B", unit_scale=True, desc=remote.name, leave=False)
            try:
                _write_verified(target, remote, response, url, on_chunk=bar.update if bar else None)
            finally:
                if bar is not None:
                    bar.close()
    except urllib.error.HTTPError as error:
        raise DownloadError(
            f"{remote.name}: HTTP {error.code} {error.reason} from {url}{hint}"
        ) from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        raise DownloadError(f"{remote.name}: cannot download {url}: {reason}{hint}") from error


def _write_verified(
    target: Path,
    remote: RemoteFile,
    source: IO[bytes],
    origin: str,
    on_chunk: Callable[[int], object] | None = None,
) -> None:
    """Streams `source` into a temp file next to `target`; renames it if the sha256 matches."""
    digest = hashlib.sha256()
    with atomic_file(target, sync=True) as file:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            file.write(chunk)
            if on_chunk:
                on_chunk(len(chunk))
        if digest.hexdigest() != remote.sha256:
            raise DownloadError(
                f"{remote.name}: sha256 mismatch for {origin}: expected {remote.sha256}, got "
                f"{digest.hexdigest()}; the file was not written (corrupt or different version)"
            )


__all__ = [
    "DATASETS",
    "ENV_MIRROR",
    "MULTI30K",
    "DatasetSpec",
    "FetchResult",
    "RemoteFile",
    "fetch_dataset",
    "resolve_mirror",
]
