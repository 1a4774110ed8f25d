import gzip
import os

import pytest

from translator.io import atomic_directory, atomic_file, read_lines, sha256_file, write_atomic


def test_atomic_file_replaces_only_on_success(tmp_path):
    path = tmp_path / "out.txt"
    write_atomic(path, "old\n")
    with pytest.raises(RuntimeError), atomic_file(path) as sink:
        sink.write(b"half of the new")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]  # no temporary left
    write_atomic(path, "new ü\n")
    assert path.read_text("utf-8") == "new ü\n"
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600


def test_compressed_output_is_reproducible(tmp_path):
    digests = []
    for name in ("a.gz", "b.gz"):
        with atomic_file(tmp_path / name, compress=True) as sink:
            sink.write(b"line one\nline two\n")
        digests.append(sha256_file(tmp_path / name))
    assert gzip.decompress((tmp_path / "a.gz").read_bytes()) == b"line one\nline two\n"
    assert digests[0] == digests[1]
    assert read_lines(tmp_path / "a.gz") == ["line one", "line two"]
    assert read_lines(tmp_path / "a.gz", limit=1) == ["line one"]


def test_atomic_directory_replaces_a_whole_directory_or_nothing(tmp_path):
    target = tmp_path / "model"
    with atomic_directory(target) as staging:
        (staging / "weights").write_text("1")
    with pytest.raises(KeyboardInterrupt), atomic_directory(target) as staging:
        (staging / "weights").write_text("2")
        raise KeyboardInterrupt
    assert (target / "weights").read_text() == "1"
    with atomic_directory(target) as staging:
        (staging / "other").write_text("3")
    assert sorted(os.listdir(target)) == ["other"]
    assert os.listdir(tmp_path) == ["model"]


TRICKY = b"a\r\nb\n\nc\xc3\xa9\rd\ne"


def test_files_and_streams_read_alike(tmp_path):
    """One reader: a file (plain or gzip) and a stream (stdin) give the same lines."""
    import io

    from translator.io import iter_lines, stream_lines

    plain, packed = tmp_path / "plain.txt", tmp_path / "packed.txt.gz"
    plain.write_bytes(TRICKY)
    packed.write_bytes(gzip.compress(TRICKY))
    want = ["a", "b", "", "cé" + "d", "e"]
    assert list(iter_lines(plain)) == list(iter_lines(packed)) == want
    assert list(stream_lines(io.BytesIO(TRICKY), "<stdin>")) == want


def test_a_stream_that_is_not_utf8_names_itself_and_the_line():
    import io

    from translator.errors import CorpusError
    from translator.io import stream_lines

    with pytest.raises(CorpusError, match=r"<stdin>, line 2: not valid UTF-8 \(byte 0xff"):
        list(stream_lines(io.BytesIO(b"ok\nbad \xff\n"), "<stdin>"))
