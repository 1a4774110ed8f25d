"""The progress a run shows against its budget, with a simulated clock and step logs."""

import io
import logging
import types

import pytest
import tensorflow as tf

from training.callbacks import Budget, Progress


class FakeRun:
    """A model stand-in with an update counter and a learning rate, and a simulated clock."""

    def __init__(self):
        self.now = 0.0
        self.optimizer = types.SimpleNamespace(
            iterations=tf.Variable(0, dtype=tf.int64), learning_rate=tf.Variable(1e-3)
        )
        self.stop_training = False

    def updates_done(self) -> int:
        return int(self.optimizer.iterations.numpy())

    def sync_state(self) -> None:
        pass

    def current_learning_rate(self) -> float:
        return float(self.optimizer.learning_rate.numpy())

    def clock(self) -> float:
        return self.now


def drive(progress: Progress, budget: Budget, run: FakeRun, steps: int, tokens_per_step=100.0):
    """Runs `steps` updates of 0.5 s each, one epoch, loss = the step number."""
    for callback in (budget, progress):
        callback.set_model(run)
        callback.on_train_begin()
        callback.on_epoch_begin(0)
    loss_sum = 0.0
    for step in range(1, steps + 1):
        run.now += 0.5
        run.optimizer.iterations.assign(step)
        loss_sum += step * tokens_per_step
        tokens = step * tokens_per_step
        logs = {"loss": loss_sum / tokens, "tokens": tokens}  # the epoch's running mean
        budget.on_train_batch_end(step - 1, logs)
        progress.on_train_batch_end(step - 1, logs)
        if run.stop_training:
            break
    progress.on_train_end()


def test_a_line_every_n_steps_with_the_interval_loss_rate_and_time_left(caplog):
    run = FakeRun()
    budget = Budget(max_steps=40, clock=run.clock)
    progress = Progress(budget, every_steps=10, clock=run.clock)
    with caplog.at_level(logging.INFO, logger="training.callbacks"):
        drive(progress, budget, run, 40)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert len(lines) == 4
    # Steps 11-20 have losses 11..20 on equal tokens: their mean is 15.5, not the
    # epoch's running mean (10.5).
    assert lines[1].startswith("step 20/40 (50%) | loss 15.500 | lr 1.00e-03 | ")
    assert "200 target tok/s" in lines[1]  # 100 tokens every 0.5 s
    # 10 s spent (the first update is not timed), 20 updates to go at 0.5 s each.
    assert lines[1].endswith("| 10s elapsed, ~10s left")
    assert lines[3].startswith("step 40/40 (100%)") and lines[3].endswith("~0s left")


def test_under_a_time_budget_the_end_is_estimated_and_the_time_left_is_the_budget(caplog):
    run = FakeRun()
    budget = Budget(max_steps=10_000, max_minutes=1.0, clock=run.clock)
    progress = Progress(budget, every_steps=60, clock=run.clock)
    with caplog.at_level(logging.INFO, logger="training.callbacks"):
        drive(progress, budget, run, 1000)
    assert budget.time_bound and run.stop_training
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    # 0.5 s an update: the minute ends at update 120, whatever max_steps says.
    assert lines[0].startswith("step 60/~120 (50%) | ")
    assert lines[0].endswith("| 30s elapsed, ~30s left")
    assert lines[1].startswith("step 120/~120 (100%)") and lines[1].endswith(
        "1m00s elapsed, ~0s left"
    )


def test_on_a_terminal_a_bar_is_drawn_and_cleared_before_other_log_lines():
    run = FakeRun()
    budget = Budget(max_steps=20, clock=run.clock)
    stream = io.StringIO()
    progress = Progress(budget, every_steps=0, bar=True, stream=stream, clock=run.clock)
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    try:
        for callback in (budget, progress):
            callback.set_model(run)
            callback.on_train_begin()
            callback.on_epoch_begin(0)
        run.now, logs = 1.0, {"loss": 2.0, "tokens": 100.0}
        run.optimizer.iterations.assign(10)
        budget.on_train_batch_end(9, logs)
        progress.on_train_batch_end(9, logs)
        assert stream.getvalue().startswith("\r\x1b[K[############............] step 10/20 (50%)")
        logging.getLogger("training").warning("saved a checkpoint")
        assert stream.getvalue().endswith("\r\x1b[Ksaved a checkpoint\n")  # bar erased first
        progress.on_train_end()
    finally:
        logging.getLogger().removeHandler(handler)
    assert not any(isinstance(f, type(progress._clear)) for f in handler.filters)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (45, "45s"), (192, "3m12s"), (3725, "1h02m")]
)
def test_durations_read_as_a_person_says_them(seconds, text):
    from training.callbacks import _duration

    assert _duration(seconds) == text


@pytest.mark.parametrize(
    ("deadline", "resumed_from", "updates"),
    [
        (None, 0.0, 120),  # the control: the minute alone, 0.5 s an update
        (120.0, 0.0, 40),  # 20 s from the start: the deadline comes first
        (200.0, 0.0, 120),  # past the minute: the minute comes first
        (120.0, 30.0, 40),  # a resumed run: 20 s more, whatever it had spent
        (90.0, 0.0, 1),  # already past: one update, then stop
    ],
)
def test_a_deadline_ends_training_by_it_whatever_is_left_of_the_minutes(
    deadline, resumed_from, updates
):
    run = FakeRun()
    run.now = 100.0  # training begins at 100 s on the clock
    budget = Budget(max_steps=10_000, max_minutes=1.0, clock=run.clock, deadline=deadline)
    budget.elapsed_seconds.assign(resumed_from)
    drive(Progress(budget, every_steps=0, clock=run.clock), budget, run, 1000)
    assert run.updates_done() == updates and run.stop_training
    assert budget.reason.startswith("time budget of ")


@pytest.mark.parametrize(
    ("validation_seconds", "updates", "elapsed"),
    [
        # 20 s of updates, 15 s of validation, 20 s more: 5 s left, less than a
        # validation, so the run ends at this one, within the minute.
        (15.0, 80, 55.0),
        # The control: 4 s of validation leaves 16 s, which buy 24 more updates.
        (4.0, 104, 60.0),
    ],
)
def test_a_validation_that_would_use_the_rest_of_the_budget_ends_the_run(
    validation_seconds, updates, elapsed
):
    run = FakeRun()
    budget = Budget(max_steps=10_000, max_minutes=1.0, clock=run.clock)
    budget.set_model(run)
    budget.on_train_begin()
    step = 0
    for epoch in range(10):  # validation periods of 40 updates of 0.5 s
        budget.on_epoch_begin(epoch)
        for _ in range(40):
            run.now += 0.5
            step += 1
            run.optimizer.iterations.assign(step)
            budget.on_train_batch_end(step - 1, {"loss": 1.0, "tokens": 100.0 * step})
            if run.stop_training:
                break
        budget.on_epoch_end(epoch)
        if run.stop_training:
            break
        run.now += validation_seconds  # the validation callbacks after the budget's
    assert run.updates_done() == updates and run.stop_training
    assert float(budget.elapsed_seconds.numpy()) == pytest.approx(elapsed)
    assert budget.reason.startswith("time budget of 1.0 minutes used")
