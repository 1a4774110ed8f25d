"""Word alignments: pieces make the words the user sees, and links go word to word.

The words of `PieceWords` are held to `translator.languages.word_count` of the decoded
text (whitespace tokens; a Chinese or Japanese character each) on a real SentencePiece
model with byte fallback; the links to hand-made attention; a line's alignment to its
segments'. The model's own alignments: tests/engines/test_ctranslate2.py (a reversing
model, on both engines), tests/test_export.py (the SavedModel), tests/serving.
"""

import io

import numpy as np
import pytest
import sentencepiece

from translator.alignment import PieceWords, joined_alignment, pharaoh, word_links, word_ranges
from translator.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from translator.documents import Layout
from translator.languages import word_count

CORPUS = [
    "A man (in a red hat) sleeps on a bench.",
    "Zwei Hunde rennen über die Wiese, oder?",
    "東京に行きます。 Tokyo is big.",
    "我们在公园里散步",
    'x東y z -- "quoted" words: 3.5kg, naïve café',
    "Dogs' toys aren't cheap!",
] * 20


@pytest.fixture(scope="module")
def processor():
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_writer=model,
        vocab_size=420,  # the 256 bytes, the characters, merges (as many as there are)
        hard_vocab_limit=False,
        model_type="bpe",  # merges within unspaced text too ("東京")
        byte_fallback=True,
        character_coverage=0.98,  # rarer characters, and unseen ones, come as bytes
        pad_id=PAD_ID,  # the ids of `translator.constants`, as `build-vocab` sets them
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        minloglevel=2,
    )
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


TEXTS = [
    *CORPUS[:6],
    "Ümlaut «quote» ☃ snowman ☃☃",
    "  spaced   out  ",
    "新しい 本 と ペン",
    "a\tb",
    "東京x公园 y",
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_pieces_make_the_words_of_the_decoded_text(processor, text):
    table = PieceWords.of_sentencepiece(processor)
    ids = processor.encode(text)
    decoded = processor.decode(ids)
    row = np.array([[*ids, EOS_ID, PAD_ID]], np.int32)
    first, last, words = (np.asarray(value) for value in word_ranges(row, table))
    assert int(words[0]) == word_count(decoded)
    # Every word has pieces, the pieces' words run in order, EOS and PAD are in none.
    spans = zip(first[0], last[0], strict=True)
    covered = {word for start, end in spans for word in range(start, end + 1)}
    assert covered == set(range(word_count(decoded)))
    in_words = [end for start, end in zip(first[0], last[0], strict=True) if start <= end]
    assert in_words == sorted(in_words)
    assert all(last[0, len(ids) :] < first[0, len(ids) :])


def test_byte_pieces_and_unspaced_words_in_a_piece_are_in_the_texts(processor):
    """The control of the cases above: the model really writes bytes and CJK pieces."""
    pieces = [processor.id_to_piece(i) for i in processor.encode(" ".join(TEXTS))]
    assert any(piece.startswith("<0x") for piece in pieces)
    assert "公园" in pieces  # unspaced words inside one piece


def test_each_target_piece_links_the_words_of_the_source_piece_it_attends_to_most():
    # Source "ab c" -> pieces ▁a, b, ▁c, EOS; target "x yz" -> ▁x, ▁y, z, EOS.
    surfaces = [None, None, None, None, " a", "b", " c", " x", " y", "z"]  # PAD .. EOS: none
    table = PieceWords.of(surfaces)
    source = np.array([[4, 5, 6, EOS_ID]], np.int32)
    target = np.array([[7, 8, 9, EOS_ID]], np.int32)
    weights = np.zeros((1, 4, 4), np.float32)
    weights[0, 0, 2] = 1.0  # ▁x -> ▁c
    weights[0, 1, 3] = 1.0  # ▁y -> EOS (no word): its best word piece
    weights[0, 1, 1] = 0.5  # ... b
    weights[0, 2, 0] = 1.0  # z -> ▁a
    weights[0, 3, 1] = 1.0  # EOS: no word
    links = np.asarray(word_links(weights, source, target, table, table))[0]
    assert pharaoh(links) == "0-1 1-0"


def test_a_lines_alignment_moves_each_segments_pairs_to_its_words():
    layout = Layout(" ", ((0, " "), (1, ""), (2, "")))
    sources = ["One two.", "Three fo", "ur."]  # the second sentence cut inside a word
    targets = ["Eins zwei.", "Drei vi", "er."]
    parts = ["0-0 1-1", "0-0 1-1", "0-0"]
    assert joined_alignment(layout, sources, targets, parts) == "0-0 1-1 2-2 3-3"
