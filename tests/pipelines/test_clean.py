"""`translator data clean`: each rule counted, kept pairs exact, nothing half-written.

The noisy corpus is real Multi30k val pairs with the benchmark's seeded noise
(`tests/support/noisy_corpus.py`), so each kind's fate can be counted against its label.
"""

import collections
import gzip
import json

import pytest

from tests.support.corpora import read_gz_lines
from tests.support.missing import need_multi30k
from tests.support.noisy_corpus import add_noise
from translator.cli import main
from translator.errors import ConfigError, CorpusError
from translator.languages import word_count
from translator.pipelines.clean import RULES, CleanConfig, LanguageCheck, clean_corpus


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def val_pairs():
    directory = need_multi30k()
    english = read_gz_lines(directory / "val.en.gz")
    german = read_gz_lines(directory / "val.de.gz")
    return list(zip(english, german, strict=True))


@pytest.fixture(scope="module")
def cleaned_noise(val_pairs, tmp_path_factory):
    """(rows with labels, the report, kept sources, kept targets) of the noisy val set."""
    tmp = tmp_path_factory.mktemp("noisy")
    rows = add_noise(val_pairs, share=0.3, seed=7)
    source = _write(tmp / "noisy.en", [r[0] for r in rows])
    target = _write(tmp / "noisy.de", [r[1] for r in rows])
    config = CleanConfig(source_lang="en", target_lang="de")
    report = clean_corpus(source, target, tmp / "out.en", tmp / "out.de", config)
    kept = ((tmp / "out.en").read_text().splitlines(), (tmp / "out.de").read_text().splitlines())
    return rows, report, *kept


def test_the_counts_add_up_and_the_kept_pairs_are_the_inputs_in_order(cleaned_noise):
    rows, report, sources, targets = cleaned_noise
    assert report.pairs == len(rows)
    assert report.kept + sum(report.removed.values()) == report.pairs
    assert list(report.removed) == list(RULES)
    assert len(sources) == len(targets) == report.kept
    # What is kept is a subsequence of the input, each pair whole.
    remaining = iter((s, t) for s, t, _ in rows)
    assert all(pair in remaining for pair in zip(sources, targets, strict=True))


def test_each_kind_of_noise_meets_the_rule_made_for_it(cleaned_noise):
    rows, report, sources, targets = cleaned_noise
    kept = collections.Counter(zip(sources, targets, strict=True))
    fate = collections.defaultdict(lambda: [0, 0])  # kind -> [kept, total]
    for source, target, kind in rows:
        fate[kind][1] += 1
        if kept[(source, target)]:
            fate[kind][0] += 1
            if kind != "clean":
                kept[(source, target)] -= 1  # count each kept copy once
    share_kept = {kind: k / n for kind, (k, n) in fate.items()}
    # Clean pairs survive (the language check reads short captions too).
    assert share_kept["clean"] >= 0.97, share_kept
    assert share_kept["copy"] == 0 and share_kept["broken"] == 0
    assert share_kept["wrong_side"] <= 0.05
    # Glued or cut targets go when their lengths disagree more than the ratio allows;
    # what stays is within it.
    assert share_kept["overlong"] < 0.6 and share_kept["truncated"] < 0.9
    for source, target in zip(sources, targets, strict=True):
        longer, shorter = sorted((word_count(source), word_count(target)), reverse=True)
        assert (longer + 1) / (shorter + 1) <= report.settings.max_length_ratio
    assert fate["boilerplate"][0] <= 3  # the first of each of the three lines
    assert report.removed["duplicate"] >= fate["boilerplate"][1] - 3
    # Misaligned pairs of the right languages and lengths need a bilingual model to tell
    # (Bicleaner's job): these rules keep them.


def test_a_pair_counts_under_the_first_rule_it_breaks(tmp_path):
    pairs = [
        ("A man rides a bike.", "Ein Mann fährt Fahrrad."),
        ("", "leer"),  # empty
        ("bell\x07", "bell\x07"),  # invalid text, before copy
        ("bell\x07", "bell\x07"),  # and again: invalid, not duplicate
        ("12 345 678", "12 345 678"),  # few letters, before copy
        ("Hello, World!", "hello world"),  # copy after normalization
        ("A man rides a bike.", "Ein Mann fährt Fahrrad."),  # duplicate
        ("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."),
        ("Two dogs play in the snow.", "Zwei Hunde toben im Schnee."),  # a source seen
        ("Die Sonne scheint über dem See.", "Die Sonne scheint über dem See, hell."),
        ("One.", "Eins zwei drei vier fünf sechs sieben acht."),  # length ratio
        ("x" * 1001, "y" * 1001),  # too long, before ratio
    ]
    source = _write(tmp_path / "in.en", [p[0] for p in pairs])
    target = _write(tmp_path / "in.de", [p[1] for p in pairs])
    config = CleanConfig(language_check=False, dedup_sources=True)
    report = clean_corpus(source, target, tmp_path / "o.en", tmp_path / "o.de", config)
    assert report.removed == {
        "empty": 1,
        "invalid_text": 2,
        "too_long": 1,
        "length_ratio": 1,
        "few_letters": 1,
        "copy": 1,
        "duplicate": 2,
        "wrong_language": 0,
    }
    assert [e.line for e in report.examples["invalid_text"]] == [3, 4]
    assert report.kept == 3
    # Without dedup_sources, the second "Two dogs" pair stays; without dedup, the repeat.
    relaxed = CleanConfig(language_check=False, dedup=False)
    report = clean_corpus(source, target, tmp_path / "o.en", tmp_path / "o.de", relaxed)
    assert report.removed["duplicate"] == 0 and report.kept == 5


def test_the_language_check_reads_the_expected_languages(tmp_path):
    pairs = [
        ("A little girl climbs into a wooden playhouse.", "Ein kleines Mädchen klettert."),
        ("Ein kleines Mädchen klettert in ein Spielhaus.", "A little girl climbs."),
        ("A little girl climbs into a wooden playhouse.", "Une petite fille grimpe."),
    ]
    source = _write(tmp_path / "in.en", [p[0] for p in pairs])
    target = _write(tmp_path / "in.de", [p[1] for p in pairs])
    config = CleanConfig(source_lang="en", target_lang="de", max_length_ratio=10)
    report = clean_corpus(source, target, tmp_path / "o.en", tmp_path / "o.de", config)
    assert report.removed["wrong_language"] == 2 and report.kept == 1
    with pytest.raises(ConfigError, match=r"does not know xx.*--no-language-check"):
        clean_corpus(
            source,
            target,
            tmp_path / "o.en",
            tmp_path / "o.de",
            CleanConfig(source_lang="xx", target_lang="de"),
        )


def test_an_interrupted_or_failed_run_writes_nothing(tmp_path):
    lines = [f"Sentence number {i} is here." for i in range(25_000)]
    source = _write(tmp_path / "in.en", lines)
    target = _write(tmp_path / "in.de", [f"Satz Nummer {i} ist hier." for i in range(25_000)])

    def interrupt(_):
        raise KeyboardInterrupt

    config = CleanConfig(language_check=False)
    with pytest.raises(KeyboardInterrupt):
        clean_corpus(source, target, tmp_path / "o.en", tmp_path / "o.de", config, interrupt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de", "in.en"]

    short = _write(tmp_path / "short.de", ["Nur eine Zeile."])
    with pytest.raises(CorpusError, match=r"different line counts: .*in.en has 25,000 lines"):
        clean_corpus(source, short, tmp_path / "o.en", tmp_path / "o.de", config)
    assert not (tmp_path / "o.en").exists() and not (tmp_path / "o.de").exists()


def test_invalid_utf8_stops_or_is_replaced_counted_and_dropped(tmp_path):
    source = tmp_path / "in.en"
    source.write_bytes(b"A good line.\nA bad \xff line.\nAnother good line.\n")
    target = _write(tmp_path / "in.de", ["Eine gute Zeile.", "Schlecht.", "Noch eine gute."])
    out = (tmp_path / "o.en", tmp_path / "o.de")
    with pytest.raises(CorpusError, match=r"in.en, line 2: not valid UTF-8"):
        clean_corpus(source, target, *out, CleanConfig(language_check=False))
    config = CleanConfig(language_check=False, errors="replace")
    report = clean_corpus(source, target, *out, config)
    assert report.replaced_lines == 1 and report.removed["invalid_text"] == 1
    assert out[0].read_text().splitlines() == ["A good line.", "Another good line."]


def test_the_command_prints_the_report_and_writes_it_as_json(val_pairs, tmp_path, capsys):
    rows = add_noise(val_pairs[:300], share=0.3, seed=3)
    source = _write(tmp_path / "crawl.en", [r[0] for r in rows])
    target = _write(tmp_path / "crawl.de", [r[1] for r in rows])
    out_source, out_target = tmp_path / "clean.en.gz", tmp_path / "clean.de.gz"
    args = ["data", "clean", "--src", str(source), "--tgt", str(target)]
    assert main([*args, "--out-src", str(out_source), "--out-tgt", str(out_target)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "clean.en.gz.clean.json").read_text())
    assert report["settings"]["source_lang"] == "en"  # from the file suffixes
    assert report["settings"]["target_lang"] == "de"
    assert f"{report['pairs']:,} pairs" in printed and "(language check: en/de" in printed
    assert "max_length_ratio 3, min_letter_share 0.5, dedup True" in printed  # the settings
    for rule in RULES:
        assert f"  {rule:<16} {report['removed'][rule]:>10,}" in printed
    with gzip.open(out_source, "rt", encoding="utf-8") as file:
        assert len(file.read().splitlines()) == report["kept"]

    # Bad input: one error line naming the file.
    outs = ["--out-src", str(tmp_path / "a"), "--out-tgt", str(tmp_path / "b")]
    assert main([*args[:-1], str(tmp_path / "missing.de"), *outs]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing.de" in err and "\n" not in err
    assert not (tmp_path / "a").exists()
    assert main([*args, *outs, "--langs", "en"]) == 2
    assert "--langs: expected SRC-TGT" in capsys.readouterr().err


def test_the_py3langid_internals_the_language_check_relies_on():
    # One language's probability is read from py3langid's private scores (`<0.5` in
    # pyproject.toml); they must be what its public `rank` reports.
    check = LanguageCheck(("en", "de"), 0.05)
    for text in ("A dog runs on the beach.", "Ein Hund rennt am Strand.", "12:30"):
        ranked = dict(check.identifier.rank(text))
        for language in ("en", "de", "fr"):
            assert check.probability(text, language) == pytest.approx(ranked[language])
