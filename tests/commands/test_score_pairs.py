"""Scoring given pairs (`translator score-pairs`): the forced score is the search's score."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests.support.models import random_sources, tiny_model
from translator.cli import main
from translator.forced import token_log_probs
from translator.search import SearchConfig, search

VOCAB = 16
LENGTHS = [5, 2, 7, 4, 3, 6]
GREEDY = SearchConfig(beam_size=1, length_penalty=0.0, max_length_a=1.0, max_length_b=3)


@pytest.mark.parametrize(
    "config", [GREEDY, dataclasses.replace(GREEDY, beam_size=4, n_best=3)], ids=["greedy", "beam"]
)
def test_the_forced_score_of_the_search_output_is_its_score(config):
    model = tiny_model(VOCAB, seed=1, logit_scale=2.0, eos_bias=3.0, constant_eos=True)
    source = random_sources(np.random.default_rng(3), LENGTHS, VOCAB)
    ids, scores, lengths = (np.asarray(x) for x in search(model, tf.constant(source), config))
    for k in range(ids.shape[1]):
        filled = lengths[:, k] > 0
        forced = token_log_probs(model, source[filled], ids[filled, k]).numpy().sum(axis=1)
        np.testing.assert_allclose(forced, scores[filled, k], rtol=1e-5, atol=1e-5)
    assert len(set(lengths[:, 0])) > 1  # hypotheses of several lengths, padded together


def write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def best(model_dir, lines):
    """Each line's greedy translation and its score with the length penalty off."""
    from translator.artifacts import load_model_dir
    from translator.inference import Translator

    loaded = load_model_dir(model_dir)
    config = SearchConfig(beam_size=1, length_penalty=0.0)
    hypotheses = Translator.from_model(loaded.model, loaded.vocabulary, config).search(lines)
    return loaded.vocabulary, hypotheses.hypotheses


def test_score_pairs_scores_translations_as_the_search_did_in_order(
    model_dir, lines, best, tmp_path, capsys
):
    vocabulary, hypotheses = best
    targets = [h[0].text if h else "" for h in hypotheses]
    targets[3] = ""  # a blank target: not scored
    src, tgt = write(tmp_path / "src.txt", lines), write(tmp_path / "tgt.txt", targets)
    args = ["score-pairs", "--model", str(model_dir), "--src", str(src), "--tgt", str(tgt)]
    assert main([*args, "--tokens", "--batch-tokens", "48"]) == 0
    out, err = capsys.readouterr()
    rows = out.split("\n")[:-1]
    assert len(rows) == len(lines)
    checked = 0
    for line, target, hypothesis, row in zip(lines, targets, hypotheses, rows, strict=True):
        if not line.strip() or not target:
            assert row == ""
            continue
        total, mean, tokens = row.split("\t")
        pieces = [token.rsplit(":", 1) for token in tokens.split(" ")]
        assert float(total) == pytest.approx(sum(float(v) for _, v in pieces), abs=1e-3)
        assert float(mean) == pytest.approx(float(total) / len(pieces), abs=1e-3)
        assert pieces[-1][0] == "</s>"
        # The text path re-tokenizes the translation: where it gives the search's own
        # pieces back, the score is the search's.
        if vocabulary.target.encode([target])[0] == list(hypothesis[0].ids):
            assert float(total) == pytest.approx(hypothesis[0].score, abs=2e-3)
            checked += 1
    assert checked >= len(rows) // 3
    blank = sum(1 for line, t in zip(lines, targets, strict=True) if not line.strip() or not t)
    assert f"({blank} blank, not scored" in err


def test_n_best_rescoring_adds_the_models_score_and_reverse_swaps(model_dir, lines, tmp_path):
    src = write(tmp_path / "src.txt", lines[:6])
    nbest = tmp_path / "nbest.txt"
    common = ["--model", str(model_dir), "-i", str(src), "-q"]
    assert main(["translate", *common, "--n-best", "2", "-o", str(nbest)]) == 0
    listed = nbest.read_text(encoding="utf-8").splitlines()
    out = tmp_path / "rescored.txt"
    score = ["score-pairs", "--model", str(model_dir), "--src", str(src), "-q", "-o", str(out)]
    assert main([*score, "--n-best", str(nbest)]) == 0
    rescored = out.read_text(encoding="utf-8").splitlines()
    assert [row.rsplit(" ||| ", 1)[0] for row in rescored] == listed
    # The same pairs scored as two files give the same totals.
    pairs = [row.split(" ||| ") for row in listed]
    sources = write(tmp_path / "s.txt", [lines[int(p[0])] for p in pairs])
    targets = write(tmp_path / "t.txt", [p[1] for p in pairs])

    def totals(*options):
        base = ["score-pairs", "--model", str(model_dir), "-q", "-o", str(out)]
        assert main([*base, *options]) == 0
        return [row.split("\t")[0] for row in out.read_text(encoding="utf-8").splitlines()]

    forward = totals("--src", str(sources), "--tgt", str(targets))
    assert forward == [row.rsplit(" ||| ", 1)[1] for row in rescored]
    # --reverse: log P(source | target), the files' roles swapped.
    reverse = totals("--reverse", "--src", str(sources), "--tgt", str(targets))
    assert reverse == totals("--src", str(targets), "--tgt", str(sources)) != forward


def test_misaligned_files_and_a_bad_n_best_line_are_one_error_line(model_dir, tmp_path, capsys):
    src = write(tmp_path / "src.txt", ["a b", "c d"])
    tgt = write(tmp_path / "tgt.txt", ["a b"])
    args = ["score-pairs", "--model", str(model_dir), "--src", str(src)]
    assert main([*args, "--tgt", str(tgt)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "line counts differ" in error[0] and str(tgt) in error[0]
    bad = write(tmp_path / "nbest.txt", ["0 ||| x ||| -1.0", "7 ||| y ||| -2.0"])
    assert main([*args, "--n-best", str(bad)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{bad}, line 2: index 7, but {src} has 2 lines" in error[0]
