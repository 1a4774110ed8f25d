"""Paragraphs split into sentences and rejoined; long sentences split again to fit.

The invariants: the segments of a line, each "translated" by the identity, rejoin into
the line as it was (its whitespace between sentences kept); every piece of a long
sentence fits, and the pieces with their gaps concatenate back to the sentence.
"""

import itertools
import logging

import pytest

from translator.documents import SentenceSplitter, fit_to_limit, segment

PARAGRAPHS = [
    "A man rides a bike.  Two dogs play in the snow! Is it cold?",
    "\tIndented: one sentence only",
    "",
    "   ",
    "Ein Mann fährt Fahrrad. Eine Frau liest ein Buch.",
    "Dr. Smith met Mrs. Jones at 3 p.m. today. They talked.",
]


def words_fit(limit: int):
    return lambda texts: [len(text.split()) <= limit for text in texts]


def test_identity_translations_rejoin_into_the_lines_as_they_were():
    segmented = segment(PARAGRAPHS, SentenceSplitter("en"))
    assert segmented.join(segmented.segments) == [line.rstrip() for line in PARAGRAPHS]
    assert segmented.segments[:3] == [
        "A man rides a bike.",
        "Two dogs play in the snow!",
        "Is it cold?",
    ]
    # The German line is two sentences; the titles' full stops end none.
    assert "Ein Mann fährt Fahrrad." in segmented.segments
    assert "Dr. Smith met Mrs. Jones at 3 p.m. today." in segmented.segments
    assert segmented.lines_split == 3
    assert [bool(layout.segments) for layout in segmented.layouts] == [1, 1, 0, 0, 1, 1]


def test_translations_go_back_to_their_own_lines_with_the_sources_whitespace():
    segmented = segment(PARAGRAPHS[:2], SentenceSplitter("en"))
    translated = segmented.join([f"<{i}>" for i in range(len(segmented.segments))])
    assert translated == ["<0>  <1> <2>", "\t<3>"]


def test_without_a_splitter_a_line_is_one_segment():
    segmented = segment(PARAGRAPHS, None)
    assert segmented.segments == [line.strip() for line in PARAGRAPHS if line.strip()]
    assert segmented.lines_split == 0


def test_a_sentence_over_the_limit_is_split_again_and_rejoined():
    long = "one two three, four five six seven eight nine ten eleven twelve"
    segmented = segment([f"Short one. {long}"], SentenceSplitter("en"), words_fit(5))
    assert segmented.sentences_split == 1
    assert all(len(piece.split()) <= 5 for piece in segmented.segments)
    assert segmented.join(segmented.segments) == [f"Short one. {long}"]
    # The clause boundary (after "three,") is preferred to the last space that fits.
    assert segmented.segments[1] == "one two three,"


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_every_piece_fits_and_the_pieces_concatenate_back(limit):
    text = "Alpha beta, gamma delta epsilon; zeta eta theta iota kappa lambda mu."
    pieces = fit_to_limit(text, words_fit(limit))
    assert "".join(piece + gap for piece, gap in pieces) == text
    assert all(len(piece.split()) <= limit for piece, _ in pieces)
    # As long as fits: a piece and the next word would not, unless a clause ended it.
    for (piece, _), (following, _) in itertools.pairwise(pieces):
        longer = f"{piece} {following.split()[0]}"
        assert len(longer.split()) > limit or piece.endswith((",", ";"))


def test_a_word_or_an_unspaced_script_longer_than_the_limit_is_cut_by_characters():
    chars_fit = lambda texts: [len(text) <= 4 for text in texts]  # noqa: E731
    assert fit_to_limit("abcdefghij", chars_fit) == [("abcd", ""), ("efgh", ""), ("ij", "")]
    # After a CJK comma where one falls in the second half of what fits.
    assert fit_to_limit("他走了，她来了吗我不知道", chars_fit)[0] == ("他走了，", "")


def test_an_unknown_language_splits_by_the_generic_rules_after_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="translator.documents"):
        first = SentenceSplitter("not a code!")
        SentenceSplitter("not a code!")
    warnings = [r for r in caplog.records if "generic rules" in r.getMessage()]
    assert len(warnings) == 1 and "'not a code!', not a language code" in warnings[0].getMessage()
    assert first.split("One. Two.") == ["One. ", "Two."]
    assert SentenceSplitter("zh-Hans").split("他走了。她来了！") == ["他走了。", "她来了！"]


@pytest.mark.parametrize(
    ("metadata", "languages"),
    [
        ({}, (None, None)),  # a model that does not say
        (
            {"config": {"data": {"train_source": "d/train.en.gz", "train_target": "d/t.de"}}},
            ("en", "de"),
        ),
        (
            {"config": {"data": {"train": [{"source": "a.ja.gz", "target": "a.zh.gz"}]}}},
            ("ja", "zh"),
        ),
        # The recipe's record says; it wins over the files' names.
        (
            {
                "config": {
                    "data": {"source_lang": "fr", "target_lang": "en", "train_source": "x.de"}
                }
            },
            ("fr", "en"),
        ),
        ({"imported_from": {"languages": ["en", "mul"]}}, ("en", "mul")),  # OPUS-MT's README
    ],
)
def test_the_source_language_comes_from_the_models_record(metadata, languages):
    from translator.artifacts import model_languages

    assert model_languages(metadata) == languages
