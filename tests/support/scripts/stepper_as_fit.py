"""A trainer's `stepper` against its `fit`: `python stepper_as_fit.py BACKEND CONFIG OUT.json`.

Builds the run's model twice from one seed, trains one with `fit` for the config's
`train.max_steps` updates and the other with `stepper`, a few updates a call, and writes
the largest weight difference and both token counts. Then the control: a stepper fed
the input one batch late, which must end elsewhere.
"""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = sys.argv[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

from training.config import load_config
from training.engines.backend import engine
from training.engines.tf_trainer import build_trainer
from training.inputs import batch_shapes, training_dataset
from translator.pipelines.vocabulary import load_vocabulary

TURNS = (3, 1, 2)  # updates per call: uneven, as the planner's first turn is apart


class Tokens(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.tokens = float(np.asarray(logs["tokens"]).reshape(-1)[0])


def built(config, vocabulary, strategy):
    keras.utils.set_random_seed(7)
    model_config = config.model.transformer_config(
        vocabulary.source_vocab_size, vocabulary.target_vocab_size
    )
    trainer, _ = build_trainer(
        config, model_config, strategy, steps_per_execution=1, trainer_class=engine().trainer
    )
    trainer.expect_shapes(batch_shapes(config, vocabulary))
    return trainer


def weights(trainer) -> list[np.ndarray]:
    trainer.sync_state()
    return [np.asarray(v) for v in trainer.transformer.get_weights()]


def stepped(config, vocabulary, strategy, late: bool) -> tuple[list[np.ndarray], float]:
    trainer = built(config, vocabulary, strategy)
    step = trainer.stepper(training_dataset(config, vocabulary, strategy, skip=int(late)))
    tokens = sum(step(n) for n in TURNS)
    return weights(trainer), tokens


def largest_difference(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


if __name__ == "__main__":
    config_path, out = sys.argv[2:4]
    config = load_config(config_path)
    on = engine()
    strategy = on.make_strategy(config.train.strategy)
    on.select_precision(config.train.precision, strategy)
    config = on.adapt(config, strategy)
    vocabulary = load_vocabulary(config.data.vocabulary)
    assert config.train.max_steps == sum(TURNS)

    trainer, counted = built(config, vocabulary, strategy), Tokens()
    first = weights(trainer)
    data = training_dataset(config, vocabulary, strategy, skip=0)
    trainer.fit(data, epochs=1, steps_per_epoch=sum(TURNS), callbacks=[counted], verbose=0)
    fitted = weights(trainer)
    by_steps, tokens = stepped(config, vocabulary, strategy, late=False)
    late, _ = stepped(config, vocabulary, strategy, late=True)
    with open(out, "w") as file:
        json.dump(
            {
                "backend": keras.backend.backend(),
                "trained": largest_difference(fitted, first),
                "difference": largest_difference(fitted, by_steps),
                "fit_tokens": counted.tokens,
                "stepper_tokens": tokens,
                "control": largest_difference(fitted, late),
            },
            file,
        )
