"""The budget planner: the best model a budget can buy on this corpus, on this machine.

A budget is wall time (or updates) on one machine; what it buys is target tokens. The
planner turns (target tokens bought, corpus tokens, model size) into every setting that
depends on them, by a few small rules, each a documented function below:

- **Model size** (`choose_shape`): the largest shape of `SHAPES` that both limits allow.
  A data limit, `DATA_PARAMETERS * (corpus tokens / REFERENCE_CORPUS_TOKENS) **
  DATA_EXPONENT` non-embedding parameters: on a fixed corpus a bigger model stops paying
  once it can memorize the data (the data-limited regime of Gordon et al. 2021 and
  Ghorbani et al. 2021, whose fitted exponents for data are below 1). And a compute
  limit, `tokens bought / TOKENS_PER_PARAMETER` parameters, the tokens bought *by that
  shape* at its measured speed: a model trained for too few tokens per parameter is
  still far from converged when the budget ends (Li et al. 2020, budgeted training).
- **Batch tokens** (`choose_batch_tokens`): grows as the cube root of the tokens bought,
  so a short budget makes more, noisier updates and a long one fewer, larger ones (the
  critical batch size grows as training goes on; McCandlish et al. 2018); a power of
  two, bounded by the memory the machine has.
- **Dropout** (`choose_dropout`): a function of the epochs the budget buys. Near one
  epoch there is nothing to overfit; after tens of epochs, regularize hard. A
  distillation's student takes at most `STUDENT_MAX_DROPOUT`.
- **Subword sampling** (`_sampling_choices`): off. It is a regularizer of many epochs,
  as dropout is, and beside the epochs' dropout it gained nothing at any corpus size or
  budget tried; a user who sets it gets `SAMPLING_ALPHA` unless they set that too.
- **Peak learning rate** (`choose_learning_rate`): lower for wider models
  (`(REFERENCE_WIDTH / d_model) ** 0.75`), as the paper's `d_model ** -0.5` schedule.
- **Warmup** (`choose_warmup_fraction`): a number of updates that grows with width, as a
  fraction of the updates bought.
- **Validation cadence** (`choose_eval_every`): validation takes time from updates; a
  short budget validates once, at the end.
- **Checkpoint cadence** (`choose_checkpoint_every`): about a minute of updates, never
  under `MIN_CHECKPOINT_UPDATES`: a kill loses at most that, and a save (the weights and
  Adam's moments copied off the device and written) stays a small share of the time, on
  a GPU's hundred updates a second as on a CPU's few.
- **Vocabulary size** (`training.planning.vocabulary`): the data limit grows with the
  corpus' characters (small corpora want small vocabularies; Sennrich and Zhang 2019);
  where it buys few epochs, the compute limit takes a smaller one, whose output layer
  costs less per token.

The constants were fit on validation BLEU, never a test set (decision D18). Nothing is
looked up by minutes: a 10x faster machine buys 10x the tokens and gets the plan of those
tokens.

This module is pure Python (no TensorFlow): `training.planning.measure` counts the corpus
and times the machine (`training.planning.timing`), then calls `make_plan`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping

from training.config import (
    BATCH_TOKENS,
    CHECKPOINT_EVERY_STEPS,
    DROPOUT,
    EVAL_EVERY_STEPS,
    LABEL_SMOOTHING,
    MODEL,
    MODEL_OVERRIDES,
    MODEL_PRESET,
    PEAK_LEARNING_RATE,
    SUBWORD_ALPHA,
    SUBWORD_NBEST,
    WARMUP_FRACTION,
    Change,
    CheckpointSection,
    ConfigKey,
)
from training.planning.vocabulary import (
    VocabularyChoice,
    VocabularyTrade,
    choose_budget_vocab_size,
    pieces_at,
)
from translator.constants import DEFAULT_LABEL_SMOOTHING
from translator.pipelines.config import PipelineConfig, bucket_batch_size

# A planned value: a number, or the chosen shape's name (the key `model`).
PlanValue = int | float | str

# The width every other width's learning rate and warmup are scaled from.
REFERENCE_WIDTH = 128
# Target tokens (labels, EOS included) of one epoch of Multi30k's 29k training pairs
# under an 8,000-piece joint vocabulary: the corpus the constants were first fit on.
REFERENCE_CORPUS_TOKENS = 474_000
# Non-embedding parameters the data limit allows on the reference corpus: between the
# narrow shape and the next one up (D18).
DATA_PARAMETERS = 3.5e6
# How the data limit grows with the corpus (below 1: data scaling exponents of NMT).
DATA_EXPONENT = 0.75
# Target tokens a budget must buy per non-embedding parameter for a shape to be chosen
# (decision D18).
TOKENS_PER_PARAMETER = 1.0
# Batch tokens at the reference purchase, that purchase (about what 5 minutes of a 2-core
# CPU buy), and how the batch grows with the tokens bought (as the cube root; D18).
REFERENCE_BATCH_TOKENS = 2048
REFERENCE_TOKENS_BOUGHT = 2.8e6
BATCH_EXPONENT = 1 / 3
MIN_BATCH_TOKENS, MAX_BATCH_TOKENS = 1024, 65536
# The share of a replica's memory a batch's activations may take.
MEMORY_SHARE = 0.5
# Real target tokens per update over `batch_tokens` (padding and the source side take
# the rest), when no measurement says otherwise (about Multi30k's).
TARGET_FILL = 0.8
# The narrow model's peak learning rate, at width 128 (D18).
REFERENCE_LEARNING_RATE = 0.005
# Warmup updates at the reference width (they grow with the width).
REFERENCE_WARMUP_UPDATES = 80
# Budgets under this many seconds validate once, at the end.
VALIDATE_ONCE_UNDER_SECONDS = 20 * 60
# Validations in a longer run.
VALIDATIONS_PER_RUN = 8
# Seconds of training between checkpoints, and the fewest updates between two: the
# config's own cadence (a multiple of the default logging cadence, 100, so neither adds
# looks at the step).
CHECKPOINT_SECONDS = 60
MIN_CHECKPOINT_UPDATES = CheckpointSection.every_steps
# Fine-tuning a trained model (`--init-from`) continues a converged network on new data:
# a tenth of the from-scratch peak rate (continued training for domain adaptation uses a
# rate near the end of the original schedule, not its peak: Luong & Manning 2015, Chu &
# Wang 2018), the shortest warmup (Adam's moments start afresh), no less dropout than
# pretraining's usual 0.1, and validations through the run, the model's own score first,
# so that a fine-tuning that only hurts keeps the model it started from.
FINE_TUNING_LEARNING_RATE_SCALE = 0.1
# A model cut from a larger one (a distillation's student: `translator.pruning`) starts
# further from converged: its blocks no longer feed the ones they were trained to. Set on
# validation with a 4+1 student cut from a 4+4 teacher (0.1x: 39.31 BLEU, 0.3x: 40.68;
# bench/RESULTS.md, "Students for CPU serving").
CUT_MODEL_LEARNING_RATE_SCALE = 0.3
FINE_TUNING_WARMUP_FRACTION = 0.05
FINE_TUNING_MIN_DROPOUT = 0.1
# A distillation's student learns its teacher's translations, one output per source and
# simpler than references (Kim & Rush 2016): it needs less regularizing than the epochs
# rule gives a model learning references. Set on validation (bench/RESULTS.md, "A
# student's dropout"). A control student trained on the references (`--student-data
# original`) takes it too, so that it differs from the distilled one in its data alone.
STUDENT_MAX_DROPOUT = 0.1
FINE_TUNING_VALIDATIONS = 4
# Characters per piece of an 8,000-piece vocabulary (for a piece count before one exists).
CHARACTERS_PER_PIECE = 4.0
# Subword sampling's strength (Kudo 2018) where the user turns it on: segmentations drawn
# ~ P ** alpha (the pipeline's default alpha).
SAMPLING_ALPHA = PipelineConfig.subword_alpha


@dataclasses.dataclass(frozen=True)
class Shape:
    """One candidate architecture."""

    # The name the plan and the measurements use.
    name: str
    # The `TransformerConfig` preset it starts from (its other fields: activation, ...).
    preset: str
    encoder_layers: int
    # Fewer than the encoder's in a student: decoding time is mostly the decoder's
    # (Kasai et al. 2021).
    decoder_layers: int
    d_model: int
    num_heads: int
    ffn_dim: int

    @property
    def parameters(self) -> int:
        """Non-embedding parameters: attention and feed-forward weights of every block."""
        d, f = self.d_model, self.ffn_dim
        encoder = 4 * d * d + 2 * d * f  # self-attention q, k, v, o; feed-forward
        decoder = 8 * d * d + 2 * d * f  # self- and cross-attention; feed-forward
        return self.encoder_layers * encoder + self.decoder_layers * decoder

    @property
    def depth(self) -> str:
        """`4+4`: encoder and decoder blocks."""
        return f"{self.encoder_layers}+{self.decoder_layers}"

    def model_overrides(self) -> dict[str, int]:
        """The `model.overrides` entries of this shape."""
        return {
            "num_encoder_layers": self.encoder_layers,
            "num_decoder_layers": self.decoder_layers,
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "ffn_dim": self.ffn_dim,
        }

    def describe(self) -> str:
        """`narrow (4+4 x 128, ffn 256, 1.3M parameters)`."""
        return (
            f"{self.name} ({self.depth} x {self.d_model}, ffn {self.ffn_dim}, "
            f"{self.parameters / 1e6:.1f}M parameters)"
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, int | str]) -> Shape:
        """A shape as `dataclasses.asdict` wrote it (a plan before students: `layers`)."""
        data = dict(data)
        if "layers" in data:
            data["encoder_layers"] = data["decoder_layers"] = data.pop("layers")
        return cls(**data)


# The candidates, smallest first. narrow: Wu et al. 2021's Transformer-Tiny for Multi30k;
# base and big: the paper's models.
SHAPES: tuple[Shape, ...] = (
    Shape("narrow", "small", 4, 4, 128, 4, 256),
    Shape("small", "small", 6, 6, 256, 4, 1024),
    Shape("base", "base", 6, 6, 512, 8, 2048),
    Shape("big", "big", 6, 6, 1024, 16, 4096),
)


@dataclasses.dataclass(frozen=True)
class CorpusCounts:
    """The training corpus, as the planner sees it."""

    # Sentence pairs (lines).
    pairs: int
    # Characters of both sides.
    characters: int
    # Target tokens of one epoch (pieces + EOS of the kept pairs); None before the
    # vocabulary exists, then estimated from the characters.
    target_tokens: int | None = None
    # Where every epoch ends each length bucket's batch short (one corpus batched anew
    # each epoch, a text corpus by one replica or a prepared one, without static shapes):
    # the kept pairs per bucket, as (bucket length, pairs); () elsewhere (a mix is batched
    # endlessly; static shapes leave the remainders of buckets that fill a batch).
    buckets: tuple[tuple[int, int], ...] = ()
    # Batch rows are a multiple of this (`data.pipeline.batch_size_multiple`).
    batch_size_multiple: int = 1

    def __post_init__(self):
        object.__setattr__(self, "buckets", tuple(tuple(b) for b in self.buckets))  # (JSON)

    @property
    def epoch_tokens(self) -> float:
        """Target tokens of one epoch, counted or estimated."""
        if self.target_tokens:
            return float(self.target_tokens)
        # About half the characters are the target side's; + EOS per pair.
        return self.characters / 2 / CHARACTERS_PER_PIECE + self.pairs

    def tokens_per_update(self, speed: Speed, batch_tokens: int) -> float:
        """Real target tokens per update at `batch_tokens`.

        An epoch's tokens over its batches where the buckets are counted: each bucket's
        last batch of an epoch is short, which a timing's first, full batches do not
        show (9% fewer tokens per update than timed on 10,000 pairs; RESULTS,
        "Vocabulary by the budget"). Else the timing's, in proportion to the batch.
        """
        if not (self.buckets and self.target_tokens):
            return speed.at_batch(batch_tokens)
        return self.target_tokens / max(self.epoch_batches(batch_tokens), 1)

    def epoch_batches(self, batch_tokens: int) -> int:
        """Batches of one epoch at `batch_tokens`, where the buckets are counted; else 0."""
        return sum(
            math.ceil(
                pairs / max(bucket_batch_size(batch_tokens, length, self.batch_size_multiple), 1)
            )
            for length, pairs in self.buckets
        )


@dataclasses.dataclass(frozen=True)
class Speed:
    """One shape's training speed on this machine."""

    # Real target tokens trained on per second (validation not included).
    tokens_per_second: float
    # Real target tokens per update at `batch_tokens`.
    tokens_per_update: float
    # The batch tokens it was measured at.
    batch_tokens: int
    # True: timed on this machine; False: scaled from a timed shape by their FLOPs.
    measured: bool
    # Seconds the start of training costs beyond the steady pace (TensorFlow traces the
    # step in its first update): spent by every run before its updates count.
    startup_seconds: float = 0.0
    # Seconds compiling the step ahead, before the clock (JAX: `_Loop.compile_ahead`): a run
    # spends them too, but outside its time budget.
    compile_seconds: float = 0.0
    # Seconds an update costs whatever its tokens (the optimizer's pass over every weight,
    # the step's dispatch), timed on half batches where an epoch's short batches count
    # (`CorpusCounts.buckets`); 0: not timed, or a speed of an epoch's own batches, short
    # ones included (an epoch timed whole, a run's pace).
    fixed_seconds: float = 0.0
    # The share of its timing's pace this speed was cut to (`sustain`): what runs on this
    # machine trained at, over their plans' timings. 1: not cut (none learned yet).
    sustained: float = 1.0
    # A trained run's steady pace (`training.planning.measure.learn_speed`), not a timing:
    # runs sustain it, so it is never cut.
    learned: bool = False
    # Timed in turn with a smaller vocabulary's model, warm (`measure_in_turn`), not as a
    # shape's own first timing: runs sustain less of such a timing's pace, so each kind
    # has its own share (`training.planning.speed_cache.sustained_share`).
    in_turn: bool = False

    def at_batch(self, batch_tokens: int) -> float:
        """Real target tokens per update at another batch size (proportional)."""
        return self.tokens_per_update * batch_tokens / self.batch_tokens

    def sustain(self, share: float) -> Speed:
        """This timing at `share` of its pace, as runs here trained (a run's pace, as is).

        A timing is a process's first seconds of updates; runs on the same machine trained
        slower over their minutes (bench/RESULTS.md, "Vocabulary by the budget"), so every
        second of an update is longer by 1 / `share`.
        """
        if self.learned or self.sustained != 1.0 or share == 1.0:
            return self
        return dataclasses.replace(
            self,
            tokens_per_second=self.tokens_per_second * share,
            fixed_seconds=self.fixed_seconds / share,
            sustained=share,
        )


@dataclasses.dataclass(frozen=True)
class Budget:
    """What the user gives: wall time, or updates."""

    # Seconds of training (None: a budget in updates).
    seconds: float | None = None
    # Optimizer updates (used when `seconds` is None).
    updates: int | None = None

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.updates is None):
            raise ValueError("a budget is either seconds or updates")
        if (self.seconds or self.updates or 0) <= 0:
            raise ValueError(f"the budget must be positive, got {self.seconds or self.updates}")

    def describe(self) -> str:
        """`5 minutes` or `3,000 updates`."""
        if self.seconds is not None:
            return f"{self.seconds / 60:.1f} minutes"
        return f"{self.updates:,} updates"


@dataclasses.dataclass(frozen=True)
class Given:
    """Settings the user fixed (config or `--set`): the plan keeps them and plans around."""

    shape: Shape | None = None
    # Why the shape is fixed: the user set it, or fine-tuning keeps the model's.
    shape_reason: str = "set by you"
    dropout: float | None = None
    batch_tokens: int | None = None
    peak_learning_rate: float | None = None
    warmup_fraction: float | None = None
    label_smoothing: float | None = None
    eval_every_steps: int | None = None
    checkpoint_every_steps: int | None = None
    subword_nbest: int | None = None
    subword_alpha: float | None = None
    # Fine-tuning a trained model (`--init-from`): the fine-tuning rules apply.
    fine_tuning: bool = False
    # That model was cut from a larger one (a distillation's student): a higher rate.
    cut: bool = False
    # A distillation's student (its shape chosen before planning): dropout at most
    # `STUDENT_MAX_DROPOUT`.
    student: bool = False


@dataclasses.dataclass(frozen=True)
class Choice:
    """One planned value and why."""

    # The run-config key it sets (`model`: the shape).
    key: ConfigKey
    value: PlanValue
    # The rule's reason, or "set by you".
    reason: str
    # False when the user set it (the plan then writes no override for it).
    planned: bool = True


@dataclasses.dataclass(frozen=True)
class Plan:
    """The chosen settings and what the budget buys with them."""

    budget: Budget
    corpus: CorpusCounts
    # Per shape name, the speeds the plan used.
    speeds: Mapping[str, Speed]
    shape: Shape
    # Target tokens, updates and epochs the budget buys with the chosen settings.
    tokens: float
    updates: int
    epochs: float
    choices: tuple[Choice, ...]
    # Seconds spent measuring speeds (counted inside a time budget).
    measuring_seconds: float = 0.0
    # Seconds the measuring spent compiling steps ahead, before its clocks (not counted).
    compiling_seconds: float = 0.0
    # The vocabulary's size and why (None: a plan made before the budget sized it).
    vocabulary: VocabularyChoice | None = None

    def changes(self) -> tuple[Change, ...]:
        """The planned (not user-set) values as typed changes of the run config, shape first."""
        result: list[Change] = []
        for choice in self.choices:
            if not choice.planned:
                continue
            if choice.key == MODEL:
                result.append(Change(MODEL_PRESET, self.shape.preset))
                result += [
                    Change(MODEL_OVERRIDES.child(name), value)
                    for name, value in self.shape.model_overrides().items()
                ]
            else:
                result.append(Change(choice.key, choice.value))
        return tuple(result)

    def with_budget(self, budget: Budget) -> Plan:
        """The same choices under a resumed run's new budget; what it buys scales with it."""
        if (budget.seconds is None) != (self.budget.seconds is None):
            raise ValueError("a resumed run's budget is of the kind it was planned for")
        scale = (budget.seconds or budget.updates) / (self.budget.seconds or self.budget.updates)
        return dataclasses.replace(
            self,
            budget=budget,
            tokens=self.tokens * scale,
            updates=round(self.updates * scale),
            epochs=self.epochs * scale,
        )

    def value(self, key: ConfigKey | str) -> PlanValue:
        """The chosen (or given) value of one key (a `ConfigKey`, or its dotted name)."""
        key = ConfigKey.of(key) if isinstance(key, str) else key
        for choice in self.choices:
            if choice.key == key:
                return choice.value
        raise KeyError(str(key))

    @property
    def batch_tokens(self) -> int:
        """The chosen (or given) batch tokens per replica."""
        return int(self.value(BATCH_TOKENS))

    def _measuring(self) -> str:
        """` (measuring speeds took N s of it; ...)`, or "" when nothing was timed."""
        said = []
        if self.measuring_seconds:
            said.append(f"measuring speeds took {self.measuring_seconds:.0f} s of it")
        if self.compiling_seconds:
            compiled = self.compiling_seconds
            said.append(f"compiling their steps took {compiled:.0f} s more, outside it")
        return f" ({'; '.join(said)})" if said else ""

    def describe(self) -> list[str]:
        """The plan as lines: counts, speeds, what the budget buys, each choice and why."""
        corpus = self.corpus
        counted = "counted" if corpus.target_tokens else "estimated from the characters"
        lines = [
            f"corpus: {corpus.pairs:,} pairs, {corpus.characters:,} characters, "
            f"{corpus.epoch_tokens:,.0f} target tokens per epoch ({counted})",
            f"budget: {self.budget.describe()}{self._measuring()}",
        ]
        for name, speed in self.speeds.items():
            if not speed.tokens_per_second:
                continue  # an update budget: nothing timed
            how = "measured" if speed.measured else "estimated from FLOPs"
            if speed.compile_seconds:
                how += f"; {speed.compile_seconds:.0f} s compiling before the clock"
            if speed.fixed_seconds:
                how += f"; {speed.fixed_seconds * 1000:.0f} ms an update whatever its tokens"
            if speed.learned:
                how += "; a trained run's pace"
            elif speed.sustained != 1.0:
                timed = speed.tokens_per_second / speed.sustained
                kind = "timing in turn" if speed.in_turn else "timing"
                how += f"; {speed.sustained:.2f} x its {kind}'s {timed:,.0f}, as runs here trained"
            updates, bought = purchase(corpus, speed, self.budget, self.batch_tokens)
            lines.append(
                f"speed: {name} {speed.tokens_per_second:,.0f} target tokens/s at "
                f"{speed.batch_tokens:,} batch tokens ({how}; {speed.startup_seconds:.0f} s "
                f"starting): would buy {bought / 1e6:,.1f}M tokens = "
                f"{updates:,.0f} updates = "
                f"{bought / self.corpus.epoch_tokens:,.1f} epochs"
            )
        if self.tokens:
            lines.append(
                f"buys: {self.tokens / 1e6:,.1f}M target tokens = {self.updates:,} updates = "
                f"{self.epochs:,.1f} epochs"
            )
        else:
            lines.append("buys: not measured (every planned value is set; nothing timed)")
        if self.vocabulary is not None:
            lines.append(f"vocabulary = {self.vocabulary.size:,} pieces: {self.vocabulary.reason}")
        for choice in self.choices:
            value = self.shape.describe() if choice.key == MODEL else choice.value
            lines.append(f"{choice.key} = {value}: {choice.reason}")
        return lines

    def to_json(self) -> str:
        """The plan as JSON (`Plan.from_json` reads it back)."""
        data = dataclasses.asdict(self)
        # A key as its dotted name.
        data["choices"] = [{**vars(choice), "key": str(choice.key)} for choice in self.choices]
        return json.dumps(data, indent=2, sort_keys=False)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """Reads `to_json`'s output."""
        data = json.loads(text)
        return cls(
            budget=Budget(**data["budget"]),
            corpus=CorpusCounts(**data["corpus"]),
            speeds={name: Speed(**speed) for name, speed in data["speeds"].items()},
            shape=Shape.from_dict(data["shape"]),
            tokens=data["tokens"],
            updates=data["updates"],
            epochs=data["epochs"],
            choices=tuple(
                Choice(**{**choice, "key": ConfigKey.of(choice["key"])})
                for choice in data["choices"]
            ),
            measuring_seconds=data.get("measuring_seconds", 0.0),
            compiling_seconds=data.get("compiling_seconds", 0.0),
            vocabulary=VocabularyChoice(**data["vocabulary"]) if data.get("vocabulary") else None,
        )


# ---- The rules ---------------------------------------------------------------------------


def data_limit(epoch_tokens: float) -> float:
    """Non-embedding parameters worth training on a corpus of `epoch_tokens` per epoch."""
    return DATA_PARAMETERS * (epoch_tokens / REFERENCE_CORPUS_TOKENS) ** DATA_EXPONENT


def compute_limit(tokens_bought: float) -> float:
    """Non-embedding parameters that `tokens_bought` target tokens can train."""
    return tokens_bought / TOKENS_PER_PARAMETER


def tokens_bought(speed: Speed, budget: Budget, batch_tokens: int) -> float:
    """Target tokens a budget buys at `speed` (a time budget) or at `batch_tokens`."""
    if budget.seconds is not None:
        return speed.tokens_per_second * max(budget.seconds - speed.startup_seconds, 0.0)
    return budget.updates * speed.at_batch(batch_tokens)


def updates_bought(corpus: CorpusCounts, speed: Speed, budget: Budget, batch_tokens: int) -> float:
    """Updates a budget buys on `corpus`'s batches at `batch_tokens`.

    Under a time budget an update costs `speed.fixed_seconds`, plus the rest of a full
    batch's seconds in proportion to its tokens: an epoch's short batches (each bucket's
    last) train fewer tokens than the timing's full ones, but not in as much less time
    (on 1,500 pairs, where half the batches are short, 13 to 20% fewer updates than
    their tokens alone said; bench/RESULTS.md, "Vocabulary by the budget").
    """
    if budget.seconds is None:
        return float(budget.updates)
    seconds = seconds_per_update(corpus, speed, batch_tokens)
    return max(budget.seconds - speed.startup_seconds, 0.0) / seconds


def seconds_per_update(corpus: CorpusCounts, speed: Speed, batch_tokens: int) -> float:
    """An update's seconds on `corpus`'s batches, its epochs' short ones counted."""
    per_update = corpus.tokens_per_update(speed, batch_tokens)
    full = speed.at_batch(batch_tokens)
    full_seconds = full / max(speed.tokens_per_second, 1e-9)
    fixed = min(speed.fixed_seconds, full_seconds)
    return fixed + (full_seconds - fixed) * min(per_update / full, 1.0)


def purchase(
    corpus: CorpusCounts, speed: Speed, budget: Budget, batch_tokens: int
) -> tuple[float, float]:
    """The updates and the target tokens a budget buys on `corpus` at `speed`.

    Under a time budget, the updates of `updates_bought` and their tokens; under an update
    budget (or with nothing timed) the tokens of `tokens_bought`, and the updates they fill.
    """
    per_update = corpus.tokens_per_update(speed, batch_tokens)
    if budget.seconds is not None and speed.tokens_per_second:
        updates = updates_bought(corpus, speed, budget, batch_tokens)
        return updates, updates * per_update
    tokens = tokens_bought(speed, budget, batch_tokens)
    return float(budget.updates or tokens / per_update), tokens


def choose_shape(
    corpus: CorpusCounts, budget: Budget, speeds: Mapping[str, Speed]
) -> tuple[Shape, str]:
    """The largest shape under both the data and the compute limit (else the smallest).

    Returns:
        The shape, and the reason: both limits, and which one stopped the next shape.
    """
    allowed_by_data = data_limit(corpus.epoch_tokens)
    chosen, stopped = SHAPES[0], ""
    for shape in SHAPES:
        speed = speeds.get(shape.name)
        if speed is None:
            stopped = f"{shape.name} was not measured"
            break
        allowed = compute_limit(tokens_bought(speed, budget, REFERENCE_BATCH_TOKENS))
        if shape.parameters > allowed_by_data or shape.parameters > allowed:
            which = "data" if shape.parameters > allowed_by_data else "compute"
            stopped = f"{shape.name} ({shape.parameters / 1e6:.1f}M) is over the {which} limit" + (
                f" ({allowed / 1e6:.1f}M for the tokens it buys)" if which == "compute" else ""
            )
            break
        chosen = shape
    reason = (
        f"the data limit allows {allowed_by_data / 1e6:.1f}M parameters for "
        f"{corpus.epoch_tokens / 1e6:.2f}M tokens per epoch, the compute limit 1 parameter "
        f"per {TOKENS_PER_PARAMETER:g} target tokens bought"
    )
    if stopped:
        reason += f"; {stopped}"
    return chosen, reason


def choose_batch_tokens(tokens: float, memory_limit: int = MAX_BATCH_TOKENS) -> int:
    """The power of two nearest to `REFERENCE_BATCH_TOKENS * (tokens / T_ref) ** (1/3)`.

    Args:
        tokens: Target tokens the budget buys.
        memory_limit: The most batch tokens the machine's memory holds.
    """
    ideal = REFERENCE_BATCH_TOKENS * (tokens / REFERENCE_TOKENS_BOUGHT) ** BATCH_EXPONENT
    power = 2 ** round(math.log2(max(ideal, 1.0)))
    return int(min(max(power, MIN_BATCH_TOKENS), max(memory_limit, MIN_BATCH_TOKENS)))


def batch_tokens_for_updates(updates: int, fill: float, memory_limit: int) -> int:
    """The batch of an update budget: where `choose_batch_tokens(updates * fill * B) = B`.

    B = R * (updates * fill * B / T_ref) ** e solves to B = (R * (updates * fill /
    T_ref) ** e) ** (1 / (1 - e)), R and T_ref the reference batch and purchase.
    """
    e = BATCH_EXPONENT
    ideal = (REFERENCE_BATCH_TOKENS * (updates * fill / REFERENCE_TOKENS_BOUGHT) ** e) ** (
        1 / (1 - e)
    )
    return choose_batch_tokens(
        REFERENCE_TOKENS_BOUGHT * (ideal / REFERENCE_BATCH_TOKENS) ** (1 / e), memory_limit
    )


def batch_tokens_in_memory(shape: Shape, vocab_size: int, memory_bytes: int) -> int:
    """The most batch tokens, a power of two, whose activations fit in a share of memory.

    The share is `MEMORY_SHARE` of `memory_bytes`. Per token: each block keeps about
    16 * d_model + 3 * ffn_dim activations for the backward pass (4 bytes each, to be
    safe), and the output layer 12 bytes per vocabulary entry (logits, their softmax and
    gradient).
    """
    blocks = shape.encoder_layers + shape.decoder_layers
    per_token = blocks * (16 * shape.d_model + 3 * shape.ffn_dim) * 4 + 12 * vocab_size
    tokens = int(MEMORY_SHARE * memory_bytes / per_token)
    return max(MIN_BATCH_TOKENS, min(MAX_BATCH_TOKENS, 2 ** max(tokens.bit_length() - 1, 0)))


def choose_dropout(epochs: float) -> float:
    """Dropout for `epochs` passes over the data, in steps of 0.05.

    0.1 from 2 to 20 epochs (D18); rising with log(epochs) to 0.3 at
    80 epochs (an hour of Multi30k on a 2-core CPU); falling to 0 as epochs fall below 2
    (data seen about once cannot be memorized).
    """
    if epochs < 2:
        value = 0.1 * epochs / 2
    else:
        value = 0.1 + 0.2 * min(max(math.log(epochs / 20) / math.log(4), 0.0), 1.0)
    return round(round(value / 0.05) * 0.05, 2)


def speed_decides_something(given: Given) -> bool:
    """Whether a measured speed could change the plan.

    It can when a value that depends on what the budget buys is unset. Subword sampling
    depends on nothing: off, or at a constant strength; the checkpoint cadence follows
    a speed where one is timed, but is no reason to time one.
    """
    unset = {f.name for f in dataclasses.fields(given) if getattr(given, f.name) is None}
    return bool(unset - {"subword_nbest", "subword_alpha", "checkpoint_every_steps"})


def choose_learning_rate(d_model: int) -> float:
    """The peak learning rate: the narrow model's, scaled by (128 / d_model) ** 0.75."""
    return float(f"{REFERENCE_LEARNING_RATE * (REFERENCE_WIDTH / d_model) ** 0.75:.2g}")


def warmup_updates(d_model: int) -> float:
    """Warmup updates of a width: 80 per 128 of width."""
    return REFERENCE_WARMUP_UPDATES * d_model / REFERENCE_WIDTH


def choose_warmup_fraction(d_model: int, updates: int) -> float:
    """`warmup_updates` as a fraction of the run's updates, within [0.05, 0.25]."""
    return round(min(max(warmup_updates(d_model) / max(updates, 1), 0.05), 0.25), 3)


def choose_eval_every(budget: Budget, updates: int) -> int:
    """0 (once, at the end) for short budgets, else about 8 validations per run."""
    short = (
        budget.seconds < VALIDATE_ONCE_UNDER_SECONDS
        if budget.seconds is not None
        else updates < 4000
    )
    if short:
        return 0
    return max(100, round(updates / VALIDATIONS_PER_RUN / 100) * 100)


def choose_checkpoint_every(budget: Budget, updates: int) -> int:
    """Updates between checkpoints: `CHECKPOINT_SECONDS` of the planned pace, in hundreds.

    At least `MIN_CHECKPOINT_UPDATES`; that alone where the pace is unknown (an update
    budget, or nothing timed). A fixed cadence saved every few seconds on a GPU, a tenth
    of a short run (decision D22).
    """
    if budget.seconds is None or updates <= 0:
        return MIN_CHECKPOINT_UPDATES
    per_minute = updates * CHECKPOINT_SECONDS / budget.seconds
    return max(MIN_CHECKPOINT_UPDATES, round(per_minute / 100) * 100)


def choose_fine_tuning_eval_every(budget: Budget, updates: int) -> int:
    """Updates between a fine-tuning run's validations: `FINE_TUNING_VALIDATIONS` at least.

    Whatever the budget (and once before the first update): small in-domain corpora
    overfit fast, and the best validated model is the one kept.
    """
    regular = choose_eval_every(budget, updates) or updates  # 0: once, at the end
    return max(1, min(regular, updates // FINE_TUNING_VALIDATIONS))


# ---- The plan ----------------------------------------------------------------------------


def _choice(key: ConfigKey, fixed: PlanValue | None, value: PlanValue, reason: str) -> Choice:
    """The user's value ("set by you") when they fixed one, else the rule's."""
    if fixed is not None:
        return Choice(key, fixed, "set by you", planned=False)
    return Choice(key, value, reason)


def _shape_choice(
    corpus: CorpusCounts, budget: Budget, speeds: Mapping[str, Speed], given: Given
) -> tuple[Shape, Choice]:
    if given.shape is not None:
        return given.shape, Choice(MODEL, given.shape.name, given.shape_reason, planned=False)
    shape, reason = choose_shape(corpus, budget, speeds)
    return shape, Choice(MODEL, shape.name, reason)


def _batch_choice(budget: Budget, speed: Speed, given: Given, memory: int) -> Choice:
    if given.batch_tokens is not None:
        return _choice(BATCH_TOKENS, given.batch_tokens, 0, "")
    if budget.seconds is not None:
        batch = choose_batch_tokens(tokens_bought(speed, budget, batch_tokens=0), memory)
    else:
        fill = speed.tokens_per_update / speed.batch_tokens
        batch = batch_tokens_for_updates(budget.updates, fill, memory)
    return Choice(
        BATCH_TOKENS,
        batch,
        f"{REFERENCE_BATCH_TOKENS:,} x (tokens bought / {REFERENCE_TOKENS_BOUGHT / 1e6:g}M) "
        f"** {BATCH_EXPONENT:.2g}, the nearest power of two (memory allows {memory:,})",
    )


def _training_choices(
    given: Given, budget: Budget, epochs: float, width: int, updates: int
) -> tuple[Choice, ...]:
    """What follows from the epochs, the width and the updates the budget buys."""
    if given.fine_tuning:
        return _fine_tuning_choices(given, budget, epochs, width, updates)
    warmup = warmup_updates(width)
    return (
        _choice(
            DROPOUT,
            given.dropout,
            *_student_dropout(
                given,
                choose_dropout(epochs),
                f"{epochs:,.1f} epochs: 0.1 from 2 to 20 epochs, up to 0.3 at 80, down to 0 "
                "below 2",
            ),
        ),
        *_sampling_choices(given),
        _choice(
            PEAK_LEARNING_RATE,
            given.peak_learning_rate,
            choose_learning_rate(width),
            f"{REFERENCE_LEARNING_RATE} x ({REFERENCE_WIDTH} / d_model {width}) ** 0.75",
        ),
        _choice(
            WARMUP_FRACTION,
            given.warmup_fraction,
            choose_warmup_fraction(width, updates),
            f"{warmup:.0f} warmup updates of {updates:,}, within [0.05, 0.25]",
        ),
        _label_smoothing_choice(given),
        _choice(
            EVAL_EVERY_STEPS,
            given.eval_every_steps,
            choose_eval_every(budget, updates),
            "validate once at the end under 20 minutes, else about 8 times",
        ),
    )


def _student_dropout(given: Given, dropout: float, why: str) -> tuple[float, str]:
    """`dropout` and `why`; for a distillation's student, at most `STUDENT_MAX_DROPOUT`."""
    if not given.student:
        return dropout, why
    return min(dropout, STUDENT_MAX_DROPOUT), (
        f"{why}; a student, at most {STUDENT_MAX_DROPOUT} (a teacher's translations need less "
        "regularizing than references; a control on the references keeps it: only its data "
        "differ)"
    )


def _sampling_choices(given: Given) -> tuple[Choice, ...]:
    """Subword sampling (off unless set) and, when it is on, its strength."""
    nbest = _choice(
        SUBWORD_NBEST,
        given.subword_nbest,
        0,
        "off at every budget: beside the epochs' dropout it gained nothing at any corpus "
        "size or budget tried",
    )
    if int(nbest.value) <= 1:
        return (nbest,)
    alpha = _choice(SUBWORD_ALPHA, given.subword_alpha, SAMPLING_ALPHA, "with sampling on")
    return nbest, alpha


def _label_smoothing_choice(given: Given) -> Choice:
    return _choice(
        LABEL_SMOOTHING, given.label_smoothing, DEFAULT_LABEL_SMOOTHING, "the paper's value"
    )


def _fine_tuning_choices(
    given: Given, budget: Budget, epochs: float, width: int, updates: int
) -> tuple[Choice, ...]:
    """`_training_choices` for continuing a trained model (`FINE_TUNING_*`)."""
    scratch = choose_learning_rate(width)
    scale = CUT_MODEL_LEARNING_RATE_SCALE if given.cut else FINE_TUNING_LEARNING_RATE_SCALE
    rate = float(f"{scratch * scale:.2g}")
    why = (
        "a model cut from a larger one starts further from converged"
        if given.cut
        else "a converged model continues near the end of its schedule"
    )
    dropout, dropout_why = _student_dropout(
        given,
        max(choose_dropout(epochs), FINE_TUNING_MIN_DROPOUT),
        f"fine-tuning, {epochs:,.1f} epochs: the epochs rule, at least "
        f"{FINE_TUNING_MIN_DROPOUT} (pretraining's usual rate)",
    )
    return (
        _choice(DROPOUT, given.dropout, dropout, dropout_why),
        *_sampling_choices(given),
        _choice(
            PEAK_LEARNING_RATE,
            given.peak_learning_rate,
            rate,
            f"fine-tuning: {scale} x the from-scratch {scratch} ({why})",
        ),
        _choice(
            WARMUP_FRACTION,
            given.warmup_fraction,
            FINE_TUNING_WARMUP_FRACTION,
            "fine-tuning: the shortest warmup (only Adam's moments start afresh)",
        ),
        _label_smoothing_choice(given),
        _choice(
            EVAL_EVERY_STEPS,
            given.eval_every_steps,
            choose_fine_tuning_eval_every(budget, updates),
            f"fine-tuning: the model's own score first, then at least "
            f"{FINE_TUNING_VALIDATIONS} validations; the best model is kept",
        ),
    )


def make_plan(
    corpus: CorpusCounts,
    budget: Budget,
    speeds: Mapping[str, Speed],
    *,
    given: Given | None = None,
    memory_batch_tokens: Mapping[str, int] | None = None,
    measuring_seconds: float = 0.0,
    compiling_seconds: float = 0.0,
    batch_speeds: Mapping[tuple[str, int], Speed] | None = None,
    vocabulary: VocabularyTrade | None = None,
) -> Plan:
    """Applies the rules, keeping what the user fixed.

    The shape comes first (it sets the speed), then the batch (it sets the updates),
    then what depends on the epochs, the width and the updates. The shape and the batch
    are chosen on the speeds of `speeds` (each shape timed at one batch size); the
    tokens, updates and epochs bought are then those of the chosen batch's own speed
    when `batch_speeds` has it: on a CPU a token costs more time in a smaller batch.

    Args:
        corpus: The training corpus' counts.
        budget: The run's budget (already net of the measuring time).
        speeds: Speeds per shape name (`SHAPES`, and "yours" for a user-set shape).
        given: Settings the user fixed.
        memory_batch_tokens: The most batch tokens the machine's memory holds, per shape
            name (missing: `MAX_BATCH_TOKENS`).
        measuring_seconds: Time spent measuring, to report.
        compiling_seconds: Time the measuring spent compiling ahead (outside the
            budget), to report.
        batch_speeds: Speeds timed at other batch sizes, by (shape name, batch tokens);
            the chosen shape's at the chosen batch is used (and the plan's `speeds` then
            holds it), any other is ignored.
        vocabulary: The run's vocabulary, to size by the budget or keep (None: not
            weighed; the plan names no vocabulary).

    Returns:
        The `Plan`.
    """
    given = given or Given()
    shape, shape_choice = _shape_choice(corpus, budget, speeds, given)
    speed = speeds[shape.name]
    memory = (memory_batch_tokens or {}).get(shape.name, MAX_BATCH_TOKENS)
    batch_choice = _batch_choice(budget, speed, given, memory)
    batch = int(batch_choice.value)
    if budget.seconds is not None and (shape.name, batch) in (batch_speeds or {}):
        speed = batch_speeds[shape.name, batch]
        speeds = {**speeds, shape.name: speed}
    bought, tokens = purchase(corpus, speed, budget, batch)
    updates = int(bought)
    epochs = tokens / corpus.epoch_tokens
    choices = (
        shape_choice,
        batch_choice,
        *_training_choices(given, budget, epochs, shape.d_model, updates),
        _choice(
            CHECKPOINT_EVERY_STEPS,
            given.checkpoint_every_steps,
            choose_checkpoint_every(budget, updates),
            f"about {CHECKPOINT_SECONDS} s of updates, at least {MIN_CHECKPOINT_UPDATES:,}",
        ),
    )
    return Plan(
        budget,
        corpus,
        dict(speeds),
        shape,
        tokens,
        updates,
        epochs,
        choices,
        measuring_seconds,
        compiling_seconds,
        _vocabulary_choice(corpus, budget, speed, shape, vocabulary),
    )


def _vocabulary_choice(
    corpus: CorpusCounts,
    budget: Budget,
    speed: Speed,
    shape: Shape,
    trade: VocabularyTrade | None,
) -> VocabularyChoice | None:
    """The vocabulary's size by the budget (`training.planning.vocabulary`), or the run's.

    A size's epochs: the measured speed scaled by a token's cost (timed at two sizes, or
    FLOPs), the corpus' pieces by `pieces_at`. A kept vocabulary says what the budget would choose.
    """
    if trade is None:
        return None
    if budget.seconds is None or not speed.tokens_per_second:
        reason = trade.fixed or "the data limit (an update budget: nothing timed to weigh it by)"
        return VocabularyChoice(trade.size, reason, planned=trade.fixed is None)
    seconds = max(budget.seconds - speed.startup_seconds, 0.0)
    pieces = corpus.epoch_tokens - corpus.pairs  # (+ EOS per pair, whatever the size)

    def epochs_at(size: int) -> float:
        rate = speed.tokens_per_second * trade.cost(shape, trade.size) / trade.cost(shape, size)
        return rate * seconds / (pieces_at(pieces, size, trade.size) + corpus.pairs)

    chosen = choose_budget_vocab_size(
        epochs_at,
        trade.size,
        lambda size: trade.output_share(shape, size),
        trade.basis,
        lambda size: trade.cost(shape, trade.size) / trade.cost(shape, size),
    )
    if trade.fixed is None:
        return chosen
    # Advice only from timed sizes: FLOPs mislead (bench/RESULTS.md).
    advise = chosen.size != trade.size and trade.timed
    advice = f"; the budget would choose {chosen.size:,} ({trade.basis})" if advise else ""
    return VocabularyChoice(trade.size, trade.fixed + advice, planned=False)
