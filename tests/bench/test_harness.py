"""bench/harness.py (data, options, timing, templates, RESULTS.md) and a short pipeline run."""

import pytest

from bench import harness


def test_update_section_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "RESULTS.md"
    harness.update_section("pipeline", "## Pipeline\n\n100 tok/s", path)
    harness.update_section("training", "## Training\n\n5 steps/s", path)
    text = path.read_text()
    assert text.startswith("# Benchmark results")
    assert text.index("## Pipeline") < text.index("## Training")
    path.write_text(text + "\nA note by hand.\n")
    harness.update_section("pipeline", "## Pipeline\n\n200 tok/s", path)
    text = path.read_text()
    assert "200 tok/s" in text and "100 tok/s" not in text and text.count("## Pipeline") == 1
    assert "5 steps/s" in text and "A note by hand." in text
    assert text.index("## Pipeline") < text.index("## Training")  # stays in place
    assert harness.read_section("training", path) == "## Training\n\n5 steps/s"
    assert harness.read_section("serving", path) is None
    with pytest.raises(ValueError):
        harness.update_section("bad name", "x", path)


def test_machine_summary_names_cores_cpu_and_tensorflow():
    summary = harness.machine_summary()
    assert "cores" in summary and "TensorFlow" in summary


def test_targets_are_printed_and_parsed_back(capsys):
    assert harness.report_target("a", 3.0, 2.0, "x")
    assert not harness.report_target("b", 3.0, 2.0, "s", higher_is_better=False)
    (a, b) = harness.parse_targets("noise\n" + capsys.readouterr().out)
    assert a == {"name": "a", "measured": 3.0, "goal": 2.0, "unit": "x", "met": True,
                 "higher_is_better": True}  # fmt: skip
    assert b["met"] is False and b["higher_is_better"] is False


def test_options_take_the_defaults_of_a_full_or_a_short_run():
    parser = harness.make_parser("x", "Does x.\n\nMore.")
    parser.add_argument("--rounds", type=int)
    args = harness.parse(parser, [], rounds=(2, 1))
    assert args.rounds == 2 and args.write and args.results == harness.RESULTS_PATH
    args = harness.parse(parser, ["--short"], rounds=(2, 1))
    assert args.rounds == 1 and not args.write
    args = harness.parse(parser, ["--short", "--rounds", "5", "--write"], rounds=(2, 1))
    assert args.rounds == 5 and args.write


def test_best_of_warms_up_and_keeps_the_fastest_call():
    calls = []
    seconds, result = harness.best_of(lambda: calls.append(len(calls)) or len(calls), 3)
    assert len(calls) == 4 and result in (2, 3, 4) and seconds >= 0


def test_find_data_looks_in_the_mirror_and_its_multi30k(tmp_path, monkeypatch):
    (tmp_path / "multi30k").mkdir()
    for name in harness.TRAIN:
        (tmp_path / "multi30k" / name).write_bytes(b"")
    monkeypatch.setenv("TRANSLATOR_DATA_MIRROR", str(tmp_path))
    assert harness.find_data(None) == tmp_path / "multi30k"
    with pytest.raises(SystemExit, match="pass --data DIR"):
        harness.find_data(str(tmp_path))


def test_template_parts_and_fields(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "TEMPLATES", tmp_path)
    (tmp_path / "x.md").write_text(
        "head\n<!-- part: a -->\n{n:,} {o.real}\n\n<!-- part: b -->\nB\n"
    )
    template = harness.Template("x")
    assert template.parts == {"a": "{n:,} {o.real}", "b": "B"}
    assert template("a", n=1234, o=2.5) == "1,234 2.5"


@pytest.mark.slow
def test_pipeline_benchmark_short_run(multi30k, capsys):
    from bench.pipeline import main

    assert main(["--short", "--data", str(multi30k)]) == 0
    out = capsys.readouterr().out
    assert "steady state (epochs 2-2)" in out and "target tok/s" in out
    (target,) = harness.parse_targets(out)
    assert target["name"] == "pipeline target tokens/s over the training goal"
