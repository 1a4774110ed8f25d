"""The run's tf.data inputs, sharded over the strategy's replicas.

Training and the planner's speed timing read the same batches through these.
"""

from __future__ import annotations

import tensorflow as tf

from training.config import RunConfig
from translator.pipelines.dataset import WeightedCorpus, make_dataset, make_mixed_dataset
from translator.pipelines.tokenizer import Vocabulary


def training_dataset(
    config: RunConfig, vocabulary: Vocabulary, strategy, skip: int
) -> tf.distribute.DistributedDataset:
    """Each replica's endless shard of the training corpora (`distribute_datasets_from_function`).

    One corpus repeats; several (or a tagged one) are mixed by weight
    (`make_mixed_dataset`). Either way the order is a function of the seed only, so
    skipping the `skip` batches already consumed puts a resumed run on exactly the
    batches an uninterrupted run would see.
    """
    data = config.data
    corpora = [
        WeightedCorpus(corpus.source, corpus.target, corpus.weight, corpus.tag)
        for corpus in data.corpora()
    ]

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
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
        return dataset.skip(skip).prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(dataset_fn)


def validation_dataset(
    config: RunConfig, vocabulary: Vocabulary, strategy
) -> tf.distribute.DistributedDataset:
    """Each replica's shard of the validation corpus: one pass, file order."""
    data = config.data

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(
            data.valid_source,
            data.valid_target,
            vocabulary,
            data.pipeline,
            training=False,
            input_context=context,
            tag=data.valid_tag,
        ).prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(dataset_fn)
