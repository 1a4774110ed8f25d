"""Which Keras backend trains a run, and what training uses on it: the one place that says.

Keras fixes its backend when it is first imported, from `KERAS_BACKEND`. A run's
`train.backend` therefore has to be settled before that: `choose_backend` is called by
the training commands right after they read the config, and sets `KERAS_BACKEND` for
the process. After that, `engine()` gives the pieces of training that differ between
the backends (the distribution, the trainer's step, the checkpoint files, the
precision rule and what the input must look like), so that `training.run` never asks
which backend it is on.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from training.config import RunConfig
from translator.errors import ConfigError
from translator.host_text import tensorflow_installed

if TYPE_CHECKING:  # pragma: no cover
    import keras

log = logging.getLogger(__name__)

BACKENDS = ("tensorflow", "jax")


def choose_backend(config: RunConfig) -> str:
    """Sets `KERAS_BACKEND` for the run's `train.backend`; returns the backend.

    The config wins over the environment, and says so when they differ.

    Raises:
        ConfigError: Keras is imported already, on another backend (a library caller
            must set `KERAS_BACKEND` before importing Keras).
    """
    from_environment = os.environ.get("KERAS_BACKEND", "")
    wanted = config.train.backend
    if wanted == "auto":
        wanted = from_environment or "tensorflow"
        if wanted not in BACKENDS:
            raise ConfigError(
                f"train.backend: auto, and KERAS_BACKEND={from_environment} is not one this "
                f"toolkit trains on ({', '.join(BACKENDS)})"
            )
    elif from_environment and from_environment != wanted:
        log.info(
            "train.backend: %s (the config's, over KERAS_BACKEND=%s)", wanted, from_environment
        )
    keras = sys.modules.get("keras")
    if keras is not None and keras.backend.backend() != wanted:
        raise ConfigError(
            f"train.backend: {wanted}, but Keras is imported already on "
            f"{keras.backend.backend()}; set KERAS_BACKEND={wanted} before importing Keras"
        )
    os.environ["KERAS_BACKEND"] = wanted
    if wanted == "jax" and tensorflow_installed():
        keep_tensorflow_off_accelerators()
    return wanted


def keep_tensorflow_off_accelerators() -> None:
    """Hides the GPUs and TPUs from TensorFlow in a process where JAX trains.

    Where both are installed, TensorFlow (tf.data preparing text, the graph's text path of
    validation) would otherwise take most of a GPU's memory beside JAX on its first op.
    It has only host work to do here.
    """
    import tensorflow as tf

    for kind in ("GPU", "TPU"):
        try:
            tf.config.set_visible_devices([], kind)
        except RuntimeError as error:  # TensorFlow ran an op already: too late to hide
            log.warning("TensorFlow already uses the %ss beside JAX: %s", kind, error)


def check_tensorflow(config: RunConfig) -> None:
    """Refuses, in one line, a run this process cannot train for want of TensorFlow.

    Text is read by the tf.data pipeline: without TensorFlow, training takes a prepared
    corpus, made where TensorFlow is (everything else of a JAX run needs no TensorFlow).

    Raises:
        ConfigError: TensorFlow is not installed and the run reads text.
    """
    if config.data.prepared or tensorflow_installed():
        return
    raise ConfigError(
        "data.train_source: training reads text files with tf.data, and TensorFlow is "
        "not installed here; prepare the corpus once where it is (translator data "
        "prepare --src SRC --tgt TGT --vocab VOCAB --out DIR), then train with --set "
        "data.prepared=DIR"
    )


def resolved(config: RunConfig) -> RunConfig:
    """`config` with `train.backend` the one this process runs (no longer "auto").

    Written to the run's config.yaml, so a resume trains on the backend the run began on.
    """
    import keras

    backend = keras.backend.backend()
    if config.train.backend not in ("auto", backend):
        raise ConfigError(
            f"train.backend: {config.train.backend}, but Keras runs on {backend} in this "
            f"process; set KERAS_BACKEND={config.train.backend} before importing Keras"
        )
    return dataclasses.replace(config, train=dataclasses.replace(config.train, backend=backend))


class Strategy(Protocol):
    """What training reads of a distribution (`TfStrategy`, `JaxStrategy`)."""

    @property
    def num_replicas_in_sync(self) -> int: ...

    def scope(self) -> AbstractContextManager: ...

    def distribute_datasets_from_function(self, dataset_fn: Callable) -> Iterable: ...

    def is_chief(self) -> bool:
        """Whether this process writes the checkpoints, logs and the final model."""
        ...

    def spans_workers(self) -> bool:
        """Whether several processes train together (and must agree step by step)."""
        ...

    def worker_means(self, *values: float) -> tuple[float, ...]:
        """The means of `values` over the processes (`values` on one): one collective."""
        ...

    def describe_devices(self) -> dict:
        """The devices, runtime and distribution a speed measured here depends on."""
        ...

    def accelerator_memory(self) -> int | None:
        """Bytes of one replica's accelerator memory; None when it trains on the CPU."""
        ...


@dataclasses.dataclass(frozen=True)
class Engine:
    """What training uses on one Keras backend."""

    # The distribution of a `train.strategy` name.
    make_strategy: Callable[[str], Strategy]
    # Resolves `train.precision` ("auto" included) for the strategy and sets Keras'
    # dtype policy; returns the policy's name.
    select_precision: Callable[[str, Strategy], str]
    # The Keras model whose `fit` trains a Transformer (`TranslationTrainer`'s API).
    trainer: type[keras.Model]
    # The run's checkpoint store (`training.checkpoints.Checkpoints`' API).
    checkpoints: type
    # A float64 number that store keeps, from its value and name (`Budget`'s time and
    # tokens): `HostScalar`, or `tf_scalar` for TensorFlow's checkpoints.
    scalar: Callable[[float, str], object]
    # The run config with what this backend's step needs of the input (static shapes
    # for XLA, batches that split over the devices), each change logged.
    adapt: Callable[[RunConfig, Strategy], RunConfig]


def engine() -> Engine:
    """The engine of the backend Keras runs on in this process."""
    import keras

    if keras.backend.backend() == "jax":
        from training.checkpoints import ArrayCheckpoints, HostScalar
        from training.engines import jax_engine

        return Engine(
            make_strategy=jax_engine.make_strategy,
            select_precision=jax_engine.select_precision,
            trainer=jax_engine.JaxTranslationTrainer,
            checkpoints=ArrayCheckpoints,
            scalar=HostScalar,
            adapt=jax_engine.adapt,
        )
    from training import checkpoints
    from training.engines import tf_strategy, tf_trainer

    return Engine(
        make_strategy=tf_strategy.make_strategy,
        select_precision=tf_strategy.select_precision,
        trainer=tf_trainer.TranslationTrainer,
        checkpoints=checkpoints.Checkpoints,
        scalar=checkpoints.tf_scalar,
        adapt=lambda config, _: config,
    )
