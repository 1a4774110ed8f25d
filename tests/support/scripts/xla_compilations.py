"""Counts the programs XLA compiles for one epoch of jit-compiled training.

    XLA_FLAGS=--xla_dump_to=DUMP python xla_compilations.py CONFIG.yaml DUMP

XLA reads its flags when TensorFlow starts, hence a process of its own. The dump holds
one `*before_optimizations.txt` per compiled program; Keras names the training step's
program `one_step_on_data`. Before the XLA epoch, a plain (not XLA) trainer trains a
few steps in the same process, as in `bench.training`, where that once made the XLA step
recompile on every update. Prints JSON: the epoch's distinct batch shapes, the XLA
step's compilations, the epoch's batches and the buckets.
"""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras

from training.config import load_config
from training.engines.tf_trainer import TranslationTrainer
from translator import Transformer
from translator.pipelines import load_vocabulary, make_dataset


def trainer_for(config, vocabulary, jit_compile: bool) -> TranslationTrainer:
    keras.utils.set_random_seed(1)
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    trainer = TranslationTrainer(Transformer(config.model.transformer_config(*sizes)))
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit_compile)
    return trainer


def step_programs(dump: Path) -> int:
    return len(list(dump.glob("*one_step_on_data*before_optimizations.txt")))


if __name__ == "__main__":
    config, dump = load_config(sys.argv[1]), Path(sys.argv[2])
    vocabulary = load_vocabulary(config.data.vocabulary)
    files = (config.data.train_source, config.data.train_target)

    def epoch():
        return make_dataset(*files, vocabulary, config.data.pipeline, training=True)

    shapes = [tuple(features["source_ids"].shape) for features, _ in epoch()]  # [b, S]
    trainer_for(config, vocabulary, jit_compile=False).fit(epoch().take(3), verbose=0)
    before = step_programs(dump)
    trainer_for(config, vocabulary, jit_compile=True).fit(epoch(), verbose=0)
    report = {
        "shapes": sorted(set(shapes)),
        "batches": len(shapes),
        "compilations": step_programs(dump) - before,
        "buckets": len(config.data.pipeline.buckets()),
    }
    print(json.dumps(report))
