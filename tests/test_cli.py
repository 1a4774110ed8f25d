"""The `translator` command as a user runs it (a real subprocess)."""

import os
import subprocess
import sys

import translator
from tests.support.cli import translator as as_a_user


def run(*args, timeout=120):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, "-m", "translator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_help_lists_subcommands_and_version():
    result = run("--help")
    assert result.returncode == 0
    assert "model-summary" in result.stdout
    version = run("--version")
    assert version.returncode == 0 and translator.__version__ in version.stdout


def test_help_does_not_import_tensorflow():
    code = (
        "import sys; from translator.cli import build_parser; build_parser(); "
        "print('tensorflow' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def test_model_summary_prints_parameter_count_and_shape():
    result = run("model-summary", "--preset", "tiny", "--vocab-size", "100", "--length", "5")
    assert result.returncode == 0, result.stderr
    assert "total" in result.stdout and "174,080" in result.stdout
    assert "logits (2, 5, 100)" in result.stdout


def test_bad_preset_is_a_clean_error():
    result = run("model-summary", "--preset", "huge")
    assert result.returncode == 2
    assert "Unknown preset 'huge'" in result.stderr
    assert "Traceback" not in result.stderr


def test_search_options_reach_the_search_config():
    """translate, evaluate and export: --top-beam-stop is the non-exact stop."""
    from translator.cli import build_parser
    from translator.commands import export
    from translator.commands.options import search_config

    parser = build_parser()
    for command in ("translate", "evaluate"):
        extra = ["--src", "s", "--ref", "r"] if command == "evaluate" else []
        default = search_config(parser.parse_args([command, "--model", "m", *extra]))
        assert default.exact_stop and default.beam_size == 4 and default.length_penalty == 0.6
        args = [command, "--model", "m", *extra, "--top-beam-stop", "--length-penalty", "1"]
        changed = search_config(parser.parse_args(args))
        assert not changed.exact_stop and changed.length_penalty == 1.0

    from translator.commands.options import inference_options

    batching = ["translate", "--model", "m", "--parallel-batches", "3", "--batch-tokens", "99"]
    options = inference_options(parser.parse_args(batching))
    assert (options.parallel_batches, options.batch_tokens) == (3, 99)

    export_args = ["export", "--model", "m", "--out", "e", "--beam-size", "5"]
    default, sampling = export.export_search_config(parser.parse_args(export_args))
    assert default.exact_stop and default.beam_size == default.n_best == 5 and sampling is None
    changed, _ = export.export_search_config(parser.parse_args([*export_args, "--top-beam-stop"]))
    assert not changed.exact_stop
    # --sampling adds the sample signature's draws; the beam signatures keep the search.
    drawn = [*export_args, "--sampling", "topp:0.9", "--num-samples", "3", "--seed", "2"]
    search, sampling = export.export_search_config(parser.parse_args(drawn))
    assert not search.sampled and search.n_best == 5
    assert (sampling.sampling, sampling.num_samples, sampling.seed) == ("topp:0.9", 3, 2)


def test_a_model_directory_that_is_not_one_is_one_error_line(tmp_path):
    result = as_a_user("translate", "--model", tmp_path, input="hello\n", timeout=120)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"translator translate: error: {tmp_path}"), line
    missing = as_a_user("data", "check", "--src", tmp_path / "no.en", "--tgt", tmp_path / "no.de")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "no.en" in missing.stderr


def test_export_loads_no_ctranslate2_code_until_asked():
    """`translator export` (and `--help`) start without CTranslate2's package or ours."""
    code = (
        "import sys; from translator.cli import build_parser; "
        "build_parser().parse_args(['export', '--model', 'm', '--out', 'o']); "
        "print(sorted(m for m in sys.modules if 'ctranslate2' in m or m == 'tensorflow'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
