"""The JAX loop's looks from the host: `python jax_loop_looks.py CONFIG.yaml OUT.json`.

Trains CONFIG (a JAX run) through `training.run`'s own pieces with one recording
callback that acts every 10 updates, and writes the updates at which the callbacks ran.
Then trains again with a device read slipped inside the loop's intervals (the control:
the transfer guard must stop it), and writes the error it raised.

On a CPU JAX's transfer guard does not apply (the arrays are in host memory already), so
the guard the loop enters is also made to refuse what reads an array's value here
(`float`, `int`, `item`, `device_get`: `ArrayImpl._value`), as a GPU's guard would.
"""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras

from training.config import load_config
from training.engines import jax_engine
from training.engines.backend import engine
from training.engines.jax_step import JaxTrainer
from training.engines.tf_trainer import build_trainer
from training.inputs import batch_shapes, training_dataset
from translator.pipelines.vocabulary import load_vocabulary


class Looks(keras.callbacks.Callback):
    every_steps = 10

    def __init__(self):
        super().__init__()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append(self.model.updates_done())


def train(config, vocabulary, strategy) -> list[int]:
    model_config = config.model.transformer_config(
        vocabulary.source_vocab_size, vocabulary.target_vocab_size
    )
    trainer, _ = build_trainer(config, model_config, strategy, trainer_class=engine().trainer)
    trainer.expect_shapes(batch_shapes(config, vocabulary))
    looks = Looks()
    data = training_dataset(config, vocabulary, strategy, skip=0)
    trainer.fit(data, epochs=1, steps_per_epoch=config.train.max_steps, callbacks=[looks])
    return looks.steps


def emulate_the_guard_on_a_cpu() -> None:
    """The loop's `transfer_guard_device_to_host` also refuses host reads of arrays."""
    import contextlib

    import jax
    from jax._src.array import ArrayImpl

    guard, value, inside = jax.transfer_guard_device_to_host, ArrayImpl._value, [False]

    def read(array):
        if inside[0]:
            raise RuntimeError("Disallowed device-to-host transfer (the guard, on a CPU)")
        return value.fget(array)

    @contextlib.contextmanager
    def guarded(level):
        with guard(level):
            inside[0] = True
            try:
                yield
            finally:
                inside[0] = False

    ArrayImpl._value = property(read)
    jax.transfer_guard_device_to_host = guarded


if __name__ == "__main__":
    config_path, out = sys.argv[1:3]
    emulate_the_guard_on_a_cpu()
    jax_engine.MAX_SECONDS_UNSEEN = float("inf")  # looks by count alone, however slow
    config = load_config(config_path)
    on = engine()
    strategy = on.make_strategy(config.train.strategy)
    on.select_precision(config.train.precision, strategy)
    config = on.adapt(config, strategy)
    vocabulary = load_vocabulary(config.data.vocabulary)
    result = {"steps": train(config, vocabulary, strategy)}
    update = JaxTrainer.update

    def reading_update(self, state, batch):
        state, step = update(self, state, batch)
        float(step.loss_sum)  # a device read inside an interval
        return state, step

    JaxTrainer.update = reading_update
    try:
        train(config, vocabulary, strategy)
        result["control"] = "no error"
    except Exception as error:  # the guard's
        result["control"] = f"{type(error).__name__}: {error}"
    with open(out, "w") as file:
        json.dump(result, file)
