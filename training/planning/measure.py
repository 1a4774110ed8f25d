"""Planning a run on this machine: count the corpus, time the candidate shapes, plan.

`plan_run` is what `translator train` and `translator recipe` call before training:

1. It counts the training corpus (pairs, characters, and target pieces under the run's
   vocabulary, through the pipeline's own scan).
2. Under a time budget it times a few updates of each candidate shape that could be
   chosen, on the real pipeline, in the run's precision and strategy, the tracing and
   first updates excluded (`Timing`). The measuring is counted inside the budget and
   bounded by `MEASURE_SHARE` of it, except that the smallest shape is always timed: its
   first update carries the tracing of the training step, which can alone exceed the
   share of a budget of a few minutes (the plan reports the seconds spent). Compiling
   ahead (JAX compiles a step per batch shape before its clock) is not counted, as a
   run's own is not, but bounds the timing's wall time (`MEASURE_WALL_SHARE`); from a
   prepared corpus a shape is timed on its commonest bucket alone, one program. The
   results are cached (`speed.json`) under a signature of the
   machine, precision, strategy, vocabulary and corpus, so a resumed or repeated run
   measures nothing. On a CPU a shape not timed gets its speed scaled from a timed one
   by their FLOPs (said as much in the plan). On an accelerator, where small shapes are
   bound by kernel launches rather than FLOPs, nothing is scaled: each shape is timed at
   the batch it would train, and one not timed within the share is not weighed.
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
import json
import logging
import os
import platform
import statistics
import time
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
    MIN_BATCH_TOKENS,
    SHAPES,
    TARGET_FILL,
    Budget,
    CorpusCounts,
    Given,
    Plan,
    Shape,
    Speed,
    batch_tokens_in_memory,
    choose_batch_tokens,
    compute_limit,
    data_limit,
    make_plan,
    seconds_per_update,
    speed_decides_something,
    tokens_bought,
)
from training.planning.vocabulary import VOCAB_MIN_EPOCHS, VocabularyTrade, vocab_candidates
from translator.config import SHAPE_FIELDS
from translator.flops import training_flops
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
SPEED_FILE = "speed.json"
# The shares of their timings' pace that runs sustained, by machine (`sustained_share`).
SUSTAINED_FILE = "sustained.json"
# The last runs whose median share a plan takes (one run's share moves with its timing's
# noise: fresh processes' timings differ by up to 22% here, bench/RESULTS.md).
SUSTAINED_RUNS = 5
# The signature's entries that are the corpus' and the vocabulary's, not the machine's.
CORPUS_SIGNATURE = ("vocabulary_sizes", "mean_target_length", "max_lengths")
# Why a run's vocabulary is kept by default: `translator train` is given one.
RUN_VOCABULARY = "the run's (data.vocabulary)"
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
# Memory assumed per GPU when TensorFlow cannot say (the smallest common training GPU).

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


# ---- Timing shapes -----------------------------------------------------------------------


def machine_signature(
    config: RunConfig, vocabulary: Vocabulary, strategy, precision: str, mean_length: float
) -> dict:
    """What a speed measurement depends on: a cached one with another signature is stale.

    The corpus and the vocabulary enter through the mean target length (rounded) and the
    vocabulary sizes: tokens per second depend on those, not on which sentences or
    pieces they are.
    """
    return {
        "processor": _processor(),
        **strategy.describe_devices(),
        "precision": precision,
        "replicas": strategy.num_replicas_in_sync,
        "vocabulary_sizes": [vocabulary.source_vocab_size, vocabulary.target_vocab_size],
        "mean_target_length": round(mean_length),
        "max_lengths": [
            config.data.pipeline.max_source_length,
            config.data.pipeline.max_target_length,
        ],
        # A prepared corpus is batched in Python, text through tf.data.
        **({"input": "prepared"} if config.data.prepared else {}),
        # Subword sampling's draws (in Python) take time from the training step.
        **({"subword_nbest": nbest} if (nbest := config.data.pipeline.subword_nbest) > 1 else {}),
    }


def _processor() -> str:
    """The CPU as its speeds depend on it (`describe_processor` of /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            text = cpuinfo.read()
    except OSError:
        text = ""
    described = describe_processor(text, os.environ.get("ONEDNN_MAX_CPU_ISA", ""))
    return f"{described or platform.processor() or platform.machine()} x{os.cpu_count()}"


def describe_processor(cpuinfo: str, isa_cap: str = "") -> str:
    """The first CPU of a /proc/cpuinfo text: its name, family, model and widest vectors.

    A virtual machine's name alone can hide its generation ("AMD EPYC" for a CPU with
    AVX2 only and for one with AVX-512, 4x apart in training speed): a speed cached on
    one must not be read on the other. A cap on oneDNN's instructions (its
    `ONEDNN_MAX_CPU_ISA`) is another machine too. "" where the text names no CPU.
    """
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block only
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    if "model name" not in fields:
        return ""
    flags = set(fields.get("flags", "").split())
    widest = next((isa for isa in ("avx512f", "avx2", "avx") if isa in flags), "")
    details = [
        f"family {fields['cpu family']} model {fields['model']}" if "cpu family" in fields else "",
        {"avx512f": "AVX-512"}.get(widest, widest.upper()),
        f"oneDNN capped at {isa_cap}" if isa_cap else "",
    ]
    details = [detail for detail in details if detail]
    return fields["model name"] + (f" ({', '.join(details)})" if details else "")


def machine_cache_path() -> Path:
    """Where speeds are shared across work directories on this machine (`speed.json`)."""
    return machine_cache_dir() / SPEED_FILE


def _machine_key(signature: dict, in_turn: bool = False) -> str:
    """A speed's signature less its corpus and vocabulary: what a sustained share depends on.

    With the kind of timing: a shape's own (the key of the shares recorded before kinds)
    or one in turn (`Speed.in_turn`).
    """
    machine = {name: value for name, value in signature.items() if name not in CORPUS_SIGNATURE}
    if in_turn:
        machine["timing"] = "in turn"
    return json.dumps(machine, sort_keys=True)


def sustained_share(signature: dict, in_turn: bool = False) -> tuple[float, int]:
    """The share of their timings' pace that runs here trained at, and over how many runs.

    The median of the last `SUSTAINED_RUNS` runs of the machine, precision and strategy of
    `signature` (any corpus: `learn_speed` records them) whose plans counted the same kind
    of timing (`in_turn`: the vocabulary's split, warm; else a shape's own, cold); (1.0, 0)
    before any.
    """
    shares = _read_json(machine_cache_dir() / SUSTAINED_FILE).get(
        _machine_key(signature, in_turn), []
    )
    if not isinstance(shares, list):
        shares = []
    shares = [share for share in shares if isinstance(share, int | float) and share > 0]
    shares = shares[-SUSTAINED_RUNS:]
    return (float(statistics.median(shares)), len(shares)) if shares else (1.0, 0)


def _record_sustained(signature: dict, share: float, in_turn: bool = False) -> None:
    """Adds a run's sustained share to the machine's (`sustained_share`), the last few kept."""
    path = machine_cache_dir() / SUSTAINED_FILE
    try:  # a cache that cannot be written (read-only home) only leaves timings as read
        shares, key = _read_json(path), _machine_key(signature, in_turn)
        kept = shares.get(key)
        kept = kept if isinstance(kept, list) else []
        shares[key] = [*kept, round(share, 4)][-SUSTAINED_RUNS:]
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(shares, indent=2))
    except OSError as error:
        log.warning("plan: cannot write %s: %s", path, error)


class SpeedCache:
    """Measured speeds under one signature: the run's `speed.json`, then the machine's.

    A run reads its own file first, then the machine's cache (`machine_cache_path`), so a
    new work directory on the same machine, with a corpus of the same mean length and a
    vocabulary of the same size, measures nothing. Measurements go to both.
    """

    def __init__(
        self, path: Path, signature: dict, shared: Path | None = None, *, read: bool = True
    ):
        self.path, self.signature, self.shared = path, signature, shared
        self.name = json.dumps(signature, sort_keys=True)
        own = _read_json(path) if read else {}
        self.speeds: dict[str, dict] = (
            own.get("speeds", {}) if own.get("signature") == signature else {}
        )
        self.machine: dict[str, dict] = (
            _read_json(shared).get(self.name, {}) if shared and read else {}
        )

    @staticmethod
    def key(shape: Shape, batch_tokens: int, output: int | None = None) -> str:
        """The entry of one shape at one batch size (with a smaller vocabulary's `output`)."""
        # Equal depths keep the key of the cache files written before students.
        depth = str(shape.encoder_layers)
        if shape.decoder_layers != shape.encoder_layers:
            depth = shape.depth
        return (
            f"{shape.preset}:{depth}x{shape.d_model}:ffn{shape.ffn_dim}:"
            f"h{shape.num_heads}@{batch_tokens}" + (f":v{output}" if output else "")
        )

    def get(self, shape: Shape, batch_tokens: int, output: int | None = None) -> Speed | None:
        """The cached speed, or None."""
        key = self.key(shape, batch_tokens, output)
        entry = self.speeds.get(key) or self.machine.get(key)
        return Speed(**entry) if entry else None

    def seed(self, known: tuple[tuple[str, Speed], ...]) -> None:
        """Speeds known without a timing (`resized_speeds`), by entry, where none is cached.

        Held for this plan; written with the next measurement.
        """
        for key, speed in known:
            if key not in self.speeds and key not in self.machine:
                self.speeds[key] = dataclasses.asdict(speed)

    def put(self, shape: Shape, batch_tokens: int, speed: Speed, output: int | None = None) -> None:
        """Records a measurement in the run's file and the machine's cache."""
        self.speeds[self.key(shape, batch_tokens, output)] = dataclasses.asdict(speed)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(
            self.path, json.dumps({"signature": self.signature, "speeds": self.speeds}, indent=2)
        )
        if self.shared is None:
            return
        try:  # a cache that cannot be written (read-only home) only costs a measurement
            shared = _read_json(self.shared)
            shared.setdefault(self.name, {}).update(self.speeds)
            self.shared.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.shared, json.dumps(shared, indent=2))
        except OSError as error:
            log.warning("plan: cannot write the speed cache %s: %s", self.shared, error)


def resized_speeds(cache_dir: Path, shape: Shape, speedup: float) -> tuple[tuple[str, Speed], ...]:
    """`shape`'s speeds cached in `cache_dir` by the last plan, times `speedup`.

    The recipe builds its vocabulary again where the budget takes a smaller size; the
    plan that chose it had just timed the shape at the old size and, in turn, at a
    smaller one (their line gives `speedup`). Training's plan, on the new vocabulary (a
    new signature), reads these rather than timing the shape a third time: on a slow CPU
    each timing's start alone is 35 to 40 s of a 5-minute budget (bench/RESULTS.md,
    "Vocabulary by the budget").

    Returns:
        `(cache entry, speed)` pairs for `SpeedCache.seed`.
    """
    speeds = _read_json(cache_dir / SPEED_FILE).get("speeds", {})
    known = []
    for key, entry in speeds.items():
        speed = Speed(**entry)
        if key == SpeedCache.key(shape, speed.batch_tokens):  # (not a smaller size's)
            rate = speed.tokens_per_second * speedup
            known.append((key, dataclasses.replace(speed, tokens_per_second=rate)))
    return tuple(known)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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


# ---- The run's plan ----------------------------------------------------------------------


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
        given = dataclasses.replace(given, shape=shape[0], shape_reason=shape[1])
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
        _record_sustained(cache.signature, predicted * pace[0] / pace[1], timed.in_turn)
        share, runs = sustained_share(cache.signature, timed.in_turn)
        kind = "timings in turn" if timed.in_turn else "timings"
        said = f"; runs here: {share:.2f} of their {kind}' pace, the median of {runs}"
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
