"""`translator translate`: batched output equals each line translated alone, in input order."""

import gzip
import itertools
import math
import os
import subprocess
import sys
import threading

import pytest

from translator.cli import main


def _write_gz(path, lines):
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode(), mtime=0))
    return path


def test_file_to_file_keeps_order_line_count_and_blank_lines(
    model_dir, lines, alone, tmp_path, capsys
):
    source = _write_gz(tmp_path / "in.txt.gz", lines)
    output = tmp_path / "out.txt"
    # A small token budget: several length-sorted batches, so order restoration matters.
    args = ["--model", str(model_dir), "-i", str(source), "-o", str(output)]
    code = main(["translate", *args, "--batch-tokens", "48"])
    assert code == 0
    written = output.read_text(encoding="utf-8").split("\n")
    assert written[-1] == ""  # every line ends with a newline
    written = written[:-1]
    assert len(written) == len(lines)
    assert written == [alone[line] if line.strip() else "" for line in lines]
    assert all(written[i] for i, line in enumerate(lines) if line.strip())
    summary = capsys.readouterr().err
    assert f"translated {len(lines)} lines (4 empty, 0 truncated)" in summary
    assert sorted(os.listdir(tmp_path)) == ["in.txt.gz", "out.txt"]  # no temporary left


def test_stdin_to_stdout_n_best(model_dir, lines, alone):
    # As a user runs it: a subprocess, text through pipes; the last line has no newline
    # and one line ends in \r\n.
    data = "\n".join(lines[:9]) + "\r\n" + "\n".join(lines[9:])
    command = ["translate", "--model", str(model_dir), "--n-best", "3", "-q"]
    result = subprocess.run(
        [sys.executable, "-m", "translator", *command],
        input=data.encode("utf-8"),
        capture_output=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"translated" not in result.stderr  # --quiet
    rows = result.stdout.decode("utf-8").splitlines()
    assert len(rows) == 3 * len(lines)
    for index, line in enumerate(lines):
        group = [row.split(" ||| ") for row in rows[3 * index : 3 * index + 3]]
        assert all(len(fields) == 3 and fields[0] == str(index) for fields in group), group
        texts, scores = [f[1] for f in group], [float(f[2]) for f in group]
        if not line.strip():
            assert texts == ["", "", ""] and all(s == -math.inf for s in scores)
            continue
        assert texts[0] == alone[line]  # the best of the n-best is the 1-best translation
        assert scores == sorted(scores, reverse=True) and math.isfinite(scores[0])


def test_errors_are_clean_and_exit_2(model_dir, tmp_path, capsys):
    missing = tmp_path / "nothing"
    assert main(["translate", "--model", str(missing), "-i", "x"]) == 2
    assert f"{missing}: no such directory" in capsys.readouterr().err

    assert main(["translate", "--model", str(model_dir), "-i", str(tmp_path / "no.txt")]) == 2
    assert "no.txt: cannot read" in capsys.readouterr().err

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nalso fine\nbroken \xff here\n")
    assert main(["translate", "--model", str(model_dir), "-i", str(bad)]) == 2
    assert "bad.txt" in (err := capsys.readouterr().err) and "line 3" in err

    good = tmp_path / "good.txt"
    good.write_text("ba ce\n")
    args = ["translate", "--model", str(model_dir), "-i", str(good)]
    assert main([*args, "--beam-size", "2", "--n-best", "3"]) == 2
    assert "n_best must be in [1, beam_size=2], got 3" in capsys.readouterr().err
    output = tmp_path / "missing_dir" / "out.txt"
    assert main([*args, "-o", str(output)]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main([*args, "--parallel-batches", "0"]) == 2
    assert "--parallel-batches must be >= 1, got 0" in capsys.readouterr().err


def test_translator_skips_whitespace_only_lines_without_decoding(model_dir, alone):
    from translator.artifacts import load_model_dir
    from translator.inference import Translator

    loaded = load_model_dir(model_dir)
    translator = Translator.from_model(loaded.model, loaded.vocabulary)
    sentence = next(iter(alone))
    lines = ["\t", sentence, " \t ", "", "   "]
    translations = translator.search(lines)
    assert translations.texts == ["", alone[sentence], "", "", ""]
    stats = translations.stats
    assert (stats.lines, stats.empty, stats.batches) == (5, 4, 1)


def test_batches_decoded_at_once_translate_as_one_after_another(model_dir, lines):
    """`parallel_batches`: batches run at the same time, and every hypothesis (text,
    score, ids), count and progress report is what one batch after another gives, with
    and without target prefixes; a batch's error reaches the caller."""
    from translator.artifacts import load_model_dir
    from translator.inference import Translator
    from translator.search import SearchConfig

    loaded = load_model_dir(model_dir)
    config = SearchConfig(beam_size=3, n_best=2)
    prefixes = [line.split()[0] if len(line.split()) > 2 else "" for line in lines]

    def translator(parallel: int):
        return Translator.from_model(
            loaded.model, loaded.vocabulary, config, batch_tokens=48, parallel_batches=parallel
        )

    def run(translator, **kwargs):
        reported = []
        translations = translator.search(lines, progress=reported.append, **kwargs)
        return translations, reported

    one_after_another = translator(1)
    at_once = translator(3)
    decoder, lock, calls = at_once.decoder, threading.Lock(), itertools.count()
    together = threading.Barrier(2, timeout=120)

    def overlapping(*args):
        with lock:
            index = next(calls)
        if index < 2:  # the first two batches wait for each other: both must be running
            together.wait()
        return decoder(*args)

    at_once.decoder = overlapping
    for kwargs in ({}, {"prefixes": prefixes}):
        expected, expected_progress = run(one_after_another, **kwargs)
        assert expected.stats.batches >= 4
        got, progress = run(at_once, **kwargs)
        assert got.hypotheses == expected.hypotheses
        assert got.stats == expected.stats
        assert progress == expected_progress and sum(progress) == len(lines)
        calls, together = itertools.count(), threading.Barrier(2, timeout=120)

    def failing(*args):
        with lock:
            index = next(calls)
        if index == 2:
            raise ValueError("batch 2 failed")
        return decoder(*args)

    at_once.decoder = failing
    with pytest.raises(ValueError, match="batch 2 failed"):
        at_once.search(lines)


@pytest.mark.slow
def test_xla_gives_the_same_translations(model_dir, lines, alone, tmp_path):
    source = _write_gz(tmp_path / "in.txt.gz", lines)
    output = tmp_path / "out.txt"
    args = ["--model", str(model_dir), "-i", str(source), "-o", str(output), "-q", "--xla"]
    assert main(["translate", *args, "--batch-tokens", "48"]) == 0
    written = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert written == [alone[line] if line.strip() else "" for line in lines]


def test_precision_option_picks_what_the_search_computes_in(model_dir, lines, tmp_path):
    """A mixed_bfloat16 model decodes in bfloat16 by default, in float32 on request."""
    import json

    from translator.artifacts import load_model_dir, save_model_dir
    from translator.inference import Translator

    trained = load_model_dir(model_dir)
    mixed_dir = save_model_dir(
        tmp_path / "mixed",
        trained.model.with_policy("mixed_bfloat16"),
        model_dir / "vocab",
        {"note": "mixed_bfloat16 copy"},
    )
    mixed = load_model_dir(mixed_dir).model
    assert mixed.dtype_policy.name == "mixed_bfloat16"
    text = [line for line in lines if line.strip()][:12]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(text) + "\n")
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(text) + "\n")
    for precision, dtype in (("model", "bfloat16"), ("float32", "float32")):
        output, report = tmp_path / f"{precision}.txt", tmp_path / precision
        common = ["--model", str(mixed_dir), "--precision", precision]
        assert main(["translate", *common, "-q", "-i", str(source), "-o", str(output)]) == 0
        translator = Translator.from_model(mixed.for_inference(precision), trained.vocabulary)
        want = translator.translate(text)
        assert output.read_text(encoding="utf-8").split("\n")[:-1] == want
        args = ["evaluate", *common, "--src", str(source), "--ref", str(reference)]
        assert main([*args, "--report", str(report)]) == 0
        search = json.loads((report / "report.json").read_text())["search"]
        assert search["compute_dtype"] == dtype


def test_sampling_is_repeatable_by_seed_and_writes_every_draw(model_dir, lines, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def run(*options):
        output = tmp_path / "out.txt"
        args = ["translate", "--model", str(model_dir), "-i", str(source), "-o", str(output)]
        assert main([*args, "-q", "--sampling", "topk:8", *options]) == 0
        return output.read_text(encoding="utf-8").splitlines()

    first = run("--seed", "3", "--batch-tokens", "48")
    assert run("--seed", "3", "--batch-tokens", "48") == first
    assert run("--seed", "4", "--batch-tokens", "48") != first
    rows = run("--seed", "3", "--num-samples", "3", "--n-best", "3")
    assert len(rows) == 3 * len(lines)
    for index, line in enumerate(lines):
        group = [row.split(" ||| ") for row in rows[3 * index : 3 * index + 3]]
        scores = [float(fields[2]) for fields in group]
        assert scores == sorted(scores, reverse=True)
        assert all(fields[1] for fields in group) == bool(line.strip())


def test_prefix_file_starts_each_translation_with_its_prefix(
    model_dir, lines, alone, tmp_path, capsys
):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # A prefix of each translation's first word (the best output continues it), "" for some.
    prefixes = [
        alone[line].split(" ")[0] if line.strip() and i % 3 else "" for i, line in enumerate(lines)
    ]
    prefix_file = tmp_path / "prefixes.txt"
    prefix_file.write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    args = ["translate", "--model", str(model_dir), "-i", str(source), "-o", str(output), "-q"]
    assert main([*args, "--prefix-file", str(prefix_file), "--beam-size", "1"]) == 0
    written = output.read_text(encoding="utf-8").splitlines()
    assert len(written) == len(lines)
    for line, prefix, text in zip(lines, prefixes, written, strict=True):
        assert text.startswith(prefix) if line.strip() else text == ""
    prefix_file.write_text("one\ntwo\n", encoding="utf-8")
    capsys.readouterr()
    assert main([*args, "--prefix-file", str(prefix_file)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{prefix_file}: 2 lines for the {len(lines)} lines" in error[0]


def test_a_paragraph_is_its_sentences_translated_alone_and_rejoined(
    model_dir, lines, tmp_path, capsys
):
    """Each line's sentences translated on their own, joined with the whitespace between
    them; `--no-split` translates the line as one segment, which gives other words."""
    from translator.artifacts import load_model_dir
    from translator.inference import Translator

    s = [line for line in lines if line.strip() and len(line.split()) < 9][:5]
    paragraphs = [f"{s[0]}. {s[1]}!  {s[2]}?", "", f"\t{s[3]}. {s[4]}."]
    loaded = load_model_dir(model_dir)
    alone = Translator.from_model(loaded.model, loaded.vocabulary)  # no splitter

    def each(sentence: str) -> str:
        return alone.translate([sentence])[0]

    want = [
        f"{each(s[0] + '.')} {each(s[1] + '!')}  {each(s[2] + '?')}",
        "",
        f"\t{each(s[3] + '.')} {each(s[4] + '.')}",
    ]
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(paragraphs) + "\n", encoding="utf-8")
    args = ["translate", "--model", str(model_dir), "-i", str(source), "-o", str(output)]
    assert main([*args, "--source-lang", "en"]) == 0
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == want
    summary = capsys.readouterr().err
    assert "translated 3 lines (1 empty, 0 truncated) as 5 segments (2 lines split" in summary

    # Progress is reported in lines, whatever the segments: all of them, once.
    from translator.documents import SentenceSplitter

    splitting = Translator.from_model(
        loaded.model, loaded.vocabulary, batch_tokens=16, splitter=SentenceSplitter("en")
    )
    reported = []
    assert splitting.search(paragraphs, progress=reported.append).texts == want
    assert sum(reported) == len(paragraphs) and len(reported) > 2

    capsys.readouterr()
    assert main([*args, "--no-split"]) == 0
    assert "translated 3 lines (1 empty, 0 truncated) as 2 segments (0 lines split" in (
        capsys.readouterr().err
    )  # each line that is not empty, as it is
    whole = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert whole == [alone.translate([line])[0] for line in paragraphs]
    assert whole[0] != want[0] and whole[2] != want[2].strip()  # the mode matters here


def test_a_paragraphs_alignment_is_its_sentences_moved_to_their_words(model_dir, lines, tmp_path):
    """`--alignments` on a paragraph: each sentence's pairs (aligned alone), offset by the
    words of the sentences before it on both sides; n-best lists get a fourth column."""
    from translator.artifacts import load_model_dir
    from translator.inference import Translator

    s = [line for line in lines if line.strip() and len(line.split()) < 9][:3]
    paragraph = f"{s[0]}. {s[1]}!  {s[2]}?"
    loaded = load_model_dir(model_dir)
    alone = Translator.from_model(loaded.model, loaded.vocabulary)  # no splitter
    found = [alone.search([sentence], alignments=True).hypotheses[0][0]
             for sentence in (s[0] + ".", s[1] + "!", s[2] + "?")]  # fmt: skip
    want, source_words, target_words = [], 0, 0
    for sentence, hypothesis in zip((s[0], s[1], s[2]), found, strict=True):
        for pair in hypothesis.alignment.split():
            i, j = map(int, pair.split("-"))
            want.append((i + source_words, j + target_words))
        source_words += len(sentence.split())
        target_words += len(hypothesis.text.split())
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text(paragraph + "\n\n", encoding="utf-8")
    args = ["translate", "--model", str(model_dir), "-i", str(source), "-o", str(output), "-q"]
    assert main([*args, "--source-lang", "en", "--alignments"]) == 0
    text, pairs = output.read_text(encoding="utf-8").split("\n")[0].split(" ||| ")
    assert text == f"{found[0].text} {found[1].text}  {found[2].text}"
    assert pairs == " ".join(f"{i}-{j}" for i, j in sorted(want))
    assert output.read_text(encoding="utf-8").split("\n")[1] == " ||| "  # blank: nothing
    assert pairs != " ".join(h.alignment for h in found)  # the control: moved, not as alone

    assert main([*args, "--source-lang", "en", "--alignments", "--n-best", "2"]) == 0
    first = output.read_text(encoding="utf-8").split("\n")[0].split(" ||| ")
    assert first[0] == "0" and first[1] == text and first[3] == pairs


def test_a_line_over_the_length_limit_is_split_again_and_nothing_is_cut(
    model_dir, lines, tmp_path, capsys
):
    """A line of ~100 pieces under a 16-token limit: translated in pieces that each fit,
    partition the line's words and are rejoined; the cut translation differs."""
    from translator.artifacts import load_model_dir
    from translator.documents import segment
    from translator.inference import Translator

    limit = 16
    long = " ".join(line.strip() for line in lines if line.strip())
    loaded = load_model_dir(model_dir)
    translator = Translator.from_model(loaded.model, loaded.vocabulary, max_source_length=limit)
    pieces = segment([long], None, translator._fits).segments
    assert " ".join(pieces) == long and len(pieces) > 3  # the words, in order, all kept
    encoded = loaded.vocabulary.host.encode(pieces)
    assert all(len(ids) <= limit - 1 for ids in encoded)  # room for EOS
    assert len(loaded.vocabulary.host.encode([long])[0]) > 4 * limit

    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text(long + "\n", encoding="utf-8")
    args = ["translate", "--model", str(model_dir), "-i", str(source), "-o", str(output)]
    assert main([*args, "--max-source-length", str(limit)]) == 0
    (written,) = output.read_text(encoding="utf-8").splitlines()
    assert written == " ".join(translator.translate(pieces))
    summary = capsys.readouterr().err
    assert "0 truncated) as" in summary and "1 over the length limit split again" in summary
    cut = translator.search_segments([long], None, None)  # the SavedModel's way: cut
    assert cut.stats.truncated == 1 and cut.texts[0] != written


def test_an_html_page_keeps_its_markup_and_says_what_was_repaired(
    model_dir, lines, tmp_path, capsys
):
    """`--format html`: the page's tags, attributes and code as written, the text
    translated; a malformed page repaired and said so on one line; text-only options
    refused."""
    s = [line for line in lines if line.strip() and len(line.split()) >= 3][:2]
    first = s[0].split()
    page = (
        f'<html><body>\n<p class="x">{first[0]} <b>{first[1]}</b> {" ".join(first[2:])}'
        f" <code>a &amp;&amp; b</code></p>\n<pre> {s[1]} </pre><p><i>{s[1]}</p>\n</body></html>\n"
    )
    source, output = tmp_path / "page.html", tmp_path / "page.out.html"
    source.write_text(page, encoding="utf-8")
    args = ["translate", "--model", str(model_dir), "-i", str(source), "-o", str(output)]
    assert main([*args, "--format", "html"]) == 0
    got = output.read_text(encoding="utf-8")
    err = capsys.readouterr().err
    assert "repaired the page as a browser reads it: closed <i> where its block ends" in err
    kept = ('<p class="x">', "<b>", "</b>", "<code>a &amp;&amp; b</code>", f"<pre> {s[1]} </pre>")
    assert all(part in got for part in kept)
    assert got.startswith("<html><body>\n") and got.endswith("</p>\n</body></html>\n")
    assert "<i>" in got and got.count("</i>") == 1  # closed where its block ends
    assert s[1] not in got.replace(f"<pre> {s[1]} </pre>", "")  # the rest translated
    for extra in (["--n-best", "2"], ["--alignments"]):
        assert main([*args, "--format", "html", *extra]) == 2
        assert "is for --format text" in capsys.readouterr().err
