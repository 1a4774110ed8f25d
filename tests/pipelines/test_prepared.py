"""A prepared corpus: the tf.data pipeline's pairs, tokenized once, read back with numpy.

Its invariants: it holds exactly the pairs (and teacher-forced rows) `make_dataset`
makes, whatever the shard size; its batches follow the pipeline's bucket rules; an
epoch is a seeded permutation and a resume continues at the batch it stopped at; a
corpus made with another vocabulary or other limits, or damaged, is one clear error;
reading it imports no TensorFlow.
"""

import collections
import dataclasses
import itertools
import json

import numpy as np
import pytest

from tests.support.no_tensorflow import run_without_tensorflow
from translator.constants import BOS_ID, PAD_ID
from translator.errors import ConfigError
from translator.pipelines.config import PipelineConfig
from translator.pipelines.errors import CorpusError
from translator.pipelines.prepared import (
    MANIFEST_FILE,
    PreparedCorpus,
    choose_bucket_boundaries,
    shard_name,
)

CONFIG = PipelineConfig(batch_tokens=600, max_source_length=48, max_target_length=48)


@pytest.fixture(scope="module")
def prepared(defect_corpus, vocabulary, tmp_path_factory):
    """The defect corpus prepared in shards of 400 pairs (four shards)."""
    from translator.pipelines.prepare import prepare_corpus

    out = tmp_path_factory.mktemp("prepared") / "corpus"
    prepare_corpus(*defect_corpus[:2], vocabulary, out, CONFIG, shard_pairs=400)
    return PreparedCorpus(out)


def rows(batches) -> collections.Counter:
    """The multiset of (source, decoder input, labels) rows, padding removed."""
    found = collections.Counter()
    for features, labels in batches:
        for source, decoder, label in zip(
            features["source_ids"], features["decoder_input_ids"], labels, strict=True
        ):
            found[
                tuple(source[source > 0]), tuple(decoder[decoder > 0]), tuple(label[label > 0])
            ] += 1
    return found


def test_it_holds_exactly_the_pipelines_pairs_and_counts(prepared, defect_corpus, vocabulary):
    from translator.pipelines.dataset import make_dataset, scan_corpus

    manifest, stats = prepared.manifest, scan_corpus(*defect_corpus[:2], vocabulary, CONFIG)
    assert manifest.shard_pairs == (400, 400, 400, stats.kept - 1200)
    assert (manifest.pairs, manifest.kept, manifest.empty, manifest.too_long) == (
        stats.pairs,
        stats.kept,
        stats.empty,
        stats.too_long,
    )
    assert manifest.empty == 5 and manifest.too_long >= 3  # the planted defects, counted
    assert (manifest.source_tokens, manifest.target_tokens) == (
        stats.source_tokens,
        stats.target_tokens,
    )
    expected = rows(
        make_dataset(*defect_corpus[:2], vocabulary, CONFIG, training=False).as_numpy_iterator()
    )
    epoch = prepared.epoch(CONFIG, 0)
    assert rows(prepared.batch(indices) for _, indices in epoch) == expected
    assert sum(len(indices) for _, indices in epoch) == stats.kept  # each pair once


def test_shard_size_changes_no_pair(prepared, defect_corpus, vocabulary, tmp_path):
    from translator.pipelines.prepare import prepare_corpus

    prepare_corpus(*defect_corpus[:2], vocabulary, tmp_path / "one", CONFIG)
    whole = PreparedCorpus(tmp_path / "one")
    assert whole.manifest.shard_pairs == (prepared.pairs,)
    every = np.arange(prepared.pairs)
    features_a, labels_a = whole.batch(every)
    features_b, labels_b = prepared.batch(every)
    np.testing.assert_array_equal(labels_a, labels_b)
    for name in features_a:
        np.testing.assert_array_equal(features_a[name], features_b[name])


def test_batches_follow_the_pipelines_bucket_rules(prepared):
    features, labels = prepared.batch(np.arange(5))
    decoder = features["decoder_input_ids"]
    assert (decoder[:, 0] == BOS_ID).all()  # teacher forcing: BOS, then the labels shifted
    real = labels != PAD_ID
    np.testing.assert_array_equal(decoder[:, 1:][real[:, 1:]], labels[:, :-1][real[:, 1:]])
    assert (real.sum(1) == (decoder != PAD_ID).sum(1)).all()
    for static in (False, True):
        config = prepared.buckets_for(dataclasses.replace(CONFIG, static_shapes=True))
        config = dataclasses.replace(config, static_shapes=static)
        batches = prepared.epoch(config, 0)
        assert batches
        for bucket, indices in batches:
            features, labels = prepared.batch(indices, bucket.length if static else None)
            longest = np.maximum(prepared.source_lengths[indices], prepared.target_lengths[indices])
            assert longest.max() <= bucket.length  # the first bucket that fits
            smaller = [b.length for b in config.buckets() if b.length < bucket.length]
            assert not smaller or longest.max() > max(smaller)
            assert len(indices) <= bucket.batch_size  # (a bucket's last batch: fewer rows)
            if static:  # (`batches` pads a short one's rows: test_static_shapes_train_...)
                assert labels.shape == (len(indices), bucket.length)
                assert features["source_ids"].shape == labels.shape
            else:  # padded to the longest row of each side, as tf.data pads
                assert labels.shape[1] == prepared.target_lengths[indices].max()
    # Under static shapes the buckets are the corpus' own, chosen when it was prepared.
    chosen = prepared.buckets_for(dataclasses.replace(CONFIG, static_shapes=True))
    assert chosen.bucket_boundaries == tuple(
        b for b in prepared.manifest.bucket_boundaries if b < CONFIG.max_length
    )
    given = dataclasses.replace(CONFIG, static_shapes=True, bucket_boundaries=(16, 32))
    assert prepared.buckets_for(given) is given  # the user's win


@pytest.mark.parametrize("batch_tokens", [256, 2**16])
def test_static_shapes_train_a_bucket_that_fills_no_batch_as_one_padded_batch(
    prepared, batch_tokens
):
    """Under static shapes, as tf.data's training batches: a bucket that fills a batch
    leaves its remainder to a later epoch (a different one each epoch); one holding fewer
    pairs than a batch's rows is one batch padded with rows of padding, so it is trained
    on (at 2**16 batch tokens no bucket fills one: every pair, every epoch)."""
    config = prepared.buckets_for(dataclasses.replace(CONFIG, static_shapes=True))
    config = dataclasses.replace(config, batch_tokens=batch_tokens, seed=7)
    counts = dict(zip(config.buckets(), prepared.bucket_counts(config), strict=True))
    assert sum(counts.values()) == prepared.pairs
    held = {(b.batch_size, b.length) for b, n in counts.items() if n}
    assert held == set(prepared.batch_shapes(config))
    short = {b for b, n in counts.items() if 0 < n < b.batch_size}
    remainder = sum(n % b.batch_size for b, n in counts.items() if b not in short)
    assert short if batch_tokens > 256 else remainder  # (the premises)
    trained = collections.Counter()
    for _, labels in itertools.islice(prepared.batches(config), len(prepared.epoch(config, 0))):
        assert labels.shape in held
        trained.update(tuple(row[row != PAD_ID]) for row in labels)
    padding = trained.pop((), 0)
    assert (padding > 0) is bool(short)
    every = collections.Counter(
        tuple(row[row != PAD_ID]) for row in prepared.batch(np.arange(prepared.pairs))[1]
    )
    assert not trained - every and every.total() - trained.total() == remainder
    if batch_tokens > 256:
        assert trained == every


def test_epochs_are_seeded_and_a_resume_continues_at_its_batch(prepared):
    per_epoch = len(prepared.epoch(CONFIG, 0))
    first = list(itertools.islice(prepared.batches(CONFIG), 2 * per_epoch + 3))
    again = list(itertools.islice(PreparedCorpus(prepared.path).batches(CONFIG), 5))
    for (_, b), (_, d) in zip(first[:5], again, strict=True):
        np.testing.assert_array_equal(b, d)  # the same seed, the same batches
    epochs = [prepared.epoch(CONFIG, e) for e in (0, 1)]
    orders = [np.concatenate([indices for _, indices in epoch]) for epoch in epochs]
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(prepared.pairs))
    assert not np.array_equal(orders[0], orders[1])  # reshuffled each epoch
    other = dataclasses.replace(CONFIG, seed=7)
    assert not np.array_equal(
        np.concatenate([i for _, i in prepared.epoch(other, 0)]), orders[0]
    )  # another seed, another order
    for skip in (1, per_epoch - 1, per_epoch + 2):  # within the first epoch, and past it
        resumed = list(itertools.islice(prepared.batches(CONFIG, skip=skip), 3))
        for (_, expected), (_, got) in zip(first[skip : skip + 3], resumed, strict=True):
            np.testing.assert_array_equal(got, expected)


def test_another_vocabulary_or_limits_is_one_line_naming_the_prepare_command(prepared):
    manifest = prepared.manifest
    sha = (manifest.source_sha256, manifest.target_sha256)
    prepared.check(*sha, CONFIG.max_source_length, CONFIG.max_target_length)
    cases = [
        (("0" * 64, sha[1], 48, 48), "vocabulary"),
        ((*sha, 64, 48), "max lengths 48/48, this run has 64/48"),
    ]
    for arguments, what in cases:
        with pytest.raises(ConfigError) as error:
            prepared.check(*arguments)
        message = str(error.value)
        assert message.startswith("data.prepared: ") and what in message
        assert "translator data prepare" in message and "\n" not in message


def test_a_damaged_or_missing_corpus_is_one_error_naming_it(prepared, tmp_path):
    import shutil

    with pytest.raises(CorpusError, match=r"not a prepared corpus .*translator data prepare"):
        PreparedCorpus(tmp_path / "nothing")
    damaged = tmp_path / "damaged"
    shutil.copytree(prepared.path, damaged)
    rows_file = damaged / shard_name(2) / "labels_rows.npy"
    np.save(rows_file, np.load(rows_file)[:-5])
    with pytest.raises(CorpusError, match="shard-00002: its labels arrays do not match"):
        PreparedCorpus(damaged)
    manifest = json.loads((damaged / MANIFEST_FILE).read_text())
    (damaged / MANIFEST_FILE).write_text(json.dumps({**manifest, "format": 99}))
    with pytest.raises(CorpusError, match="format 99; this version reads format 1"):
        PreparedCorpus(damaged)


def test_a_failed_preparation_keeps_what_was_there(prepared, vocabulary, tmp_path):
    import shutil

    from translator.pipelines.prepare import prepare_corpus

    out = tmp_path / "kept"
    shutil.copytree(prepared.path, out)
    (tmp_path / "a.en").write_text("one\ntwo\n")
    (tmp_path / "a.de").write_text("eins\n")
    with pytest.raises(CorpusError, match=r"lines"):
        prepare_corpus(tmp_path / "a.en", tmp_path / "a.de", vocabulary, out, CONFIG)
    assert PreparedCorpus(out).manifest == prepared.manifest
    assert not (tmp_path / "kept.partial").exists()


def test_chosen_buckets_pad_least_among_every_choice():
    rng = np.random.default_rng(3)
    longest = np.concatenate([rng.integers(3, 30, 500), rng.integers(30, 70, 60)])
    chosen = choose_bucket_boundaries(longest, count=3, align=8)

    def padded(boundaries):
        bounds = np.asarray(boundaries)
        return int(bounds[np.searchsorted(bounds, longest, side="left")].sum())

    candidates = range(8, 73, 8)
    best = min(
        (c for k in (1, 2, 3) for c in itertools.combinations(candidates, k) if c[-1] == 72),
        key=padded,
    )
    assert chosen[-1] == 72 and len(chosen) <= 3
    assert padded(chosen) == padded(best)  # the exact optimum, found by brute force


def test_the_cli_prepares_and_reading_imports_no_tensorflow(defect_corpus, vocab_dir, tmp_path):
    from tests.support.cli import translator

    out = tmp_path / "cli"
    result = translator(
        "data", "prepare", "--src", str(defect_corpus[0]), "--tgt", str(defect_corpus[1]),
        "--vocab", str(vocab_dir), "--out", str(out), "--max-source-length", "48",
        "--max-target-length", "48",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "skipped 5 with an empty line" in result.stdout
    assert f"--set data.prepared={out}" in result.stdout
    # In a process where TensorFlow cannot be imported: the corpus reads, and batches.
    out_text = run_without_tensorflow(
        "import itertools, sys\n"
        "from translator.pipelines.config import PipelineConfig\n"
        "from translator.pipelines.prepared import PreparedCorpus\n"
        "import training.inputs\n"
        f"corpus = PreparedCorpus({str(out)!r})\n"
        "config = PipelineConfig(batch_tokens=600, max_source_length=48, max_target_length=48)\n"
        "n = sum(len(b[1]) for b in itertools.islice(corpus.batches(config), 20))\n"
        "print(n, 'tensorflow' in sys.modules)\n"
    )
    count, loaded = out_text.split()
    assert int(count) > 20 and loaded == "False"
