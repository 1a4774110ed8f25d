"""Parallel corpus reading: line semantics equal to TextLineDataset, clear errors."""

import gzip

import pytest

from translator.io import count_lines, is_gzip, iter_lines
from translator.pipelines.corpus import ParallelCorpus, text_line_dataset
from translator.pipelines.errors import CorpusError

TRICKY = [
    b"",
    b"a",
    b"a\n",
    b"a\n\n",
    b"\n",
    b"\r\n",
    b"one\r\ntwo\r\n",
    b"c\rd\nlast line without newline",
    "Grüße, 𝄞 ☃\n  spaced  \n\tTab\n".encode(),
]


def write(path, data):
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("data", TRICKY)
def test_python_reader_sees_the_lines_text_line_dataset_sees(tmp_path, data, suffix):
    path = write(tmp_path / f"f{suffix}", data)
    assert is_gzip(path) == (suffix == ".gz")
    graph = [line.decode("utf-8") for line in text_line_dataset(path).as_numpy_iterator()]
    assert list(iter_lines(path)) == graph
    assert count_lines(path) == len(graph)


def test_gzip_is_detected_by_content_not_name(tmp_path):
    path = tmp_path / "looks_plain.txt"
    path.write_bytes(gzip.compress(b"x\ny\n"))
    assert list(iter_lines(path)) == ["x", "y"]
    plain = write(tmp_path / "named.gz", b"p\n")  # no gzip magic despite the name
    plain.write_bytes(b"p\n")
    assert list(iter_lines(plain)) == ["p"]


def test_parallel_iteration_and_validate(tmp_path):
    source = write(tmp_path / "s.gz", b"a\nb\nc\n")
    target = write(tmp_path / "t", b"A\nB\nC")
    corpus = ParallelCorpus(source, target)
    assert corpus.validate() == 3
    assert list(corpus) == [("a", "A"), ("b", "B"), ("c", "C")]
    assert list(corpus.text_dataset().as_numpy_iterator()) == [
        (b"a", b"A"),
        (b"b", b"B"),
        (b"c", b"C"),
    ]


@pytest.mark.parametrize("longer", ["source", "target"])
def test_line_count_mismatch_names_both_files_and_counts(tmp_path, longer):
    many = write(tmp_path / "many.gz", b"1\n2\n3\n4\n5\n")
    few = write(tmp_path / "few", b"1\n2\n3\n")
    source, target = (many, few) if longer == "source" else (few, many)
    corpus = ParallelCorpus(source, target)
    counts = {"source": 5, "target": 3} if longer == "source" else {"source": 3, "target": 5}
    expected = f"{source} has {counts['source']:,} lines, {target} has {counts['target']:,}"
    with pytest.raises(CorpusError, match="different line counts") as info:
        corpus.validate()
    assert expected in str(info.value)
    with pytest.raises(CorpusError) as info:
        list(corpus)  # streaming iteration reports the same, with full counts
    assert expected in str(info.value)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_invalid_utf8_names_file_and_line(tmp_path, suffix):
    lines = [f"line {i} ü".encode() for i in range(1, 150_001)]  # ~2 MB: several blocks
    lines[123_456] = b"broken \xc3( here"  # line 123,457
    path = write(tmp_path / f"latin{suffix}", b"\n".join(lines) + b"\n")
    for check in (count_lines, lambda p: sum(1 for _ in iter_lines(p))):
        with pytest.raises(CorpusError) as info:
            check(path)
        message = str(info.value)
        assert str(path) in message and "line 123457" in message and "UTF-8" in message


def test_invalid_utf8_on_last_line_without_newline(tmp_path):
    path = write(tmp_path / "f", b"ok\nbad \xff")
    with pytest.raises(CorpusError, match=r"line 2: not valid UTF-8"):
        count_lines(path)


def test_multibyte_characters_across_read_blocks_are_valid(tmp_path):
    # 2-, 3- and 4-byte characters in long lines: block boundaries fall inside characters.
    line = ("ü€𝄞" * 1000).encode()
    path = write(tmp_path / "wide", b"\n".join([line] * 300))
    assert count_lines(path) == 300


def test_missing_and_broken_files_are_named(tmp_path):
    missing = tmp_path / "nope.en"
    with pytest.raises(CorpusError, match=r"nope\.en"):
        count_lines(missing)
    with pytest.raises(CorpusError, match=r"nope\.en"):
        ParallelCorpus(missing, missing).validate()
    truncated = tmp_path / "cut.gz"
    data = gzip.compress("".join(f"line {i}\n" for i in range(10_000)).encode())
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusError, match=r"cut\.gz"):
        count_lines(truncated)
    with pytest.raises(CorpusError, match=r"cut\.gz"):
        list(iter_lines(truncated))
