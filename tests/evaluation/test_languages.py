"""Scores right for every target language, with one reference or several.

The oracle is sacreBLEU's own command line (`sacrebleu REF... -i HYP -l SRC-TGT`), which
chooses BLEU's tokenizer from the target language; ours must print the same figures and
signatures. No model here: hypotheses are made by editing references.
"""

import json

import numpy as np
import pytest

from tests.support.scores import sacrebleu_scores
from translator.cli import main
from translator.evaluation import Scoring, ScoringError, evaluate, source_length

# A few words of each language, joined as the language writes them: Chinese and Japanese
# without spaces, Korean and German with them.
WORDS = {
    "zh": ["我们", "今天", "北京", "天气", "很", "好", "朋友", "一起", "去", "公园", "看", "书"],
    "ja": ["私", "は", "東京", "に", "住んで", "います", "今日", "天気", "が", "良い", "本", "を"],
    "ko": ["나는", "서울에", "삽니다", "오늘", "날씨가", "좋습니다", "친구와", "함께", "책을"],
    "de": ["ein", "Mann", "fährt", "Fahrrad", "heute", "die", "Sonne", "scheint", "im", "Park"],
}
JOINER = {"zh": "", "ja": "", "ko": " ", "de": " "}
END = {"zh": "。", "ja": "。", "ko": ".", "de": "."}


def _edited(words, rng):
    """The words with one replaced and, sometimes, one dropped (a system's errors)."""
    edited = list(words)
    edited[rng.integers(len(edited))] = rng.choice(words)
    if len(edited) > 3 and rng.random() < 0.5:
        del edited[rng.integers(len(edited))]
    return edited


def _files(tmp_path, lang, count=60, seed=0):
    """Two references and hypotheses in `lang`, written to files; returns their paths."""
    rng = np.random.default_rng(seed)
    vocabulary, join, end = WORDS[lang], JOINER[lang], END[lang]
    streams = {"ref1": [], "ref2": [], "hyp": []}
    for _ in range(count):
        words = list(rng.choice(vocabulary, rng.integers(3, 9)))
        streams["ref1"].append(join.join(words) + end)
        streams["ref2"].append(join.join(_edited(words, rng)) + end)
        streams["hyp"].append(join.join(_edited(words, rng)) + end)
    paths = {}
    for name, lines in streams.items():
        paths[name] = tmp_path / f"{name}.{lang}"
        paths[name].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths


@pytest.mark.parametrize("references", [1, 2])
@pytest.mark.parametrize("lang", ["zh", "ja", "ko", "de"])
def test_scores_equal_sacrebleus_command_line_for_the_target_language(lang, references, tmp_path):
    paths = _files(tmp_path, lang)
    refs = [paths["ref1"], paths["ref2"]][:references]
    report = tmp_path / "report"
    args = ["score", "--hyp", str(paths["hyp"]), "-l", f"en-{lang}", "--metrics", "chrf++"]
    for ref in refs:
        args += ["--ref", str(ref)]
    assert main([*args, "--report", str(report)]) == 0
    ours = json.loads((report / "report.json").read_text())["scores"]

    cjk = lang != "de"
    expected = sacrebleu_scores(refs, paths["hyp"], langs=f"en-{lang}", ter_asian=cjk)
    expected |= sacrebleu_scores(refs, paths["hyp"], langs=f"en-{lang}", metrics=("chrf++",))
    assert set(expected) == {"bleu", "chrf", "ter", "chrf_pp"}
    for key, (score, signature) in expected.items():
        assert round(ours[key]["score"], 4) == pytest.approx(score, abs=1e-9), key
        assert ours[key]["signature"] == signature
    tokenizer = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab", "de": "13a"}[lang]
    assert f"|tok:{tokenizer}" in ours["bleu"]["signature"]
    assert f"nrefs:{references}|" in ours["bleu"]["signature"]
    assert ("asian:yes" in ours["ter"]["signature"]) == cjk
    # The tokenizer matters: a CJK target scored with 13a is another figure.
    if cjk:
        plain = sacrebleu_scores(refs, paths["hyp"])["bleu"][0]
        assert plain != pytest.approx(ours["bleu"]["score"], abs=0.5)


def test_a_second_reference_counts_in_every_part_of_the_report(tmp_path):
    paths = _files(tmp_path, "de", count=80, seed=3)
    read = {name: path.read_text().splitlines() for name, path in paths.items()}
    sources = [f"source {i}" for i in range(80)]
    one = evaluate(read["hyp"], [read["ref1"]], sources=sources)
    two = evaluate(
        read["hyp"], [read["ref1"], read["ref2"]], sources=sources, baseline=read["ref2"]
    )
    assert two.references == 2 and one.references == 1
    # More references can only match more n-grams: BLEU and chrF rise, TER falls.
    assert two.metric("bleu").score > one.metric("bleu").score
    assert two.metric("chrf").score > one.metric("chrf").score
    assert two.metric("ter").score < one.metric("ter").score
    # Sentences show both references; buckets and the paired test score against both.
    worst = two.worst[0]
    assert worst.other_references == (read["ref2"][worst.line - 1],)
    assert two.by_source_length[0].bleu == pytest.approx(two.metric("bleu").score)
    assert all("nrefs:2" in c.signature for c in two.comparison)


def test_chinese_and_japanese_sources_are_bucketed_by_characters():
    assert source_length("A man rides a bike .") == 6
    assert source_length("我们今天去公园。") == 8  # seven ideographs, and "。" a word of its own
    assert source_length("東京に住んでいます") == 9  # kanji and kana count one each
    assert source_length("나는 서울에 삽니다.") == 3  # Korean is written with spaces
    assert source_length("用 Keras 3 训练") == 5  # mixed: Latin words, CJK characters


def test_language_codes_choose_as_sacrebleu_does():
    assert Scoring(target_lang="zh-Hans").bleu_tokenizer == "zh"
    assert Scoring(target_lang="jpn").bleu_tokenizer == "ja-mecab"
    assert Scoring(target_lang="ko_KR").bleu_tokenizer == "ko-mecab"
    assert Scoring(target_lang="de").bleu_tokenizer == "13a"
    assert Scoring().bleu_tokenizer == "13a" and not Scoring().asian_ter
    assert Scoring(target_lang="zh", tokenize="char").bleu_tokenizer == "char"


def test_our_language_map_is_sacrebleus():
    from sacrebleu.metrics.bleu import BLEU

    from translator.evaluation.metrics import CJK_TOKENIZERS

    assert BLEU._TOKENIZER_MAP == CJK_TOKENIZERS


def test_a_missing_tokenizer_package_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "MeCab" else real(name, *a)
    )
    with pytest.raises(ScoringError, match=r'needs MeCab: pip install -e "\.\[cjk\]"'):
        Scoring(target_lang="ja").check()
    paths = _files(tmp_path, "ja", count=5)
    args = ["score", "--hyp", str(paths["hyp"]), "--ref", str(paths["ref1"])]
    assert main([*args, "-l", "en-ja"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("translator score: error: ") and "[cjk]" in err and "\n" not in err
    assert main([*args, "-l", "en-ja", "--tokenize", "char"]) == 0  # another tokenizer works
    assert main([*args, "--tokenize", "bogus"]) == 2
    assert "no tokenizer 'bogus'" in capsys.readouterr().err
    assert main([*args, "-l", "zh"]) == 2
    assert "--langs: expected SRC-TGT" in capsys.readouterr().err
