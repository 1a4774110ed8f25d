import numpy as np

from training.schedule import InverseSquareRootSchedule


def test_warmup_then_inverse_square_root():
    schedule = InverseSquareRootSchedule(d_model=512, warmup_steps=4000, scale=1.0)
    lr = np.array([float(schedule(s)) for s in range(0, 20000, 50)])
    steps = np.arange(0, 20000, 50) + 1.0
    expected = 512**-0.5 * np.minimum(steps**-0.5, steps * 4000**-1.5)
    np.testing.assert_allclose(lr, expected, rtol=1e-5)
    peak = int(np.argmax(lr))
    assert abs(steps[peak] - 4000) <= 50
    assert np.all(np.diff(lr[: peak - 1]) > 0) and np.all(np.diff(lr[peak + 1 :]) < 0)


def test_accumulation_counts_updates_not_micro_batches():
    plain = InverseSquareRootSchedule(256, 100, scale=2.0)
    accumulated = InverseSquareRootSchedule(256, 100, scale=2.0, accumulation_steps=4)
    for update in (0, 7, 99, 500):
        for micro in range(4):
            assert float(accumulated(update * 4 + micro)) == float(plain(update))
    assert (
        InverseSquareRootSchedule.from_config(accumulated.get_config()).get_config()
        == accumulated.get_config()
    )


# ---- BudgetedSchedule and the Budget callback ------------------------------------------

import types  # noqa: E402

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from training.callbacks import Budget  # noqa: E402
from training.checkpoints import tf_scalar  # noqa: E402
from training.schedule import BudgetedSchedule  # noqa: E402


def rates(schedule, steps):
    return np.array([float(schedule(s)) for s in steps])


@pytest.mark.parametrize("decay", ["linear", "cosine"])
def test_budgeted_warms_up_then_reaches_its_end_value_at_the_budget(decay):
    schedule = BudgetedSchedule(
        0.004, total_updates=1000, warmup_fraction=0.1, decay=decay, final_fraction=0.05
    )
    lr = rates(schedule, range(1000))  # update u = s + 1
    assert lr[99] == pytest.approx(0.004)  # the peak at the end of the warmup
    assert np.all(np.diff(lr[:100]) > 0) and np.all(np.diff(lr[100:]) < 0)
    assert lr[0] == pytest.approx(0.004 / 100)
    assert lr[-1] == pytest.approx(0.05 * 0.004)  # the end value at the last update
    assert float(schedule(5000)) == pytest.approx(0.05 * 0.004)  # and after it
    middle = lr[549]  # halfway through the cool-down
    assert middle == pytest.approx(0.004 * (0.05 + 0.95 * 0.5), rel=1e-3)


def test_budgeted_follows_its_total_updates_variable_and_round_trips():
    schedule = BudgetedSchedule(0.002, total_updates=100, warmup_fraction=0.0)
    assert float(schedule(99)) == pytest.approx(0.0)
    schedule.total_updates.assign(200.0)
    assert float(schedule(99)) == pytest.approx(0.001)
    copy = BudgetedSchedule.from_config(schedule.get_config())
    assert copy.get_config() == schedule.get_config()
    accumulated = BudgetedSchedule(0.002, total_updates=200, accumulation_steps=4)
    for micro in range(4):
        assert float(accumulated(40 + micro)) == float(
            BudgetedSchedule(0.002, total_updates=200)(10)
        )
    with pytest.raises(ValueError, match="decay"):
        BudgetedSchedule(0.002, 100, decay="step")


class FakeTraining:
    """A model stand-in for the Budget callback: an update counter and a simulated clock."""

    def __init__(self, seconds_per_step, seed=0):
        self.now = 0.0
        self.seconds_per_step = seconds_per_step
        self.rng = np.random.default_rng(seed)
        iterations = tf.Variable(0, dtype=tf.int64)
        self.model = types.SimpleNamespace(
            optimizer=types.SimpleNamespace(iterations=iterations),
            stop_training=False,
            updates_done=lambda: int(iterations.numpy()),  # `TranslationTrainer`'s API
            sync_state=lambda: None,
        )

    def clock(self):
        return self.now

    def run(self, budget, schedule, start_cost=3.0, pause_every=0, pause=0.0):
        """Steps until the budget stops; returns the learning rate of every update."""
        budget.set_model(self.model)
        self.model.stop_training = False
        budget.on_train_begin()
        self.now += start_cost  # tracing and filling the shuffle buffer: in the budget
        lr = []
        while not self.model.stop_training:
            step = int(self.model.optimizer.iterations.numpy())
            lr.append(float(schedule(step)))
            self.model.optimizer.iterations.assign_add(1)
            jitter = self.rng.uniform(0.8, 1.2)
            self.now += self.seconds_per_step * jitter
            if pause_every and (step + 1) % pause_every == 0:
                self.now += pause  # a validation
            budget.on_train_batch_end(step)
        return np.array(lr)


@pytest.mark.parametrize("seconds_per_step", [0.05, 0.5])
def test_time_budget_ends_where_the_schedule_ends(seconds_per_step):
    schedule = BudgetedSchedule(0.003, total_updates=100_000, warmup_fraction=0.05)
    budget = Budget(max_steps=100_000, max_minutes=2.0, schedule=schedule, clock=None)
    training = FakeTraining(seconds_per_step)
    budget.clock = training.clock
    lr = training.run(budget, schedule, pause_every=100, pause=10 * seconds_per_step)
    assert "time budget" in budget.reason
    # It stops at the first update that ends past the 2 minutes (a validation may end it).
    assert 120.0 <= training.now < 120.0 + 11 * 1.2 * seconds_per_step
    steps = len(lr)
    assert lr.max() == pytest.approx(0.003, rel=0.05)  # the peak is reached
    assert int(np.argmax(lr)) < 0.1 * steps  # early, in the warmup
    assert lr[-1] < 0.02 * 0.003  # and the rate is ~0 when the time runs out
    assert float(schedule.total_updates.numpy()) == pytest.approx(steps, rel=0.02)


def test_step_budget_sets_the_end_at_max_steps():
    schedule = BudgetedSchedule(0.003, total_updates=1, warmup_fraction=0.1)
    budget = Budget(max_steps=300, schedule=schedule, clock=None)
    training = FakeTraining(0.1)
    budget.clock = training.clock
    lr = training.run(budget, schedule)
    assert len(lr) == 300 and "max_steps" in budget.reason
    assert lr[-1] == 0.0  # the end value, at the last update
    assert lr[-2] == pytest.approx(0.003 / 300 / 0.9, rel=1e-3)  # one update before it


def test_resumed_time_budget_keeps_the_curve_and_the_time_spent(tmp_path):
    def fresh():
        schedule = BudgetedSchedule(0.003, total_updates=100_000, warmup_fraction=0.05)
        training = FakeTraining(0.25, seed=3)
        budget = Budget(max_steps=100_000, max_minutes=1.0, schedule=schedule, scalar=tf_scalar)
        budget.clock = training.clock
        return schedule, training, budget

    schedule, training, budget = fresh()
    whole = training.run(budget, schedule)

    # The same run, stopped after 30 s and resumed from a checkpoint in a new "process".
    schedule, training, budget = fresh()
    budget.max_seconds = 30.0
    first = training.run(budget, schedule)
    path = tf.train.Checkpoint(budget=budget.state()).save(str(tmp_path / "ckpt"))
    step = int(training.model.optimizer.iterations.numpy())

    schedule, training, budget = fresh()
    tf.train.Checkpoint(budget=budget.state()).read(path).assert_existing_objects_matched()
    training.model.optimizer.iterations.assign(step)
    assert float(budget.elapsed_seconds.numpy()) == pytest.approx(30.0, abs=0.5)
    rest = training.run(budget, schedule)
    resumed = np.concatenate([first, rest])
    # The resumed run spends only the rest of the minute (its second start-up, 3 s of it,
    # costs ~12 updates) and ends at ~0 like the whole one.
    assert len(whole) - 16 <= len(resumed) <= len(whole)
    assert rest[-1] < 0.02 * 0.003
    # Its curve continues where the first half left it (no restart of the warmup).
    assert rest[0] == pytest.approx(first[-1], rel=0.05)


def test_more_minutes_on_a_finished_run_follow_the_longer_run_curve(tmp_path):
    def fresh(minutes):
        schedule = BudgetedSchedule(0.003, total_updates=100_000, warmup_fraction=0.05)
        training = FakeTraining(0.25, seed=3)
        budget = Budget(max_steps=100_000, max_minutes=minutes, schedule=schedule, scalar=tf_scalar)
        budget.clock = training.clock
        return schedule, training, budget

    schedule, training, budget = fresh(1.0)
    whole = training.run(budget, schedule)

    # A run planned for 30 s ends at ~0; resumed with a minute in all, it trains on.
    schedule, training, budget = fresh(0.5)
    finished = training.run(budget, schedule)
    assert finished[-1] < 0.02 * 0.003
    path = tf.train.Checkpoint(budget=budget.state()).save(str(tmp_path / "ckpt"))
    step = len(finished)
    schedule, training, budget = fresh(1.0)
    tf.train.Checkpoint(budget=budget.state()).read(path).assert_existing_objects_matched()
    training.model.optimizer.iterations.assign(step)
    rest = training.run(budget, schedule)
    # From its second update (the first sets the clock) it is on the minute-long curve.
    assert rest[2:20] == pytest.approx(whole[step + 2 : step + 20], rel=0.15)
    assert rest[-1] < 0.02 * 0.003 and len(whole) - 16 <= step + len(rest) <= len(whole)


def test_the_config_names_the_schedule():
    from tests.support.runs import tiny_run_config
    from training.optimizer import make_schedule

    task = {"train": ("a", "b"), "valid": ("c", "d"), "vocab": "v"}
    paper = make_schedule(
        tiny_run_config(
            task,
            optimizer={"schedule": "inverse_sqrt", "warmup_steps": 300, "learning_rate_scale": 1.5},
        ),
        d_model=256,
    )
    assert isinstance(paper, InverseSquareRootSchedule)
    assert (paper.warmup_steps, paper.scale, paper.d_model) == (300, 1.5, 256)
    budgeted = make_schedule(
        tiny_run_config(task, train={"max_steps": 700}, optimizer={"decay": "cosine"}), 256
    )
    assert isinstance(budgeted, BudgetedSchedule) and budgeted.decay == "cosine"
    assert float(budgeted.total_updates.numpy()) == 700.0  # the step budget until measured
