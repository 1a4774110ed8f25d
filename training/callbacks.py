"""Keras callbacks of a training run: budget, NaN guard, checkpoints, BLEU, throughput.

The step counter is the optimizer's update count, not Keras' per-`fit` batch index, so
everything stays right across a resume.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

import keras
import sacrebleu
import tensorflow as tf

from training.checkpoints import Checkpoints
from training.strategy import spans_workers

log = logging.getLogger(__name__)


def _step(model) -> int:
    return int(model.optimizer.iterations.numpy())


class NanGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss and remembers the step.

    The periodic checkpoints look at `failed_step` and stop saving, so the last good
    checkpoint stays the newest one.
    """

    def __init__(self):
        super().__init__()
        self.failed_step: int | None = None

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.failed_step = _step(self.model)
            self.model.stop_training = True


class Budget(keras.callbacks.Callback):
    """Stops after `max_steps` updates or `max_minutes` of wall time (0 = no limit).

    It also tells a `BudgetedSchedule` where the run will end. Under a time budget the
    updates still to come are estimated from the rate measured so far (validation
    included: the time from this process' first finished update to now, over the updates
    since), so the schedule reaches its end value when the time runs out; with a step
    budget only, the end is `max_steps`.

    The wall time spent so far lives in `elapsed_seconds`, a variable saved with the
    checkpoints: a resumed run spends only what is left of the budget, and its schedule
    goes on along the same curve. `target_tokens` counts what the budget bought: the real
    (non-padding) target tokens trained on, over all replicas and resumes.

    Args:
        max_steps: Stop after this many optimizer updates.
        max_minutes: Stop after this much wall time, in minutes; 0 = no limit.
        schedule: A schedule with a `total_updates` variable to keep up to date, or None.
        clock: Seconds from an arbitrary origin (tests pass a simulated clock).
    """

    def __init__(
        self,
        max_steps: int,
        max_minutes: float = 0.0,
        schedule=None,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self.max_steps = max_steps
        self.max_seconds = max_minutes * 60.0
        self.schedule = schedule if hasattr(schedule, "total_updates") else None
        self.clock = clock
        self.elapsed_seconds = tf.Variable(0.0, trainable=False, dtype=tf.float64)
        self.target_tokens = tf.Variable(0.0, trainable=False, dtype=tf.float64)
        self._epoch_tokens = 0.0  # the trainer's token count is per epoch
        self.reason = ""
        self._started = self._elapsed_before = 0.0
        self._first: tuple[float, int] | None = None  # (time, step) of the first update

    def state(self) -> dict[str, tf.Variable]:
        """What a checkpoint keeps so that a resumed run goes on with the same budget."""
        state = {"elapsed_seconds": self.elapsed_seconds, "target_tokens": self.target_tokens}
        if self.schedule is not None:
            state["total_updates"] = self.schedule.total_updates
        return state

    def on_train_begin(self, logs=None):
        self._started = self.clock()
        self._elapsed_before = float(self.elapsed_seconds.numpy())
        self._first = None
        self.reason = ""
        if self.schedule is not None and not self.max_seconds:
            self.schedule.total_updates.assign(float(self.max_steps))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_tokens = 0.0

    def on_train_batch_end(self, batch, logs=None):
        now, step = self.clock(), _step(self.model)
        elapsed = self._elapsed_before + now - self._started
        tokens = float((logs or {}).get("tokens", self._epoch_tokens))
        self.target_tokens.assign_add(tokens - self._epoch_tokens)
        self._epoch_tokens = tokens
        end = float(self.max_steps)
        if self._first is None:
            self._first = (now, step)  # the first update carries the tracing: not timed
        elif self.max_seconds:
            end = self.estimated_updates(now, step, elapsed)
        elapsed, end = self.agree(elapsed, end)
        self.elapsed_seconds.assign(elapsed)
        if self.schedule is not None and self.max_seconds and step > self._first[1]:
            self.schedule.total_updates.assign(end)
        if step >= self.max_steps:
            self.reason = f"reached max_steps ({self.max_steps})"
        elif self.max_seconds and elapsed >= self.max_seconds:
            self.reason = f"time budget of {self.max_seconds / 60:g} minutes used"
        if self.reason:
            self.model.stop_training = True

    def agree(self, elapsed: float, end: float) -> tuple[float, float]:
        """The time spent and the estimated end, the same on every worker (their means).

        Workers' clocks differ a little: without this, workers of a MultiWorkerMirrored
        run would train at different learning rates and stop at different steps (the
        others then wait forever in the next all-reduce). One collective per update.
        """
        strategy = getattr(self.model, "distribute_strategy", None)
        if strategy is None or not spans_workers(strategy):
            return elapsed, end
        local = strategy.run(lambda: tf.constant([elapsed, end], tf.float64))
        mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, local, axis=None).numpy()
        return float(mean[0]), float(mean[1])

    def estimated_updates(self, now: float, step: int, elapsed: float) -> float:
        """The update count at which the time budget will run out, at the rate so far."""
        first_time, first_step = self._first
        seconds_per_update = (now - first_time) / max(step - first_step, 1)
        left = max(self.max_seconds - elapsed, 0.0)
        return min(float(self.max_steps), step + left / max(seconds_per_update, 1e-9))


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Saves every `every_steps` updates and at every epoch (validation) end."""

    def __init__(self, checkpoints: Checkpoints, every_steps: int, nan_guard: NanGuard):
        super().__init__()
        self.checkpoints = checkpoints
        self.every_steps = every_steps
        self.nan_guard = nan_guard
        self.last_saved = -1

    def save(self) -> None:
        """Saves unless this step is saved already or the loss went NaN."""
        step = _step(self.model)
        if self.nan_guard.failed_step is None and step != self.last_saved and step > 0:
            path = self.checkpoints.save()
            self.last_saved = step
            log.info("saved %s", path)

    def on_train_batch_end(self, batch, logs=None):
        if self.every_steps and _step(self.model) % self.every_steps == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        self.save()


class Throughput(keras.callbacks.Callback):
    """Adds `tokens_per_second` (target tokens) and `learning_rate` to the epoch logs."""

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        elapsed = max(time.monotonic() - self.started, 1e-9)
        logs["tokens_per_second"] = float(logs.get("tokens", 0.0)) / elapsed
        optimizer = self.model.optimizer
        rate = optimizer.learning_rate
        logs["learning_rate"] = float(rate.numpy() if hasattr(rate, "numpy") else rate)


class TensorBoard(keras.callbacks.TensorBoard):
    """Keras' TensorBoard callback, with the end-of-period summaries always written.

    With an integer `update_freq`, Keras (3.15) wraps the whole training in
    `record_if(step % update_freq == 0)`, so its epoch-end summaries (validation loss and
    BLEU, tokens/s, the learning rate) were dropped unless a period happened to end on a
    multiple of `update_freq`.
    """

    def _log_epoch_metrics(self, epoch, logs):
        with self.summary.record_if(True):
            super()._log_epoch_metrics(epoch, logs)


class BleuValidation(keras.callbacks.Callback):
    """Translates the validation sources, scores them with sacreBLEU, keeps the best.

    Adds `val_bleu` to the epoch logs (so TensorBoard and the progress bar show it),
    calls `on_best(step, bleu)` when BLEU improves, and stops training after `patience`
    validations without improvement (0 = never).

    Args:
        translate: Maps source sentences to detokenized translations.
        sources: Validation source sentences.
        references: Their reference translations.
        on_best: Called with (step, bleu) on a new best, e.g. to save the model.
        patience: Early-stopping patience in validations; 0 disables it.
        nan_guard: Validation is skipped once the loss went NaN.
    """

    def __init__(
        self,
        translate: Callable[[Sequence[str]], list[str]],
        sources: Sequence[str],
        references: Sequence[str],
        on_best: Callable[[int, float], None],
        patience: int,
        nan_guard: NanGuard,
    ):
        super().__init__()
        self.translate = translate
        self.sources = list(sources)
        self.references = list(references)
        self.on_best = on_best
        self.patience = patience
        self.nan_guard = nan_guard
        self.best = -1.0
        self.best_step = 0
        self.since_best = 0
        self.history: list[tuple[int, float]] = []
        self.stopped_early = False

    def on_epoch_end(self, epoch, logs=None):
        if self.nan_guard.failed_step is not None:
            return
        started = time.monotonic()
        hypotheses = self.translate(self.sources)
        bleu = sacrebleu.corpus_bleu(hypotheses, [self.references]).score
        step = _step(self.model)
        self.history.append((step, bleu))
        if logs is not None:
            logs["val_bleu"] = bleu
        log.info("step %d: validation BLEU %.2f (%.1fs)", step, bleu, time.monotonic() - started)
        if bleu > self.best:
            self.best, self.best_step, self.since_best = bleu, step, 0
            self.on_best(step, bleu)
        else:
            self.since_best += 1
            if self.patience and self.since_best >= self.patience:
                log.info("early stopping: no BLEU gain in %d validations", self.patience)
                self.stopped_early = True
                self.model.stop_training = True
