"""bench/results.py (the shared RESULTS.md writer) and a smoke run of bench/pipeline.py."""

import pytest

from bench.results import machine_summary, read_section, update_section


def test_update_section_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "RESULTS.md"
    update_section("pipeline", "## Pipeline\n\n100 tok/s", path)
    update_section("training", "## Training\n\n5 steps/s", path)
    text = path.read_text()
    assert text.startswith("# Benchmark results")
    assert text.index("## Pipeline") < text.index("## Training")
    path.write_text(text + "\nA note by hand.\n")
    update_section("pipeline", "## Pipeline\n\n200 tok/s", path)
    text = path.read_text()
    assert "200 tok/s" in text and "100 tok/s" not in text and text.count("## Pipeline") == 1
    assert "5 steps/s" in text and "A note by hand." in text
    assert text.index("## Pipeline") < text.index("## Training")  # stays in place
    assert read_section("training", path) == "## Training\n\n5 steps/s"
    assert read_section("serving", path) is None
    with pytest.raises(ValueError):
        update_section("bad name", "x", path)


def test_machine_summary_names_cores_cpu_and_tensorflow():
    summary = machine_summary()
    assert "cores" in summary and "TensorFlow" in summary


@pytest.mark.slow
def test_pipeline_benchmark_short_run(multi30k_dir, vocab_dir, capsys):
    from bench.pipeline import main

    assert (
        main(["--short", "--no-write", "--data", str(multi30k_dir), "--vocab", str(vocab_dir)]) == 0
    )
    out = capsys.readouterr().out
    assert "steady state (epochs 2-2)" in out and "target tok/s" in out
