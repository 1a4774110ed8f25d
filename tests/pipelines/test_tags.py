"""Tags: `build-vocab --user-symbols` keeps them one piece; the text path prepends them."""

import pytest
import tensorflow as tf

from tests.support.corpora import write_copy_corpus
from translator.cli import main
from translator.pipelines.vocabulary import load_vocabulary
from translator.text import prepare

TAGS = "<2de>,<2en>,<bt>"


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tags")
    source, target = write_copy_corpus(root, 300, seed=5)
    out = root / "vocab"
    args = ["build-vocab", "--src", str(source), "--tgt", str(target), "--out", str(out)]
    assert main([*args, "--vocab-size", "42", "--no-byte-fallback", "--user-symbols", TAGS]) == 0
    return out


def test_each_user_symbol_is_one_piece_and_recorded(vocab_dir):
    vocabulary = load_vocabulary(vocab_dir)
    assert vocabulary.metadata.tags == tuple(TAGS.split(","))
    for tag in vocabulary.metadata.tags:
        tag_id = vocabulary.tag_id(tag)
        assert vocabulary.source.id_to_piece(tag_id) == tag
        assert tag_id in vocabulary.source.encode([f"ba {tag} ce"])[0]  # never split


def test_a_bad_user_symbols_list_is_one_error_line(vocab_dir, tmp_path, capsys):
    src = vocab_dir.parent / "5.src"
    args = ["build-vocab", "--src", str(src), "--tgt", str(src), "--out", str(tmp_path / "v")]
    with pytest.raises(SystemExit):
        main([*args, "--vocab-size", "60", "--user-symbols", "<a>,,<b>"])
    assert "without spaces" in capsys.readouterr().err


def test_prepare_tags_every_non_empty_source_and_keeps_empty_lines_empty(vocab_dir):
    vocabulary = load_vocabulary(vocab_dir)
    tag = vocabulary.tag_id("<2de>")
    lines = tf.constant(["ba ce", "", "  ", "di fo gu"])
    plain = prepare(lines, vocabulary.source, 64)
    tagged = prepare(lines, vocabulary.source, 64, tag)
    assert tagged.rows.numpy().tolist() == plain.rows.numpy().tolist() == [0, 3]
    assert tagged.empty.numpy().tolist() == [False, True, True, False]
    for with_tag, without in zip(tagged.source_ids.numpy(), plain.source_ids.numpy(), strict=True):
        ids = [int(t) for t in without if t]
        assert [int(t) for t in with_tag if t] == [tag, *ids]
    # The tag counts against the source limit: the cut leaves room for it.
    cut = prepare(tf.constant(["di fo gu ba ce"]), vocabulary.source, 4, tag)
    assert cut.truncated.numpy().tolist() == [True]
    assert int(cut.lengths.numpy()[0]) == 4 and int(cut.source_ids.numpy()[0, 0]) == tag
