"""The training and validation inputs as tf.data builds them from text."""

import itertools

from tests.support.runs import tiny_run_config
from training.inputs import training_dataset, validation_dataset
from translator.pipelines.vocabulary import load_vocabulary


class OnePipeline:
    """A strategy stand-in: the one input pipeline's dataset itself."""

    @staticmethod
    def distribute_datasets_from_function(dataset_fn):
        return dataset_fn(None)


def test_no_input_is_autotuned_so_deleting_its_iterator_never_waits(copy_task):
    """Keras deletes the validation iterator at every validation and the training one
    when `fit` returns; deleting an autotuned one can first wait out its tuner's sleep,
    up to a minute (bench/RESULTS.md). Both inputs still give their batches."""
    config = tiny_run_config(copy_task)
    vocabulary = load_vocabulary(copy_task["vocab"])
    validation = validation_dataset(config, vocabulary, OnePipeline())
    training = training_dataset(config, vocabulary, OnePipeline(), skip=0)
    for dataset in (validation, training):
        assert dataset.options().autotune.enabled is False
        assert len(list(itertools.islice(dataset, 3))) > 0
