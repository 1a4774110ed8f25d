"""Timing shapes on the real pipeline, within a budget's share.

`measure_speed` times a few updates of one shape at one batch (an epoch's short batches
read whole, or by half batches); `measure_in_turn` two vocabulary sizes of it in turns,
so that a drift of the machine falls on both; `Timing` holds a plan's timings to its
share of the budget and caches them (`training.planning.speed_cache`). Shapes not timed
are scaled from a timed one by their FLOPs (`scaled_speed`), on a CPU only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from training.config import RunConfig
from training.planning.rules import (
    MIN_BATCH_TOKENS,
    Budget,
    CorpusCounts,
    Shape,
    Speed,
    batch_tokens_in_memory,
    choose_batch_tokens,
    compute_limit,
    data_limit,
    tokens_bought,
)
from training.planning.speed_cache import SpeedCache
from translator.flops import training_flops

if TYPE_CHECKING:
    from training.engines.backend import Strategy
    from translator.pipelines.vocabulary import Vocabulary

log = logging.getLogger(__name__)

# The most of a time budget spent timing shapes.
MEASURE_SHARE = 0.10
# Updates run before the timed ones (the first carries the tracing), and timed updates.
WARMUP_UPDATES = 2
TIMED_UPDATES = 8
# The vocabulary's split is the difference of two speeds, so it takes longer timings
# (eight updates put the output layer's share anywhere from 0 to 31% where runs said
# ~0%), of both models in turn (two timings one after the other drift apart as the
# machine does; bench/RESULTS.md, "Vocabulary by the budget"): this many updates each,
# in turns of `TURN_UPDATES`, for at most this many seconds each (outside the budget,
# as the vocabulary's cost), and at most this share of the budget each: a budget of
# seconds is not to wait twice its length for its vocabulary (two turns each at least).
SPLIT_TIMED_UPDATES = 32
SPLIT_MEASURE_SECONDS = 20.0
SPLIT_BUDGET_SHARE = 0.10
TURN_UPDATES = 4
# An epoch of at most this many batches (each bucket's last short) is timed whole, after
# another whole one: a timing's first updates meet new batch shapes, and eight of them
# read 36% below to 37% above a run's pace on 750 pairs (bench/RESULTS.md, "Vocabulary
# by the budget").
EPOCH_TIMED_BATCHES = 32
ENDLESS = 2**31 - 1  # updates of a timing `fit`: it ends when timed enough
# The batch tokens a shape is timed at, unless the user set the batch: the middle of what
# plans on a CPU use (a token costs about the same at the others there).
TIMED_BATCH_TOKENS = 2048
# A shape is timed only if this much of the measuring share is left (else estimated).
MIN_MEASURE_SECONDS = 4.0
# The most of a time budget the timing may take in wall time, compiling included (no
# new timing starts after it). Compiling ahead (JAX) is not charged to the budget, but
# on a GPU each program takes seconds to tens of seconds.
MEASURE_WALL_SHARE = 0.5
# On an accelerator, the most batches a shape is timed at beyond the first, each the one
# the last speed buys (it settles in one or two: the batch grows as the cube root).
BATCH_ROUNDS = 3


def measure_speed(
    shape: Shape,
    batch_tokens: int,
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy: Strategy,
    seconds: float,
    *,
    warmup: int = WARMUP_UPDATES,
    updates: int = TIMED_UPDATES,
    every_bucket: bool = False,
    epoch_batches: int = 0,
) -> Speed:
    """Trains `shape` for a few updates on the real pipeline and times the steady ones.

    From a prepared corpus under static shapes it trains on one bucket's batches (the
    commonest: `training.inputs.timing_input`) unless `every_bucket`, so one program is
    compiled, not one per bucket. The seconds JAX's `fit` spends compiling ahead, before
    its clock, are reported apart (`Speed.compile_seconds`): a run spends its own outside
    its budget too.

    Args:
        shape: The candidate.
        batch_tokens: Batch tokens per replica.
        config: The run config (data, optimizer, precision and strategy settings).
        vocabulary: The run's vocabulary.
        strategy: The run's strategy (the timing is of its replicas together).
        seconds: Stop timing this long after the clock starts (at least two timed
            updates are made);
            ignored when the strategy spans workers, which must all make the same
            number of updates.
        warmup: Looks at the clock before the timed ones (the first update carries the
            tracing; the next ones meet new batch shapes, whose kernels are set up on
            first use). TensorFlow's `fit` looks after every update, the JAX loop every
            few (`training.engines.jax_engine.updates_unseen`).
        updates: Updates timed, at least (and two looks), unless `seconds` pass first.
        every_bucket: Train on the run's own batches, every bucket's (benchmarks).
        epoch_batches: The batches of the run's epoch where each ends every bucket's batch
            short (`CorpusCounts.epoch_batches`), else 0. Up to `EPOCH_TIMED_BATCHES`,
            one whole epoch warms up (every batch shape met once: on a CPU a shape's first
            update cost up to four times its later ones) and the next is timed whole, its
            short batches as trained. Above, as many updates as timed are timed again on
            half batches (the same model and input at half the batch tokens), for the
            seconds an update costs whatever its tokens (`Speed.fixed_seconds`).
    """
    if strategy.spans_workers():
        seconds, epoch_batches = float("inf"), 0  # (workers would have to agree)
    whole_epoch = 0 < epoch_batches <= EPOCH_TIMED_BATCHES
    if whole_epoch:
        warmup, updates = epoch_batches, epoch_batches
    timed_config = with_shape(config, shape, batch_tokens)
    trainer, data = _timed_trainer(timed_config, vocabulary, strategy, every_bucket=every_bucket)
    clock = _clock(warmup, updates, seconds)
    trainer.fit(
        data,
        epochs=1,
        steps_per_epoch=ENDLESS,  # (the clock stops it)
        verbose=0,
        callbacks=[clock],
        shuffle=False,  # the pipeline shuffles
    )
    speed = _speed(clock, clock.warmup, batch_tokens, strategy, trainer.compiled_seconds)
    if whole_epoch or not epoch_batches:
        return speed
    from training.inputs import timing_input

    half = with_shape(config, shape, batch_tokens // 2)
    step = trainer.stepper(timing_input(half, vocabulary, strategy, every_bucket)[0])
    step(warmup)  # (its input's start)
    started = time.monotonic()
    tokens = step(updates)
    took = time.monotonic() - started
    full = (speed.tokens_per_update / speed.tokens_per_second, speed.tokens_per_update)
    fixed = fixed_seconds(full, (took / updates, tokens / updates))
    log.info(
        "plan: on half batches %s target tokens an update in %.1f ms, full ones %s in %.1f ms: "
        "%.1f ms an update whatever its tokens",
        f"{tokens / updates:,.0f}",
        1000 * took / updates,
        f"{full[1]:,.0f}",
        1000 * full[0],
        1000 * fixed,
    )
    return dataclasses.replace(speed, fixed_seconds=fixed)


def fixed_seconds(full: tuple[float, float], half: tuple[float, float]) -> float:
    """The seconds an update costs whatever its tokens, from two (seconds, tokens) points.

    The line through an update of full batches and one of half batches, at no tokens;
    within [0, a full update's seconds] (0 where the two batches' tokens are too close to
    tell a slope: a corpus whose batches are single long rows).
    """
    (full_seconds, full_tokens), (half_seconds, half_tokens) = full, half
    if full_tokens - half_tokens < 0.1 * full_tokens:
        return 0.0
    slope = (full_seconds - half_seconds) / (full_tokens - half_tokens)
    return min(max(full_seconds - slope * full_tokens, 0.0), full_seconds)


def _timed_trainer(
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy: Strategy,
    *,
    output: int | None = None,
    every_bucket: bool = False,
):
    """A fresh trainer of `config`'s model and its timing input (`timing_input`).

    One update per execution; `output`: the model of a joint vocabulary of that size,
    on the run's batches with their ids folded into it.
    """
    from training.engines.backend import engine
    from training.engines.tf_trainer import build_trainer
    from training.inputs import timing_input

    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    trainer, _ = build_trainer(
        config,
        config.model.transformer_config(*(sizes if output is None else (output, output))),
        strategy,
        steps_per_execution=1,
        trainer_class=engine().trainer,
    )
    data, shapes = timing_input(config, vocabulary, strategy, every_bucket, id_limit=output)
    trainer.expect_shapes(shapes)
    return trainer, data


def measure_in_turn(
    shape: Shape,
    batch_tokens: int,
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy: Strategy,
    output: int,
    seconds: float,
    *,
    updates: int = SPLIT_TIMED_UPDATES,
    turn: int = TURN_UPDATES,
) -> tuple[Speed, Speed]:
    """Times `shape` under the run's vocabulary and under `output` entries, in turn.

    Two models, the run's and one whose joint vocabulary has `output` entries (its batches
    the run's, every real id folded into the size: a step's cost does not depend on which ids
    it sees), make `turn` updates
    each in turn, in the order ABBA ABBA..., each turn timed on its own: the machine's
    drift over the timing, which two timings one after the other each read apart, falls
    on both alike. Each model's first turn (its tracing, first kernels) is not timed.

    Args:
        shape: The chosen shape.
        batch_tokens: Batch tokens per replica.
        config: The run config.
        vocabulary: The run's vocabulary.
        strategy: The run's strategy (on one worker: the turns are timed on its clock).
        output: The smaller joint vocabulary's size.
        seconds: Stop after the turn that passes this many seconds for both models
            together (at least two turns each are timed).
        updates: Updates timed per model, at most.
        turn: Updates per turn.

    Returns:
        The speeds under the run's vocabulary and under `output` entries.
    """
    config = with_shape(config, shape, batch_tokens)
    steps, compiled = [], 0.0
    for limit in (None, output):
        trainer, data = _timed_trainer(config, vocabulary, strategy, output=limit)
        steps.append(trainer.stepper(data))
        compiled += trainer.compiled_seconds
    for step in steps:
        step(turn)  # (untimed)
    spent, tokens, turns = [0.0, 0.0], [0.0, 0.0], 0
    paces: tuple[list[float], list[float]] = ([], [])  # each turn's (for the log)
    started = time.monotonic()
    while turns * turn < updates and (turns < 2 or time.monotonic() - started < seconds):
        for model in (0, 1) if turns % 2 == 0 else (1, 0):
            begun = time.monotonic()
            done = steps[model](turn)
            took = time.monotonic() - begun
            tokens[model], spent[model] = tokens[model] + done, spent[model] + took
            paces[model].append(done / max(took, 1e-9))
        turns += 1
    timed = turns * turn
    rates = strategy.worker_means(*(tokens[m] / max(spent[m], 1e-9) for m in (0, 1)))
    log.info(
        "plan: in %d turns of %d updates each: %s target tokens/s at %s entries (turns %s), "
        "%s at %s (turns %s)",
        turns,
        turn,
        f"{rates[0]:,.0f}",
        f"{vocabulary.target_vocab_size:,}",
        _spread(paces[0]),
        f"{rates[1]:,.0f}",
        f"{output:,}",
        _spread(paces[1]),
    )
    return tuple(
        Speed(
            rates[m],
            tokens[m] / timed,
            batch_tokens,
            measured=True,
            compile_seconds=compiled / 2,
            in_turn=True,
        )
        for m in (0, 1)
    )


def _spread(values: list[float]) -> str:
    """'lowest to highest' of some rates, for a log line."""
    return f"{min(values):,.0f} to {max(values):,.0f}"


def _clock(warmup: int, updates: int, seconds: float):
    """A callback that looks at the clock after each batch, and stops the timing.

    Its `marks` are (time, target tokens, updates) per look; `begun` holds when `fit`'s
    clock started (after compiling ahead, if any). A warm-up longer than
    `WARMUP_UPDATES` (an epoch's) ends early once `seconds` have passed: its `warmup` is
    then `WARMUP_UPDATES`, the looks since are timed, and the timing stops (a slow
    machine's timing stays bounded).
    """
    import keras

    class Clock(keras.callbacks.Callback):
        # Any cadence: the JAX loop then looks every few updates, as it does in training
        # (a look after every update would time a slower loop than the run's).
        every_steps = 0

        def __init__(self):
            super().__init__()
            self.marks: list[tuple[float, float, int]] = []
            self.begun: list[float] = []
            self.warmup = warmup  # looks before the timed ones

        def on_train_begin(self, logs=None):
            self.begun.append(time.monotonic())

        def on_train_batch_end(self, batch, logs=None):
            tokens = float((logs or {}).get("tokens", 0.0))
            self.marks.append((time.monotonic(), tokens, self.model.updates_done()))
            late = time.monotonic() - self.begun[0] > seconds
            if late and self.warmup > WARMUP_UPDATES:
                self.warmup = WARMUP_UPDATES  # (an epoch's warm-up cut short)
            if len(self.marks) - self.warmup < 2:
                return  # (at least two looks timed)
            timed = self.marks[-1][2] - self.marks[self.warmup - 1][2]
            if timed >= updates or late:
                self.model.stop_training = True

    return Clock()


def _speed(clock, warmup: int, batch_tokens: int, strategy: Strategy, compiled: float) -> Speed:
    """The steady rate from the last warm-up look to the last, and the start's cost.

    Agreed over the workers (their means).
    """
    marks = clock.marks
    (t0, tokens0, updates0), (t1, tokens1, updates1) = marks[warmup - 1], marks[-1]
    updates = max(updates1 - updates0, 1)
    # The start's cost: the first look's time less what its updates take at the steady
    # pace (the JAX loop looks after a second's worth of dispatched updates, not one).
    first_look, _, first_updates = marks[0]
    startup = first_look - clock.begun[0] - first_updates * (t1 - t0) / updates
    rate, per_update, startup, compiling = strategy.worker_means(
        (tokens1 - tokens0) / max(t1 - t0, 1e-9),
        (tokens1 - tokens0) / updates,
        max(startup, 0.0),
        compiled,
    )
    return Speed(
        rate,
        per_update,
        batch_tokens,
        measured=True,
        startup_seconds=startup,
        compile_seconds=compiling,
    )


def with_shape(config: RunConfig, shape: Shape, batch_tokens: int) -> RunConfig:
    """`config` with the shape's model fields and the batch size."""
    overrides = {**config.model.overrides, **shape.model_overrides()}
    model = dataclasses.replace(config.model, preset=shape.preset, overrides=overrides)
    pipeline = dataclasses.replace(config.data.pipeline, batch_tokens=batch_tokens)
    return dataclasses.replace(
        config, model=model, data=dataclasses.replace(config.data, pipeline=pipeline)
    )


def flops_per_token(
    shape: Shape, config: RunConfig, vocab_sizes: tuple[int, int], length: float
) -> float:
    """Training FLOPs per target token of a shape, for pairs of `length` tokens a side."""
    model = with_shape(config, shape, MIN_BATCH_TOKENS).model.transformer_config(*vocab_sizes)
    return float(training_flops(model, length, length)) / length


def scaled_speed(timed: Speed, timed_flops: float, flops: float) -> Speed:
    """A shape's speed estimated from a timed shape's, in proportion to their FLOPs."""
    return dataclasses.replace(
        timed, tokens_per_second=timed.tokens_per_second * timed_flops / flops, measured=False
    )


class Timing:
    """The planner's timings under one time budget, and what they cost.

    A timing's steady part (building the model, the first updates, the timed ones) is
    charged to the budget and bounded by `MEASURE_SHARE` of it; its compiling ahead,
    before the clock (JAX), is not charged, as a run's own is not, but the timing's wall
    time, compiling included, is bounded by `MEASURE_WALL_SHARE` of the budget.
    """

    def __init__(
        self,
        budget_seconds: float,
        config: RunConfig,
        vocabulary: Vocabulary,
        strategy: Strategy,
        cache: SpeedCache,
        clock: Callable[[], float] = time.monotonic,
        counts: CorpusCounts | None = None,
    ):
        self.share = MEASURE_SHARE * budget_seconds
        self.wall = MEASURE_WALL_SHARE * budget_seconds
        self.split_seconds = min(SPLIT_MEASURE_SECONDS, SPLIT_BUDGET_SHARE * budget_seconds)
        self.config, self.vocabulary, self.strategy, self.cache = (
            config, vocabulary, strategy, cache,
        )  # fmt: skip
        self.charged = 0.0  # seconds counted inside the budget
        self.compiled = 0.0  # seconds compiling ahead, outside it
        # Seconds timing the vocabulary's sizes: the vocabulary's cost, outside the budget
        # as its SentencePiece training is.
        self.for_vocabulary = 0.0
        self.clock = clock  # (tests pass a simulated one)
        self.started = clock()
        # The corpus, whose epochs' batches decide how a speed is timed (`measure_speed`).
        self.counts = counts

    def left(self) -> float:
        """Seconds of the measuring share not yet charged."""
        return self.share - self.charged

    def may_time(self) -> bool:
        """Whether another (uncached) timing fits.

        It must fit the share and the wall bound, and not span workers, whose clocks
        could disagree on that.
        """
        return (
            self.left() >= MIN_MEASURE_SECONDS
            and self.clock() - self.started < self.wall
            and not self.strategy.spans_workers()
        )

    def speed(
        self,
        shape: Shape,
        batch_tokens: int,
        *,
        always: bool = False,
    ) -> Speed | None:
        """The shape's speed at `batch_tokens`: cached, else timed, else None.

        Timed if `always`, or if it fits (`may_time`).
        """
        speed = self.cache.get(shape, batch_tokens)
        if speed is not None:
            return speed
        if not (always or self.may_time()):
            return None
        log.info("plan: timing %s at %d batch tokens", shape.describe(), batch_tokens)
        started = self.clock()
        speed = measure_speed(
            shape,
            batch_tokens,
            self.config,
            self.vocabulary,
            self.strategy,
            max(self.left(), MIN_MEASURE_SECONDS),
            epoch_batches=self.counts.epoch_batches(batch_tokens) if self.counts else 0,
        )
        self.compiled += speed.compile_seconds
        self.charged += max(self.clock() - started - speed.compile_seconds, 0.0)
        self.cache.put(shape, batch_tokens, speed)
        return speed

    def split(self, shape: Shape, batch_tokens: int, output: int) -> tuple[Speed, Speed]:
        """The shape's speeds under the run's vocabulary and under `output` entries.

        Timed in turn (`measure_in_turn`) for `split_seconds` each, whatever the share
        left, and not charged to the budget: the vocabulary's cost (`for_vocabulary`).
        The smaller one is cached here; the run's, the caller's to keep.
        """
        log.info(
            "plan: timing %s at %d batch tokens under %s and %s vocabulary entries, in turn",
            shape.describe(),
            batch_tokens,
            f"{self.vocabulary.target_vocab_size:,}",
            f"{output:,}",
        )
        started = self.clock()
        full, small = measure_in_turn(
            shape,
            batch_tokens,
            self.config,
            self.vocabulary,
            self.strategy,
            output,
            2 * self.split_seconds,
        )
        compiled = full.compile_seconds + small.compile_seconds
        self.compiled += compiled
        self.for_vocabulary += max(self.clock() - started - compiled, 0.0)
        self.cache.put(shape, batch_tokens, small, output)
        return full, small


def time_shapes(
    candidates: tuple[Shape, ...],
    counts: CorpusCounts,
    batch_tokens: int,
    timing: Timing,
    budget_seconds: float,
) -> dict[str, Speed]:
    """Speeds of the candidates: timed (or cached) where one could be chosen, else scaled.

    The smallest is always timed. A larger one is timed only while its FLOP-scaled
    estimate, doubled, would pass both limits and `timing` has room for it.

    Returns:
        Speeds by shape name.
    """
    vocabulary = timing.vocabulary
    vocab_sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    speeds: dict[str, Speed] = {}
    reference: tuple[Speed, float] | None = None
    length = counts.epoch_tokens / max(counts.pairs, 1)  # the corpus' mean target length
    for shape in candidates:
        flops = flops_per_token(shape, timing.config, vocab_sizes, length)
        speed = timing.cache.get(shape, batch_tokens)
        if speed is None and reference is not None:
            estimate = scaled_speed(reference[0], reference[1], flops)
            bought = 2 * tokens_bought(estimate, Budget(seconds=budget_seconds), batch_tokens)
            worth_timing = shape.parameters <= min(
                data_limit(counts.epoch_tokens), compute_limit(bought)
            )
            if not worth_timing or not timing.may_time():
                speeds[shape.name] = estimate
                continue
        if speed is None:
            speed = timing.speed(shape, batch_tokens, always=True)
        speeds[shape.name] = speed
        reference = (speed, flops)
    return speeds


def time_shapes_at_their_batches(
    candidates: tuple[Shape, ...],
    counts: CorpusCounts,
    batch_tokens: int,
    timing: Timing,
    budget_seconds: float,
    memory: dict[str, int],
    batch_given: bool = False,
) -> dict[str, Speed]:
    """Speeds of the candidates on an accelerator: each timed, at the batch it would train.

    There small shapes are bound by kernel launches rather than FLOPs, and a token costs
    less in a larger batch, so no speed is scaled from another shape's. Smallest first,
    each is timed at the batch the last one settled on (`batch_tokens` for the first),
    then again at the batch the rule gives for what that speed buys, until that is the
    batch timed (unless the user set the batch). The timing stops after a shape over the
    data or compute limit (a larger one would be too), or when `timing` has no room left
    (the first shape is always timed). A shape not timed is not weighed: the plan says
    it was not measured.

    Returns:
        Speeds by shape name (each at its own batch where that was timed).
    """
    budget = Budget(seconds=budget_seconds)
    speeds: dict[str, Speed] = {}
    start = batch_tokens
    for shape in candidates:
        speed = timing.speed(shape, start, always=not speeds)
        if speed is None:
            break
        for _ in range(0 if batch_given else BATCH_ROUNDS):
            # The batch this speed buys, timed in turn, until it is the one timed.
            own = choose_batch_tokens(tokens_bought(speed, budget, 0), memory[shape.name])
            at_own = None if own == speed.batch_tokens else timing.speed(shape, own)
            if at_own is None:
                break
            speed = at_own
        speeds[shape.name] = speed
        start = speed.batch_tokens if not batch_given else batch_tokens
        limit = min(
            data_limit(counts.epoch_tokens),
            compute_limit(tokens_bought(speed, budget, speed.batch_tokens)),
        )
        if shape.parameters > limit:
            break
    return speeds


def memory_batch_tokens(shape: Shape, vocab_size: int, strategy) -> int:
    """`plan.batch_tokens_in_memory` of one replica.

    Its memory: the accelerator's, else the host's shared by the replicas.
    """
    memory = strategy.accelerator_memory()
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        memory //= max(strategy.num_replicas_in_sync, 1)
    return batch_tokens_in_memory(shape, vocab_size, memory)
