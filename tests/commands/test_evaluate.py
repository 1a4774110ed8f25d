"""`translator evaluate`: translates like `translate`, scores like the `sacrebleu` program."""

import contextlib
import gzip
import hashlib
import io
import json

import pytest

from tests.support.cli import METADATA
from tests.support.images import assert_png, markdown_images
from tests.support.scores import sacrebleu_paired, sacrebleu_scores
from translator.cli import main


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _references(sources, hypotheses):
    """References at varied distances from the model's output, so that every metric,
    lowercased BLEU included, has a non-trivial value (random weights translate badly)."""
    references = []
    for i, (source, hypothesis) in enumerate(zip(sources, hypotheses, strict=True)):
        words = hypothesis.split()
        kind = i % 4
        if kind == 0 or not words:
            references.append(hypothesis)
        elif kind == 1:
            references.append(" ".join(words[:-1]))
        elif kind == 2:
            references.append(" ".join(w.capitalize() for w in words))
        else:
            references.append(source)
    return references


@pytest.fixture(scope="module")
def evaluated(model_dir, lines, alone, tmp_path_factory):
    """One `evaluate` run with --hyp-out, --report and --compare; its files and outputs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SACREBLEU_SEED", raising=False)
        return _evaluate(model_dir, lines, alone, tmp_path_factory)


def _evaluate(model_dir, lines, alone, tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    sources = [*[line for line in lines if line.strip()][:18], "  "]  # one blank source
    expected = [alone.get(line, "") for line in sources]
    src, ref, base = root / "src.txt", root / "ref.txt.gz", root / "baseline.txt"
    src.write_text("".join(s + "\n" for s in sources))
    references = _references(sources, expected)
    ref.write_bytes(gzip.compress("".join(r + "\n" for r in references).encode(), mtime=0))
    baseline = [" ".join(reversed(h.split())) if i % 3 else h for i, h in enumerate(expected)]
    base.write_text("".join(b + "\n" for b in baseline))
    hyp, report = root / "hyp.txt", root / "report"
    args = ["--model", str(model_dir), "--src", str(src), "--ref", str(ref)]
    outputs = ["--hyp-out", str(hyp), "--report", str(report), "--compare", str(base)]
    with contextlib.redirect_stdout(io.StringIO()) as capture:
        code = main(["evaluate", *args, *outputs])
    assert code == 0
    return dict(
        stdout=capture.getvalue(),
        root=root,
        src=src,
        ref=ref,
        base=base,
        hyp=hyp,
        report=report,
        sources=sources,
        expected=expected,
        references=references,
    )


def test_evaluate_translates_scores_and_reports(evaluated, model_dir):
    files = evaluated
    # The translations are those of `translate` (each line alone), blank line included.
    assert files["hyp"].read_text().splitlines() == files["expected"]
    report = json.loads((files["report"] / "report.json").read_text())

    # Every score and signature is the sacrebleu program's on the same files.
    reference = sacrebleu_scores(files["ref"], files["hyp"])
    lowercased = sacrebleu_scores(files["ref"], files["hyp"], lowercase=True)
    assert 10 < reference["bleu"][0] < 90  # a figure that can differ, not 0 or 100
    for key, (score, signature) in [*reference.items(), ("bleu_lc", lowercased["bleu"])]:
        assert report["scores"][key]["score"] == pytest.approx(score, abs=1e-4), key
        assert report["scores"][key]["signature"] == signature
    assert report["scores"]["bleu_lc"]["score"] > report["scores"]["bleu"]["score"]

    # The paired bootstrap test is sacreBLEU's: same p-values, means and intervals.
    paired, signatures = sacrebleu_paired(files["ref"], files["base"], files["hyp"])
    comparison = report["comparison"]
    assert comparison["resamples"] == 1000 and comparison["seed"] == 12345
    for key, expected in paired.items():
        ours = comparison["metrics"][key]
        assert ours["p_value"] == pytest.approx(expected["p_value"], abs=1e-4)
        system = (ours["system"], ours["system_mean"], ours["system_ci"])
        baseline = (ours["baseline"], ours["baseline_mean"], ours["baseline_ci"])
        assert system == pytest.approx(expected["system"], abs=1e-4)
        assert baseline == pytest.approx(expected["baseline"], abs=1e-4)
        assert ours["signature"] == signatures[key]
        # Our interval comes from the very resamples sacreBLEU's means were computed on.
        means = ours["system_mean"] - ours["baseline_mean"]
        assert ours["difference_mean"] == pytest.approx(means, abs=1e-4)
        assert ours["difference_low"] <= ours["difference_mean"] <= ours["difference_high"]

    # Model, data, settings and timing identify how the scores were made.
    vocab = json.loads((model_dir / "vocab" / "vocab.json").read_text())
    model = report["model"]
    assert model["directory"] == str(model_dir.resolve())
    assert model["model_sha256"] == _sha256(model_dir / "model.keras")
    assert model["source_vocab_sha256"] == vocab["models"]["source"]["sha256"]
    assert model["metadata"] == METADATA
    for role in ("src", "ref", "hyp", "base"):
        name = {"src": "source", "ref": "reference", "hyp": "hypotheses", "base": "baseline"}
        entry = report["data"][name[role]]
        assert entry["sha256"] == _sha256(files[role]) and entry["lines"] == 19
    assert report["search"]["beam_size"] == 4 and report["search"]["length_penalty"] == 0.6
    assert report["translation"]["lines"] == 19 and report["translation"]["empty"] == 1
    assert report["timing"]["translate_seconds"] > 0 and report["timing"]["warmup_seconds"] > 0
    assert report["timing"]["sentences_per_second"] > 0
    assert report["sentences"] == 19 and report["empty_hypotheses"] == 1

    # report.md: the scores table, the comparison and the worst sentence by chrF.
    markdown = (files["report"] / "report.md").read_text()
    bleu = report["scores"]["bleu"]
    escaped = bleu["signature"].replace("|", "\\|")  # a pipe inside a Markdown table cell
    assert f"| BLEU | {bleu['score']:.2f} | `{escaped}` |" in markdown
    worst = report["worst"][0]
    assert worst["chrf"] == min(s["chrf"] for s in report["worst"])
    assert f"line {worst['line']}, chrF {worst['chrf']:.1f}" in markdown
    assert "## Comparison with" in markdown
    assert f"{bleu['score']:6.2f}" in evaluated["stdout"]


def test_evaluate_report_has_scores_by_source_length_and_its_charts(evaluated):
    import sacrebleu

    files, report_dir = evaluated, evaluated["report"]
    report = json.loads((report_dir / "report.json").read_text())
    buckets = report["by_source_length"]["buckets"]
    # The buckets split the 19 sentences by the words of their source (the blank one: 0).
    hypotheses, references = files["expected"], files["references"]
    words = [len(source.split()) for source in files["sources"]]
    assert sum(b["sentences"] for b in buckets) == len(words) == 19
    assert buckets[0]["label"] == "0" and buckets[0]["sentences"] == words.count(0) == 1
    for b in buckets:
        last = float("inf") if b["last"] is None else b["last"]
        chosen = [i for i, n in enumerate(words) if b["first"] <= n <= last]
        assert len(chosen) == b["sentences"] > 0
        refs = [[references[i] for i in chosen]]
        bleu = sacrebleu.corpus_bleu([hypotheses[i] for i in chosen], refs).score
        assert b["bleu"] == pytest.approx(bleu)

    # report.md links both charts by relative path; each is a real picture beside it.
    charts = {name: report_dir / name for name in ("source-length.png", "bootstrap.png")}
    assert markdown_images(report_dir / "report.md") == charts
    for chart in charts.values():
        assert_png(chart, min_bytes=20_000, min_size=300)
        assert str(chart) in files["stdout"]  # the "wrote ..." line


def test_score_of_the_kept_translations_equals_evaluate(evaluated, tmp_path, monkeypatch):
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    files = evaluated
    args = ["--hyp", str(files["hyp"]), "--ref", str(files["ref"]), "--compare", str(files["base"])]
    assert main(["score", *args, "--report", str(tmp_path)]) == 0
    scored = json.loads((tmp_path / "report.json").read_text())
    evaluated_report = json.loads((files["report"] / "report.json").read_text())
    for key in ("scores", "length", "comparison", "worst"):
        if key == "worst":  # evaluate also shows the source sentence
            for s in evaluated_report[key]:
                s["source"] = None
        assert scored[key] == evaluated_report[key], key
    assert scored["model"] is None and scored["timing"] is None


def test_evaluate_errors_before_loading_the_model(model_dir, tmp_path, capsys):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("a\nb\nc\n")
    ref.write_text("a\nb\n")
    args = ["evaluate", "--src", str(src), "--ref", str(ref)]
    assert main([*args, "--model", str(tmp_path / "none")]) == 2
    assert "none: no such directory" in capsys.readouterr().err
    assert main([*args, "--model", str(model_dir)]) == 2
    err = capsys.readouterr().err
    assert f"line counts differ: {src} has 3, {ref} has 2" in err and err.startswith(
        "translator evaluate:"
    )
    assert main([*args[:-1], str(tmp_path / "missing.txt"), "--model", str(model_dir)]) == 2
    assert "missing.txt: cannot read" in capsys.readouterr().err
    ref.write_text("a\nb\nc\n")
    hyp_out = tmp_path / "no" / "such" / "dir" / "hyp.txt"
    assert main([*args, "--model", str(model_dir), "--hyp-out", str(hyp_out)]) == 2
    err = capsys.readouterr().err
    assert "hyp.txt: cannot write: its directory does not exist" in err
    assert "translated" not in err  # refused before any translation
