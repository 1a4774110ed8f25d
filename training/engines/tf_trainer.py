"""The training and validation steps, as a Keras model wrapping the Transformer.

`TranslationTrainer` owns what the paper's training step needs and the Transformer
should not know about: the label-smoothed loss over real target tokens, averaged over
the *global* batch (every replica's tokens), and global-norm gradient clipping. It
runs under `model.fit`, so Keras callbacks, the progress bar and `tf.distribute` work
as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import keras
from keras import ops

from training.config import RunConfig
from training.optimizer import make_optimizer, make_schedule
from translator.config import TransformerConfig
from translator.constants import DEFAULT_LABEL_SMOOTHING
from translator.losses import masked_cross_entropy
from translator.model import Transformer

if TYPE_CHECKING:  # pragma: no cover
    from training.engines.backend import Strategy

# TensorFlow is imported inside the functions of TensorFlow's step below: the JAX
# trainer subclasses this model and runs in processes that have no TensorFlow.


def _sum_over_replicas(value):
    """Sums a per-replica value over all replicas (identity without a strategy)."""
    import tensorflow as tf

    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value)


def real_positions(states, labels, multiple: int = 256):
    """The states and labels of the real (non-padding) target positions, as rows.

    Scoring only these skips the padding's share of the output projection and the loss
    (see `PipelineConfig.bucket_width`).

    Args:
        states: `[batch, length, d_model]` decoder states.
        labels: int `[batch, length]`, 0 = padding.
        multiple: Row count granularity (see `pad_rows`).

    Returns:
        `(states, labels)`: `[rows, d_model]` and int `[rows]`, rows a multiple of
        `multiple`.
    """
    import tensorflow as tf

    index = tf.where(tf.not_equal(labels, 0))  # [real, 2]
    return pad_rows(tf.gather_nd(states, index), tf.gather_nd(labels, index), multiple)


def pad_rows(states, labels, multiple: int = 256):
    """Rows of states and their labels, padded to a multiple of `multiple` rows.

    The padding rows have label 0 (ignored by the loss), so that the fused loss, compiled
    once per logits shape, sees a few shapes, not one per batch.

    Args:
        states: `[tokens, d_model]`.
        labels: int `[tokens]`.
        multiple: Row count granularity.

    Returns:
        `(states, labels)`: `[rows, d_model]` and int `[rows]`.
    """
    import tensorflow as tf

    real = tf.shape(labels)[0]
    extra = (multiple - real % multiple) % multiple
    states = tf.pad(states, [[0, extra], [0, 0]])  # [rows, d_model]
    labels = tf.pad(labels, [[0, extra]])  # [rows]
    return states, labels


@keras.saving.register_keras_serializable(package="translator")
class TranslationTrainer(keras.Model):
    """Teacher-forced training of a `Transformer` on `(features, labels)` batches.

    Batches come from `translator.pipelines.make_dataset`: features
    `{"source_ids": [batch, src_len], "decoder_input_ids": [batch, tgt_len]}`, labels
    `[batch, tgt_len]`, 0 = padding.

    The loss of a step is the label-smoothed cross-entropy summed over the real target
    tokens of all replicas, divided by their number. Each replica computes
    `local_sum / global_tokens`; the optimizer sums gradients over replicas, which then
    equal the gradient of the global mean. So a batch split over replicas trains exactly
    like the same batch on one device, whatever the padding. Under gradient accumulation
    (the optimizer's `gradient_accumulation_steps`) the update averages the micro-batch
    gradients, each a token mean of its micro-batch.

    Args:
        transformer: The model to train.
        label_smoothing: Label smoothing of the cross-entropy.
        clip_norm: Clip the global gradient norm (over all replicas) to this; 0 = off.
        **kwargs: Standard `keras.Model` arguments.
    """

    def __init__(
        self,
        transformer: Transformer,
        label_smoothing: float = DEFAULT_LABEL_SMOOTHING,
        clip_norm: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.transformer = transformer
        self.label_smoothing = label_smoothing
        self.clip_norm = clip_norm
        # Token-weighted mean loss and target tokens seen, over all replicas, per epoch.
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.token_counter = keras.metrics.Sum(name="tokens")

    @property
    def metrics(self):
        return [self.loss_tracker, self.token_counter]

    def call(self, inputs, training=None):
        return self.transformer(inputs, training=training)

    def build(self, input_shape=None):
        if not self.transformer.built:  # a loaded model is built already
            self.transformer.build()
        self.built = True

    def track_schedule(self, schedule) -> None:
        """Nothing on TensorFlow: its step reads the schedule's variables as they are.

        (On JAX the compiled step reads only the values passed in: see
        `training.engines.jax_engine.JaxTranslationTrainer`.)
        """

    # Seconds the last `fit` spent compiling steps ahead, before its clock: none on
    # TensorFlow, which traces as the shapes come (JAX sets it).
    compiled_seconds: float = 0.0

    def expect_shapes(self, shapes: tuple[tuple[int, int], ...]) -> None:
        """Nothing on TensorFlow: it traces a step for each shape as it comes.

        (On JAX `fit` compiles them before its clock: see `JaxTranslationTrainer`.)
        """

    def updates_done(self) -> int:
        """Optimizer updates so far."""
        return int(self.optimizer.iterations.numpy())

    def sync_state(self) -> None:
        """Nothing on TensorFlow: its variables are current after every step."""

    def stepper(self, data) -> Callable[[int], float]:
        """Updates on `data` outside `fit`, a few at a time: `fit`'s own step function.

        The planner times two models in turn with it (`training.planning.timing.
        measure_in_turn`), which `fit`, one model's loop to its end, cannot do.

        Args:
            data: The training input (a dataset, distributed or not).

        Returns:
            `step(n)`: makes `n` updates on the next batches of `data` and returns, once
            they are done, the target tokens they trained (all replicas').
        """
        import numpy as np
        import tensorflow as tf

        self.make_train_function()
        if not isinstance(data, tf.distribute.DistributedDataset):
            data = self.distribute_strategy.experimental_distribute_dataset(data)
        batches = iter(data)
        self.reset_metrics()
        seen = [0.0]  # the token counter's total (it sums since the reset)

        def step(n: int) -> float:
            for _ in range(n):
                logs = self.train_function(batches)
            total = float(np.asarray(logs["tokens"]).reshape(-1)[0])  # (waits for them)
            done, seen[0] = total - seen[0], total
            return done

        return step

    def current_learning_rate(self) -> float:
        """The rate of the current update (a schedule's value, or a plain float)."""
        rate = self.optimizer.learning_rate
        return float(rate.numpy() if hasattr(rate, "numpy") else rate)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Under a strategy, Keras' fit pulls a batch and all-reduces it (MEAN) to build the
        # model symbolically, before checking whether anything is unbuilt. That fails for
        # dict batches under MultiWorkerMirroredStrategy and for replicas holding batches
        # of different shapes (token batching). Everything here is built before fit.
        if self.built and self.optimizer is not None and self.optimizer.built:
            return
        super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def _loss(self, features, labels, training):
        model = self.transformer
        if not model.built:  # (its methods are called directly, not through `__call__`)
            model.build()
        source_ids, target_ids = features["source_ids"], features["decoder_input_ids"]
        # The real tokens alone, as packed rows, but in an XLA step (static shapes).
        packs = not self.jit_compile
        source_layout = model.packed_layout(source_ids) if packs else None
        target_layout = model.packed_layout(target_ids) if packs else None
        encoder_output = model.encode(source_ids, training=training, layout=source_layout)
        states = model.decoder_states(
            target_ids,
            encoder_output,
            source_ids,
            training=training,
            layout=target_layout,
            encoder_layout=source_layout,
        )  # [tokens, d_model] packed, else [batch, tgt_len, d_model]
        if target_layout is not None:  # the labels of the same tokens (shifted, same places)
            states, labels = pad_rows(states, target_layout.pack(labels))  # [rows, ...]
        elif packs:  # (an XLA step needs static shapes: it scores them all)
            states, labels = real_positions(states, labels)  # [rows, d_model], [rows]
        logits = model.logits(states, training)  # [rows, vocab] (or [batch, tgt_len, vocab])
        loss_sum, tokens = masked_cross_entropy(
            labels, logits, self.label_smoothing, compiled=not self.jit_compile
        )
        global_sum, global_tokens = _sum_over_replicas([loss_sum, tokens])
        global_tokens = ops.maximum(global_tokens, 1.0)
        # Every replica records the *global* figures, so each replica's metrics hold the
        # exact token-weighted values (Keras reports a replica's own metric results, and
        # would otherwise average per-replica means over different token counts).
        self.loss_tracker.update_state(global_sum / global_tokens, sample_weight=global_tokens)
        self.token_counter.update_state(global_tokens)
        return loss_sum / global_tokens

    def train_step(self, data):
        import tensorflow as tf

        features, labels = data
        with tf.GradientTape() as tape:
            loss = self._loss(features, labels, training=True)
            scaled_loss = self.optimizer.scale_loss(loss)  # loss scaling under float16
        variables = self.transformer.trainable_variables
        gradients = tape.gradient(scaled_loss, variables)
        if self.clip_norm:
            gradients = self._clip(gradients)
        self.optimizer.apply(gradients, variables)
        return self._results()

    def test_step(self, data):
        features, labels = data
        self._loss(features, labels, training=False)
        return self._results()

    def _results(self):
        from training.engines.tf_strategy import spans_workers

        results = {metric.name: metric.result() for metric in self.metrics}
        if spans_workers(self.distribute_strategy):
            # Keras' fit reduces per-replica logs with strategy.reduce(MEAN, axis=0) under
            # multi-worker collectives, which needs an axis to reduce: scalars fail there.
            # The values are equal on all replicas, so the mean gives them back.
            results = {name: ops.reshape(value, (1,)) for name, value in results.items()}
        return results

    def _clip(self, gradients):
        """Clips the *global* gradient to `clip_norm`.

        Keras' own `global_clipnorm` clips each replica's share before the cross-replica
        sum, which is not the global norm. Here the full gradient is summed first, clipped,
        and divided by the replica count, since the optimizer sums it over replicas again.
        """
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        gradients = [tf.convert_to_tensor(g) for g in gradients]
        if replicas > 1:
            gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        # Under loss scaling the gradients are still scaled: scale the threshold alike.
        threshold = self.clip_norm * getattr(self.optimizer, "dynamic_scale", 1.0)
        gradients, _ = tf.clip_by_global_norm(gradients, threshold)
        return [g / replicas for g in gradients] if replicas > 1 else gradients

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "transformer": keras.saving.serialize_keras_object(self.transformer),
                "label_smoothing": self.label_smoothing,
                "clip_norm": self.clip_norm,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["transformer"] = keras.saving.deserialize_keras_object(config["transformer"])
        return cls(**config)


def build_trainer(
    config: RunConfig,
    model_config: TransformerConfig,
    strategy: Strategy,
    steps_per_execution: int | None = None,
    trainer_class: type[TranslationTrainer] = TranslationTrainer,
) -> tuple[TranslationTrainer, keras.optimizers.schedules.LearningRateSchedule]:
    """A new model, its trainer and optimizer, built under `strategy`, ready for `fit`.

    Training and the planner's speed timing both build theirs here, so a timed step is
    the step that trains.

    Args:
        config: The run config (loss, optimizer, schedule, XLA and steps per execution).
        model_config: The model's architecture.
        strategy: Variables are created under its scope.
        steps_per_execution: Overrides `config.train.steps_per_execution` (timing: 1).
        trainer_class: The backend's trainer (`training.engines.backend.engine().trainer`).

    Returns:
        The trainer (its model is `trainer.transformer`) and the optimizer's schedule.
    """
    with strategy.scope():
        transformer = Transformer(model_config, name="transformer")
        trainer = trainer_class(
            transformer,
            label_smoothing=config.optimizer.label_smoothing,
            clip_norm=config.optimizer.clip_norm,
        )
        schedule = make_schedule(config, model_config.d_model)
        trainer.track_schedule(schedule)
        trainer.compile(
            optimizer=make_optimizer(config, model_config.d_model, schedule),
            steps_per_execution=steps_per_execution or config.train.steps_per_execution,
            jit_compile=config.train.jit_compile,
        )
        trainer.build()  # under a strategy, before `fit` sees batches
        trainer.optimizer.build(transformer.trainable_variables)
    return trainer, schedule
