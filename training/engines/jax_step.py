"""The training step on JAX: a pure function of the training state, compiled by XLA.

The same step as `training.engines.tf_trainer.TranslationTrainer` on TensorFlow: the
label-smoothed cross-entropy summed over the real target tokens and divided by their
number, the global gradient norm clipped, and Adam with the run's schedule. JAX wants
the state passed in and returned, so the variables' values travel as a `TrainState`
and are written back to the Keras variables only when asked (`write_back`). The one
step of JAX training: `translator train`'s loop (`training.engines.jax_engine`) and
`bench/accelerator`'s both call it.
"""

from __future__ import annotations

import concurrent.futures
from typing import NamedTuple

import jax
import keras
from keras import ops

from training.schedule import BudgetedSchedule
from translator.constants import DEFAULT_LABEL_SMOOTHING
from translator.losses import masked_cross_entropy
from translator.model import Transformer


class TrainState(NamedTuple):
    """The values of everything a step reads and changes."""

    # The model's trainable variables, in `model.trainable_variables` order.
    trainable: list
    # Its other variables (the dropout layers' seed states among them).
    non_trainable: list
    # The optimizer's variables (step counter, Adam's moments), in its order.
    optimizer: list
    # The updates the budget allows (`BudgetedSchedule.total_updates`): float32 scalar.
    total_updates: jax.Array


class StepResult(NamedTuple):
    """What one step reports besides the new state."""

    # Sum of the token losses: float32 scalar.
    loss_sum: jax.Array
    # Real target tokens: float32 scalar.
    tokens: jax.Array
    # Global gradient norm before clipping: float32 scalar.
    gradient_norm: jax.Array


class JaxTrainer:
    """A `Transformer`, its optimizer and the compiled step that trains them.

    Args:
        model: The model to train (built here if needed).
        optimizer: A Keras optimizer (`training.optimizer.make_optimizer`).
        schedule: Its learning-rate schedule when that is a `BudgetedSchedule`: its
            `total_updates` then travels in the state, so a caller may change it
            without a recompile.
        label_smoothing: Label smoothing of the cross-entropy.
        clip_norm: Clip the global gradient norm to this; 0 = off.
    """

    def __init__(
        self,
        model: Transformer,
        optimizer: keras.optimizers.Optimizer,
        schedule: BudgetedSchedule | None = None,
        label_smoothing: float = DEFAULT_LABEL_SMOOTHING,
        clip_norm: float = 0.0,
    ):
        if not model.built:
            model.build()
        self.model = model
        self.optimizer = optimizer
        self.label_smoothing = label_smoothing
        self.clip_norm = clip_norm
        optimizer.build(model.trainable_variables)
        self._total_updates = None if schedule is None else schedule.total_updates
        self.step = jax.jit(self._step, donate_argnums=0)
        self.loss_and_gradients = jax.jit(self._loss_and_gradients)
        self.evaluate = jax.jit(self._evaluate)
        # Programs compiled ahead of time, by batch shape (`compile`).
        self._programs: dict[tuple, jax.stages.Compiled] = {}

    def compile(self, state: TrainState, batches: list) -> list[tuple]:
        """Compiles the step for each new batch shape among `batches`, side by side.

        XLA releases the GIL while it compiles, so the shapes compile in parallel; the
        persistent compilation cache (if on) serves the ones compiled before. Returns the
        shapes compiled.
        """
        new = {}
        for batch in batches:
            new.setdefault(batch_shape(batch), batch)
        new = {shape: b for shape, b in new.items() if shape not in self._programs}
        lowered = {shape: self.step.lower(state, batch) for shape, batch in new.items()}
        with concurrent.futures.ThreadPoolExecutor(max(len(lowered), 1)) as pool:
            futures = {shape: pool.submit(p.compile) for shape, p in lowered.items()}
        self._programs.update({shape: future.result() for shape, future in futures.items()})
        return list(new)

    def update(self, state: TrainState, batch) -> tuple[TrainState, StepResult]:
        """One update: `step`, through its program compiled ahead for this shape if any."""
        program = self._programs.get(batch_shape(batch))
        return (program or self.step)(state, batch)

    def state(self) -> TrainState:
        """Copies of the variables' current values, as a state for `step`.

        Copies: `step` donates its state's buffers, and the variables' own must outlive
        it (a caller may read the model, or start again from it, mid-training).
        """
        total = self._total_updates

        def values(variables):
            return [ops.copy(v.value) for v in variables]

        return TrainState(
            values(self.model.trainable_variables),
            values(self.model.non_trainable_variables),
            values(self.optimizer.variables),
            ops.copy(ops.convert_to_tensor(1.0 if total is None else total.value, "float32")),
        )

    def write_back(self, state: TrainState) -> None:
        """Assigns a state's values to the model's and optimizer's variables."""
        pairs = (
            (self.model.trainable_variables, state.trainable),
            (self.model.non_trainable_variables, state.non_trainable),
            (self.optimizer.variables, state.optimizer),
        )
        for variables, values in pairs:
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)
        if self._total_updates is not None:
            self._total_updates.assign(state.total_updates)

    def _loss(self, trainable, non_trainable, features, labels, training=True):
        """Mean token loss and `(non_trainable, loss_sum, tokens)` of one batch."""
        inputs = (features["source_ids"], features["decoder_input_ids"])
        logits, non_trainable = self.model.stateless_call(
            trainable, non_trainable, inputs, training=training
        )  # float32 [batch, target_length, vocab]
        loss_sum, tokens = masked_cross_entropy(labels, logits, self.label_smoothing)
        return loss_sum / ops.maximum(tokens, 1.0), (non_trainable, loss_sum, tokens)

    def _loss_and_gradients(self, state: TrainState, batch):
        """`(mean loss, gradients)` of a batch `(features, labels)` at `state`."""
        (loss, _), gradients = jax.value_and_grad(self._loss, has_aux=True)(
            state.trainable, state.non_trainable, *batch
        )
        return loss, gradients

    def _evaluate(self, state: TrainState, batch) -> tuple[jax.Array, jax.Array]:
        """`(loss_sum, tokens)` of a batch at `state`, without dropout: float32 scalars."""
        _, (_, loss_sum, tokens) = self._loss(state.trainable, state.non_trainable, *batch, False)
        return loss_sum, tokens

    def _step(self, state: TrainState, batch) -> tuple[TrainState, StepResult]:
        grad_fn = jax.value_and_grad(self._loss, has_aux=True)
        (_, (non_trainable, loss_sum, tokens)), gradients = grad_fn(
            state.trainable, state.non_trainable, *batch
        )
        gradients, norm = clip_by_global_norm(gradients, self.clip_norm)
        trainable, optimizer = self._apply(state, gradients)
        new_state = TrainState(trainable, non_trainable, optimizer, state.total_updates)
        return new_state, StepResult(loss_sum, tokens, norm)

    def _apply(self, state: TrainState, gradients):
        """The optimizer's update, with the schedule's `total_updates` from the state."""
        extra = []
        if self._total_updates is not None:
            extra.append((self._total_updates, state.total_updates))
        return apply_stateless(
            self.optimizer,
            self.model.trainable_variables,
            state.trainable,
            state.optimizer,
            gradients,
            extra,
        )


def batch_shape(batch) -> tuple:
    """The shapes of a batch's arrays, in tree order: one compiled program each."""
    return tuple(tuple(leaf.shape) for leaf in jax.tree_util.tree_leaves(batch))


def clip_by_global_norm(gradients: list, clip_norm: float) -> tuple[list, jax.Array]:
    """The gradients clipped to a global norm, as `tf.clip_by_global_norm`, and that norm.

    Scaled by `clip / max(norm, clip)`; unchanged when `clip_norm` is 0.
    """
    norm = ops.sqrt(sum(ops.sum(ops.square(g)) for g in gradients))
    if clip_norm:
        scale = clip_norm / ops.maximum(norm, clip_norm)
        gradients = [g * scale for g in gradients]
    return gradients, norm


def apply_stateless(
    optimizer: keras.optimizers.Optimizer,
    variables: list,
    values: list,
    optimizer_values: list,
    gradients: list,
    extra: list = (),
) -> tuple[list, list]:
    """`optimizer.apply` on values rather than variables: `(new values, new optimizer values)`.

    `extra` maps more variables the update reads (the schedule's `total_updates`) to
    their values, so a compiled step reads them as arguments, not as traced constants.
    """
    mapping = [
        *zip(variables, values, strict=True),
        *zip(optimizer.variables, optimizer_values, strict=True),
        *extra,
    ]
    with keras.StatelessScope(state_mapping=mapping) as scope:
        optimizer.apply(gradients, variables)
    return (
        [scope.get_current_value(v) for v in variables],
        [scope.get_current_value(v) for v in optimizer.variables],
    )
