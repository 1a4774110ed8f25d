"""The planner's rule as a function: the extremes, and monotone in the right directions."""

import dataclasses

import pytest

from training.config import (
    CHECKPOINT_EVERY_STEPS,
    DEFAULT_CONFIG,
    DROPOUT,
    PEAK_LEARNING_RATE,
    SUBWORD_ALPHA,
    SUBWORD_NBEST,
    Change,
    RunConfig,
    apply_changes,
    read_config,
)
from training.planning.rules import (
    CHECKPOINT_SECONDS,
    MIN_CHECKPOINT_UPDATES,
    SHAPES,
    STUDENT_MAX_DROPOUT,
    Budget,
    CorpusCounts,
    Given,
    Plan,
    Speed,
    batch_tokens_for_updates,
    choose_batch_tokens,
    choose_dropout,
    make_plan,
    speed_decides_something,
)

# A 2-core CPU as measured here: the narrow shape's speed and 25 s to its first update;
# the larger shapes in proportion to their parameters (what FLOP scaling gives, roughly).
CPU = {
    shape.name: Speed(8000.0 * SHAPES[0].parameters / shape.parameters, 1700.0, 2048, True, 25.0)
    for shape in SHAPES
}
MULTI30K = CorpusCounts(pairs=29_000, characters=3_820_000, target_tokens=474_000)


def faster(times: float) -> dict[str, Speed]:
    return {
        name: dataclasses.replace(speed, tokens_per_second=speed.tokens_per_second * times)
        for name, speed in CPU.items()
    }


def corpus(pairs: int) -> CorpusCounts:
    """A corpus of Multi30k-like sentences (16 target tokens, 132 characters a pair)."""
    return CorpusCounts(pairs=pairs, characters=132 * pairs, target_tokens=16 * pairs)


def plan(counts=MULTI30K, minutes=5.0, speeds=None, **given) -> Plan:
    return make_plan(counts, Budget(seconds=minutes * 60), speeds or CPU, given=Given(**given))


def index(p: Plan) -> int:
    return [shape.name for shape in SHAPES].index(p.shape.name)


def test_multi30k_on_this_cpu_gets_the_settings_its_trials_chose():
    five, hour = plan(minutes=5), plan(minutes=60)
    assert five.shape.name == hour.shape.name == "narrow"  # won at every budget tried
    # 2 minutes buy ~0.7M tokens, where 1,024-token batches won the grid's cells; 5 and 15
    # minutes ~2M and ~7M (the minutes table's 2,048), an hour ~30M (its 4,096).
    assert five.value("data.pipeline.batch_tokens") == 2048
    assert plan(minutes=2).value("data.pipeline.batch_tokens") == 1024
    assert plan(minutes=15).value("data.pipeline.batch_tokens") == 2048
    assert hour.value("data.pipeline.batch_tokens") == 4096
    assert five.value("model.overrides.dropout") == 0.1
    assert hour.value("model.overrides.dropout") >= 0.25  # ~80 epochs: regularize hard
    assert five.value("eval.every_steps") == 0 and hour.value("eval.every_steps") > 0


def test_a_tiny_corpus_gets_the_smallest_model_and_heavy_dropout():
    p = plan(corpus(1000), minutes=60)
    assert p.shape is SHAPES[0]
    assert p.epochs > 500 and p.value("model.overrides.dropout") == 0.3


def test_ten_million_pairs_on_a_100x_machine_get_a_paper_model_and_little_dropout():
    p = plan(corpus(10_000_000), minutes=60, speeds=faster(100))
    assert p.shape.name in ("base", "big")
    assert p.epochs < 2 and p.value("model.overrides.dropout") <= 0.05
    assert p.value("data.pipeline.batch_tokens") >= 4096
    assert p.value("optimizer.peak_learning_rate") < plan().value("optimizer.peak_learning_rate")


def test_ten_million_pairs_on_this_cpu_are_compute_limited_not_data_limited():
    cpu, gpu = plan(corpus(10_000_000), minutes=60), plan(corpus(10_000_000), 60, faster(100))
    assert index(cpu) < index(gpu)
    assert cpu.epochs < 0.5 and cpu.value("model.overrides.dropout") == 0.0


@pytest.mark.parametrize("times", [10, 100])
def test_a_faster_machine_buys_more_and_never_gets_a_smaller_model_or_batch(times):
    for pairs in (1000, 29_000, 1_000_000, 10_000_000):
        slow, fast = plan(corpus(pairs), 15), plan(corpus(pairs), 15, faster(times))
        assert fast.tokens > slow.tokens and fast.updates >= slow.updates
        assert index(fast) >= index(slow)
        assert fast.value("data.pipeline.batch_tokens") >= slow.value("data.pipeline.batch_tokens")


def test_a_larger_corpus_never_gets_a_smaller_model_nor_more_dropout():
    for speeds in (CPU, faster(10), faster(100)):
        plans = [plan(corpus(n), 60, speeds) for n in (1000, 10_000, 100_000, 1_000_000, 10**7)]
        shapes = [index(p) for p in plans]
        dropouts = [p.value("model.overrides.dropout") for p in plans]
        assert shapes == sorted(shapes)
        assert dropouts == sorted(dropouts, reverse=True)
    # and across the whole range the model does grow.
    assert index(plan(corpus(10**7), 60, faster(100))) > index(plan(corpus(1000), 60, faster(100)))


def test_a_longer_budget_never_gets_a_smaller_model_or_batch():
    for pairs in (3000, 29_000, 10**6):
        plans = [plan(corpus(pairs), minutes) for minutes in (2, 5, 15, 60, 600)]
        assert [index(p) for p in plans] == sorted(index(p) for p in plans)
        batches = [p.value("data.pipeline.batch_tokens") for p in plans]
        assert batches == sorted(batches)


def test_dropout_rises_with_epochs_from_zero_to_its_cap():
    values = [choose_dropout(e) for e in (0.1, 0.5, 1, 2, 5, 20, 40, 80, 1000)]
    assert values == sorted(values)
    assert values[0] == 0.0 and values[-1] == 0.3
    assert choose_dropout(10) == 0.1


def test_batch_tokens_are_powers_of_two_within_bounds_and_memory():
    for tokens in (1e4, 1e6, 1e8, 1e10, 1e13):
        batch = choose_batch_tokens(tokens)
        assert batch & (batch - 1) == 0 and 1024 <= batch <= 65536
    assert choose_batch_tokens(1e12, memory_limit=4096) == 4096


def test_an_update_budget_gets_the_batch_a_time_budget_of_the_same_tokens_gets():
    for updates in (300, 1632, 11_000, 200_000):
        batch = batch_tokens_for_updates(updates, fill=0.8, memory_limit=65536)
        bought = choose_batch_tokens(updates * 0.8 * batch)
        assert bought in (batch, batch * 2, batch // 2)  # one power of two of rounding
    p = make_plan(MULTI30K, Budget(updates=1632), CPU)
    assert p.updates == 1632 and p.value("data.pipeline.batch_tokens") == 2048


def test_what_the_user_set_is_kept_and_planned_around():
    user_shape = dataclasses.replace(SHAPES[2], name="yours")
    speeds = {"yours": dataclasses.replace(CPU["base"])}
    p = plan(minutes=60, speeds=speeds, shape=user_shape, dropout=0.2, batch_tokens=8192)
    assert p.shape is user_shape
    assert p.value("model.overrides.dropout") == 0.2
    assert p.value("data.pipeline.batch_tokens") == 8192
    changes = p.changes()
    keys = [str(change.key) for change in changes]
    assert not any(key.startswith(("model.", "data.pipeline.batch_tokens")) for key in keys)
    # The planned values follow the user's choices: base's learning rate, updates at 8,192.
    assert Change(PEAK_LEARNING_RATE, 0.0018) in changes
    assert p.updates == int(p.tokens / CPU["base"].at_batch(8192))


@pytest.mark.parametrize("pairs", [3_000, 10_000, 29_000])
@pytest.mark.parametrize("minutes", [5, 15, 60])
def test_subword_sampling_is_off_unless_the_user_sets_it(pairs, minutes):
    p = plan(corpus(pairs), minutes=minutes)
    assert p.value("data.pipeline.subword_nbest") == 0
    reason = next(c.reason for c in p.choices if c.key == SUBWORD_NBEST)
    assert reason.startswith("off at every budget")
    assert not any(c.key == SUBWORD_ALPHA for c in p.choices)


def test_subword_sampling_set_by_the_user_and_what_the_speed_decides():
    # Sampling depends on nothing the speed buys: a config that sets all else is not timed.
    everything = dict(
        dropout=0.1,
        batch_tokens=2048,
        peak_learning_rate=1e-3,
        warmup_fraction=0.1,
        label_smoothing=0.1,
        eval_every_steps=0,
    )
    shape = dataclasses.replace(SHAPES[0], name="yours")
    assert not speed_decides_something(Given(shape=shape, **everything))
    assert speed_decides_something(Given(**everything))  # the shape is planned
    assert speed_decides_something(Given(shape=shape, **{**everything, "dropout": None}))
    # Turned on alone: the pipeline's alpha comes with it.
    on = plan(corpus(3_000), minutes=60, subword_nbest=8)
    assert on.value("data.pipeline.subword_alpha") == 0.5
    config = apply_changes(RunConfig(), on.changes())
    assert config.data.pipeline.subword_alpha == 0.5
    # What the user sets is kept, and writes no change.
    mine = plan(corpus(3_000), minutes=60, subword_nbest=4, subword_alpha=0.2)
    assert mine.value("data.pipeline.subword_nbest") == 4
    assert mine.value("data.pipeline.subword_alpha") == 0.2
    assert not any("subword" in str(change.key) for change in mine.changes())


# The narrow shape on an H200 (bench/accelerator's run of 2026-12-04): 1.15M target tokens/s.
H200 = {
    name: dataclasses.replace(
        speed, tokens_per_second=speed.tokens_per_second * 144, batch_tokens=8192
    )
    for name, speed in CPU.items()
}


@pytest.mark.parametrize("speeds", [CPU, H200], ids=["cpu", "h200"])
@pytest.mark.parametrize("minutes", [3, 15, 60])
def test_checkpoints_come_about_once_a_minute_of_training_whatever_the_machine(speeds, minutes):
    p = plan(minutes=minutes, speeds=speeds)
    every = int(p.value(CHECKPOINT_EVERY_STEPS))
    seconds_per_update = minutes * 60 / p.updates
    assert every % 100 == 0 and every >= MIN_CHECKPOINT_UPDATES
    if every > MIN_CHECKPOINT_UPDATES:  # a minute, to the hundred updates
        assert abs(every * seconds_per_update - CHECKPOINT_SECONDS) <= 100 * seconds_per_update
    else:  # a minute holds no more than the floor
        assert p.updates * CHECKPOINT_SECONDS / (minutes * 60) < MIN_CHECKPOINT_UPDATES + 50
    assert apply_changes(RunConfig(), p.changes()).checkpoint.every_steps == every
    # A 3-minute run on the GPU saves a few times, not every 500 of its ~30,000 updates.
    if speeds is H200 and minutes == 3:
        assert p.updates > 20_000 and p.updates // every <= 3


def test_a_checkpoint_cadence_set_by_the_user_is_kept_and_no_reason_to_time():
    mine = plan(minutes=3, speeds=H200, checkpoint_every_steps=10)
    assert mine.value(CHECKPOINT_EVERY_STEPS) == 10
    assert not any(change.key == CHECKPOINT_EVERY_STEPS for change in mine.changes())
    # Without a timing (an update budget) the floor.
    updates = make_plan(MULTI30K, Budget(updates=50_000), CPU)
    assert updates.value(CHECKPOINT_EVERY_STEPS) == MIN_CHECKPOINT_UPDATES
    # The recipe's default config leaves the cadence to the plan.
    assert CHECKPOINT_EVERY_STEPS not in read_config(DEFAULT_CONFIG).keys


def test_planned_changes_make_a_run_config():
    config = apply_changes(RunConfig(), plan(minutes=60).changes())
    assert config.model.overrides["d_model"] == 128
    assert config.data.pipeline.batch_tokens == 4096
    assert config.model.transformer_config(8000, 8000).num_encoder_layers == 4


def test_a_plan_survives_its_json():
    p = plan(minutes=15)
    assert Plan.from_json(p.to_json()) == p


def test_the_measuring_time_and_the_tracing_are_not_counted_as_training():
    p = plan(minutes=5)
    assert p.tokens == pytest.approx(CPU["narrow"].tokens_per_second * (300 - 25))
    assert any("25 s starting" in line for line in p.describe())
    with pytest.raises(ValueError, match="positive"):
        Budget(seconds=-1.0)


def test_what_a_budget_buys_comes_from_the_chosen_batchs_own_speed():
    # Two minutes choose 1,024-token batches; on a CPU they run slower per token than the
    # 2,048 the shapes were timed at: the plan's tokens, updates and epochs are theirs.
    timed = plan(minutes=2)
    assert timed.value("data.pipeline.batch_tokens") == 1024
    slower = Speed(6000.0, 850.0, 1024, True, 25.0)
    at_batch = make_plan(
        MULTI30K, Budget(seconds=120), CPU, batch_speeds={("narrow", 1024): slower}
    )
    assert at_batch.shape == timed.shape  # the choices made on the timed speeds stand
    assert at_batch.value("data.pipeline.batch_tokens") == 1024
    assert at_batch.tokens == pytest.approx(6000.0 * (120 - 25))
    assert at_batch.updates == int(at_batch.tokens / 850.0)
    assert at_batch.epochs == pytest.approx(at_batch.tokens / MULTI30K.epoch_tokens)
    assert at_batch.tokens < timed.tokens and at_batch.speeds["narrow"] == slower
    assert any("at 1,024 batch tokens (measured" in line for line in at_batch.describe())
    # A speed of a batch the rule did not choose changes nothing.
    other = make_plan(MULTI30K, Budget(seconds=120), CPU, batch_speeds={("narrow", 4096): slower})
    assert other == timed


def test_an_epochs_short_batches_cost_each_update_its_fixed_seconds():
    """An update costs `fixed_seconds` whatever its tokens, plus a full batch's other
    seconds in proportion to its tokens: the plan's updates are the budget over an epoch's
    seconds so counted batch by batch. Without short batches (no buckets counted: full
    batches only) the fixed cost changes nothing; with none timed, the tokens decide."""
    import math

    from translator.pipelines.config import bucket_batch_size

    # 1,500 pairs in buckets of 4 pieces: about half an epoch's batches are a bucket's last.
    buckets = ((8, 300), (12, 500), (16, 400), (20, 200), (28, 80), (40, 20))
    tokens = sum(length // 2 * pairs for length, pairs in buckets)
    small = CorpusCounts(1500, 196_000, tokens, buckets)
    timed = Speed(8000.0, 1800.0, 2048, True, 10.0)
    fixed = dataclasses.replace(timed, fixed_seconds=0.06)
    budget = Budget(seconds=300)

    # The oracle: each batch of an epoch, its tokens, its seconds.
    seconds = batches = 0
    full_seconds = 1800.0 / 8000.0
    for length, pairs in buckets:
        rows = bucket_batch_size(2048, length, 1)
        for start in range(0, pairs, rows):
            batch_tokens = min(rows, pairs - start) * (length // 2)
            seconds += 0.06 + (full_seconds - 0.06) * batch_tokens / 1800.0
            batches += 1
    assert batches == sum(math.ceil(p / bucket_batch_size(2048, n, 1)) for n, p in buckets)
    planned = make_plan(small, budget, {"narrow": fixed}, given=Given(shape=SHAPES[0]))
    assert planned.updates == int((300 - 10) / (seconds / batches))
    assert planned.tokens == pytest.approx((300 - 10) / (seconds / batches) * tokens / batches)
    assert any("60 ms an update whatever its tokens" in line for line in planned.describe())
    # Controls: no fixed cost timed, the tokens alone; full batches only, no change.
    alone = make_plan(small, budget, {"narrow": timed}, given=Given(shape=SHAPES[0]))
    assert alone.updates == int(8000.0 * 290 / (tokens / batches)) > planned.updates
    mix = dataclasses.replace(small, buckets=())
    assert (
        make_plan(mix, budget, {"narrow": fixed}, given=Given(shape=SHAPES[0])).updates
        == make_plan(mix, budget, {"narrow": timed}, given=Given(shape=SHAPES[0])).updates
        == int(8000.0 * 290 / 1800.0)
    )


def test_a_students_dropout_is_at_most_its_cap_from_random_weights_or_cut():
    """Many epochs give a model learning references 0.3; a distillation's student 0.1."""
    shape = dataclasses.replace(SHAPES[0], name="student-1")
    speeds, small = {"student-1": CPU[SHAPES[0].name]}, corpus(1000)
    for cut in ({}, {"fine_tuning": True, "cut": True}):
        learner = plan(small, 60, speeds, shape=shape, **cut)
        student = plan(small, 60, speeds, shape=shape, student=True, **cut)
        assert learner.value("model.overrides.dropout") == 0.3
        assert student.value("model.overrides.dropout") == STUDENT_MAX_DROPOUT
        (why,) = [c.reason for c in student.choices if c.key == DROPOUT]
        assert "a student, at most 0.1" in why
        # Fewer epochs than the cap's: the epochs rule's own, and the user's value wins.
        assert (
            plan(small, 0.05, speeds, shape=shape, student=True).value("model.overrides.dropout")
            < STUDENT_MAX_DROPOUT
        )
        given = plan(small, 60, speeds, shape=shape, student=True, dropout=0.25, **cut)
        assert given.value("model.overrides.dropout") == 0.25


@pytest.mark.parametrize("minutes", [5.0, 60.0])
def test_fine_tuning_continues_a_trained_model_gently_and_validates_through_the_run(minutes):
    """The model's shape is kept; a tenth of the rate, the shortest warmup, dropout >= 0.1,
    and at least four validations however short the budget."""
    shape = dataclasses.replace(SHAPES[1], name="yours")
    speeds = {"yours": CPU[SHAPES[1].name]}
    topic = corpus(3000)
    scratch = plan(topic, minutes, speeds, shape=shape)
    tuned = plan(topic, minutes, speeds, shape=shape, fine_tuning=True)
    assert tuned.shape is shape and tuned.updates == scratch.updates  # same budget, batch
    rate = tuned.value("optimizer.peak_learning_rate")
    assert rate == pytest.approx(scratch.value("optimizer.peak_learning_rate") / 10, rel=0.05)
    assert tuned.value("optimizer.warmup_fraction") == 0.05
    assert scratch.value("optimizer.warmup_fraction") >= 0.05
    assert tuned.value("model.overrides.dropout") >= max(
        0.1, scratch.value("model.overrides.dropout")
    )
    every = tuned.value("eval.every_steps")
    assert 1 <= every <= tuned.updates // 4
    assert scratch.value("eval.every_steps") == 0 or every <= scratch.value("eval.every_steps")
    reasons = " ".join(choice.reason for choice in tuned.choices)
    assert reasons.count("fine-tuning") >= 4
    # What the user sets still wins.
    assert (
        plan(topic, minutes, speeds, shape=shape, fine_tuning=True, peak_learning_rate=1e-3).value(
            "optimizer.peak_learning_rate"
        )
        == 1e-3
    )
    # A model cut from a larger one (a distillation's student) takes three tenths.
    cut = plan(topic, minutes, speeds, shape=shape, fine_tuning=True, cut=True)
    cut_rate = cut.value("optimizer.peak_learning_rate")
    assert cut_rate == pytest.approx(3 * rate, rel=0.05)
    assert "cut from a larger one" in " ".join(choice.reason for choice in cut.choices)
    assert cut.value("optimizer.warmup_fraction") == 0.05


def test_a_timing_cut_to_what_runs_sustained_buys_that_share_of_the_updates():
    """`Speed.sustain(share)`: every second of an update longer by 1 / share, the fixed
    ones too, so a plan buys `share` of the updates; a run's own pace, and a speed cut
    already, stay as they are (no second cut)."""
    budget = Budget(seconds=300)
    timed = Speed(8000.0, 1800.0, 2048, True, 10.0, fixed_seconds=0.06)
    cut = timed.sustain(0.9)
    assert (cut.tokens_per_second, cut.fixed_seconds) == (pytest.approx(7200.0), 0.06 / 0.9)
    assert cut.sustained == 0.9 and cut.tokens_per_update == timed.tokens_per_update
    given = Given(shape=SHAPES[0])
    full = make_plan(MULTI30K, budget, {"narrow": timed}, given=given)
    sustained = make_plan(MULTI30K, budget, {"narrow": cut}, given=given)
    assert sustained.updates == pytest.approx(0.9 * full.updates, abs=1)
    line = next(line for line in sustained.describe() if line.startswith("speed: narrow"))
    assert "7,200 target tokens/s" in line and "0.90 x its timing's 8,000" in line
    assert cut.sustain(0.5) == cut and timed.sustain(1.0) == timed
    pace = dataclasses.replace(timed, learned=True)
    assert pace.sustain(0.9) == pace
    line = make_plan(MULTI30K, budget, {"narrow": pace}, given=given).describe()
    assert any("a trained run's pace" in text for text in line)
