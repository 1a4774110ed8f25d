"""Training on Keras' JAX backend: the step under `fit`, the devices, the precision.

`JaxTranslationTrainer` is `TranslationTrainer` with JAX's stateless step: Keras' `fit`
passes the variables' values in and takes the new ones back, compiled by XLA. The loss
is the same (label-smoothed cross-entropy summed over the real target tokens, divided
by their number) and so is clipping (the global gradient norm): under
`keras.distribution.DataParallel` a batch is one global array split over the devices,
so both are global without a collective written here.

The input is the same tf.data pipeline, read by Keras as NumPy, or a prepared corpus
(`data.prepared`, read with numpy); TensorFlow also writes the TensorBoard events. XLA
compiles one program per batch shape, so the pipeline runs with static shapes (`adapt`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math

import jax
import keras
from keras import ops

from training.config import RunConfig
from training.jax_step import apply_stateless, clip_by_global_norm
from training.trainer import TranslationTrainer
from translator.errors import ConfigError
from translator.losses import masked_cross_entropy

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


# Programs that compile faster than this are not worth a file in the cache.
CACHE_MIN_COMPILE_SECONDS = 0.5


def keep_compiled_programs() -> None:
    """Turns on JAX's persistent compilation cache, in the machine's cache (`jax/`).

    A training step compiles once per batch shape, seconds each on a CPU: with the cache,
    the run reuses the programs the planner's timing compiled, and a resumed or repeated
    run those of the last one, instead of compiling them again inside its budget.
    """
    from training.backend import machine_cache_dir

    jax.config.update("jax_compilation_cache_dir", str(machine_cache_dir() / "jax"))
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
    compute it natively (bench/RESULTS.md, the accelerator section).
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


@keras.saving.register_keras_serializable(package="translator")
class JaxTranslationTrainer(TranslationTrainer):
    """`TranslationTrainer`'s training and validation steps, stateless for JAX's `fit`.

    The schedule's `total_updates`, which the budget moves while training, is one of
    this model's variables (`track_schedule`), so the compiled step reads its current
    value rather than the one it was traced with.
    """

    def track_schedule(self, schedule) -> None:
        """Keeps the schedule's `total_updates` (if it has one) in the step's state."""
        total = getattr(schedule, "total_updates", None)
        if total is not None:
            self.schedule_total_updates = total

    def updates_done(self) -> int:
        """Optimizer updates so far, without writing the whole state back."""
        state = getattr(self, "_jax_state", None)
        if state and not self._jax_state_synced:  # mid-epoch: `fit` holds the values
            index = _index(self.optimizer.variables, self.optimizer.iterations)
            return int(state["optimizer_variables"][index])
        return int(ops.convert_to_numpy(self.optimizer.iterations))

    def sync_state(self) -> None:
        """Writes the values `fit` holds back into the variables (Keras' `jax_state_sync`)."""
        self.jax_state_sync()

    def _sums(self, trainable, non_trainable, features, labels, training):
        """`(mean loss, (non_trainable, loss_sum, tokens))` of a batch at these values."""
        inputs = (features["source_ids"], features["decoder_input_ids"])
        logits, non_trainable = self.stateless_call(
            trainable, non_trainable, inputs, training=training
        )  # [batch, tgt_len, vocab]
        loss_sum, tokens = masked_cross_entropy(labels, logits, self.label_smoothing)
        return loss_sum / ops.maximum(tokens, 1.0), (non_trainable, loss_sum, tokens)

    def train_step(self, state, data):
        trainable, non_trainable, optimizer_values, metrics_values = state
        features, labels = data
        grad_fn = jax.value_and_grad(self._sums, has_aux=True)
        (_, (non_trainable, loss_sum, tokens)), gradients = grad_fn(
            trainable, non_trainable, features, labels, True
        )
        gradients, _ = clip_by_global_norm(gradients, self.clip_norm)
        total = getattr(self, "schedule_total_updates", None)
        extra = []
        if total is not None:  # the budget's current end, from the state
            extra.append((total, non_trainable[_index(self.non_trainable_variables, total)]))
        trainable, optimizer_values = apply_stateless(
            self.optimizer, self.trainable_variables, trainable, optimizer_values, gradients, extra
        )
        logs, metrics_values = self._track(metrics_values, loss_sum, tokens)
        return logs, (trainable, non_trainable, optimizer_values, metrics_values)

    def test_step(self, state, data):
        trainable, non_trainable, metrics_values = state
        features, labels = data
        _, (_, loss_sum, tokens) = self._sums(trainable, non_trainable, features, labels, False)
        logs, metrics_values = self._track(metrics_values, loss_sum, tokens)
        return logs, (trainable, non_trainable, metrics_values)

    def _track(self, metrics_values, loss_sum, tokens):
        """The token-weighted mean loss and the token count, updated statelessly."""
        mapping = list(zip(self.metrics_variables, metrics_values, strict=True))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            global_tokens = ops.maximum(tokens, 1.0)
            self.loss_tracker.update_state(loss_sum / global_tokens, sample_weight=global_tokens)
            self.token_counter.update_state(tokens)
            logs = {m.name: m.result() for m in self.metrics}
        return logs, [scope.get_current_value(v) for v in self.metrics_variables]


def _index(variables, variable) -> int:
    return next(i for i, v in enumerate(variables) if v is variable)
