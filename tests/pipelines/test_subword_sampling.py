"""Subword sampling in the training pipeline (`PipelineConfig.subword_nbest`).

Off, the pipeline is today's, batch for batch; on, the same seed gives the same batches,
each epoch draws anew, a skipped (resumed) stream continues as the uninterrupted one, every
drawn segmentation decodes to the sentence, and validation stays deterministic.
"""

import dataclasses

import numpy as np
import pytest

from tests.support.corpora import read_gz_lines, write_lines
from translator.constants import EOS_ID, PAD_ID
from translator.errors import ConfigError
from translator.pipelines.config import PipelineConfig
from translator.pipelines.dataset import make_dataset

BASE = PipelineConfig(
    batch_tokens=2048, max_source_length=64, max_target_length=64, shuffle_buffer_size=300, seed=5
)
# Small line batches: several seeds an epoch, drawn by parallel calls.
SAMPLED = dataclasses.replace(BASE, subword_nbest=8, subword_alpha=0.1, tokenize_batch_size=32)
PAIRS = 400


@pytest.fixture(scope="module")
def corpus(multi30k_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("sampling")
    sources = read_gz_lines(multi30k_dir / "train.en.gz", PAIRS)
    targets = read_gz_lines(multi30k_dir / "train.de.gz", PAIRS)
    return write_lines(root / "s.en", sources), write_lines(root / "s.de", targets)


def batches(dataset, count=None):
    taken = dataset if count is None else dataset.take(count)
    return [
        (f["source_ids"].numpy(), f["decoder_input_ids"].numpy(), labels.numpy())
        for f, labels in taken
    ]


def rows(array):
    """The rows without padding (and without the EOS the labels and sources end with)."""
    return [tuple(int(i) for i in row if i not in (PAD_ID, EOS_ID)) for row in array]


def equal(first, second):
    return len(first) == len(second) and all(
        all(np.array_equal(a, b) for a, b in zip(x, y, strict=True))
        for x, y in zip(first, second, strict=True)
    )


def one_best(corpus, vocabulary) -> list[tuple[int, ...]]:
    """The kept pairs' source sentences as the tokenizer itself segments them (one-best),
    sorted: a pair is kept when both sides fit `BASE`'s limits with their EOS."""
    sources, targets = (vocabulary.source.encode(path.read_text("utf-8").splitlines())
                        for path in corpus)  # fmt: skip
    return sorted(
        tuple(int(i) for i in source)
        for source, target in zip(sources, targets, strict=True)
        if len(source) < BASE.max_source_length and len(target) < BASE.max_target_length
    )


def test_off_is_the_one_best_segmentation_batch_for_batch(corpus, vocabulary):
    """subword_nbest 0 or 1 (off): every source row is its sentence's one-best pieces (the
    tokenizer's own, not the pipeline's), and the batches are those without sampling;
    sampling on (the control) segments some sentences otherwise."""
    plain = batches(make_dataset(*corpus, vocabulary, BASE, training=True))
    assert sorted(r for b in plain for r in rows(b[0])) == one_best(corpus, vocabulary)
    for nbest in (1, 2):
        off = dataclasses.replace(BASE, subword_nbest=nbest, subword_alpha=0.5)
        same = equal(batches(make_dataset(*corpus, vocabulary, off, training=True)), plain)
        assert same == (nbest == 1), f"subword_nbest={nbest}"


def test_the_same_seed_gives_the_same_batches_and_each_epoch_draws_anew(corpus, vocabulary):
    def two_epochs(config):
        return batches(make_dataset(*corpus, vocabulary, config, training=True).repeat(2))

    first, again = two_epochs(SAMPLED), two_epochs(SAMPLED)
    assert equal(first, again)
    half = len(first) // 2
    one = sorted(r for b in first[:half] for r in rows(b[0]))
    two = sorted(r for b in first[half:] for r in rows(b[0]))
    assert one != two  # the second epoch segmented the same sentences otherwise
    other = two_epochs(dataclasses.replace(SAMPLED, seed=6))
    assert not equal(first, other)
    # Without sampling the two epochs hold the same rows, only shuffled.
    plain = batches(make_dataset(*corpus, vocabulary, BASE, training=True).repeat(2))
    half = len(plain) // 2
    same = sorted(r for b in plain[:half] for r in rows(b[0]))
    assert same == sorted(r for b in plain[half:] for r in rows(b[0]))


def test_a_resumed_stream_continues_as_the_uninterrupted_one(corpus, vocabulary):
    """`training.inputs` resumes by skipping the consumed batches of the repeated stream."""
    stream = make_dataset(*corpus, vocabulary, SAMPLED, training=True).repeat()
    whole = batches(stream, 30)
    resumed = batches(
        make_dataset(*corpus, vocabulary, SAMPLED, training=True).repeat().skip(17), 13
    )
    assert equal(resumed, whole[17:])


def test_drawn_segmentations_decode_to_the_sentence_and_vary(vocabulary):
    tokenizer = vocabulary.source
    sentences = ["A man in a blue shirt is standing on a ladder cleaning windows.", "Hi"]
    best = tokenizer.encode(sentences)
    drawn = [tokenizer.sample_ids(sentences, seed, 8, 0.1) for seed in range(40)]
    for rows_ in drawn:
        assert tokenizer.decode(rows_) == tokenizer.decode(best)
    assert len({tuple(rows_[0]) for rows_ in drawn}) > 3  # several segmentations drawn
    assert tuple(best[0]) in {tuple(rows_[0]) for rows_ in drawn}
    # alpha large: almost always the best one; the same seed, the same draw.
    sharp = [tokenizer.sample_ids(sentences, seed, 8, 50.0)[0] for seed in range(20)]
    assert all(row == best[0] for row in sharp)
    assert tokenizer.sample_ids(sentences, 3, 8, 0.1) == drawn[3]


def test_validation_and_lengths_follow_the_draws(corpus, vocabulary):
    """Evaluation batches are the one-best ones; training's buckets hold the drawn lengths,
    which are not the one-best ones."""
    valid = batches(make_dataset(*corpus, vocabulary, SAMPLED, training=False))
    assert equal(valid, batches(make_dataset(*corpus, vocabulary, BASE, training=False)))
    drawn = batches(make_dataset(*corpus, vocabulary, SAMPLED, training=True))
    for source, decoder_input, labels in drawn:
        width = max(source.shape[1], labels.shape[1])
        assert source.size <= SAMPLED.batch_tokens and labels.size <= SAMPLED.batch_tokens
        longest = max(
            np.count_nonzero(source, axis=1).max(), np.count_nonzero(labels, axis=1).max()
        )
        assert width - longest < SAMPLED.bucket_width  # the batch's bucket is its draws'
        assert decoder_input.shape == labels.shape
    lengths = sorted(len(r) for b in drawn for r in rows(b[0]))
    assert lengths != sorted(len(r) for r in one_best(corpus, vocabulary))


def test_a_bpe_vocabulary_is_refused_naming_the_key(corpus, tmp_path):
    from translator.pipelines.vocab import build_vocabulary
    from translator.pipelines.vocabulary import load_vocabulary

    bpe = tmp_path / "bpe"
    build_vocabulary([corpus[0]], [corpus[1]], bpe, vocab_size=600, model_type="bpe")
    with pytest.raises(ConfigError, match=r"data\.pipeline\.subword_nbest: .* BPE"):
        make_dataset(*corpus, load_vocabulary(bpe), SAMPLED, training=True)
    with pytest.raises(ConfigError, match="subword_nbest must be >= 0"):
        PipelineConfig(subword_nbest=-1)
