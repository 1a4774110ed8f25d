"""The tf.data pipeline: batch structure, token budget, exactly-once, shards, skip counts."""

import collections
import dataclasses
import logging

import numpy as np
import pytest
import tensorflow as tf

from tests.support.corpora import expected_pairs, read_gz_lines, write_lines
from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.pipelines.config import Bucket, PipelineConfig
from translator.pipelines.dataset import make_dataset, scan_corpus
from translator.pipelines.errors import CorpusError

CONFIG = PipelineConfig(
    batch_tokens=1024, max_source_length=64, max_target_length=64, shuffle_buffer_size=5000, seed=7
)


def real_tokens(row):
    """The row without its trailing padding; asserts padding occurs only at the end."""
    row = np.asarray(row)
    length = int(np.count_nonzero(row))
    assert np.all(row[:length] != PAD_ID) and np.all(row[length:] == PAD_ID), row
    return tuple(int(i) for i in row[:length])


def collect(dataset):
    """Every pair of an epoch, as tuples without padding, plus the batches' arrays."""
    pairs, batches = collections.Counter(), []
    for features, labels in dataset:
        source = features["source_ids"].numpy()
        decoder_input = features["decoder_input_ids"].numpy()
        labels = labels.numpy()
        batches.append((source, decoder_input, labels))
        for row in zip(source, decoder_input, labels, strict=True):
            pairs[tuple(real_tokens(part) for part in row)] += 1
    return pairs, batches


@pytest.fixture(scope="module")
def expected(defect_corpus, vocabulary):
    _, _, sources, targets = defect_corpus
    return expected_pairs(sources, targets, vocabulary, CONFIG)


def test_batch_structure_and_teacher_forcing(defect_corpus, vocabulary):
    dataset = make_dataset(defect_corpus[0], defect_corpus[1], vocabulary, CONFIG, training=True)
    features_spec, labels_spec = dataset.element_spec
    assert set(features_spec) == {"source_ids", "decoder_input_ids"}
    for spec in (features_spec["source_ids"], features_spec["decoder_input_ids"], labels_spec):
        assert spec.dtype == tf.int32 and spec.shape.rank == 2
    _, batches = collect(dataset)
    assert batches
    for source, decoder_input, labels in batches:
        assert source.dtype == decoder_input.dtype == labels.dtype == np.int32
        assert source.shape[0] == decoder_input.shape[0] == labels.shape[0] > 0
        assert decoder_input.shape == labels.shape
        for row in zip(source, decoder_input, labels, strict=True):
            src, dec, lab = (real_tokens(part) for part in row)
            assert len(dec) == len(lab) >= 2
            assert dec[0] == BOS_ID and lab[-1] == EOS_ID  # BOS first, EOS last
            assert lab[:-1] == dec[1:]  # labels are the decoder input shifted by one
            assert BOS_ID not in dec[1:] and EOS_ID not in dec and EOS_ID not in lab[:-1]
            assert src[-1] == EOS_ID and BOS_ID not in src and EOS_ID not in src[:-1]  # + EOS
        # Each side is padded to its own longest row, no further.
        assert np.count_nonzero(source[:, -1]) > 0 and np.count_nonzero(labels[:, -1]) > 0


def test_every_kept_pair_exactly_once_per_epoch(defect_corpus, vocabulary, expected):
    pairs, _, _ = expected
    for training in (True, False):
        dataset = make_dataset(
            defect_corpus[0], defect_corpus[1], vocabulary, CONFIG, training=training
        )
        produced, _ = collect(dataset)
        assert produced == pairs  # same multiset: nothing lost, nothing doubled
        again, _ = collect(dataset)
        assert again == pairs  # and again in the next epoch


def test_token_budget_holds_and_batches_are_full(defect_corpus, vocabulary):
    dataset = make_dataset(defect_corpus[0], defect_corpus[1], vocabulary, CONFIG, training=True)
    _, batches = collect(dataset)
    buckets = CONFIG.buckets()
    lengths = [b.length for b in buckets]
    partial = collections.Counter()
    real = 0
    for source, _, labels in batches:
        for array in (source, labels):
            assert array.shape[0] * array.shape[1] <= CONFIG.batch_tokens  # padding counted
        longest = max(source.shape[1], labels.shape[1])
        bucket = buckets[int(np.searchsorted(lengths, longest))]
        # The batch's bucket is the one of its longest row; it holds that bucket's batch
        # size except for at most one partial batch per bucket (the end of the epoch).
        assert source.shape[0] <= bucket.batch_size
        if source.shape[0] < bucket.batch_size:
            partial[bucket] += 1
        real += np.count_nonzero(labels)
    assert all(count == 1 for count in partial.values()), partial
    # Not wastefully small: on average 60% of the budget is real target tokens.
    assert real / (len(batches) * CONFIG.batch_tokens) > 0.6


def test_buckets_from_width_and_boundaries():
    config = PipelineConfig(
        batch_tokens=100, max_source_length=20, max_target_length=10, bucket_width=8
    )
    assert config.buckets() == (Bucket(8, 12), Bucket(16, 6), Bucket(20, 5))
    config = dataclasses.replace(config, bucket_boundaries=(5, 12, 30), batch_size_multiple=4)
    assert config.buckets() == (Bucket(5, 20), Bucket(12, 8), Bucket(20, 4))
    assert PipelineConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="batch_tokens"):
        PipelineConfig(batch_tokens=100, max_source_length=256)
    with pytest.raises(ValueError, match="ascending"):
        PipelineConfig(bucket_boundaries=(16, 8))
    with pytest.raises(ValueError, match="Unknown PipelineConfig field"):
        PipelineConfig.from_dict({"batch_size": 32})


def test_shuffling_is_seeded_and_changes_each_epoch(subset_files, vocabulary, tmp_path):
    # 400 pairs: several batches, quick to iterate six times.
    source = write_lines(tmp_path / "s.en", subset_files[0].read_text().splitlines()[:400])
    target = write_lines(tmp_path / "t.de", read_gz_lines(subset_files[1], 400))

    def order(dataset):
        return [tuple(labels.numpy()[0]) for _, labels in dataset]

    def make(config, training):
        return make_dataset(source, target, vocabulary, config, training=training)

    first = make(CONFIG, True)
    epoch1, epoch2 = order(first), order(first)
    assert len(epoch1) > 5 and epoch1 != epoch2  # reshuffled each epoch
    assert order(make(CONFIG, True)) == epoch1  # same seed: same order in a new pipeline
    assert order(make(dataclasses.replace(CONFIG, seed=8), True)) != epoch1
    evaluation = make(CONFIG, False)
    assert order(evaluation) == order(evaluation)  # deterministic without training


def test_two_shards_split_the_corpus_exactly(defect_corpus, vocabulary, expected):
    pairs, _, _ = expected
    shards = []
    for index in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=index, num_replicas_in_sync=2
        )
        dataset = make_dataset(
            defect_corpus[0],
            defect_corpus[1],
            vocabulary,
            CONFIG,
            training=True,
            input_context=context,
        )
        shards.append(collect(dataset)[0])
    # Multisets: a pair produced by both shards (or twice by one) would exceed its count.
    assert shards[0] + shards[1] == pairs  # disjoint halves, together everything once
    stats = scan_corpus(defect_corpus[0], defect_corpus[1], vocabulary, CONFIG, num_shards=2)
    assert stats.kept_per_shard == (sum(shards[0].values()), sum(shards[1].values()))
    assert abs(stats.kept_per_shard[0] - stats.kept_per_shard[1]) <= 10


def test_skipped_pairs_are_counted_exactly(defect_corpus, vocabulary, expected):
    pairs, empty, too_long = expected
    stats = scan_corpus(defect_corpus[0], defect_corpus[1], vocabulary, CONFIG)
    # Planted: 5 pairs with an empty or blank side (one also over-long), 3 over-long; a
    # few real captions are over 64 pieces with this small vocabulary too.
    assert (stats.pairs, stats.empty, stats.too_long) == (1500, 5, too_long)
    assert empty == 5 and too_long >= 3
    assert stats.kept == sum(pairs.values()) == stats.pairs - stats.empty - stats.too_long
    assert stats.target_tokens == sum(
        len(labels) for (_, _, labels), n in pairs.items() for _ in range(n)
    )
    assert sum(stats.bucket_counts) == stats.kept
    summary = stats.summary()
    assert (
        "1,500 pairs" in summary
        and "5 with an empty line" in summary
        and f"{too_long} longer than 64" in summary
    )


def test_summary_is_logged_once(multi30k_dir, vocabulary, tmp_path, caplog):
    source = write_lines(tmp_path / "a.en", ["A dog.", "", "A cat."])
    target = write_lines(tmp_path / "a.de", ["Ein Hund.", "Leer", "Eine Katze."])
    caplog.set_level(logging.INFO, logger="translator.pipelines")
    for _ in range(2):
        dataset = make_dataset(source, target, vocabulary, CONFIG, training=True)
    records = [r for r in caplog.records if r.name == "translator.pipelines"]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert (
        "3 pairs, 2 kept" in records[0].getMessage()
        and "1 with an empty line" in records[0].getMessage()
    )
    assert sum(int(labels.shape[0]) for _, labels in dataset) == 2


@pytest.mark.parametrize("batch_tokens", [CONFIG.batch_tokens, 2**16])
def test_static_shapes(defect_corpus, vocabulary, expected, batch_tokens):
    """Every batch has one of the buckets' fixed shapes. Evaluation keeps every pair (a
    bucket's last batch padded with rows of padding); training leaves exactly the counted
    remainders of buckets that fill a batch to later epochs, and trains a bucket that
    fills none as one padded batch (at 2**16 batch tokens no bucket fills one)."""
    pairs, _, _ = expected
    config = dataclasses.replace(
        CONFIG,
        static_shapes=True,
        bucket_width=16,
        batch_size_multiple=8,
        batch_tokens=batch_tokens,
    )
    shapes = {(b.batch_size, b.length) for b in config.buckets()}
    assert all(size % 8 == 0 for size, _ in shapes)
    stats = scan_corpus(defect_corpus[0], defect_corpus[1], vocabulary, config)
    sizes = [b.batch_size for b in config.buckets()]
    fills = [n >= size for n, size in zip(stats.bucket_counts, sizes, strict=True)]
    short = any(n and not fill for n, fill in zip(stats.bucket_counts, fills, strict=True))
    # (the premises: remainders of filling buckets, or buckets that fill no batch)
    if batch_tokens == CONFIG.batch_tokens:
        assert sum(stats.static_remainder) > 0 and "static shapes leave" in stats.summary()
    else:
        assert not any(fills) and sum(stats.static_remainder) == 0
    for training in (True, False):
        dataset = make_dataset(
            defect_corpus[0], defect_corpus[1], vocabulary, config, training=training
        )
        produced, batches = collect(dataset)
        padding = produced.pop(((), (), ()), 0)  # rows of padding only
        for source, decoder_input, labels in batches:
            assert source.shape == decoder_input.shape == labels.shape
            assert source.shape in shapes  # one of the buckets' fixed shapes
        left_out = sum(stats.static_remainder) if training else 0
        assert sum(produced.values()) == stats.kept - left_out
        assert all(count <= pairs[key] for key, count in produced.items())  # none twice
        assert (padding > 0) is (short or not training)  # training pads short buckets only


def test_bad_corpora_fail_before_the_first_batch(vocabulary, tmp_path):
    source = write_lines(tmp_path / "s.en", ["a", "b", "c"])
    target = write_lines(tmp_path / "t.de.gz", ["a", "b"])
    with pytest.raises(CorpusError, match=r"s\.en has 3 lines, .*t\.de\.gz has 2"):
        make_dataset(source, target, vocabulary, CONFIG, training=True)
    broken = tmp_path / "broken.de"
    broken.write_bytes(b"a\nb\n\xe4c\n")
    with pytest.raises(CorpusError, match=r"broken\.de, line 3: not valid UTF-8"):
        make_dataset(source, broken, vocabulary, CONFIG, training=False)


def test_length_limits_include_the_special_token(vocabulary, tmp_path):
    sources = ["A man in a red shirt.", "Two dogs.", "A woman reads a book in the park."]
    targets = ["Ein Mann.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest."]
    source = write_lines(tmp_path / "s.en", sources)
    target = write_lines(tmp_path / "t.de", targets)
    source_pieces = [len(ids) for ids in vocabulary.source.encode(sources)]
    target_pieces = [len(ids) for ids in vocabulary.target.encode(targets)]
    longest_source, longest_target = max(source_pieces), max(target_pieces)
    # Exactly at the limit (pieces + EOS == max_source_length): kept.
    config = dataclasses.replace(
        CONFIG, max_source_length=longest_source + 1, max_target_length=longest_target + 1
    )
    assert scan_corpus(source, target, vocabulary, config).kept == 3
    produced, batches = collect(make_dataset(source, target, vocabulary, config, training=False))
    assert sum(produced.values()) == 3
    assert max(b[0].shape[1] for b in batches) == longest_source + 1
    # One below: the longest source and the longest target are skipped.
    config = dataclasses.replace(
        config, max_source_length=longest_source, max_target_length=longest_target
    )
    stats = scan_corpus(source, target, vocabulary, config)
    too_long = sum(
        s + 1 > longest_source or t + 1 > longest_target
        for s, t in zip(source_pieces, target_pieces, strict=True)
    )
    assert stats.too_long == too_long >= 1 and stats.kept == 3 - too_long
    produced, _ = collect(make_dataset(source, target, vocabulary, config, training=False))
    assert sum(produced.values()) == stats.kept
