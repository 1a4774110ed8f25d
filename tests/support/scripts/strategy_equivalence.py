"""Trains the same tiny model on the same global batches under two strategies.

Run as a script (logical CPU devices must be configured before TensorFlow starts).
Prints one JSON line: per strategy, the loss per step and the final weights' checksum.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from training.strategy import make_strategy  # noqa: E402
from training.trainer import TranslationTrainer  # noqa: E402
from translator import Transformer, TransformerConfig  # noqa: E402


def batches(count=6, batch=8, seed=0):
    """Copy-task batches with ragged lengths, so replicas get different token counts."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        lengths = rng.integers(2, 12, batch)
        src = np.zeros((batch, 13), "int32")
        dec = np.zeros((batch, 13), "int32")
        lab = np.zeros((batch, 13), "int32")
        for i, n in enumerate(lengths):
            tokens = rng.integers(4, 30, n)
            src[i, :n], src[i, n] = tokens, 3
            dec[i, 0], dec[i, 1 : n + 1] = 2, tokens
            lab[i, :n], lab[i, n] = tokens, 3
        out.append(({"source_ids": src, "decoder_input_ids": dec}, lab))
    return out


def run(strategy, clip_norm):
    keras.utils.set_random_seed(3)
    data = batches()
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(data),
        output_signature=(
            {
                "source_ids": tf.TensorSpec([None, None], tf.int32),
                "decoder_input_ids": tf.TensorSpec([None, None], tf.int32),
            },
            tf.TensorSpec([None, None], tf.int32),
        ),
    )
    with strategy.scope():
        model = Transformer(TransformerConfig.preset("tiny", vocab_size=30, dropout=0.0))
        trainer = TranslationTrainer(model, label_smoothing=0.1, clip_norm=clip_norm)
        trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    # The same global batch: split over the replicas by tf.distribute.
    distributed = strategy.experimental_distribute_dataset(dataset)

    losses = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))

    # The loss logged per step is the running mean over the epoch (global, token-weighted).
    trainer.fit(distributed, epochs=1, verbose=0, callbacks=[Record()])
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    # Each replica's real target tokens per batch (tf.distribute splits a batch's rows).
    halves = [np.array_split(labels, strategy.num_replicas_in_sync) for _, labels in data]
    return {
        "losses": losses,
        "weights": weights.tolist(),  # all of them
        "replicas": strategy.num_replicas_in_sync,
        "replica_tokens": [[int(np.count_nonzero(h)) for h in batch] for batch in halves],
    }


if __name__ == "__main__":
    # One strategy object each: two MirroredStrategy instances in one process would
    # draw colliding collective instance keys.
    one_device = make_strategy("one_device")  # what `train.strategy: one_device` runs
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    results = {}
    for clip in map(float, sys.argv[1:] or ["0"]):
        results[str(clip)] = {"one_device": run(one_device, clip), "mirrored": run(mirrored, clip)}
    print(json.dumps(results))
