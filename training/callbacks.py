"""Keras callbacks of a training run: budget, NaN guard, checkpoints, BLEU, summaries.

The step counter is the optimizer's update count, not Keras' per-`fit` batch index, so
everything stays right across a resume.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import keras

from training.checkpoints import Checkpoints, HostScalar
from training.summaries import SPLITS, EventWriter, last_step

log = logging.getLogger(__name__)

# Updates a run must make at its steady pace before it reports that pace (`Budget`).
STEADY_UPDATES = 20


def update_step(model) -> int:
    """The updates the trainer has made (across resumes)."""
    return model.updates_done()


def _learning_rate(model) -> float:
    """The rate of the current update (a schedule's value, or a plain float)."""
    return model.current_learning_rate()


class NanGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss and remembers the step.

    The periodic checkpoints look at `failed_step` and stop saving, so the last good
    checkpoint stays the newest one.
    """

    # Any cadence of updates will do (`training.engines.jax_engine.updates_unseen`).
    every_steps = 0

    def __init__(self):
        super().__init__()
        self.failed_step: int | None = None

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.failed_step = update_step(self.model)
            self.model.stop_training = True


class Budget(keras.callbacks.Callback):
    """Stops after `max_steps` updates or `max_minutes` of wall time (0 = no limit).

    It also tells a `BudgetedSchedule` where the run will end. Under a time budget the
    updates still to come are estimated from the rate measured so far (validation
    included: the time from this process' first finished update to now, over the updates
    since), so the schedule reaches its end value when the time runs out; with a step
    budget only, the end is `max_steps`.

    A validation period that ends with less of the budget left than the last validation
    took ends the run there: the budget would run out during the validation, and one
    more update would only buy a second validation and checkpoint past the budget's end.

    The wall time spent so far lives in `elapsed_seconds`, a variable saved with the
    checkpoints: a resumed run spends only what is left of the budget, and its schedule
    goes on along the same curve. `target_tokens` counts what the budget bought: the real
    (non-padding) target tokens trained on, over all replicas and resumes.

    Args:
        max_steps: Stop after this many optimizer updates.
        max_minutes: Stop after this much wall time, in minutes; 0 = no limit.
        schedule: A schedule with a `total_updates` variable to keep up to date, or None.
        clock: Seconds from an arbitrary origin (tests pass a simulated clock).
        strategy: The run's `training.engines.backend.Strategy`, whose workers agree on the time
            spent (None: one process).
        scalar: Makes the two numbers the checkpoints keep, from a value and a name
            (`training.engines.backend.Engine.scalar`).
        deadline: A `clock()` value by which this process' training must end, or None.
            A job that owes its minutes as a whole (a distillation) sets it when its
            training stage begins, so the stage's own start (the plan, building the model,
            compiling) comes out of training's time rather than past the job's end.
            One process' clock: the workers of a multi-worker run would each stop by
            their own, so a deadline is for a run of one process (as a distillation's).
    """

    # Any cadence of updates will do: it stops at the first look past the budget.
    every_steps = 0

    def __init__(
        self,
        max_steps: int,
        max_minutes: float = 0.0,
        schedule=None,
        clock: Callable[[], float] = time.monotonic,
        strategy=None,
        scalar: Callable[[float, str], HostScalar] = HostScalar,
        deadline: float | None = None,
    ):
        super().__init__()
        self.max_steps = max_steps
        self.deadline = deadline
        self.strategy = strategy
        self.max_seconds = max_minutes * 60.0
        self.schedule = schedule if hasattr(schedule, "total_updates") else None
        self.clock = clock
        self.elapsed_seconds = scalar(0.0, "elapsed_seconds")
        self.target_tokens = scalar(0.0, "target_tokens")
        self._epoch_tokens = 0.0  # the trainer's token count is per epoch
        self.reason = ""
        # The update count at which the run is expected to end (max_steps, or where the
        # time budget runs out at the rate so far).
        self.end_step = float(max_steps)
        self._started = self._elapsed_before = 0.0
        self._first: tuple[float, int] | None = None  # (time, step) of the first update
        # The steady pace: seconds and target tokens of the looks after another look of
        # the same epoch (no first update's tracing, no validation between epochs).
        self.steady_seconds = self.steady_tokens = 0.0
        self.steady_updates = 0
        self._last_look: tuple[float, int] | None = None  # (time, step), this epoch
        # Seconds from an epoch's last update to the next epoch's start, last measured:
        # what a validation period's end costs (validation, checkpoint, summaries).
        self.epoch_end_seconds: float | None = None

    def steady_speed(self) -> tuple[float, float] | None:
        """This process' steady pace: (target tokens per second, per update).

        None before `STEADY_UPDATES` updates were seen at it.
        """
        if self.steady_updates < STEADY_UPDATES or self.steady_seconds <= 0:
            return None
        return (
            self.steady_tokens / self.steady_seconds,
            self.steady_tokens / self.steady_updates,
        )

    def state(self) -> dict[str, object]:
        """What a checkpoint keeps so that a resumed run goes on with the same budget."""
        state = {"elapsed_seconds": self.elapsed_seconds, "target_tokens": self.target_tokens}
        if self.schedule is not None:
            state["total_updates"] = self.schedule.total_updates
        return state

    def on_train_begin(self, logs=None):
        self._started = self.clock()
        self._elapsed_before = float(self.elapsed_seconds.numpy())
        self._first = self._last_look = None  # (a new fit's start is no epoch end)
        self.reason = ""
        if self.deadline is not None:
            # (at least a millisecond: 0 would read as no time limit)
            left = self._elapsed_before + max(self.deadline - self._started, 1e-3)
            self.max_seconds = min(self.max_seconds or left, left)
        if self.schedule is not None and not self.max_seconds:
            self.schedule.total_updates.assign(float(self.max_steps))

    def on_epoch_begin(self, epoch, logs=None):
        if self._last_look is not None:
            self.epoch_end_seconds = self.clock() - self._last_look[0]
        self._epoch_tokens = 0.0
        self._last_look = None

    def on_epoch_end(self, epoch, logs=None):
        # (Before the validation callbacks: it runs early in the list.)
        if not self.max_seconds or self.reason or self.epoch_end_seconds is None:
            return
        elapsed = float(self.elapsed_seconds.numpy())  # at the last update, agreed
        _, cost = self.agree(elapsed, self.epoch_end_seconds)
        if self.max_seconds - elapsed < cost:
            self.reason = (
                f"time budget of {self.max_seconds / 60:.1f} minutes used "
                f"(its last {self.max_seconds - elapsed:.0f} s go to this validation)"
            )
            self.model.stop_training = True

    def on_train_batch_end(self, batch, logs=None):
        now, step = self.clock(), update_step(self.model)
        elapsed = self._elapsed_before + now - self._started
        tokens = float((logs or {}).get("tokens", self._epoch_tokens))
        self.target_tokens.assign_add(tokens - self._epoch_tokens)
        if self._last_look is not None and self._first is not None:
            self.steady_seconds += now - self._last_look[0]
            self.steady_tokens += tokens - self._epoch_tokens
            self.steady_updates += step - self._last_look[1]
        self._last_look = (now, step)
        self._epoch_tokens = tokens
        end = float(self.max_steps)
        if self._first is None:
            self._first = (now, step)  # the first update carries the tracing: not timed
        elif self.max_seconds:
            end = self.estimated_updates(now, step, elapsed)
        elapsed, end = self.agree(elapsed, end)
        self.end_step = end
        self.elapsed_seconds.assign(elapsed)
        if self.schedule is not None and self.max_seconds and step > self._first[1]:
            self.schedule.total_updates.assign(end)  # (JAX's loop passes it to the step)
        if step >= self.max_steps:
            self.reason = f"reached max_steps ({self.max_steps})"
        elif self.max_seconds and elapsed >= self.max_seconds:
            self.reason = f"time budget of {self.max_seconds / 60:.1f} minutes used"
        if self.reason:
            self.model.stop_training = True

    def agree(self, elapsed: float, end: float) -> tuple[float, float]:
        """The time spent and the estimated end, the same on every worker (their means).

        Workers' clocks differ a little: without this, workers of a MultiWorkerMirrored
        run would train at different learning rates and stop at different steps (the
        others then wait forever in the next all-reduce). One collective per update.
        """
        if self.strategy is None:
            return elapsed, end
        elapsed, end = self.strategy.worker_means(elapsed, end)
        return elapsed, end

    @property
    def time_bound(self) -> bool:
        """Whether the time budget (not max_steps) is expected to end the run."""
        return bool(self.max_seconds) and self.end_step < self.max_steps

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
        step = update_step(self.model)
        if self.nan_guard.failed_step is None and step != self.last_saved and step > 0:
            self.model.sync_state()
            path = self.checkpoints.save()
            self.last_saved = step
            log.info("saved %s", path)

    def on_train_batch_end(self, batch, logs=None):
        if self.every_steps and update_step(self.model) % self.every_steps == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        self.save()


class Interrupt(keras.callbacks.Callback):
    """Ctrl-C (SIGINT) ends training cleanly after the update in progress.

    Training stops at that step; the periodic checkpoint saves it (its end-of-period
    save) and `train` raises `TrainingInterrupted` instead of writing a final model. The
    same command then resumes on exactly the batches an uninterrupted run would see. A
    second Ctrl-C interrupts at once. Installed only in the main thread, and not under a
    multi-worker strategy, whose workers must all stop at the same step while a signal
    reaches one of them.
    """

    every_steps = 0  # any cadence: it stops at the next look

    def __init__(self, strategy=None):
        super().__init__()
        self.strategy = strategy  # the run's (None: one process)
        # The step training stopped at, once interrupted.
        self.step: int | None = None
        self._requested = False
        self._previous: Callable | int | None = None

    def on_train_begin(self, logs=None):
        self._requested, self.step = False, None
        if threading.current_thread() is not threading.main_thread():
            return
        if self.strategy is not None and self.strategy.spans_workers():
            return
        self._previous = signal.signal(signal.SIGINT, self._request)

    def _request(self, signum, frame) -> None:
        self._requested = True
        signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)
        log.warning(
            "interrupted: stopping after this update to save a checkpoint "
            "(Ctrl-C again to quit at once, without one)"
        )

    def on_train_batch_end(self, batch, logs=None):
        if self._requested and self.step is None:
            self.step = update_step(self.model)
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if signal.getsignal(signal.SIGINT) == self._request:
            signal.signal(signal.SIGINT, self._previous or signal.default_int_handler)


class Progress(keras.callbacks.Callback):
    """Shows how far the run is against its budget (steps or minutes), not Keras' epochs.

    Every `every_steps` updates it logs a line such as

        step 1,200/~4,480 (27%) | loss 3.214 | lr 4.10e-03 | 8,120 target tok/s |
            3m12s elapsed, ~8m40s left

    (the loss is the mean over those updates' target tokens; the end is the budget's
    estimate under a time budget), and the validation loss after each validation. With
    `bar`, for a terminal, a progress bar on `stream` is redrawn in between; other log
    lines clear it first so the two never mix.

    Args:
        budget: The run's `Budget`: the step, time and token counts, the estimated end.
        every_steps: Log a line every this many updates; 0 = never.
        bar: Also draw a progress bar (on a terminal).
        stream: Where the bar goes (default: stderr).
        clock: Seconds from an arbitrary origin.
    """

    def __init__(
        self,
        budget: Budget,
        every_steps: int,
        bar: bool = False,
        stream=None,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self.budget = budget
        self.every_steps = every_steps
        self.bar = bar
        self.stream = stream or sys.stderr
        self.clock = clock
        self._drawn = False
        self._clear = _ClearLine(self)

    def on_train_begin(self, logs=None):
        self._interval = _Interval(self.budget, self.clock)
        self._last_draw = -math.inf
        if self.bar:
            for handler in logging.getLogger().handlers:
                handler.addFilter(self._clear)

    def on_epoch_begin(self, epoch, logs=None):
        self._interval.epoch_begin()  # the trainer's metrics restart every epoch

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        step = update_step(self.model)
        if self.every_steps and step % self.every_steps == 0:
            log.info("%s", self.line(step, logs))
        if self.bar and self.clock() - self._last_draw >= 0.5:
            self._last_draw = self.clock()
            self.stream.write(f"\r\033[K{self.bar_text(step, logs)}")
            self.stream.flush()
            self._drawn = True

    def on_epoch_end(self, epoch, logs=None):
        if logs and "val_loss" in logs:
            log.info("step %d: validation loss %.3f", update_step(self.model), logs["val_loss"])

    def on_train_end(self, logs=None):
        self.clear()
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._clear)

    def clear(self) -> None:
        """Erases the bar, if drawn (before another line is printed)."""
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False

    def line(self, step: int, logs: dict) -> str:
        """The progress line at `step`; resets the interval its figures cover."""
        loss, tokens_per_second = self._interval.take(logs)
        rate = _learning_rate(self.model)
        return (
            f"{self._position(step)} | loss {loss:.3f} | lr {rate:.2e} | "
            f"{tokens_per_second:,.0f} target tok/s | {self._times(step)}"
        )

    def bar_text(self, step: int, logs: dict, width: int = 24) -> str:
        """The progress bar: how much of the budget is spent, and the epoch's mean loss."""
        done = round(self._fraction(step) * width)
        loss = float(logs.get("loss", float("nan")))
        bar = f"[{'#' * done}{'.' * (width - done)}]"
        return f"{bar} {self._position(step)} | loss {loss:.3f} | {self._times(step)}"

    def _fraction(self, step: int) -> float:
        budget = self.budget
        fraction = step / max(budget.max_steps, 1)
        if budget.max_seconds:
            spent = float(budget.elapsed_seconds.numpy()) / budget.max_seconds
            fraction = max(fraction, spent)
        return min(fraction, 1.0)

    def _position(self, step: int) -> str:
        approximate = "~" if self.budget.time_bound else ""
        end = f"{approximate}{self.budget.end_step:,.0f}"
        return f"step {step:,}/{end} ({self._fraction(step):.0%})"

    def _times(self, step: int) -> str:
        budget = self.budget
        elapsed = float(budget.elapsed_seconds.numpy())
        if budget.time_bound:
            left = max(budget.max_seconds - elapsed, 0.0)
        else:  # the step budget binds: at the rate so far
            left = elapsed * max(budget.end_step - step, 0.0) / max(step, 1)
        return f"{_duration(elapsed)} elapsed, ~{_duration(left)} left"


class _ClearLine(logging.Filter):
    """Erases a progress bar before a log record is printed on the same terminal."""

    def __init__(self, progress: Progress):
        super().__init__()
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        self.progress.clear()
        return True


def _duration(seconds: float) -> str:
    """`seconds` as 45s, 3m12s or 1h02m."""
    seconds = max(round(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Summaries(keras.callbacks.Callback):
    """TensorBoard scalars against the global update (event files: `EventWriter`).

    Every `every_steps` updates it writes to `<log_dir>/train`: `loss` (the mean over
    those updates' target tokens), `learning_rate`, `tokens_per_second` (real target
    tokens) and `minutes` (the budget's wall time, resumes included); after each
    validation, `loss`, `bleu` and `minutes` to `<log_dir>/validation`. The step of
    every point is the optimizer's update count, so curves line up across resumes and
    with the progress lines.

    A resumed run redoes the updates after its checkpoint, some of which may be logged
    already; those steps are not written again (a resume trains exactly the same
    batches), so each tag's steps stay strictly increasing.

    Args:
        log_dir: The run's TensorBoard directory.
        budget: The run's `Budget`: its token count and wall time.
        every_steps: Write the training scalars every this many updates.
        clock: Seconds from an arbitrary origin.
    """

    def __init__(
        self,
        log_dir: str | Path,
        budget: Budget,
        every_steps: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self.log_dir = Path(log_dir)
        self.budget = budget
        self.every_steps = every_steps
        self.clock = clock
        self._writers: dict[str, EventWriter] = {}
        self._logged: dict[str, int] = {}

    def on_train_begin(self, logs=None):
        self._interval = _Interval(self.budget, self.clock)
        for split in SPLITS:
            self._writers[split] = EventWriter(self.log_dir / split)
            self._logged[split] = last_step(self.log_dir / split)

    def on_epoch_begin(self, epoch, logs=None):
        self._interval.epoch_begin()

    def on_train_batch_end(self, batch, logs=None):
        step = update_step(self.model)
        if self.every_steps and step % self.every_steps == 0:
            self._write_training(step, logs or {})

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        scalars = {"loss": logs.get("val_loss"), "bleu": logs.get("val_bleu")}
        scalars = {tag: value for tag, value in scalars.items() if value is not None}
        if scalars:
            self._write(
                "validation", update_step(self.model), {**scalars, "minutes": self._minutes()}
            )

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.close()

    def _write_training(self, step: int, logs: dict) -> None:
        loss, tokens_per_second = self._interval.take(logs)
        scalars = {
            "loss": loss,
            "learning_rate": _learning_rate(self.model),
            "tokens_per_second": tokens_per_second,
            "minutes": self._minutes(),
        }
        self._write("train", step, scalars)

    def _minutes(self) -> float:
        return float(self.budget.elapsed_seconds.numpy()) / 60.0

    def _write(self, split: str, step: int, scalars: dict[str, float]) -> None:
        if step <= self._logged[split]:
            return  # logged before the resume, from the same batches
        self._writers[split].write(step, scalars)
        self._logged[split] = step


class _Interval:
    """The mean loss and the target tokens/s since the last `take`.

    Keras' batch logs hold the epoch's running mean loss and token count; the figures of
    the last interval are the differences of their products.
    """

    def __init__(self, budget: Budget, clock: Callable[[], float]):
        self.budget = budget
        self.clock = clock
        self._mark = (clock(), float(budget.target_tokens.numpy()))
        self.epoch_begin()

    def epoch_begin(self) -> None:
        self._epoch = (0.0, 0.0)  # (loss sum, tokens) at the last take, this epoch

    def take(self, logs: dict) -> tuple[float, float]:
        """(Mean loss per target token, target tokens per second) since the last take."""
        now, tokens = self.clock(), float(self.budget.target_tokens.numpy())
        seconds, new_tokens = max(now - self._mark[0], 1e-9), tokens - self._mark[1]
        self._mark = (now, tokens)
        epoch_tokens = float(logs.get("tokens", 0.0))
        loss_sum = float(logs.get("loss", 0.0)) * epoch_tokens
        loss = (loss_sum - self._epoch[0]) / max(epoch_tokens - self._epoch[1], 1.0)
        self._epoch = (loss_sum, epoch_tokens)
        return loss, new_tokens / seconds
