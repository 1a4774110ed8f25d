"""Vocabularies: special ids, determinism, metadata, round trip, in-graph == Python."""

import hashlib
import json

import numpy as np
import pytest
import tensorflow as tf

from tests.support.corpora import read_gz_lines, write_lines
from translator.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from translator.pipelines.errors import CorpusError, VocabularyError
from translator.pipelines.tokenizer import SentencePieceTokenizer
from translator.pipelines.vocab import METADATA_FILE, build_vocabulary, train_sentencepiece
from translator.pipelines.vocabulary import load_vocabulary


@pytest.fixture(scope="module")
def small_files(multi30k_dir, tmp_path_factory):
    """800 pairs: enough for fast 500-id models."""
    root = tmp_path_factory.mktemp("small")
    source = write_lines(root / "s.en.gz", read_gz_lines(multi30k_dir / "train.en.gz", 800))
    target = write_lines(root / "s.de", read_gz_lines(multi30k_dir / "train.de.gz", 800))
    return source, target


def test_special_ids_are_pad_unk_bos_eos(vocabulary):
    tokenizer = vocabulary.source
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert [tokenizer.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.vocab_size == 1000
    ids = tokenizer.tokenize(["Ein Hund läuft."]).flat_values.numpy()
    assert ids.min() > EOS_ID  # tokenize adds no specials


def test_joint_vocabulary_directory_and_metadata(vocab_dir, vocabulary):
    assert vocabulary.joint and vocabulary.source is vocabulary.target
    meta = json.loads((vocab_dir / METADATA_FILE).read_text())
    assert meta["joint"] is True and meta["model_type"] == "unigram" and meta["vocab_size"] == 1000
    assert meta["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    model = vocab_dir / meta["models"]["source"]["file"]
    assert meta["models"]["source"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert vocabulary.source.sha256 == meta["models"]["source"]["sha256"]
    assert vocabulary.source.model_proto == model.read_bytes()
    assert (vocab_dir / "spm.vocab").read_text().splitlines()[3] == "</s>\t0"


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(small_files, tmp_path, model_type):
    first = build_vocabulary(
        [small_files[0]], [small_files[1]], tmp_path / "a", vocab_size=500, model_type=model_type
    )
    second = build_vocabulary(
        [small_files[0]], [small_files[1]], tmp_path / "b", vocab_size=500, model_type=model_type
    )
    assert (tmp_path / "a" / "spm.model").read_bytes() == (
        tmp_path / "b" / "spm.model"
    ).read_bytes()
    assert first.source_sha256 == second.source_sha256
    other_size = build_vocabulary(
        [small_files[0]], [small_files[1]], tmp_path / "c", vocab_size=600, model_type=model_type
    )
    assert other_size.source_sha256 != first.source_sha256  # the hash does depend on settings


def test_separate_vocabularies(small_files, tmp_path):
    meta = build_vocabulary(
        [small_files[0]], [small_files[1]], tmp_path, vocab_size=500, joint=False
    )
    assert (
        not meta.joint
        and meta.source_model == "source.model"
        and meta.target_model == "target.model"
    )
    vocabulary = load_vocabulary(tmp_path)
    assert vocabulary.source is not vocabulary.target
    assert vocabulary.source.sha256 != vocabulary.target.sha256
    assert vocabulary.source_vocab_size == vocabulary.target_vocab_size == 500
    # Each model learned its own language: German words are cheaper in the target model.
    german = ["Zwei junge Männer stehen draußen in der Nähe von Büschen."]
    assert len(vocabulary.target.encode(german)[0]) < len(vocabulary.source.encode(german)[0])


def test_existing_vocabulary_is_not_overwritten_silently(small_files, tmp_path):
    build_vocabulary([small_files[0]], [small_files[1]], tmp_path, vocab_size=500, model_type="bpe")
    with pytest.raises(VocabularyError, match="already holds a vocabulary"):
        build_vocabulary([small_files[0]], [small_files[1]], tmp_path, vocab_size=500)
    build_vocabulary(
        [small_files[0]],
        [small_files[1]],
        tmp_path,
        vocab_size=500,
        model_type="bpe",
        overwrite=True,
    )


def test_load_vocabulary_rejects_missing_and_altered_files(vocab_dir, tmp_path):
    with pytest.raises(VocabularyError, match="not a vocabulary directory"):
        load_vocabulary(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in vocab_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    load_vocabulary(copy)
    model = copy / "spm.model"
    model.write_bytes(model.read_bytes()[:-1] + b"x")
    with pytest.raises(VocabularyError, match=r"spm.model: sha256 .* differs"):
        load_vocabulary(copy)
    model.unlink()
    with pytest.raises(VocabularyError, match=r"spm\.model: cannot read"):
        load_vocabulary(copy)


def test_bad_training_input_is_a_clear_error(tmp_path):
    with pytest.raises(VocabularyError, match="too small"):
        train_sentencepiece(["a b c"], vocab_size=100)
    with pytest.raises(VocabularyError, match="model type"):
        train_sentencepiece(["a b c"], vocab_size=1000, model_type="wordpiece")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n" * 5 + b"caf\xe9\n")
    with pytest.raises(CorpusError, match=r"bad\.txt, line 6: not valid UTF-8"):
        build_vocabulary([bad], [bad], tmp_path / "v", vocab_size=300)
    with pytest.raises(CorpusError, match=r"missing\.txt"):
        build_vocabulary([tmp_path / "missing.txt"], [bad], tmp_path / "v", vocab_size=300)
    with pytest.raises(VocabularyError, match=r"Vocabulary size too high|vocab"):
        train_sentencepiece(["a b c", "d e f"] * 10, vocab_size=5000)


def test_a_size_too_high_says_the_most_the_corpus_supports_and_that_size_trains():
    sentences = ["a b c", "d e f"] * 10
    with pytest.raises(VocabularyError) as caught:
        train_sentencepiece(sentences, vocab_size=5000)
    most = caught.value.supported_size
    assert most is not None and 4 < most < 5000 and str(most) in str(caught.value)
    assert train_sentencepiece(sentences, vocab_size=most)  # the recipe's fallback


@pytest.mark.parametrize("language", ["en", "de"])
def test_round_trip_on_multi30k_validation(vocabulary, multi30k_dir, language):
    lines = read_gz_lines(multi30k_dir / f"val.{language}.gz")
    assert len(lines) == 1014
    tokenizer = vocabulary.source
    ids = tokenizer.tokenize(tf.constant(lines))  # in-graph
    assert ids.to_list() == tokenizer.encode(lines)  # identical to the Python tokenizer
    decoded = [text.decode("utf-8") for text in tokenizer.detokenize(ids).numpy()]
    assert decoded == tokenizer.decode(ids.to_list())
    exceptions = [(line, back) for line, back in zip(lines, decoded, strict=True) if line != back]
    assert len(exceptions) <= 0.001 * len(lines), exceptions[:5]
    for line, back in exceptions:
        # Explained by normalization: what SentencePiece normalizes the line to, and
        # normalization only touches spaces (identity rule + remove_extra_whitespaces).
        assert back == tokenizer.normalize(line)
        assert back == " ".join(part for part in line.split(" ") if part)


def test_round_trip_exceptions_are_whitespace_only(vocabulary):
    tokenizer = vocabulary.source
    lines = [" leading", "trailing ", "double  space", "ﬁ ligature ½ ＦＵＬＬ", "☃ 𝄞 ℌ 日本語"]
    decoded = tokenizer.decode(tokenizer.encode(lines))
    assert decoded == ["leading", "trailing", "double space", *lines[3:]]  # no NFKC, no UNK
    assert UNK_ID not in {i for row in tokenizer.encode(lines) for i in row}  # byte fallback


def test_detokenize_stops_at_eos_and_strips_padding(vocabulary):
    tokenizer = vocabulary.target
    words = tokenizer.encode(["Ein Hund", "Zwei Katzen schlafen"])
    a, b = words
    dense = np.zeros((3, len(b) + 6), np.int64)
    dense[0, : len(a) + 2] = [BOS_ID, *a, EOS_ID]
    dense[0, len(a) + 2 : len(a) + 4] = b[:2]  # garbage after EOS is ignored
    dense[1, : len(b) + 1] = [*b, EOS_ID]
    dense[2, :2] = [PAD_ID, PAD_ID]  # nothing at all
    texts = tokenizer.detokenize(tf.constant(dense)).numpy().tolist()
    assert texts == [b"Ein Hund", b"Zwei Katzen schlafen", b""]
    ragged = tf.ragged.constant([[*a, EOS_ID, *b], [*b]], dtype=tf.int32)
    assert tokenizer.detokenize(ragged).numpy().tolist() == [b"Ein Hund", b"Zwei Katzen schlafen"]
    assert tokenizer.decode([[*a, EOS_ID, *b], [BOS_ID, *b, PAD_ID]]) == [
        "Ein Hund",
        "Zwei Katzen schlafen",
    ]


def test_tokenizer_lives_in_a_saved_model(vocabulary, tmp_path):
    class Exported(tf.Module):
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def round_trip(self, texts):
            ids = self.tokenizer.tokenize(texts).to_tensor(PAD_ID)  # [batch, len]
            return {"ids": ids, "text": self.tokenizer.detokenize(ids)}

    module = Exported(vocabulary.source)
    texts = tf.constant(["Ein Mann fährt Fahrrad.", "A dog runs."])
    expected = module.round_trip(texts)
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    result = loaded.round_trip(texts)
    np.testing.assert_array_equal(result["ids"].numpy(), expected["ids"].numpy())
    assert result["text"].numpy().tolist() == [b"Ein Mann f\xc3\xa4hrt Fahrrad.", b"A dog runs."]


def test_tokenizer_from_file_equals_loaded(vocab_dir, vocabulary):
    tokenizer = SentencePieceTokenizer.from_file(vocab_dir / "spm.model")
    assert tokenizer.sha256 == vocabulary.source.sha256
    assert tokenizer.vocab_size == vocabulary.source.vocab_size
    assert tokenizer.piece_to_id("</s>") == EOS_ID


def test_tokenizer_survives_tf_random_set_seed(vocabulary, subset_files):
    # tf.random.set_seed clears TF's eager kernel cache, which destroys tensorflow_text's
    # kernel-owned SentencePiece resource; the tokenizer must keep working regardless.
    from translator.pipelines.config import PipelineConfig
    from translator.pipelines.dataset import make_dataset

    tokenizer = vocabulary.source
    texts = tf.constant(["Ein Hund.", "A dog."])
    expected = tokenizer.tokenize(texts).to_list()
    function = tf.function(lambda t: tokenizer.tokenize(t).to_tensor())
    function(texts)
    dataset = make_dataset(*subset_files, vocabulary, PipelineConfig(), training=False)
    tf.random.set_seed(7)
    assert tokenizer.tokenize(texts).to_list() == expected  # eager
    padded = tf.ragged.constant(expected).to_tensor().numpy()
    np.testing.assert_array_equal(function(texts).numpy(), padded)  # tf.function
    assert tokenizer.detokenize(tokenizer.tokenize(texts)).numpy().tolist() == [
        b"Ein Hund.",
        b"A dog.",
    ]
    assert sum(int(labels.shape[0]) for _, labels in dataset) == 3000  # built before the reset
