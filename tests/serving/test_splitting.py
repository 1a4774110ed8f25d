"""The server's paragraphs: a request's string is translated as its sentences (and the
pieces of one over the export's limit) each run alone through the SavedModel, rejoined.

In process: the session's export loaded as `translator serve` loads it, its `Predictor`
with the splitting `serve` builds by default, against the export's own signatures run on
the sentences themselves. The control: the same request without splitting gives another
translation.
"""

import math

import numpy as np
import pytest

from serving.batching import Batcher
from serving.config import BatchingConfig
from serving.model import ServedModel
from serving.protocol import RequestLimits
from serving.service import Predictor
from serving.splitting import Splitting
from tests.support.corpora import synthetic_sentences
from tests.support.serving import MAX_SOURCE_LENGTH, SEARCH
from translator.cli import main as cli_main

# Sentences the splitter ends at their full stops; the paragraph keeps two spaces once.
SENTENCES = [s.rstrip(".,!") + "." for s in synthetic_sentences(3, seed=61, max_words=6)]
PARAGRAPH = f"{SENTENCES[0]} {SENTENCES[1]}  {SENTENCES[2]}"
# A page: a paragraph with bold, code and an entity, a link in a list, an image alone in
# its block (no text: the model is not asked), and a page left unclosed.
PAGE = (
    f"<p>{SENTENCES[0]} <b>{SENTENCES[1]}</b> <code>x &lt; 1</code> {SENTENCES[2]}</p>\n"
    f'<ul><li><a href="/a?b=1&amp;c=2">{SENTENCES[1]}</a></li><li><img src="x.png"></li></ul>\n'
)
BROKEN = f"<p><i>{SENTENCES[0]}</p>"


@pytest.fixture(scope="module")
def served(exported):
    model = ServedModel("translator", exported.base)
    batcher = Batcher(model.run, BatchingConfig())
    batcher.start()
    splitting = Splitting.of_export(model.path, model.metadata, split=True, source_lang="en")
    yield model, Predictor(model, batcher, RequestLimits(), splitting=splitting)
    batcher.stop()


def run(model, signature, rows):
    return model.run(signature, [r.encode() if isinstance(r, str) else r for r in rows])


def test_a_paragraph_is_its_sentences_run_alone_and_rejoined(served):
    model, predictor = served
    got = predictor.submit("serving_default", [PARAGRAPH.encode(), b""]).result(timeout=120)
    alone = run(model, "serving_default", SENTENCES)
    texts = [text.decode() for text in alone["translations"]]
    assert got["translations"][0].decode() == f"{texts[0]} {texts[1]}  {texts[2]}"
    assert got["scores"][0] == pytest.approx(float(np.mean(alone["scores"])), rel=1e-6)
    assert got["translations"][1] == b"" and got["scores"][1] == 0.0  # as the export says
    whole = run(model, "serving_default", [PARAGRAPH])["translations"][0]
    assert whole != got["translations"][0]  # the control: unsplit, another translation

    # The n-best lists: the k-th of each sentence, joined; the first is the 1-best.
    lists = predictor.submit("n_best", [PARAGRAPH.encode()]).result(timeout=120)
    assert lists["translations"][0, 0] == got["translations"][0]
    assert list(lists["scores"][0]) == sorted(lists["scores"][0], reverse=True)


def test_a_paragraphs_alignment_is_its_sentences_moved_to_their_words(served):
    """The aligned signature through splitting: each sentence's pairs, offset by the
    words of the sentences before it, on both sides."""
    model, predictor = served
    got = predictor.submit("aligned", [PARAGRAPH.encode(), b""]).result(timeout=120)
    alone = run(model, "aligned", SENTENCES)
    texts = [text.decode() for text in alone["translations"]]
    want, source_words, target_words = [], 0, 0
    for sentence, text, pairs in zip(SENTENCES, texts, alone["alignments"], strict=True):
        for pair in pairs.decode().split():
            i, j = map(int, pair.split("-"))
            want.append(f"{i + source_words}-{j + target_words}")
        source_words += len(sentence.split())
        target_words += len(text.split())
    assert got["alignments"][0].decode() == " ".join(want)
    assert got["translations"][0].decode() == f"{texts[0]} {texts[1]}  {texts[2]}"
    assert got["alignments"][1] == b""
    # The control: each sentence's own pairs, unmoved, are not the paragraph's.
    assert got["alignments"][0] != b" ".join(alone["alignments"])


def test_a_tag_goes_with_every_sentence_and_a_prefix_with_the_first(served):
    model, predictor = served
    got = predictor.submit("tagged", [(PARAGRAPH.encode(), b"<2de>")]).result(timeout=120)
    alone = run(model, "tagged", [(s.encode(), b"<2de>") for s in SENTENCES])["translations"]
    assert got["translations"][0] == b" ".join(alone[:2]) + b"  " + alone[2]
    prefix = b"Baku"
    got = predictor.submit("prefixed", [(PARAGRAPH.encode(), prefix)]).result(timeout=120)
    rows = [(s.encode(), prefix if i == 0 else b"") for i, s in enumerate(SENTENCES)]
    alone = run(model, "prefixed", rows)["translations"]
    assert got["translations"][0] == b" ".join(alone[:2]) + b"  " + alone[2]
    assert got["translations"][0].startswith(prefix)


def test_a_sentence_over_the_exports_limit_is_split_again_not_cut(served, exported):
    import sentencepiece

    model, predictor = served
    long = " ".join(synthetic_sentences(12, seed=62)).replace(".", ",").replace("!", ",")
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(
            exported.version_dir / "assets" / model.metadata["vocabulary"]["source_model"]
        )
    )
    assert len(processor.encode(long)) > 3 * MAX_SOURCE_LENGTH
    planned = predictor.splitting.plan([long.encode()], ("inputs",))
    pieces = [row.decode() for row in planned.rows]
    assert " ".join(pieces) == long and len(pieces) > 3  # every word, in order
    assert all(len(ids) <= MAX_SOURCE_LENGTH - 1 for ids in processor.encode(pieces))
    got = predictor.submit("serving_default", [long.encode()]).result(timeout=120)
    alone = run(model, "serving_default", pieces)
    assert got["translations"][0] == b" ".join(alone["translations"])
    cut = run(model, "serving_default", [long])["translations"][0]  # the export alone cuts
    assert cut != got["translations"][0] and math.isfinite(got["scores"][0])


def test_without_splitting_a_string_runs_as_it_is(served):
    model, _ = served
    predictor = Predictor(model, served[1].batcher, RequestLimits())
    got = predictor.submit("serving_default", [PARAGRAPH.encode()]).result(timeout=120)
    assert got["translations"][0] == run(model, "serving_default", [PARAGRAPH])["translations"][0]


def test_html_pages_come_back_as_translate_format_html_writes_them(
    served, exported, tmp_path, capsys
):
    """The server's `html` signature == `translate --format html` with the export's search,
    page by page: the same text, markup and repairs."""
    _, predictor = served
    got = predictor.submit("html", [PAGE.encode(), BROKEN.encode()]).result(timeout=120)
    search = ["--beam-size", str(SEARCH.beam_size), "--length-penalty", str(SEARCH.length_penalty),
              "--max-source-length", str(MAX_SOURCE_LENGTH), "--quiet"]  # fmt: skip
    for index, page in enumerate((PAGE, BROKEN)):
        (tmp_path / "page.html").write_text(page, "utf-8")
        capsys.readouterr()
        args = ["translate", "--model", str(exported.model_dir), "-i", str(tmp_path / "page.html")]
        assert cli_main([*args, "--format", "html", *search]) == 0
        out, err = capsys.readouterr()
        assert got["translations"][index].decode() == out
        repairs = got["repairs"][index].decode()
        assert (f"repaired the page as a browser reads it: {repairs}\n" in err) == bool(repairs)
    assert got["repairs"][0] == b"" and b"closed <i>" in got["repairs"][1]
    page = got["translations"][0].decode()
    for kept in (
        "<code>x &lt; 1</code>",
        '<a href="/a?b=1&amp;c=2">',
        '<li><img src="x.png"></li>',
    ):
        assert kept in page
    assert page != PAGE  # translated
