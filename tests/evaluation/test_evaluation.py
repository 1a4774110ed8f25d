"""`translator.evaluation` and `translator score`: sacreBLEU's scores, reports, clear errors.

No model here (and no TensorFlow): hypotheses are made by editing references.
"""

import dataclasses
import gzip
import json

import numpy as np
import pytest

from tests.support.images import assert_png, markdown_images
from tests.support.scores import sacrebleu_scores
from translator.cli import main
from translator.evaluation import (
    EvaluationError,
    EvaluationReport,
    evaluate,
    file_identity,
    render_markdown,
    sentence_chrf,
    write_report,
)

WORDS = [
    "the",
    "a",
    "man",
    "woman",
    "dog",
    "ball",
    "runs",
    "jumps",
    "over",
    "under",
    "red",
    "blue",
    "Green",
    "small",
    "big",
]


def _corpus(count=120, seed=0):
    """References, a closer system and a farther baseline (dropped, swapped, recased words)."""
    rng = np.random.default_rng(seed)
    references, system, baseline = [], [], []
    for _ in range(count):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(4, 12))]
        references.append(" ".join(words) + " .")
        edited = list(words)
        if rng.random() < 0.5:
            edited[rng.integers(len(edited))] = WORDS[rng.integers(len(WORDS))]
        if rng.random() < 0.3:
            edited = [w.upper() if rng.random() < 0.3 else w for w in edited]
        system.append(" ".join(edited) + " .")
        worse = list(edited)
        if rng.random() < 0.6:
            del worse[rng.integers(len(worse))]
        if rng.random() < 0.3:
            rng.shuffle(worse)
        baseline.append(" ".join(worse))
    return references, system, baseline


def _write(path, lines, newline="\n"):
    data = "".join(line + newline for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    return path


@pytest.fixture
def corpus_files(tmp_path):
    references, system, baseline = _corpus()
    return {
        "ref": _write(tmp_path / "ref.txt", references),
        "hyp": _write(tmp_path / "hyp.txt", system),
        "base": _write(tmp_path / "base.txt", baseline),
    }


def test_score_command_equals_sacrebleu_program(corpus_files, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    hyp, ref = corpus_files["hyp"], corpus_files["ref"]
    report_dir = tmp_path / "report"
    assert main(["score", "--hyp", str(hyp), "--ref", str(ref), "--report", str(report_dir)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((report_dir / "report.json").read_text())
    expected = sacrebleu_scores(ref, hyp)
    expected["bleu_lc"] = sacrebleu_scores(ref, hyp, lowercase=True)["bleu"]
    for key, (score, signature) in expected.items():
        assert report["scores"][key]["score"] == pytest.approx(score, abs=1e-4), key
        assert report["scores"][key]["signature"] == signature
        assert signature in printed
    assert 20 < report["scores"]["bleu"]["score"] < 95
    assert report["scores"]["bleu_lc"]["score"] > report["scores"]["bleu"]["score"]
    assert report["data"]["hypotheses"] == dataclasses.asdict(file_identity(hyp, 120))
    assert report["comparison"] is None and report["model"] is None
    assert (report_dir / "report.md").read_text().startswith("# Evaluation report")


def test_gzip_and_crlf_inputs_score_like_plain_files(corpus_files, tmp_path):
    from translator.io import read_lines

    references = read_lines(corpus_files["ref"])
    crlf = _write(tmp_path / "ref.crlf.txt.gz", references, newline="\r\n")
    assert read_lines(crlf) == references
    hypotheses = read_lines(corpus_files["hyp"])
    assert (
        evaluate(hypotheses, [read_lines(crlf)]).metrics
        == evaluate(hypotheses, [references]).metrics
    )


def test_identical_text_scores_perfectly():
    references, _, _ = _corpus(30)
    result = evaluate(references, [references])
    assert result.metric("bleu").score == pytest.approx(100.0)
    assert result.metric("chrf").score == pytest.approx(100.0)
    assert result.metric("ter").score == 0.0
    assert result.length.ratio == 1.0 and result.length.brevity_penalty == 1.0


def test_paired_comparison_is_antisymmetric():
    references, system, baseline = _corpus()
    forward = evaluate(system, [references], baseline=baseline, bootstrap_samples=300).comparison
    backward = evaluate(baseline, [references], baseline=system, bootstrap_samples=300).comparison
    for ahead, behind in zip(forward, backward, strict=True):
        assert ahead.difference == pytest.approx(-behind.difference)
        # Same resamples in both directions: the interval mirrors, the p-value is the same.
        assert ahead.difference_low == pytest.approx(-behind.difference_high, abs=1e-4)
        assert ahead.difference_high == pytest.approx(-behind.difference_low, abs=1e-4)
        assert ahead.p_value == pytest.approx(behind.p_value)
        assert ahead.difference_low <= ahead.difference <= ahead.difference_high
        assert ahead.system_mean == pytest.approx(behind.baseline_mean)
        means = ahead.system_mean - ahead.baseline_mean  # sacreBLEU's, same resamples
        assert ahead.difference_mean == pytest.approx(means, abs=1e-4)
    bleu = forward[0]
    assert bleu.key == "bleu" and bleu.difference > 0 and bleu.p_value < 0.05
    assert "bs:300" in bleu.signature


def test_score_compare_prints_difference_interval_and_p_value(corpus_files, capsys):
    args = ["--hyp", str(corpus_files["hyp"]), "--ref", str(corpus_files["ref"])]
    assert main(["score", *args, "--compare", str(corpus_files["base"])]) == 0
    out = capsys.readouterr().out
    assert "paired bootstrap against the baseline (1000 resamples" in out
    for label in ("BLEU", "chrF2", "TER"):
        row = next(
            line for line in out.splitlines() if line.startswith(label + " ") and " vs " in line
        )
        assert "difference" in row and "95% CI [" in row and "p = 0." in row


def test_worst_sentences_and_samples():
    references, system, _ = _corpus(40)
    result = evaluate(system, [references], worst=5, samples=4)
    chrf = sentence_chrf(system, [references])
    assert [s.chrf for s in result.worst] == sorted(chrf)[:5]
    for s in result.worst:
        assert (s.hypothesis, s.reference) == (system[s.line - 1], references[s.line - 1])
    assert [s.line for s in result.samples] == [1, 14, 27, 40]  # spread, first and last


def test_markdown_survives_pipes_and_backticks(tmp_path):
    references = ["a | b ``` c", "plain text here"]
    hypotheses = ["a | b c", "plain ```` text"]
    report = EvaluationReport(
        evaluation=evaluate(hypotheses, [references], sources=["src | one", "src two"]),
        data={"hypotheses": file_identity(_write(tmp_path / "h|x.txt", hypotheses), 2)},
    )
    markdown = render_markdown(report)
    assert "`" + str(tmp_path).replace("|", "\\|") + "/h\\|x.txt`" in markdown
    assert "\n`````text\n" in markdown  # a fence longer than any backtick run in the text
    assert "SRC  src | one" in markdown and "HYP  plain ```` text" in markdown


def test_errors_name_files_and_exit_2(corpus_files, tmp_path, capsys):
    hyp, ref = corpus_files["hyp"], corpus_files["ref"]
    short = _write(tmp_path / "short.txt.gz", ["one", "two"])
    assert main(["score", "--hyp", str(short), "--ref", str(ref)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("translator score: error: ")
    assert f"{short} has 2, {ref} has 120" in err

    assert main(["score", "--hyp", str(hyp), "--ref", str(ref), "--compare", str(short)]) == 2
    assert f"{short} has 2, {ref} has 120" in capsys.readouterr().err

    assert main(["score", "--hyp", str(tmp_path / "none.txt"), "--ref", str(ref)]) == 2
    assert "none.txt: cannot read" in capsys.readouterr().err

    broken = tmp_path / "broken.txt"
    broken.write_bytes(b"ok\nok\n\xc3\x28 not utf-8\n")
    assert main(["score", "--hyp", str(broken), "--ref", str(ref)]) == 2
    assert f"{broken}, line 3: not valid UTF-8" in capsys.readouterr().err

    empty = _write(tmp_path / "empty.txt", [])
    assert main(["score", "--hyp", str(empty), "--ref", str(empty)]) == 2
    assert "no lines to score" in capsys.readouterr().err

    with pytest.raises(
        EvaluationError, match="line counts differ: hypotheses has 1, references has 2"
    ):
        evaluate(["x"], [["x", "y"]])


@pytest.mark.parametrize("key", ["bleu", "chrf", "ter"])
def test_the_sacrebleu_internals_the_paired_interval_relies_on(key):
    # `_difference_interval` sums sacreBLEU's per-sentence sufficient statistics over each
    # resample; sacreBLEU has no public API for that. Pinned here (and `<3` in
    # pyproject.toml): summed statistics must give exactly the public corpus score.
    import sacrebleu

    from translator.evaluation.scoring import corpus_metrics

    assert sacrebleu.__version__.split(".")[0] == "2"
    metric = corpus_metrics()[key]
    hypotheses = ["the man is riding a bike", "a dog runs", "two women talk"]
    references = ["a man is riding a bike", "the dog runs fast", "two women are talking"]
    stats = np.array(metric._extract_corpus_statistics(hypotheses, [references]), "float32")
    summed = metric._compute_score_from_stats(stats.sum(0)).score
    assert summed == pytest.approx(metric.corpus_score(hypotheses, [references]).score, abs=1e-4)


def test_scores_by_source_length_are_sacrebleu_on_each_bucket(tmp_path):
    import sacrebleu

    references, system, _ = _corpus(150, seed=1)
    rng = np.random.default_rng(2)
    # Sources of 0 to 40 words, none of 11 to 15 (an empty bucket); a blank one has 0.
    lengths = rng.choice([*range(0, 11), *range(16, 41)], len(references))
    sources = [" ".join(rng.choice(WORDS, n)) for n in lengths]
    sources[3] = " \t "
    result = evaluate(system, [references], sources=sources)
    buckets = result.by_source_length
    assert [b.label for b in buckets] == ["0", "1-5", "6-10", "16-20", "21-30", "31+"]

    # The buckets partition the sentences by whitespace words of the source, with no
    # empty bucket, and their counts add up.
    words = [len(s.split()) for s in sources]
    members = [
        [i for i, n in enumerate(words) if b.first <= n and (b.last is None or n <= b.last)]
        for b in buckets
    ]
    assert sorted(i for m in members for i in m) == list(range(len(sources)))
    assert [b.sentences for b in buckets] == [len(m) for m in members]
    assert min(b.sentences for b in buckets) > 0
    assert sum(b.sentences for b in buckets) == result.sentences

    # Each bucket's score is sacreBLEU's on exactly that bucket's sentences.
    for bucket, m in zip(buckets, members, strict=True):
        hypotheses, refs = [system[i] for i in m], [[references[i] for i in m]]
        assert bucket.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, refs).score)
        assert bucket.chrf == pytest.approx(sacrebleu.corpus_chrf(hypotheses, refs).score)

    # The report: the same numbers in report.json and in report.md's table, and the chart
    # that report.md links beside it. No comparison, so no bootstrap chart: not even the
    # one a report written there before left.
    (tmp_path / "bootstrap.png").write_bytes(b"an older report's chart")
    report = EvaluationReport(evaluation=result, data={})
    json_path, md_path, charts = write_report(report, tmp_path)
    assert not (tmp_path / "bootstrap.png").exists()
    written = json.loads(json_path.read_text())["by_source_length"]
    assert written["unit"].startswith("words of the source")
    assert written["buckets"] == [dataclasses.asdict(b) for b in buckets]
    markdown = md_path.read_text()
    for b in buckets:
        assert f"| {b.label} | {b.sentences:,} | {b.bleu:.2f} | {b.chrf:.2f} |" in markdown
    assert markdown_images(md_path) == {"source-length.png": tmp_path / "source-length.png"}
    assert charts == (tmp_path / "source-length.png",)
    assert_png(tmp_path / "source-length.png", min_bytes=20_000, min_size=400)


def test_score_compare_report_charts_both_systems_resamples(corpus_files, tmp_path, capsys):
    report_dir = tmp_path / "report"
    args = ["--hyp", str(corpus_files["hyp"]), "--ref", str(corpus_files["ref"])]
    extra = ["--compare", str(corpus_files["base"]), "--bootstrap-samples", "200"]
    assert main(["score", *args, *extra, "--report", str(report_dir)]) == 0
    chart = report_dir / "bootstrap.png"
    assert f", {chart} and " in capsys.readouterr().out  # the "wrote ..." line names it
    # report.md links exactly the bootstrap chart (no sources: no scores by length).
    assert markdown_images(report_dir / "report.md") == {"bootstrap.png": chart}
    assert "## Scores by source length" not in (report_dir / "report.md").read_text()
    assert_png(chart, min_bytes=20_000, min_size=300)
    report = json.loads((report_dir / "report.json").read_text())
    assert report["by_source_length"] is None
    assert "system_resamples" not in report["comparison"]["metrics"]["bleu"]


def test_resampled_scores_are_the_ones_sacrebleu_summarizes():
    # What the bootstrap chart draws: each system's score on each of sacreBLEU's resamples.
    references, system, baseline = _corpus()
    result = evaluate(system, [references], baseline=baseline, bootstrap_samples=200)
    for c in result.comparison:
        ours, theirs = np.array(c.system_resamples), np.array(c.baseline_resamples)
        assert len(ours) == len(theirs) == 200
        assert ours.mean() == pytest.approx(c.system_mean, abs=1e-3)
        assert theirs.mean() == pytest.approx(c.baseline_mean, abs=1e-3)
        assert (ours - theirs).mean() == pytest.approx(c.difference_mean, abs=1e-4)
