"""What a user sees on stderr: the command's own lines, none of its libraries' start-up noise.

Each command runs as a user runs it: a fresh process, no TF_CPP_* setting in its
environment. `-v` shows the libraries' logs again.
"""

import functools

from tests.support import cli
from tests.support.cli import NOISE

# As a user runs it, up to 10 minutes a command.
translator = functools.partial(cli.translator, timeout=600)


def test_translate_prints_only_its_summary_and_v_shows_the_rest(model_dir):
    result = translator("translate", "--model", model_dir, input="ba ce di\n\nfo gu\n")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    assert not NOISE.search(result.stderr), result.stderr
    # The command's own lines: its summary, after one warning (the model does not state
    # its source language, so generic rules find the sentences).
    lines = result.stderr.splitlines()
    assert [line.startswith("translated") for line in lines] == [False, True], result.stderr
    assert "the source language is not known" in lines[0]
    verbose = translator("translate", "--model", model_dir, "-v", input="ba ce di\n")
    assert verbose.returncode == 0 and NOISE.search(verbose.stderr), verbose.stderr


def test_export_prints_only_where_the_export_went(model_dir, tmp_path):
    result = translator("export", "--model", model_dir, "--out", tmp_path / "export")
    assert result.returncode == 0, result.stderr
    assert not NOISE.search(result.stderr) and "Assets written" not in result.stderr, result.stderr
    assert (tmp_path / "export" / "1" / "saved_model.pb").is_file()
