"""Trains the same tiny model on the same global batches under several strategies.

    python strategy_equivalence.py CLIP_NORM... [--strategies one_device,mirrored]

Run as a script (logical CPU devices must be configured before TensorFlow starts). Prints
one JSON line: per clip norm, per strategy, the loss per step, every final weight and each
replica's real target tokens. With TF_CONFIG set, this process is one worker of a
`multi_worker` run (one CPU device; run one process per worker).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

if not os.environ.get("TF_CONFIG"):  # mirrored's two replicas: two logical CPUs
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras
import numpy as np

from training.engines.tf_strategy import make_strategy
from training.engines.tf_trainer import TranslationTrainer
from translator import Transformer, TransformerConfig


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
        trainer.build()  # as `build_trainer` does: under the strategy, before `fit`
        trainer.optimizer.build(model.trainable_variables)
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


def make(name: str):
    """The strategy NAME, as `train.strategy: NAME` makes it (mirrored: the two CPUs)."""
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    return make_strategy(name)


if __name__ == "__main__":
    arguments = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    names = ["one_device", "mirrored"]
    if "--strategies" in sys.argv:
        names = sys.argv[sys.argv.index("--strategies") + 1].split(",")
        arguments.remove(sys.argv[sys.argv.index("--strategies") + 1])
    # One strategy object each: two MirroredStrategy instances in one process would
    # draw colliding collective instance keys.
    strategies = {name: make(name) for name in names}
    results = {}
    for clip in map(float, arguments or ["0"]):
        results[str(clip)] = {name: run(strategy, clip) for name, strategy in strategies.items()}
    print(json.dumps(results))
