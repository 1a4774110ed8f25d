"""Planning a run on this machine: count the corpus, time the candidate shapes, plan.

`plan_run` is what `translator train` and `translator recipe` call before training:

1. It counts the training corpus (pairs, characters, and target pieces under the run's
   vocabulary, through the pipeline's own scan).
2. Under a time budget it times a few updates of each candidate shape that could be
   chosen, on the real pipeline, in the run's precision and strategy, the tracing and
   first updates excluded (`training.planning.timing`). The measuring is counted inside
   the budget and bounded by `MEASURE_SHARE` of it, except that the smallest shape is
   always timed: its first update carries the tracing of the training step, which can
   alone exceed the share of a budget of a few minutes (the plan reports the seconds
   spent). Compiling ahead (JAX compiles a step per batch shape before its clock) is not
   counted, as a run's own is not, but bounds the timing's wall time
   (`MEASURE_WALL_SHARE`); from a prepared corpus a shape is timed on its commonest
   bucket alone, one program. The results are cached (`speed.json`,
   `training.planning.speed_cache`) under a signature of the machine, precision,
   strategy, vocabulary and corpus, so a resumed or repeated run measures nothing. On a
   CPU a shape not timed gets its speed scaled from a timed one by their FLOPs (said as
   much in the plan). On an accelerator, where small shapes are bound by kernel launches
   rather than FLOPs, nothing is scaled: each shape is timed at the batch it would
   train, and one not timed within the share is not weighed.
3. It applies `training.planning.rules.make_plan`. Shapes are timed at one batch size; when the
   rule chooses another, that batch is timed too (within the same share, or read from
   the cache), and the updates and epochs the budget buys are that batch's: on a CPU a
   token costs more time in a smaller batch. It saves the plan (`plan.json` in the run
   directory): a resumed run trains the plan it started with.

4. Where the plan may size the vocabulary (the recipe's vocabulary stage) and the budget
   buys few epochs, it times the chosen shape and batch again under a smaller vocabulary
   (`training.planning.vocabulary`): the output layer's share of a step's time, measured.

A run that trains its plan reports its steady pace (`learn_speed`), which replaces the
plan's timing in the caches: a timing is a few updates, taken once and then reused. It
also records the share of its timing's pace the run sustained (`sustained.json`): later
plans on the machine count every fresh timing at the median share of its last runs
(`sustained_share`), since a few seconds of updates read faster than minutes of them;
one share for a shape's own timings, one for the vocabulary's warm timings in turn.

Under an update budget nothing is timed: the tokens an update buys are `TARGET_FILL`
of its batch tokens.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from training.config import (
    BATCH_TOKENS,
    CHECKPOINT_EVERY_STEPS,
    DROPOUT,
    EVAL_EVERY_STEPS,
    LABEL_SMOOTHING,
    MAX_MINUTES,
    MODEL_OVERRIDES,
    MODEL_PRESET,
    PEAK_LEARNING_RATE,
    SUBWORD_ALPHA,
    SUBWORD_NBEST,
    WARMUP_FRACTION,
    Change,
    ConfigKey,
    RunConfig,
    apply_changes,
)
from training.planning.rules import (
    SHAPES,
    TARGET_FILL,
    Budget,
    CorpusCounts,
    Given,
    Plan,
    Shape,
    Speed,
    make_plan,
    seconds_per_update,
    speed_decides_something,
)
from training.planning.speed_cache import (
    SPEED_FILE,
    SUSTAINED_FILE,
    SpeedCache,
    machine_cache_path,
    machine_signature,
    record_sustained,
    sustained_share,
)
from training.planning.timing import (
    TIMED_BATCH_TOKENS,
    Timing,
    flops_per_token,
    memory_batch_tokens,
    time_shapes,
    time_shapes_at_their_batches,
)
from training.planning.vocabulary import VOCAB_MIN_EPOCHS, VocabularyTrade, vocab_candidates
from translator.config import SHAPE_FIELDS
from translator.host_text import tensorflow_installed
from translator.io import count_characters, machine_cache_dir, write_atomic
from translator.pruning import is_cut_model

if TYPE_CHECKING:
    from training.engines.backend import Strategy
    from translator.config import TransformerConfig
    from translator.pipelines.vocabulary import Vocabulary

log = logging.getLogger(__name__)
T = TypeVar("T")
PLAN_FILE = "plan.json"
# Why a run's vocabulary is kept by default: `translator train` is given one.
RUN_VOCABULARY = "the run's (data.vocabulary)"
# `model.*` keys that fix the architecture when the user sets them (`model.overrides`
# as a whole replaces every override, the planned ones too).
SHAPE_KEYS = frozenset(
    {MODEL_PRESET, MODEL_OVERRIDES} | {MODEL_OVERRIDES.child(name) for name in SHAPE_FIELDS}
)


def given_settings(
    config: RunConfig, keys: frozenset[ConfigKey], vocab_sizes: tuple[int, int]
) -> Given:
    """What the user fixed, read from the resolved config for the keys they set."""
    shape = None
    if keys & SHAPE_KEYS:
        shape = shape_of(config.model.transformer_config(*vocab_sizes), config.model.preset)

    def value(key: ConfigKey, read: Callable[[], T]) -> T | None:
        whole = key.path[:-1] == MODEL_OVERRIDES.path and MODEL_OVERRIDES in keys
        return read() if key in keys or whole else None

    init_from = config.train.init_from
    return Given(
        shape=shape,
        shape_reason=f"the fine-tuned model's ({init_from})" if init_from else "set by you",
        dropout=value(DROPOUT, lambda: config.model.transformer_config(*vocab_sizes).dropout),
        batch_tokens=value(BATCH_TOKENS, lambda: config.data.pipeline.batch_tokens),
        peak_learning_rate=value(PEAK_LEARNING_RATE, lambda: config.optimizer.peak_learning_rate),
        warmup_fraction=value(WARMUP_FRACTION, lambda: config.optimizer.warmup_fraction),
        label_smoothing=value(LABEL_SMOOTHING, lambda: config.optimizer.label_smoothing),
        eval_every_steps=value(EVAL_EVERY_STEPS, lambda: config.eval.every_steps),
        checkpoint_every_steps=value(CHECKPOINT_EVERY_STEPS, lambda: config.checkpoint.every_steps),
        subword_nbest=value(SUBWORD_NBEST, lambda: config.data.pipeline.subword_nbest),
        subword_alpha=value(SUBWORD_ALPHA, lambda: config.data.pipeline.subword_alpha),
        fine_tuning=bool(init_from),
        cut=bool(init_from) and is_cut_model(init_from),
    )


def shape_of(model: TransformerConfig, preset: str) -> Shape:
    """The user's architecture as a planner `Shape` named "yours"."""
    return Shape(
        "yours",
        preset,
        model.num_encoder_layers,
        model.num_decoder_layers,
        model.d_model,
        model.num_heads,
        model.ffn_dim,
    )


def count_corpus(config: RunConfig, vocabulary: Vocabulary, replicas: int = 1) -> CorpusCounts:
    """Pairs, characters and target tokens of one epoch of the run's training corpus.

    With the pairs per length bucket where an epoch's batches are counted by them: one
    corpus batched anew each epoch, a prepared one or a text one by one replica
    (`make_dataset(...).repeat()`), without static shapes (`CorpusCounts.tokens_per_update`).

    Raises:
        CorpusError: the training or validation corpus has no pair to learn from (before
            anything is timed), or a file is bad (naming it).
    """
    data = config.data
    counted = not data.pipeline.static_shapes  # (static: full batches, as timed)
    if data.prepared:  # counted when it was prepared (a prepared set has a pair at least)
        from training.inputs import open_prepared

        prepared = open_prepared(config, vocabulary)
        manifest = prepared.manifest
        pipeline = prepared.buckets_for(data.pipeline)
        lengths = (bucket.length for bucket in pipeline.buckets())
        counts = CorpusCounts(
            manifest.pairs,
            manifest.characters,
            manifest.target_tokens,
            tuple(zip(lengths, prepared.bucket_counts(pipeline), strict=True)) if counted else (),
            pipeline.batch_size_multiple,
        )
        if prepared.validation() is not None or not tensorflow_installed():
            return counts  # (no TensorFlow: the text validation set is checked by BLEU)
        pairs, characters, target_tokens = counts.pairs, counts.characters, counts.target_tokens
    else:
        pairs = characters = target_tokens = 0
    from translator.pipelines.dataset import check_learnable, scan_corpus

    stats = None
    for corpus in data.corpora():  # one epoch of a mix: each corpus once
        stats = scan_corpus(corpus.source, corpus.target, vocabulary, data.pipeline, tag=corpus.tag)
        check_learnable(stats, training=True)
        pairs, target_tokens = pairs + stats.pairs, target_tokens + stats.target_tokens
        characters += count_characters(corpus.source, corpus.target)
    buckets: tuple[tuple[int, int], ...] = ()
    if data.prepared:
        buckets = counts.buckets
    elif counted and stats is not None and not data.is_mix() and replicas == 1:
        lengths = (bucket.length for bucket in data.pipeline.buckets())
        buckets = tuple(zip(lengths, stats.bucket_counts, strict=True))
    if data.valid_source:
        valid = scan_corpus(
            data.valid_source, data.valid_target, vocabulary, data.pipeline, tag=data.valid_tag
        )
        check_learnable(valid, training=False)
    return CorpusCounts(
        pairs, characters, target_tokens, buckets, data.pipeline.batch_size_multiple
    )


def plan_run(
    config: RunConfig,
    keys: frozenset[ConfigKey],
    vocabulary: Vocabulary,
    strategy: Strategy,
    precision: str,
    cache_dir: Path,
    shape: tuple[Shape, str] | None = None,
    vocabulary_kept: str | None = RUN_VOCABULARY,
    measured_before: float = 0.0,
    known_speeds: tuple[tuple[str, Speed], ...] = (),
) -> Plan:
    """Counts, times and plans one run (see the module docstring).

    Args:
        config: The resolved config (the user's values and the defaults).
        keys: The keys the user set (`training.config.explicit_keys`): kept as they are.
        vocabulary: The run's vocabulary.
        strategy: The run's strategy.
        precision: The run's dtype policy name.
        cache_dir: Where `speed.json` is kept.
        shape: A shape chosen before planning and why (a distillation's student): kept
            as a shape the user set is; the config's model section must be it.
        vocabulary_kept: Why the run's vocabulary is kept (the plan then only says what
            size the budget would choose); None: the plan sizes it
            (`training.planning.vocabulary`), for the recipe to build.
        measured_before: Seconds this run already spent timing (the recipe's plan that
            sized the vocabulary), charged to a time budget as this plan's own are.
        known_speeds: Speeds known without a timing, by cache entry (the vocabulary
            built again: `resized_speeds`), where none is cached.
    """
    counts = count_corpus(config, vocabulary, strategy.num_replicas_in_sync)
    vocab_sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    given = given_settings(config, keys, vocab_sizes)
    if shape is not None:
        given = dataclasses.replace(given, shape=shape[0], shape_reason=shape[1], student=True)
    candidates = (given.shape,) if given.shape else SHAPES
    batch = given.batch_tokens or TIMED_BATCH_TOKENS
    settled = not speed_decides_something(given)
    memory = {
        shape.name: memory_batch_tokens(shape, max(vocab_sizes), strategy) for shape in candidates
    }
    if config.train.max_minutes > 0 and not settled:
        timing = _timing(config, vocabulary, strategy, precision, counts, cache_dir)
        if known_speeds:
            log.info(
                "plan: speeds at %s batch tokens from the timings that sized the vocabulary "
                "(scaled to its size), not timed again",
                " and ".join(f"{speed.batch_tokens:,}" for _, speed in known_speeds),
            )
            timing.cache.seed(known_speeds)
        speeds = _timed_speeds(candidates, counts, config, timing, given, memory)
    else:
        # An update budget, or every planned value set (the speed would decide nothing):
        # nothing is timed; an update buys `TARGET_FILL` of its batch tokens.
        fill = Speed(0.0, TARGET_FILL * batch, batch, measured=False)
        speeds, timing = {shape.name: fill for shape in candidates}, None
        minutes = config.train.max_minutes
        budget = (
            Budget(seconds=minutes * 60) if minutes > 0 else Budget(updates=config.train.max_steps)
        )

    sustain = _sustained(timing, strategy)
    length = counts.epoch_tokens / max(counts.pairs, 1)
    ratio = vocabulary.source_vocab_size / vocabulary.target_vocab_size
    trade = VocabularyTrade(
        vocabulary.target_vocab_size,
        lambda shape, size: flops_per_token(shape, config, (round(size * ratio), size), length),
        vocabulary_kept,
    )

    def planned(batch_speeds=None, trade: VocabularyTrade = trade) -> Plan:
        spent, compiled = (0.0, 0.0) if timing is None else _agreed(timing)
        spent += measured_before if timing is not None else 0.0
        if batch_speeds is not None:
            batch_speeds = {key: sustain(speed) for key, speed in batch_speeds.items()}
        return make_plan(
            counts,
            budget if timing is None else _net_budget(config, spent),
            {name: sustain(speed) for name, speed in speeds.items()},
            given=given,
            memory_batch_tokens=memory,
            measuring_seconds=spent,
            compiling_seconds=compiled,
            batch_speeds=batch_speeds,
            vocabulary=trade,
        )

    plan, batch_speeds = planned(), None
    chosen = plan.batch_tokens
    if timing is not None and chosen != batch:
        # The rule chose another batch than the one timed: what the budget buys (updates,
        # epochs, and so dropout and warmup) comes from that batch's own speed, timed too
        # while the measuring share has time left (or cached), else scaled from the timed one.
        speed = timing.speed(plan.shape, chosen)
        if speed is not None:
            batch_speeds = {(plan.shape.name, chosen): speed}
            plan = planned(batch_speeds)
    if timing is None or plan.epochs >= VOCAB_MIN_EPOCHS:
        return plan
    if vocabulary_kept is not None:
        # Kept: what the budget would choose is said where both sizes are timed already.
        cached = _timed_output_cost(timing, plan, trade, time=False)
        return plan if cached is None else planned(batch_speeds, cached[0])
    # Few epochs: the vocabulary's size is weighed, on the output layer's measured share
    # of the time (FLOPs mislead: bench/RESULTS.md, "Vocabulary by the budget").
    measured = _timed_output_cost(timing, plan, trade)
    if measured is None:
        return plan
    trade, warm = measured
    if warm is not None:  # the data limit's size timed again, warm: what the budget buys
        if batch_speeds is None:
            speeds[plan.shape.name] = warm
        else:
            batch_speeds = {(plan.shape.name, plan.batch_tokens): warm}
    return planned(batch_speeds, trade)


def _sustained(timing: Timing | None, strategy: Strategy) -> Callable[[Speed], Speed]:
    """A speed at the share of its timing's pace this plan counts, said in the log.

    Each kind's `sustained_share` (`Speed.in_turn`); a timing in turn where no run planned
    on one yet, the shape timings' (before kinds, one share served both). 1 under an
    update budget (nothing timed), and across workers, which would each read their own
    machine's.
    """
    if timing is None or strategy.spans_workers():
        return lambda speed: speed
    signature, where = timing.cache.signature, machine_cache_dir() / SUSTAINED_FILE
    share, runs = sustained_share(signature)
    in_turn, runs_in_turn = sustained_share(signature, in_turn=True)
    if runs:
        log.info(
            "plan: runs on this machine trained at %.2f of their timings' pace (the median "
            "of the last %d): a timing counts at that pace (%s)",
            share,
            runs,
            where,
        )
    if runs_in_turn:
        log.info(
            "plan: runs planned on timings in turn (the vocabulary's sizes) trained at %.2f "
            "of their pace (the median of the last %d): such a timing counts at that pace",
            in_turn,
            runs_in_turn,
        )
    shares = {False: share, True: in_turn if runs_in_turn else share}
    return lambda speed: speed.sustain(shares[speed.in_turn])


def _timed_output_cost(
    timing: Timing, plan: Plan, trade: VocabularyTrade, time: bool = True
) -> tuple[VocabularyTrade, Speed | None] | None:
    """`trade` with a token's seconds timed at its size and the smallest candidate's.

    A step's time is linear in the vocabulary's size (one projection, one softmax), so the
    chosen shape and batch timed at two sizes give it at any size. Both are timed in
    turn (`Timing.split`), warm, whatever the share left, but where workers would have to
    agree on it, and not charged to the budget; the run's speed so timed, warm and longer
    than the shape's first timing, is returned too (what the budget buys). `time=False`:
    from the cache only. None: not timed (a scale of FLOPs stays), or no smaller
    candidate.
    """
    smallest = vocab_candidates(trade.size)[-1]
    if smallest >= trade.size:
        return None
    shape, batch = plan.shape, plan.batch_tokens
    at_smallest, warm = timing.cache.get(shape, batch, smallest), None
    if at_smallest is None:
        if not time or timing.strategy.spans_workers():
            return None
        warm, at_smallest = timing.split(shape, batch, smallest)
        log.info(
            "plan: timing the vocabulary's sizes took %.0f s, outside the budget",
            timing.for_vocabulary,
        )
        # (Its start is warm; a run's own pays the tracing, as the first timing did.)
        # (and the fixed cost of an update, which the turns do not time)
        timed = plan.speeds[shape.name]
        warm = dataclasses.replace(
            warm, startup_seconds=timed.startup_seconds, fixed_seconds=timed.fixed_seconds
        )
        timing.cache.put(shape, batch, warm)
    built = warm or plan.speeds[shape.name]
    # (Both as timed: the plan's speed is cut to what runs sustain, the cached one is not.)
    seconds = built.sustained / built.tokens_per_second
    seconds_small = at_smallest.sustained / at_smallest.tokens_per_second
    slope = max((seconds - seconds_small) / (trade.size - smallest), 0.0)  # (noise: >= 0)
    base = seconds - slope * trade.size
    measured = dataclasses.replace(
        trade,
        cost=lambda shape, size: base + slope * size,
        basis=f"timed at {trade.size:,} and {smallest:,} entries, in turn",
    )
    return measured, warm


def _timing(
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy: Strategy,
    precision: str,
    counts: CorpusCounts,
    cache_dir: Path,
) -> Timing:
    """The run's `Timing`, over its speed cache (`speed.json`, and the machine's)."""
    cache = _speed_cache(config, vocabulary, strategy, precision, counts, cache_dir)
    seconds = config.train.max_minutes * 60
    return Timing(seconds, config, vocabulary, strategy, cache, counts=counts)


def _speed_cache(
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy: Strategy,
    precision: str,
    counts: CorpusCounts,
    cache_dir: Path,
) -> SpeedCache:
    """The speeds measured under this run's signature: its own file's, then the machine's."""
    signature = machine_signature(
        config, vocabulary, strategy, precision, counts.epoch_tokens / max(counts.pairs, 1)
    )
    if strategy.spans_workers():
        # Every worker times, together: a cache one of them has could differ.
        return SpeedCache(cache_dir / SPEED_FILE, signature, read=False)
    return SpeedCache(cache_dir / SPEED_FILE, signature, machine_cache_path())


def learn_speed(
    plan: Plan,
    pace: tuple[float, float],
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy: Strategy,
    precision: str,
    cache_dir: Path,
) -> None:
    """A trained run's steady pace replaces its plan's timing in the speed caches.

    A timing is a few updates, taken once and reused by every later plan on this machine;
    it can be taken beside other work, and it misses what a run's own callbacks cost per
    update. The run's pace, over all its updates, is the better measurement: the next plan
    of this shape, batch and signature buys what this run did (its start-up cost kept).

    Args:
        plan: The plan the run trained.
        pace: Target tokens per second and per update (`callbacks.Budget.steady_speed`).
        config: The run's config, as planned.
        vocabulary: The run's vocabulary.
        strategy: The run's strategy.
        precision: The run's dtype policy name.
        cache_dir: Where the plan's speeds are cached.
    """
    if plan.budget.seconds is None or strategy.spans_workers():
        return
    cache = _speed_cache(config, vocabulary, strategy, precision, plan.corpus, cache_dir)
    timed = plan.speeds[plan.shape.name]
    learned = dataclasses.replace(
        timed,
        tokens_per_second=pace[0],
        tokens_per_update=pace[1],
        batch_tokens=plan.batch_tokens,
        measured=True,
        fixed_seconds=0.0,  # (the pace is of an epoch's batches, short ones included)
        sustained=1.0,
        learned=True,
    )
    said = ""
    if not timed.learned and timed.measured:
        # An update's seconds as the timing read them (before `Speed.sustain`), over the
        # run's own: the share of the timing's pace the run sustained.
        predicted = seconds_per_update(plan.corpus, timed, plan.batch_tokens) * timed.sustained
        record_sustained(cache.signature, predicted * pace[0] / pace[1], timed.in_turn)
        share, runs = sustained_share(cache.signature, timed.in_turn)
        kind = " in turn" if timed.in_turn else ""
        said = f"; runs here: {share:.2f} of the pace of their timings{kind}, the median of {runs}"
    log.info(
        "plan: the run trained %s at %s target tokens/s, its plan's timing %s%s; later plans "
        "on this machine use the run's (%s)",
        plan.shape.name,
        f"{pace[0]:,.0f}",
        f"{timed.tokens_per_second / timed.sustained:,.0f}",
        said,
        cache.path,
    )
    cache.put(plan.shape, plan.batch_tokens, learned)


def _timed_speeds(
    candidates: tuple[Shape, ...],
    counts: CorpusCounts,
    config: RunConfig,
    timing: Timing,
    given: Given,
    memory: dict[str, int],
) -> dict[str, Speed]:
    """The candidates' speeds under the run's time budget.

    On an accelerator each is timed at its own batch (`time_shapes_at_their_batches`);
    elsewhere `time_shapes`.
    """
    seconds = config.train.max_minutes * 60
    batch = given.batch_tokens or TIMED_BATCH_TOKENS
    if timing.strategy.accelerator_memory() is not None:
        return time_shapes_at_their_batches(
            candidates, counts, batch, timing, seconds, memory,
            batch_given=bool(given.batch_tokens),
        )  # fmt: skip
    return time_shapes(candidates, counts, batch, timing, seconds)


def _agreed(timing: Timing) -> tuple[float, float]:
    """The seconds charged and compiled, the same on every worker (their means)."""
    charged, compiled = timing.strategy.worker_means(timing.charged, timing.compiled)
    return charged, compiled


def _net_budget(config: RunConfig, spent: float) -> Budget:
    """The run's time budget less the `spent` seconds of timing (at least one second)."""
    return Budget(seconds=max(config.train.max_minutes * 60 - spent, 1.0))


def planned_config(
    config: RunConfig, plan: Plan, keep: frozenset[ConfigKey] = frozenset()
) -> RunConfig:
    """The run config with the plan's values, but for the keys in `keep`, which win.

    `keep`: the keys the user gives this run (`--set`); over a saved plan too. Under a
    time budget, the minutes left after measuring become `train.max_minutes`.
    """
    config = apply_changes(config, plan.changes(), keep)
    if plan.budget.seconds is not None:
        config = apply_changes(config, [Change(MAX_MINUTES, plan.budget.seconds / 60)])
    return config


def save_plan(plan: Plan, run_dir: Path) -> Path:
    """Writes `plan.json` into the run directory."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / PLAN_FILE
    write_atomic(path, plan.to_json())
    return path


def load_plan(run_dir: Path) -> Plan | None:
    """The plan a run started with, or None."""
    path = run_dir / PLAN_FILE
    return Plan.from_json(path.read_text("utf-8")) if path.is_file() else None
