"""The Python API (`translator.load`) in a fresh process, against the commands it stands for.

What a notebook does, two lines after `import translator`, must give what `translator
translate` and `translator score-pairs` print for the same model and settings; and
`import translator` alone must not start TensorFlow.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from tests.support.corpora import synthetic_sentences
from tests.support.paths import REPO
from translator.cli import main as cli_main
from translator.io import one_line

# Ordinary sentences, an empty one, and characters the vocabulary has never seen.
LINES = [*synthetic_sentences(6, seed=41, max_words=6), "", "Zoë's café ✓"]
# A paragraph of three sentences.
PARAGRAPH = " ".join(line.rstrip(".,!") + "." for line in LINES[:3])
# An HTML snippet: a paragraph with inline markup and code, a list.
_WORDS = LINES[3].split()
PAGE = (
    f"<p>{_WORDS[0]} <b>{' '.join(_WORDS[1:])}</b> <code>x &lt; 1</code>.</p>\n"
    f'<ul><li><a href="/a?b=1&amp;c=2">{LINES[4]}</a></li></ul>\n'
)

NOTEBOOK = textwrap.dedent(
    """
    import json, sys
    import translator
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "jax"))
    assert not heavy, heavy
    lines, targets = json.loads(sys.argv[2]), json.loads(sys.argv[3])

    model = translator.load(sys.argv[1])
    print(json.dumps({
        "best": model.translate(lines),
        "one": model.translate(lines[0]),
        "greedy": model.translate(lines, beam_size=1),
        "n_best": model.translate(lines, n_best=3),
        "de": model.translate(lines, target_lang="de"),
        "scores": model.score(lines, targets),
        "repr": repr(model),
        "paragraph": model.translate(sys.argv[4]),
        "whole": translator.load(sys.argv[1], split=False).translate(sys.argv[4]),
        "aligned": model.translate([sys.argv[4], lines[0]], alignments=True),
        "aligned_one": model.translate(lines[0], alignments=True).alignment,
        "html": model.translate_html(sys.argv[5]),
    }))
    """
)


def run_cli(capsys, *args) -> list[str]:
    """The lines the command printed (split at newlines only: a random model's
    translations may hold form feeds and other characters `splitlines` splits at)."""
    assert cli_main(list(map(str, args))) == 0, capsys.readouterr().err
    return capsys.readouterr().out.split("\n")[:-1]


@pytest.fixture(scope="module")
def notebook(exported):
    targets = [f"Ba {i}" for i in range(len(LINES))]
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            NOTEBOOK,
            str(exported.model_dir),
            *map(json.dumps, [LINES, targets]),
            PARAGRAPH,
            PAGE,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1]), targets


def test_load_then_translate_gives_what_translate_prints(notebook, exported, tmp_path, capsys):
    got, _ = notebook
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES), "utf-8")
    translate = ["translate", "--model", exported.model_dir, "-i", source, "--quiet"]
    for key, options in (("best", []), ("greedy", ["--beam-size", "1"])):
        printed = run_cli(capsys, *translate, *options)
        assert [one_line(text) for text in got[key]] == printed, key
    assert got["one"] == got["best"][0]
    assert got["best"][LINES.index("")] == ""
    printed = run_cli(capsys, *translate, "--target-lang", "de")
    assert [one_line(text) for text in got["de"]] == printed
    assert got["de"] != got["best"]  # the tag was given
    rows = [row.split(" ||| ") for row in run_cli(capsys, *translate, "--n-best", "3")]
    for index, hypotheses in enumerate(got["n_best"]):
        listed = [text for i, text, _ in rows[index * 3 : index * 3 + 3] if int(i) == index]
        assert [one_line(text) for text in hypotheses] == listed[: len(hypotheses)]
        assert len(hypotheses) == (0 if not LINES[index].strip() else 3)
    assert got["repr"] == f"translator.Model({str(exported.model_dir)!r}, engine='auto')"
    # A paragraph: split into its sentences as `translate` splits it, or whole with
    # split=False as with --no-split; the two differ.
    source.write_text(PARAGRAPH + "\n", "utf-8")
    assert [one_line(got["paragraph"])] == run_cli(capsys, *translate)
    assert [one_line(got["whole"])] == run_cli(capsys, *translate, "--no-split")
    assert got["paragraph"] != got["whole"]
    # Alignments: each text and its pairs, as `translate --alignments` prints them.
    source.write_text(PARAGRAPH + "\n" + LINES[0] + "\n", "utf-8")
    printed = run_cli(capsys, *translate, "--alignments")
    assert [f"{one_line(text)} ||| {pairs}" for text, pairs in got["aligned"]] == printed
    assert got["aligned"][0][0] == got["paragraph"] and got["aligned_one"] == got["aligned"][1][1]
    assert all(pairs for _, pairs in got["aligned"])
    # HTML: as `translate --format html` writes it; markup and code kept.
    source.write_text(PAGE, "utf-8")
    assert cli_main(list(map(str, [*translate, "--format", "html"]))) == 0
    assert got["html"] == capsys.readouterr().out
    for kept in ("<code>x &lt; 1</code>", '<a href="/a?b=1&amp;c=2">', "</b>", "<ul><li>"):
        assert kept in got["html"]
    assert got["html"] != PAGE  # translated


def test_score_gives_what_score_pairs_prints(notebook, exported, tmp_path, capsys):
    got, targets = notebook
    source, target = tmp_path / "src.txt", tmp_path / "tgt.txt"
    source.write_text("".join(line + "\n" for line in LINES), "utf-8")
    target.write_text("".join(line + "\n" for line in targets), "utf-8")
    printed = run_cli(
        capsys, "score-pairs", "--model", exported.model_dir, "--src", source, "--tgt", target
    )
    for score, line in zip(got["scores"], printed, strict=True):
        if score is None:
            assert line == ""
        else:
            assert f"{score:.4f}" == line.split("\t")[0]
    assert got["scores"][LINES.index("")] is None


def test_bad_settings_and_paths_are_one_clear_error(exported, tmp_path):
    import translator
    from translator.artifacts import ModelDirError
    from translator.errors import ConfigError

    with pytest.raises(ModelDirError, match=str(tmp_path)):
        translator.load(tmp_path)
    model = translator.load(exported.model_dir)
    with pytest.raises(ConfigError, match=r"unknown search setting\(s\) beam;"):
        model.translate(["a"], beam=2)
    with pytest.raises(ConfigError, match="beam_size"):
        model.translate(["a"], beam_size=0)
    with pytest.raises(ConfigError, match="tag or target_lang, not both"):
        model.translate(["a"], tag="<2de>", target_lang="de")
    with pytest.raises(ConfigError, match="2 sources for 1 targets"):
        model.score(["a", "b"], ["c"])


def test_a_keras_file_loads_in_a_fresh_process_after_the_import_the_readme_names(tmp_path):
    """README: `import translator.model` registers the layers; then Keras loads the file."""
    from tests.support.models import tiny_model

    model = tiny_model(20, seed=2)
    path = tmp_path / "x.keras"
    model.save(path)
    script = textwrap.dedent(
        """
        import sys
        import keras
        import numpy as np
        import translator.model  # registers the model's classes with Keras
        model = keras.saving.load_model(sys.argv[1])
        ids = np.array([[3, 4, 5, 2]], np.int32)
        print(float(np.asarray(model((ids, ids))).sum()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    import numpy as np

    ids = np.array([[3, 4, 5, 2]], np.int32)
    expected = float(np.asarray(model((ids, ids))).sum())
    assert float(result.stdout.splitlines()[-1]) == pytest.approx(expected, rel=1e-5)
