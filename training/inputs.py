"""The run's training and validation inputs, sharded over the strategy's replicas.

Training and the planner's speed timing read the same batches through these: the
tf.data pipeline over text files, or a prepared corpus (`data.prepared`), which needs
no TensorFlow. A strategy calls each input function with its `InputContext`; JAX's
calls it with None, and takes the global batches as they come (Keras splits them).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from training.config import RunConfig
from translator.host_text import tensorflow_installed
from translator.pipelines.prepared import Batch, PreparedCorpus

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

    from translator.pipelines.config import Bucket
    from translator.pipelines.vocabulary import Vocabulary

log = logging.getLogger(__name__)


def training_dataset(
    config: RunConfig, vocabulary: Vocabulary, strategy, skip: int, id_limit: int | None = None
) -> Iterable:
    """Each replica's endless shard of the training corpora (`distribute_datasets_from_function`).

    One corpus repeats; several (or a tagged one) are mixed by weight
    (`make_mixed_dataset`); a prepared corpus is batched from its arrays. Either way the
    order is a function of the seed only, so skipping the `skip` batches already consumed
    puts a resumed run on exactly the batches an uninterrupted run would see.
    `id_limit`: every real id folded into that many entries (`_ids_folded`: the planner's
    timing of a smaller vocabulary).
    """
    if config.data.prepared:
        corpus = open_prepared(config, vocabulary)
        return _prepared_dataset(config, corpus, strategy, skip, id_limit=id_limit)
    import tensorflow as tf

    from translator.pipelines.dataset import WeightedCorpus, make_dataset, make_mixed_dataset

    data = config.data
    corpora = [
        WeightedCorpus(corpus.source, corpus.target, corpus.weight, corpus.tag)
        for corpus in data.corpora()
    ]

    def dataset_fn(context: tf.distribute.InputContext | None) -> tf.data.Dataset:
        if data.is_mix():
            dataset = make_mixed_dataset(corpora, vocabulary, data.pipeline, input_context=context)
        else:
            corpus = corpora[0]
            dataset = make_dataset(
                corpus.source_path,
                corpus.target_path,
                vocabulary,
                data.pipeline,
                training=True,
                input_context=context,
            ).repeat()
        if id_limit is not None:
            dataset = dataset.map(lambda ids, labels: _ids_folded((ids, labels), id_limit))
        return _untuned(dataset.skip(skip).prefetch(tf.data.AUTOTUNE))

    return strategy.distribute_datasets_from_function(dataset_fn)


def batch_shapes(config: RunConfig, vocabulary: Vocabulary) -> tuple[tuple[int, int], ...]:
    """`(rows, length)` of the training batches under static shapes; () without them.

    Every bucket holding a pair: one that fills no batch is one batch padded with rows of
    padding an epoch (`translator.pipelines.dataset`), so each brings its shape.
    """
    pipeline = config.data.pipeline
    if not pipeline.static_shapes:
        return ()
    if config.data.prepared:
        corpus = open_prepared(config, vocabulary)
        return corpus.batch_shapes(corpus.buckets_for(pipeline))
    from translator.pipelines.dataset import scan_corpus

    data = config.data
    counts = [0] * len(pipeline.buckets())
    for corpus in data.corpora():
        stats = scan_corpus(corpus.source, corpus.target, vocabulary, pipeline, tag=corpus.tag)
        counts = [a + b for a, b in zip(counts, stats.bucket_counts, strict=True)]
    return tuple(
        (bucket.batch_size, bucket.length)
        for bucket, count in zip(pipeline.buckets(), counts, strict=True)
        if count
    )


def timing_input(
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy,
    every_bucket: bool = False,
    id_limit: int | None = None,
) -> tuple[Iterable, tuple[tuple[int, int], ...]]:
    """What the planner times a shape on: `(input, batch shapes to compile ahead)`.

    From a prepared corpus under static shapes, only the batches of the bucket holding
    the most target tokens: one program to compile rather than one per bucket (on a GPU
    each takes seconds, and the run compiles its own with its planned dropout anyway).
    Otherwise, or with `every_bucket`, the training input itself. `id_limit`: every id
    folded into that many entries (timing a smaller vocabulary's model on the same batches).
    """
    if config.data.prepared and config.data.pipeline.static_shapes and not every_bucket:
        corpus = open_prepared(config, vocabulary)
        pipeline = corpus.buckets_for(config.data.pipeline)
        bucket = corpus.commonest_bucket(pipeline)
        if bucket is not None:
            batches = _prepared_dataset(
                config, corpus, strategy, skip=0, only=bucket, id_limit=id_limit
            )
            return batches, ((bucket.batch_size, bucket.length),)
    data = training_dataset(config, vocabulary, strategy, skip=0, id_limit=id_limit)
    return data, batch_shapes(config, vocabulary)


def open_prepared(config: RunConfig, vocabulary: Vocabulary) -> PreparedCorpus:
    """The run's prepared corpus, checked against its vocabulary and length limits.

    Raises:
        CorpusError: not a prepared corpus. ConfigError: made with another vocabulary or
            other limits (one line saying to prepare it again).
    """
    corpus = PreparedCorpus(config.data.prepared)
    pipeline = config.data.pipeline
    corpus.check(
        vocabulary.source_sha256,
        vocabulary.target_sha256,
        pipeline.max_source_length,
        pipeline.max_target_length,
    )
    return corpus


def _prepared_dataset(
    config: RunConfig,
    corpus: PreparedCorpus,
    strategy,
    skip: int,
    only: Bucket | None = None,
    id_limit: int | None = None,
) -> Iterable[Batch]:
    """The prepared corpus' batches: a Python iterator on JAX, a tf.data one on TensorFlow.

    `corpus`: the run's, opened and checked (`open_prepared`); `only`: just that bucket's
    batches; `id_limit`: every real id folded into that many entries.
    """
    pipeline = corpus.buckets_for(config.data.pipeline)
    if pipeline is not config.data.pipeline and only is None:
        log.info(
            "data.prepared: buckets %s, chosen from the corpus for static shapes",
            ", ".join(str(b.length) for b in pipeline.buckets()),
        )

    def batches(shard: int, shards: int) -> Iterator[Batch]:
        # Input pipeline `shard` of `shards` takes every `shards`-th batch. (A generator:
        # what Keras' `fit` takes as a Python input.)
        start = shard + skip * shards
        chosen = itertools.islice(corpus.batches(pipeline, only=only), start, None, shards)
        if id_limit is None:
            yield from chosen
        else:
            yield from (_ids_folded(batch, id_limit) for batch in chosen)

    def dataset_fn(context: tf.distribute.InputContext | None):
        if context is None:
            return batches(0, 1)
        import tensorflow as tf

        rows = tf.TensorSpec([None, None], tf.int32)
        signature = ({"source_ids": rows, "decoder_input_ids": rows}, rows)
        shard, shards = context.input_pipeline_id, context.num_input_pipelines
        dataset = tf.data.Dataset.from_generator(
            lambda: batches(shard, shards), output_signature=signature
        )
        return _untuned(dataset.prefetch(tf.data.AUTOTUNE))

    return strategy.distribute_datasets_from_function(dataset_fn)


def _ids_folded(batch: Batch, limit: int) -> Batch:
    """A batch's ids folded into `limit` entries: numpy arrays or tensors.

    Padding (0) stays 0 and every real id stays real (1 to `limit - 1`: `(id - 1) modulo
    (limit - 1) + 1`), so the smaller model trains exactly the run's real tokens.
    """

    def fold(ids):
        real = (ids + _ABOVE_ANY_ID - 1) // _ABOVE_ANY_ID  # 1 for a real id, 0 for padding
        return ((ids - 1) % (limit - 1) + 1) * real

    features, labels = batch
    return {name: fold(ids) for name, ids in features.items()}, fold(labels)


_ABOVE_ANY_ID = 2**30  # (int32 ids: a real id plus this stays under 2**31)


def validation_dataset(config: RunConfig, vocabulary: Vocabulary, strategy) -> Iterable | None:
    """Each replica's shard of the validation corpus: one pass, file order.

    With a prepared corpus, the validation set prepared with it (`data prepare --valid`);
    without one there, tf.data reads the text, or where TensorFlow is not installed the
    validation loss is not computed (None), and the log says so (BLEU still is).
    """
    if config.data.prepared:
        prepared = open_prepared(config, vocabulary).validation()
        if prepared is not None:
            pipeline = prepared.buckets_for(config.data.pipeline)
            return strategy.distribute_datasets_from_function(
                lambda context: _shard(list(prepared.evaluation_batches(pipeline)), context)
            )
        if not tensorflow_installed():
            log.warning(
                "data.prepared: %s has no validation set prepared with it (translator data "
                "prepare --valid SRC TGT), and TensorFlow is not installed to read it as text: "
                "no validation loss (validation BLEU still runs)",
                config.data.prepared,
            )
            return None

    from translator.pipelines.dataset import make_dataset

    data = config.data

    def dataset_fn(context: tf.distribute.InputContext | None) -> tf.data.Dataset:
        dataset = make_dataset(
            data.valid_source,
            data.valid_target,
            vocabulary,
            data.pipeline,
            training=False,
            input_context=context,
            tag=data.valid_tag,
        )
        return _untuned(dataset)

    return strategy.distribute_datasets_from_function(dataset_fn)


def _untuned(dataset):
    """`dataset` (a `tf.data.Dataset`) without tf.data's autotuning.

    Keras deletes the validation iterator at every validation and the training one when
    `fit` returns, and deleting an autotuned iterator can first wait out its tuner's
    sleep, up to a minute: 5 to 60 s stalls, inside the time budget or after it. Without
    the tuner, parallel maps run on the CPU's cores and prefetching still grows its buffer
    as it needs; training is as fast (bench/RESULTS.md, "The test suite's time").
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def _shard(batches: list[Batch], context) -> Iterable[Batch]:
    """One input pipeline's batches: all (JAX: no context), or a tf.data share of them."""
    if context is None:
        return batches
    import tensorflow as tf

    mine = batches[context.input_pipeline_id :: context.num_input_pipelines]
    rows = tf.TensorSpec([None, None], tf.int32)
    signature = ({"source_ids": rows, "decoder_input_ids": rows}, rows)
    return tf.data.Dataset.from_generator(lambda: iter(mine), output_signature=signature)


# Batches of the training mix counted for the log line that reports it.
MIX_REPORT_BATCHES = 100


def log_mix(config: RunConfig, vocabulary: Vocabulary) -> None:
    """Logs each corpus' weight and its share of the pairs actually drawn."""
    from translator.pipelines.dataset import WeightedCorpus, drawn_shares, make_mixed_dataset

    data = config.data
    corpora = data.corpora()
    mix = make_mixed_dataset(
        [WeightedCorpus(c.source, c.target, c.weight, c.tag) for c in corpora],
        vocabulary,
        data.pipeline,
    )
    shares = drawn_shares(mix, len(corpora), MIX_REPORT_BATCHES)
    total = sum(corpus.weight for corpus in corpora)
    for corpus, share in zip(corpora, shares, strict=True):
        log.info(
            "mix: %s%s: weight %.1f%%, drawn %.1f%% of the pairs of the first %d batches",
            corpus.source,
            f" (tag {corpus.tag})" if corpus.tag else "",
            100 * corpus.weight / total,
            100 * share,
            MIX_REPORT_BATCHES,
        )
