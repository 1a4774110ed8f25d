"""`translator data` and `translator build-vocab`, run through the real command line parser."""

import gzip
import json

import pytest

from translator.cli import main


def test_data_multi30k_from_mirror(multi30k_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRANSLATOR_DATA_MIRROR", raising=False)
    dest = tmp_path / "m30k"
    assert main(["data", "multi30k", "--dest", str(dest), "--mirror", str(multi30k_dir)]) == 0
    out = capsys.readouterr().out
    assert "6 files verified" in out and "translator build-vocab" in out
    assert (dest / "train.en.gz").read_bytes() == (multi30k_dir / "train.en.gz").read_bytes()
    assert main(["data", "multi30k", "--dest", str(dest), "--mirror", str(multi30k_dir)]) == 0
    assert "already present" in capsys.readouterr().out


def test_data_multi30k_checksum_failure_is_a_clean_error(tmp_path, capsys):
    mirror = tmp_path / "bad-mirror"
    mirror.mkdir()
    (mirror / "train.en.gz").write_bytes(gzip.compress(b"not the real file\n"))
    assert main(["data", "multi30k", "--dest", str(tmp_path / "d"), "--mirror", str(mirror)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("translator data: error: train.en.gz: sha256 mismatch")
    assert "Traceback" not in err


def test_build_vocab_and_check(subset_files, tmp_path, capsys):
    source, target = subset_files
    out = tmp_path / "vocab"
    argv = ["build-vocab", "--src", str(source), "--tgt", str(target), "--vocab-size", "500"]
    assert main([*argv, "--out", str(out), "--model-type", "bpe", "--separate"]) == 0
    assert "source.model" in capsys.readouterr().out
    meta = json.loads((out / "vocab.json").read_text())
    assert meta["joint"] is False and meta["model_type"] == "bpe" and meta["vocab_size"] == 500
    assert main([*argv, "--out", str(out)]) == 2  # refuses to overwrite
    assert "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--out", str(out), "--overwrite", "--model-type", "bpe"]) == 0
    capsys.readouterr()

    assert (
        main(["data", "check", "--src", str(source), "--tgt", str(target), "--vocab", str(out)])
        == 0
    )
    assert "3,000 pairs, 3,000 kept" in capsys.readouterr().out
    assert main(["data", "check", "--src", str(source), "--tgt", str(source.parent / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


def test_build_vocab_reports_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\n")
    code = main(
        [
            "build-vocab",
            "--src",
            str(bad),
            "--tgt",
            str(bad),
            "--vocab-size",
            "300",
            "--out",
            str(tmp_path / "v"),
        ]
    )
    assert code == 2
    assert "bad.txt, line 2: not valid UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command", [["data"], ["data", "multi30k"], ["data", "check"], ["build-vocab"]]
)
def test_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    assert "usage: translator" in capsys.readouterr().out
