"""Dataset fetching: mirror path, checksum failure, HTTP path, atomic writes."""

import functools
import gzip
import hashlib
import http.server
import threading

import pytest

from translator.io import sha256_file
from translator.pipelines.download import (
    ENV_MIRROR,
    MULTI30K,
    DatasetSpec,
    RemoteFile,
    fetch_dataset,
)
from translator.pipelines.errors import DownloadError


@pytest.fixture
def fixture_mirror(tmp_path):
    """A small mirror directory and the spec of its two files."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    files = []
    for name, text in (("a.en.gz", "A dog.\nA cat.\n"), ("a.de.gz", "Ein Hund.\nEine Katze.\n")):
        data = gzip.compress(text.encode(), mtime=0)
        (mirror / name).write_bytes(data)
        files.append(RemoteFile(name, hashlib.sha256(data).hexdigest()))
    spec = DatasetSpec(name="tiny", base_url="http://127.0.0.1:9/unused/", files=tuple(files))
    return mirror, spec


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_mirror_copies_verifies_and_skips_present_files(fixture_mirror, tmp_path):
    mirror, spec = fixture_mirror
    dest = tmp_path / "dest"
    lines = []
    results = fetch_dataset(spec, dest, mirror=mirror, log=lines.append)
    assert [r.status for r in results] == ["copied", "copied"]
    for remote, result in zip(spec.files, results, strict=True):
        assert result.path == dest / remote.name
        assert result.path.read_bytes() == (mirror / remote.name).read_bytes()
        assert sha256_file(result.path) == remote.sha256
    assert len(lines) == 2 and "sha256 ok" in lines[0]
    # Second run: nothing copied again.
    assert [r.status for r in fetch_dataset(spec, dest, mirror=mirror)] == ["present", "present"]
    # A damaged local file is replaced by a verified copy.
    (dest / "a.de.gz").write_bytes(b"damaged")
    assert [r.status for r in fetch_dataset(spec, dest, mirror=mirror)] == ["present", "copied"]
    assert sha256_file(dest / "a.de.gz") == spec.files[1].sha256
    assert leftovers(dest) == []


def test_checksum_mismatch_names_the_file_and_writes_nothing(fixture_mirror, tmp_path):
    mirror, spec = fixture_mirror
    (mirror / "a.de.gz").write_bytes(gzip.compress(b"Ein anderer Hund.\n"))
    dest = tmp_path / "dest"
    with pytest.raises(DownloadError) as info:
        fetch_dataset(spec, dest, mirror=mirror)
    message = str(info.value)
    assert "a.de.gz" in message and "sha256 mismatch" in message and spec.files[1].sha256 in message
    assert (dest / "a.en.gz").is_file()  # the good file before it stays
    assert not (dest / "a.de.gz").exists() and leftovers(dest) == []  # no partial file


def test_missing_mirror_file_and_directory(fixture_mirror, tmp_path):
    mirror, spec = fixture_mirror
    (mirror / "a.de.gz").unlink()
    with pytest.raises(DownloadError, match=r"a\.de\.gz: missing from the mirror directory"):
        fetch_dataset(spec, tmp_path / "dest", mirror=mirror)
    with pytest.raises(DownloadError, match="does not exist"):
        fetch_dataset(spec, tmp_path / "dest", mirror=tmp_path / "nowhere")


def test_environment_mirror_and_dataset_subdirectory(fixture_mirror, tmp_path, monkeypatch):
    mirror, spec = fixture_mirror
    parent = tmp_path / "all-data"
    parent.mkdir()
    mirror.rename(parent / "tiny")  # files in <mirror>/<dataset>/
    monkeypatch.setenv(ENV_MIRROR, str(parent))
    results = fetch_dataset(spec, tmp_path / "dest")
    assert [r.status for r in results] == ["copied", "copied"]
    assert results[0].origin == str(parent / "tiny" / "a.en.gz")


@pytest.fixture
def http_server(fixture_mirror):
    mirror, spec = fixture_mirror

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(mirror))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", spec
    server.shutdown()
    server.server_close()


def test_network_download_is_verified(http_server, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_MIRROR, raising=False)
    url, spec = http_server
    spec = DatasetSpec(name=spec.name, base_url=url, files=spec.files)
    results = fetch_dataset(spec, tmp_path / "dest", progress=True)
    assert [r.status for r in results] == ["downloaded", "downloaded"]
    assert results[0].origin == url + "a.en.gz"
    assert all(sha256_file(r.path) == f.sha256 for r, f in zip(results, spec.files, strict=True))
    missing = DatasetSpec(name="tiny", base_url=url, files=(RemoteFile("nope.gz", "0" * 64),))
    with pytest.raises(DownloadError, match=r"nope\.gz: HTTP 404.*--mirror"):
        fetch_dataset(missing, tmp_path / "dest")
    assert leftovers(tmp_path / "dest") == []


def test_network_failure_suggests_a_mirror(fixture_mirror, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_MIRROR, raising=False)
    _, spec = fixture_mirror  # base_url points at a closed port
    with pytest.raises(
        DownloadError, match=rf"a\.en\.gz: cannot download .*--mirror DIR.*{ENV_MIRROR}"
    ):
        fetch_dataset(spec, tmp_path / "dest", timeout=5)


def test_multi30k_from_the_shared_mirror(multi30k_dir, tmp_path):
    results = fetch_dataset("multi30k", tmp_path / "m30k", mirror=multi30k_dir)
    assert [r.path.name for r in results] == [f.name for f in MULTI30K.files]
    assert {r.status for r in results} == {"copied"}
    # The sha256 values in the code are those of the files (and of the mirror's README).
    readme = multi30k_dir / "README.md"
    for remote in MULTI30K.files:
        assert sha256_file(tmp_path / "m30k" / remote.name) == remote.sha256
        if readme.is_file():
            assert f"{remote.sha256}  {remote.name}" in readme.read_text()
    with pytest.raises(DownloadError, match="unknown dataset"):
        fetch_dataset("wmt99", tmp_path)
