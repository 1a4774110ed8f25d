"""Training on Keras' JAX backend: the loop, the devices, the precision.

`JaxTranslationTrainer.fit` is the JAX loop: the one step of `training.engines.jax_step` (the
loss of `TranslationTrainer`: label-smoothed cross-entropy summed over the real target
tokens, divided by their number; the global gradient norm clipped), its state kept on
the devices, the updates counted on the host and the callbacks run every few updates,
not after each. Under `keras.distribution.DataParallel` a batch is one global array
split over the devices, so the loss and the clipping are global without a collective
written here.

The input is the same tf.data pipeline, read as NumPy, or a prepared corpus
(`data.prepared`, read with numpy); TensorFlow also writes the TensorBoard events. XLA
compiles one program per batch shape, so the pipeline runs with static shapes (`adapt`),
and every shape is compiled before the clock starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
import types
from collections.abc import Callable

import jax
import jax.numpy as jnp
import keras
import numpy as np
from keras import ops

from training.config import RunConfig
from training.engines.tf_trainer import TranslationTrainer
from translator.errors import ConfigError
from translator.io import machine_cache_dir

log = logging.getLogger(__name__)

# Bucket width under static shapes when the config asks for narrower ones: each bucket
# is a compiled program (the pipeline's own advice for static shapes).
STATIC_BUCKET_WIDTH = 16


class JaxStrategy:
    """The devices a JAX run trains on, with the members training reads of a strategy.

    One device, or (`mirrored`) data parallel over all local ones through
    `keras.distribution.DataParallel`: variables replicated, each batch split along its
    first axis. Multi-host runs (`jax.distributed.initialize`, which reads
    `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`, or a cluster's
    own variables) are not tested here.
    """

    def __init__(self, devices: list):
        self.devices = devices
        self.distribution = None
        if len(devices) > 1:
            self.distribution = keras.distribution.DataParallel(devices=devices)
        keras.distribution.set_distribution(self.distribution)

    @property
    def num_replicas_in_sync(self) -> int:
        return len(self.devices)

    def scope(self):
        return contextlib.nullcontext()

    def distribute_datasets_from_function(self, dataset_fn):
        """The global batches, one input pipeline (no context); Keras splits each batch."""
        return dataset_fn(None)

    def is_chief(self) -> bool:
        """The first process writes (the only one, unless `jax.distributed` started more)."""
        return jax.process_index() == 0

    def spans_workers(self) -> bool:
        return jax.process_count() > 1

    def worker_means(self, *values: float) -> tuple[float, ...]:
        """The means over the processes: one all-gather (none with one process)."""
        if not self.spans_workers():
            return values
        from jax.experimental import multihost_utils

        gathered = multihost_utils.process_allgather(np.asarray(values, np.float64))
        return tuple(float(value) for value in np.mean(gathered, axis=0))

    def describe_devices(self) -> dict:
        devices = [f"{device.platform}:{device.id} {device.device_kind}" for device in self.devices]
        return {"devices": devices, "jax": jax.__version__, "strategy": type(self).__name__}

    def accelerator_memory(self) -> int | None:
        """What the first device's allocator may hold (None on the CPU, or unreported)."""
        device = self.devices[0]
        if device.platform == "cpu":
            return None
        stats = device.memory_stats() or {}
        return stats.get("bytes_limit")


# Programs that compile faster than this are not worth a file in the cache.
CACHE_MIN_COMPILE_SECONDS = 0.5


def keep_compiled_programs() -> None:
    """Turns on JAX's persistent compilation cache, in the machine's cache (`jax/`).

    A training step compiles once per batch shape, seconds each on a CPU: with the cache,
    a resumed or repeated run reuses the programs of the last one (and the run those the
    planner's timing compiled, where its model is the one timed) instead of compiling
    them again.
    """
    jax.config.update("jax_compilation_cache_dir", str(machine_cache_dir() / "jax"))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:  # (JAX's own setting)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)


def make_strategy(name: str) -> JaxStrategy:
    """The devices of a `train.strategy` name on JAX.

    Raises:
        ConfigError: multi_worker or tpu (tf.distribute's), which JAX does not take.
    """
    # (JAX logs each platform it probes and does not find, a TPU's on every machine.)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
    keep_compiled_programs()
    devices = jax.local_devices()
    if name in ("auto", "mirrored"):
        if name == "auto" and devices[0].platform == "cpu":
            devices = devices[:1]  # host "devices" share the same cores
        return JaxStrategy(devices)
    if name == "one_device":
        return JaxStrategy(devices[:1])
    raise ConfigError(
        f"train.strategy: {name} is tf.distribute's; on JAX choose auto, one_device or "
        "mirrored (all local devices)"
    )


def select_precision(name: str, strategy: JaxStrategy) -> str:
    """`train.precision` on JAX: auto is mixed_bfloat16 on accelerators, float32 on CPUs.

    Not mixed_float16: bfloat16 needs no loss scaling, and the GPUs and TPUs JAX runs on
    compute it natively (decision D17).
    """
    if name == "auto":
        name = "float32" if strategy.devices[0].platform == "cpu" else "mixed_bfloat16"
    keras.config.set_dtype_policy(name)
    return name


def adapt(config: RunConfig, strategy: JaxStrategy) -> RunConfig:
    """The config compiled by XLA, with static batch shapes that split over the devices.

    (`train.jit_compile` is implied: Keras' JAX `fit` runs op by op without it.) The
    pipeline's changes are logged.
    """
    pipeline = config.data.pipeline
    changes = {}
    if not pipeline.static_shapes:
        changes["static_shapes"] = True
        if not pipeline.bucket_boundaries and pipeline.bucket_width < STATIC_BUCKET_WIDTH:
            changes["bucket_width"] = STATIC_BUCKET_WIDTH
    devices = strategy.num_replicas_in_sync
    if pipeline.batch_size_multiple % devices:
        changes["batch_size_multiple"] = math.lcm(pipeline.batch_size_multiple, devices)
    train = config.train
    if not train.jit_compile:
        config = dataclasses.replace(config, train=dataclasses.replace(train, jit_compile=True))
    if not changes:
        return config
    log.info(
        "jax: data.pipeline %s (XLA compiles one step per batch shape%s)",
        ", ".join(f"{key}={value}" for key, value in changes.items()),
        f"; batches split over {devices} devices" if devices > 1 else "",
    )
    data = dataclasses.replace(config.data, pipeline=dataclasses.replace(pipeline, **changes))
    return dataclasses.replace(config, data=data)


# The most updates dispatched between two looks from the host (the clock, the callbacks):
# the device is never waited for in between.
MAX_UPDATES_UNSEEN = 50
# ... and the most seconds: the clock (the time budget) is read at least this often, and
# no more updates are dispatched unseen than the device makes in this time at the last
# looks' pace (dispatch runs ahead: on a 2-core CPU one second queued 33 updates, 16 s of
# work, and a planner's 4-s timing took 26 s).
MAX_SECONDS_UNSEEN = 1.0


@keras.saving.register_keras_serializable(package="translator")
class JaxTranslationTrainer(TranslationTrainer):
    """`TranslationTrainer`'s model, optimizer and schedule, trained by the JAX loop.

    `fit` is the product's loop on JAX: the one step (`training.engines.jax_step.JaxTrainer`:
    loss over the real tokens, clipping, the optimizer), its state held on the devices
    and passed from update to update. The host counts the updates and dispatches them
    without waiting; every few updates (`updates_unseen`) it reads the interval's loss
    and tokens in one transfer and runs the callbacks, which see Keras' `fit` API (the
    update count, the logs, `stop_training`). The variables are written back only when
    a callback asks (`sync_state`: checkpoints, validation BLEU). Every batch shape the
    input will bring (`batch_shapes`) is compiled before the clock starts, side by side.
    """

    # The batch shapes `fit` compiles before its clock: `(rows, length)` each.
    batch_shapes: tuple[tuple[int, int], ...] = ()

    def expect_shapes(self, shapes: tuple[tuple[int, int], ...]) -> None:
        """The batch shapes the input will bring (`training.inputs.batch_shapes`)."""
        self.batch_shapes = tuple(shapes)

    def track_schedule(self, schedule) -> None:
        """Keeps the schedule: its `total_updates` (if any) travels in the step's state."""
        self._schedule = schedule

    def updates_done(self) -> int:
        """Optimizer updates so far: the host's count inside `fit`."""
        loop = getattr(self, "_loop", None)
        if loop is not None:
            return loop.updates
        return int(ops.convert_to_numpy(self.optimizer.iterations))

    def sync_state(self) -> None:
        """Writes the values `fit` holds back into the variables."""
        loop = getattr(self, "_loop", None)
        if loop is not None:
            loop.write_back()

    def current_learning_rate(self) -> float:
        """The rate of the current update, from the host's count (no device read)."""
        rate = self.optimizer.learning_rate
        if callable(getattr(self, "_schedule", None)):
            rate = self._schedule(self.updates_done())
        return float(ops.convert_to_numpy(rate))

    def stepper(self, data) -> Callable[[int], float]:
        """Updates on `data` outside `fit`, a few at a time: the loop's own step.

        The planner times two models in turn with it (`training.planning.timing.
        measure_in_turn`). The batch shapes are compiled first (`expect_shapes`), as
        `fit` does before its clock; the state stays on the devices between calls, and
        `sync_state` writes it back (until the next `fit`).

        Args:
            data: NumPy batches, or a dataset that gives them (`as_numpy_iterator`).

        Returns:
            `step(n)`: makes `n` updates on the next batches of `data` and returns, once
            they are done, the target tokens they trained.
        """
        loop = _Loop(self, callbacks=())
        loop.compile_ahead()
        self._loop = loop
        batches = data.as_numpy_iterator() if hasattr(data, "as_numpy_iterator") else iter(data)

        def step(n: int) -> float:
            tokens = [loop.update(loop.place(next(batches))).tokens for _ in range(n)]
            return float(np.sum(jax.device_get(tokens)))  # (waits for them)

        return step

    def fit(
        self,
        x,
        *,
        epochs: int = 1,
        initial_epoch: int = 0,
        steps_per_epoch: int,
        validation_data=None,
        callbacks=(),
        **_,
    ):
        """Trains as Keras' `fit` would, on JAX's terms (see the class docstring).

        Args:
            x: The training input: an iterator of `(features, labels)` NumPy batches, or
                a dataset that gives one (`as_numpy_iterator`).
            epochs: The epoch to end before; an epoch is `steps_per_epoch` updates.
            initial_epoch: The epoch to start at.
            steps_per_epoch: Updates per epoch (one validation period).
            validation_data: Batches for the validation loss after each epoch, or None.
            callbacks: Keras callbacks.
            **_: Keras' other arguments (`verbose`, `shuffle`): the callbacks report, and
                the input is shuffled where it is made.

        Returns:
            A `keras.callbacks.History`-like object: `.history["loss"]` (and
            `"val_loss"`) per epoch.
        """
        loop = _Loop(self, callbacks)
        self._loop = loop
        try:
            history = loop.run(x, epochs, initial_epoch, steps_per_epoch, validation_data)
            loop.write_back()  # (not after an error: an update may have taken the state)
            return history
        finally:
            self._loop = None


class _Loop:
    """One `JaxTranslationTrainer.fit`: the state on the devices, the host's counts."""

    def __init__(self, trainer: JaxTranslationTrainer, callbacks):
        from training.engines.jax_step import JaxTrainer

        self.trainer = trainer
        schedule = getattr(trainer, "_schedule", None)
        budgeted = schedule if hasattr(schedule, "total_updates") else None
        self.step = JaxTrainer(
            trainer.transformer, trainer.optimizer, budgeted, trainer.label_smoothing,
            trainer.clip_norm,
        )  # fmt: skip
        self.total = None if budgeted is None else budgeted.total_updates
        self.callbacks = keras.callbacks.CallbackList(list(callbacks), model=trainer)
        self.every = updates_unseen(callbacks)
        self.backlog = backlog(None)
        self.updates = int(ops.convert_to_numpy(trainer.optimizer.iterations))
        self.state = self.step.state()
        self.place = _placement()

    def write_back(self) -> None:
        """The state into the variables, as copies (the next update donates its buffers)."""
        self.step.write_back(jax.tree_util.tree_map(jnp.copy, self.state))

    def run(self, x, epochs, initial_epoch, steps_per_epoch, validation_data):
        batches = x.as_numpy_iterator() if hasattr(x, "as_numpy_iterator") else iter(x)
        self.compile_ahead()
        history = {"loss": []}
        trainer, callbacks = self.trainer, self.callbacks
        trainer.stop_training = False
        callbacks.on_train_begin()
        logs: dict = {}
        for epoch in range(initial_epoch, epochs):
            callbacks.on_epoch_begin(epoch)
            logs = self._epoch(batches, steps_per_epoch)
            if validation_data is not None:  # (as Keras: also when stopping)
                logs["val_loss"] = self._validation_loss(validation_data)
            callbacks.on_epoch_end(epoch, logs)
            for name, value in logs.items():
                history.setdefault(name, []).append(value)
            if trainer.stop_training:
                break
        callbacks.on_train_end(logs)
        return types.SimpleNamespace(history=history)

    def _epoch(self, batches, steps: int) -> dict:
        """Up to `steps` updates, the callbacks at every `self.every`; the epoch's logs.

        The host also looks after `self.backlog` updates unseen (the device's pace) and
        after `MAX_SECONDS_UNSEEN` of dispatching.
        """
        loss_sum = tokens = 0.0
        pending, looked = [], time.monotonic()
        seen = looked  # when the last look's updates were done and its callbacks had run
        for index in range(steps):
            pending.append(self.update(self.place(next(batches))))
            due = self.updates % self.every == 0 or index == steps - 1
            due = due or len(pending) >= self.backlog
            if not due and time.monotonic() - looked < MAX_SECONDS_UNSEEN:
                continue
            looked = time.monotonic()
            sums = np.sum(jax.device_get([(r.loss_sum, r.tokens) for r in pending]), axis=0)
            self.backlog = backlog((time.monotonic() - seen) / len(pending))
            loss_sum, tokens, pending = loss_sum + float(sums[0]), tokens + float(sums[1]), []
            logs = {"loss": loss_sum / max(tokens, 1.0), "tokens": tokens}
            self.callbacks.on_train_batch_end(index, logs)
            seen = time.monotonic()
            if self.total is not None:  # the budget may have moved the schedule's end
                # (A copy: the next update donates the state's buffers.)
                self.state = self.state._replace(total_updates=jnp.copy(self.total.value))
            if self.trainer.stop_training:
                break
        return {"loss": loss_sum / max(tokens, 1.0), "tokens": tokens}

    def update(self, batch):
        """One update on a batch placed on the devices; its (unread) loss sum and tokens."""
        # Nothing between looks reads from the device: a read would wait for it.
        with jax.transfer_guard_device_to_host("disallow_explicit"):
            self.state, result = self.step.update(self.state, batch)
        self.updates += 1
        return result

    def _validation_loss(self, validation_data) -> float:
        """The token-weighted validation loss, summed on the devices, read once."""
        batches = validation_data
        if hasattr(batches, "as_numpy_iterator"):
            batches = batches.as_numpy_iterator()
        sums = [self.step.evaluate(self.state, self.place(batch)) for batch in batches]
        loss_sum, tokens = np.sum(jax.device_get(sums), axis=0)
        return float(loss_sum / max(tokens, 1.0))

    def compile_ahead(self) -> None:
        """Compiles the step for every shape the input will bring, before the clock."""
        shapes = self.trainer.batch_shapes
        if not shapes:
            return
        started = time.monotonic()
        examples = [self.place(_zeros(rows, length)) for rows, length in shapes]
        compiled = self.step.compile(self.state, examples)
        self.trainer.compiled_seconds = time.monotonic() - started
        log.info(
            "jax: compiled the training step for %d batch shape(s) in %.1f s, before the clock",
            len(compiled),
            self.trainer.compiled_seconds,
        )


def backlog(seconds_per_update: float | None) -> int:
    """The updates dispatched before the host looks, 1 to `MAX_UPDATES_UNSEEN`.

    `MAX_SECONDS_UNSEEN` of the device's work at `seconds_per_update` (None: not known
    yet, one: the first look times the pace).
    """
    if math.isinf(MAX_SECONDS_UNSEEN):
        return MAX_UPDATES_UNSEEN  # (looks by count alone)
    if seconds_per_update is None:
        return 1
    return int(max(1, min(MAX_UPDATES_UNSEEN, MAX_SECONDS_UNSEEN / max(seconds_per_update, 1e-9))))


def updates_unseen(callbacks) -> int:
    """The updates dispatched between two looks: a divisor of every callback's cadence.

    A callback states the cadence it needs as `every_steps` (N: at multiples of N; 0:
    any); one that states none is called after every update.
    """
    cadence = 0
    for callback in callbacks:
        every = getattr(callback, "every_steps", None)
        if every is None:
            return 1
        cadence = math.gcd(cadence, int(every))
    if cadence == 0:
        return MAX_UPDATES_UNSEEN
    return max(d for d in range(1, min(cadence, MAX_UPDATES_UNSEEN) + 1) if cadence % d == 0)


def _zeros(rows: int, length: int):
    """A batch of `rows` x `length` padding: the shape of a real one, for compiling."""
    ids = np.zeros((rows, length), np.int32)
    return {"source_ids": ids, "decoder_input_ids": ids}, ids


def _placement():
    """Puts a NumPy batch on the devices: whole on one, or split along its rows.

    Split over the devices of the data-parallel distribution (`JaxStrategy`), if any.
    """
    distribution = keras.distribution.distribution()
    if distribution is None:
        return jax.device_put
    rows = jax.sharding.NamedSharding(
        distribution.device_mesh.backend_mesh,
        jax.sharding.PartitionSpec(distribution.batch_dim_name),
    )
    return lambda batch: jax.device_put(batch, rows)
