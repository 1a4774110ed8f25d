"""The run config: one frozen, typed section per concern, loaded from YAML.

`load_config(path, overrides=["optimizer.warmup_steps=4000"])` reads a YAML file,
applies `--set key=value` overrides and validates every key and value, naming the
offending key (`optimizer.warmpu_steps: unknown key; did you mean 'warmup_steps'?`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from translator.config import DROPOUT_FIELDS, TransformerConfig, dropout_problem
from translator.constants import DEFAULT_LABEL_SMOOTHING
from translator.errors import ConfigError, FieldError, check_ranges
from translator.pipelines.config import PipelineConfig

# A number in exponent notation, which YAML 1.1 (PyYAML) reads as a string without a dot.
# The run config `translator train` starts from: Multi30k EN->DE, everything else planned.
DEFAULT_CONFIG = Path(__file__).parent / "configs" / "multi30k_en_de.yaml"
# The resolved config a run writes into its directory (and a resume reads back).
RUN_CONFIG_FILE = "config.yaml"
FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
Strategy = Literal["auto", "one_device", "mirrored", "multi_worker", "tpu"]
Precision = Literal["auto", "float32", "mixed_bfloat16", "mixed_float16"]
Backend = Literal["auto", "tensorflow", "jax"]
# A value a key of the run config may hold (a section's leaf, or a `model.overrides` entry).
ConfigValue = bool | int | float | str


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """Which Transformer to train."""

    # A `TransformerConfig` preset: tiny, small, base or big.
    preset: str = "small"
    # Any `TransformerConfig` field, e.g. {num_encoder_layers: 4, position_encoding: rotary}.
    # Vocabulary sizes come from the vocabulary, not from here.
    overrides: dict[str, ConfigValue] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in DROPOUT_FIELDS:
            if problem := dropout_problem(self.overrides.get(name, 0.0)):
                raise FieldError(f"overrides.{name}", problem)

    def transformer_config(
        self, source_vocab_size: int, target_vocab_size: int
    ) -> TransformerConfig:
        """The `TransformerConfig` for vocabularies of the given sizes."""
        fields = dict(self.overrides)
        fields.setdefault("share_embeddings", source_vocab_size == target_vocab_size)
        return TransformerConfig.preset(
            self.preset,
            source_vocab_size=source_vocab_size,
            target_vocab_size=target_vocab_size,
            **fields,
        )


@dataclasses.dataclass(frozen=True)
class TrainCorpus:
    """One training corpus of a weighted mix (an item of `data.train`)."""

    # Source and target text files, aligned line by line (plain or .gz).
    source: str = ""
    target: str = ""
    # Its share of the drawn pairs, relative to the other corpora's weights. Must be > 0:
    # to leave a corpus out, remove it from the list.
    weight: float = 1.0
    # Prepended to its source sentences as one piece, e.g. <bt> (back-translated) or <2de>
    # (a target language); a tag of the vocabulary (`build-vocab --user-symbols`). "": none.
    tag: str = ""


@dataclasses.dataclass(frozen=True)
class DataSection:
    """Where the corpus and the vocabulary are (paths relative to the working directory)."""

    # Training source and target text files, one sentence per line (plain or .gz).
    train_source: str = ""
    train_target: str = ""
    # Several training corpora, mixed by weight, instead of train_source/train_target.
    train: tuple[TrainCorpus, ...] = ()
    # A prepared corpus (`translator data prepare`) instead of the training text files:
    # tokenized once, read with numpy (no TensorFlow), batched as the pipeline batches;
    # the validation set prepared with it (`--valid`: DIR/valid) gives the validation loss.
    prepared: str = ""
    # Validation files for loss and BLEU; empty to train without validation.
    valid_source: str = ""
    valid_target: str = ""
    # Prepended to the validation sources as training tags a corpus (e.g. <2de>, the
    # direction to validate of a multilingual model); "": none.
    valid_tag: str = ""
    # The source language's code (en, de, zh, ...): whose rules split a paragraph into
    # sentences when the model translates. "": the suffix of train_source (train.en.gz).
    source_lang: str = ""
    # The target language's code (de, zh, ja, ...): BLEU's tokenizer for validation and
    # reports, as sacreBLEU chooses it (zh, ja-mecab, ko-mecab, else 13a). "": 13a.
    target_lang: str = ""
    # A directory written by `translator build-vocab`.
    vocabulary: str = ""
    # Tokenization, filtering, batching (batch_tokens is per replica).
    pipeline: PipelineConfig = dataclasses.field(default_factory=PipelineConfig)

    def corpora(self) -> tuple[TrainCorpus, ...]:
        """The training corpora: `train`, or the one pair of train_source/train_target.

        None with a prepared corpus: it holds the tokenized pairs, not text files.
        """
        if self.prepared:
            return ()
        if self.train:
            return self.train
        return (TrainCorpus(self.train_source, self.train_target),)

    def is_mix(self) -> bool:
        """True when training draws from several corpora, or tags one."""
        return len(self.corpora()) > 1 or any(corpus.tag for corpus in self.corpora())


@dataclasses.dataclass(frozen=True)
class OptimizerSection:
    """Adam, its learning-rate schedule, and the loss."""

    # budgeted: warm up, then anneal to ~0 exactly where the step or time budget ends
    #   (the end is re-estimated from the measured step time under train.max_minutes).
    # inverse_sqrt: the paper's schedule, which never ends (open-ended training).
    schedule: Literal["budgeted", "inverse_sqrt"] = "budgeted"
    # budgeted: the learning rate at the end of the warmup.
    peak_learning_rate: float = 0.002
    # budgeted: share of the run spent warming up linearly.
    warmup_fraction: float = 0.05
    # budgeted: shape of the cool-down from the peak to the end value.
    decay: Literal["linear", "cosine"] = "linear"
    # budgeted: the end value as a fraction of the peak.
    final_learning_rate_fraction: float = 0.0
    # inverse_sqrt: multiplier of lr = scale * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5).
    learning_rate_scale: float = 2.0
    # inverse_sqrt: steps of linear warmup before the inverse-square-root decay.
    warmup_steps: int = 4000
    # Adam's beta_1, beta_2 and epsilon (the paper: 0.9, 0.98, 1e-9).
    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    # Clip gradients to this global norm (over all replicas); 0 = no clipping.
    clip_norm: float = 0.0
    # Micro-batches whose gradients are averaged into one update (1 = none).
    accumulation_steps: int = 1
    # Label smoothing of the cross-entropy (the paper: 0.1).
    label_smoothing: float = DEFAULT_LABEL_SMOOTHING

    def __post_init__(self) -> None:
        if not self.peak_learning_rate > 0:
            raise FieldError("peak_learning_rate", f"must be > 0, got {self.peak_learning_rate}")
        check_ranges(
            self,
            {
                "warmup_fraction": (0, 1),
                "final_learning_rate_fraction": (0, 1.0000001),
                "learning_rate_scale": (0, None),
                "warmup_steps": (1, None),
                "clip_norm": (0, None),
                "accumulation_steps": (1, None),
                "label_smoothing": (0, 1),
            },
        )


@dataclasses.dataclass(frozen=True)
class TrainSection:
    """How long, where and in which precision to train."""

    # Stop after this many optimizer updates.
    max_steps: int = 100_000
    # Also stop after this much wall time (minutes, validation included); 0 = no limit.
    max_minutes: float = 0.0
    # Seed of weights initialization, dropout and data shuffling.
    seed: int = 1234
    # The Keras backend that trains: tensorflow (tf.distribute, SavedModel's own) or jax
    # (XLA; GPUs and TPUs set up for JAX). auto: KERAS_BACKEND, else tensorflow. Set, it
    # wins over KERAS_BACKEND. Either backend's model works with every command.
    backend: Backend = "auto"
    # auto: TPU if one is configured, else mirrored over GPUs if > 1, else one device.
    strategy: Strategy = "auto"
    # auto: mixed_float16 on GPU, mixed_bfloat16 on TPU and on CPUs with native bfloat16
    # (AVX512-BF16 or AMX), float32 on other CPUs, where bfloat16 is slower.
    precision: Precision = "auto"
    # Training steps run per call into the graph: > 1 cuts Python overhead for small
    # models; callbacks and the progress bar then see every N-th step.
    steps_per_execution: int = 1
    # Compile the training step with XLA: only with static shapes (pipeline.static_shapes).
    jit_compile: bool = False
    # Start from this trained model's weights (a model directory, a run directory or a
    # .keras file): fine-tuning. The architecture and vocabulary must be the model's; the
    # optimizer, schedule and budget start fresh. Empty: random initialization.
    init_from: str = ""
    # Log a progress line (step, loss, learning rate, tokens/s, time) and write those
    # TensorBoard scalars every this many updates. On a terminal a progress bar against
    # the budget shows in between.
    log_every_steps: int = 100

    def __post_init__(self) -> None:
        check_ranges(
            self,
            {
                "max_steps": (0, None),
                "max_minutes": (0, None),
                "steps_per_execution": (1, None),
                "log_every_steps": (1, None),
            },
        )


@dataclasses.dataclass(frozen=True)
class EvalSection:
    """Validation: loss and BLEU of greedy translations."""

    # Validate every this many steps (and at the end); 0 = only at the end.
    every_steps: int = 1000
    # Translate the validation set and score it with sacreBLEU.
    bleu: bool = True
    # Translate at most this many validation sentences for BLEU (0 = all).
    max_sentences: int = 0
    # Stop when validation BLEU has not improved for this many validations (0 = never).
    early_stopping_patience: int = 0

    def __post_init__(self) -> None:
        rules = ("every_steps", "max_sentences", "early_stopping_patience")
        check_ranges(self, dict.fromkeys(rules, (0, None)))


@dataclasses.dataclass(frozen=True)
class CheckpointSection:
    """Checkpoints for resuming, and checkpoint averaging for the final model."""

    # Save every this many steps (and at the end); a plan sets it to about a minute's.
    every_steps: int = 500
    # Keep this many most recent checkpoints.
    keep_last: int = 5
    # The final model averages the weights of this many last checkpoints (0 or 1 = none;
    # under a plan's cadence they are about a minute apart: set every_steps with it).
    average_last: int = 0

    def __post_init__(self) -> None:
        check_ranges(
            self, {"every_steps": (1, None), "keep_last": (1, None), "average_last": (0, None)}
        )


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs."""

    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    data: DataSection = dataclasses.field(default_factory=DataSection)
    optimizer: OptimizerSection = dataclasses.field(default_factory=OptimizerSection)
    train: TrainSection = dataclasses.field(default_factory=TrainSection)
    eval: EvalSection = dataclasses.field(default_factory=EvalSection)
    checkpoint: CheckpointSection = dataclasses.field(default_factory=CheckpointSection)

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict, as written to the run directory's config.yaml."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One key of the run config by its path of fields, checked when made.

    `model.overrides` is a mapping: its entries are keys too (`model.overrides.dropout`).
    """

    path: tuple[str, ...]

    def __post_init__(self) -> None:
        node: Any = RunConfig
        for index, name in enumerate(self.path):
            if not dataclasses.is_dataclass(node):
                if node is dict or typing.get_origin(node) is dict:
                    return  # a mapping's entry: any name
                raise ConfigError(f"{'.'.join(self.path[:index])}: not a section")
            hints = typing.get_type_hints(node)
            if name not in hints:
                raise ConfigError(f"{'.'.join(self.path[: index + 1])}: unknown key")
            node = hints[name]

    @classmethod
    def of(cls, dotted: str) -> ConfigKey:
        """The key of `section.field` (`data.pipeline.batch_tokens`)."""
        return cls(tuple(dotted.split(".")))

    def child(self, name: str) -> ConfigKey:
        """The key `name` inside this one (`model.overrides` -> `model.overrides.dropout`)."""
        return ConfigKey((*self.path, name))

    def within(self, keys: typing.Collection[ConfigKey]) -> bool:
        """True when `keys` holds this key or a section that holds it."""
        return any(ConfigKey(self.path[:end]) in keys for end in range(1, len(self.path) + 1))

    def __str__(self) -> str:
        return ".".join(self.path)


@dataclasses.dataclass(frozen=True)
class Change:
    """A typed change of the run config: `key` set to `value`."""

    key: ConfigKey
    value: ConfigValue


def replace_value(config: RunConfig, key: ConfigKey, value: ConfigValue) -> RunConfig:
    """`config` with one key replaced (sections rebuilt with `dataclasses.replace`).

    Raises:
        ConfigError: naming the key, for a value out of its range.
    """

    def replaced(node: Any, path: tuple[str, ...]) -> Any:
        name, rest = path[0], path[1:]
        if isinstance(node, dict):
            return {**node, name: replaced(node.get(name), rest) if rest else value}
        child = replaced(getattr(node, name), rest) if rest else value
        return dataclasses.replace(node, **{name: child})

    try:
        return replaced(config, key.path)
    except FieldError as error:
        raise ConfigError(f"{key}: {error.message}") from None


def apply_changes(
    config: RunConfig, changes: typing.Iterable[Change], keep: typing.Collection[ConfigKey] = ()
) -> RunConfig:
    """`config` with each change made, but for the keys in `keep` (and their sections)."""
    for change in changes:
        if not change.key.within(keep):
            config = replace_value(config, change.key, change.value)
    return config


# The keys the planner and the recipe set, spelled once.
DATA = ConfigKey.of("data")
DATA_PREPARED = DATA.child("prepared")
DATA_VOCABULARY = DATA.child("vocabulary")
# The training corpus as text files: one pair, or a weighted list.
DATA_TEXT = (DATA.child("train"), DATA.child("train_source"), DATA.child("train_target"))
TRAIN = ConfigKey.of("train")
MODEL = ConfigKey.of("model")
MODEL_PRESET = ConfigKey.of("model.preset")
MODEL_OVERRIDES = ConfigKey.of("model.overrides")
DROPOUT = MODEL_OVERRIDES.child("dropout")
BATCH_TOKENS = ConfigKey.of("data.pipeline.batch_tokens")
SUBWORD_NBEST = ConfigKey.of("data.pipeline.subword_nbest")
SUBWORD_ALPHA = ConfigKey.of("data.pipeline.subword_alpha")
PEAK_LEARNING_RATE = ConfigKey.of("optimizer.peak_learning_rate")
WARMUP_FRACTION = ConfigKey.of("optimizer.warmup_fraction")
LABEL_SMOOTHING = ConfigKey.of("optimizer.label_smoothing")
EVAL_EVERY_STEPS = ConfigKey.of("eval.every_steps")
CHECKPOINT_EVERY_STEPS = ConfigKey.of("checkpoint.every_steps")
MAX_MINUTES = TRAIN.child("max_minutes")
INIT_FROM = TRAIN.child("init_from")


# ---- Loading and validation ------------------------------------------------------------


def load_config(path: str | Path | None, overrides: typing.Sequence[str] = ()) -> RunConfig:
    """Reads a YAML run config and applies `key.path=value` overrides.

    Args:
        path: A YAML file, or None for the defaults.
        overrides: `section.key=value` strings; values are parsed as YAML scalars.

    Raises:
        ConfigError: naming the file and the key for any unknown key or bad value.
    """
    return _built(raw_config(path, overrides), path)


def _built(raw: dict[str, Any], path: str | Path | None) -> RunConfig:
    """The checked `RunConfig` of a raw mapping; errors name the file, if any."""
    try:
        return build_section(RunConfig, raw, "")
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}" if path else str(error)) from None


def raw_config(path: str | Path | None, overrides: typing.Sequence[str] = ()) -> dict[str, Any]:
    """The YAML file's mapping with the `--set` overrides applied, not yet checked.

    Raises:
        ConfigError: a missing file, bad YAML, or a malformed override.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: not valid YAML: {error}") from error
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
    for override in overrides:
        _apply_override(raw, override)
    return raw


@dataclasses.dataclass(frozen=True)
class GivenConfig:
    """A run config as the command line reads it, once: the values and who set which key.

    The only place `--set` text is read (`read_config`); past the command line, code
    gets this and compares `ConfigKey`s.
    """

    # The config file's values with the command line's applied, checked.
    config: RunConfig
    # The keys the config file or the command line gave a value: a plan keeps them.
    keys: frozenset[ConfigKey] = frozenset()
    # Those the command line gave: they win over a saved plan when a run resumes.
    set_keys: frozenset[ConfigKey] = frozenset()

    def with_values(self, *changes: Change) -> GivenConfig:
        """With values a command's own options give (`--max-minutes`), as `--set` would."""
        keys = frozenset(change.key for change in changes)
        config = apply_changes(self.config, changes)
        return GivenConfig(config, self.keys | keys, self.set_keys | keys)


def read_config(path: str | Path | None, overrides: typing.Sequence[str] = ()) -> GivenConfig:
    """Reads a YAML run config with `key.path=value` overrides, and who set which key.

    Raises:
        ConfigError: naming the file and the key for any unknown key or bad value.
    """
    raw = raw_config(path, overrides)  # the file read once
    return GivenConfig(_built(raw, path), _keys_of(raw), _keys_of(raw_config(None, overrides)))


def explicit_keys(
    path: str | Path | None, overrides: typing.Sequence[str] = ()
) -> frozenset[ConfigKey]:
    """The keys the YAML file or the overrides give a value (what the user set).

    `model.overrides` entries count one by one (`model.overrides.dropout`).
    """
    return _keys_of(raw_config(path, overrides))


def _keys_of(raw: dict[str, Any]) -> frozenset[ConfigKey]:
    """The keys a raw mapping gives a value (`explicit_keys`)."""

    def walk(node: dict[str, Any], prefix: str) -> typing.Iterator[str]:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                yield from walk(value, name + ".")
            else:
                yield name

    return frozenset(ConfigKey.of(name) for name in walk(raw, ""))


def _apply_override(raw: dict[str, Any], override: str) -> None:
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key=value, got {override!r}")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as error:
        raise ConfigError(f"--set {key}: cannot parse value {text!r}: {error}") from error
    *parents, leaf = key.strip().split(".")
    node = raw
    for i, part in enumerate(parents):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parents[: i + 1])} is not a section")
        node = child
    node[leaf] = value


def build_section(cls: type, raw: Any, where: str) -> Any:
    """Builds dataclass `cls` from a mapping, checking every key and value type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in raw.items():
        name = f"{where}.{key}" if where else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = (
                f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(fields)}"
            )
            raise ConfigError(f"{name}: unknown key{hint}")
        values[key] = _check_value(hints[key], value, name)
    try:
        return cls(**values)
    except FieldError as error:  # a value out of its range: name its key
        name = f"{where}.{error.field}" if where else error.field
        raise ConfigError(f"{name}: {error.message}") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where or 'config'}: {error}") from None


# How an error names what a value should have been.
_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _check_value(hint: Any, value: Any, name: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return build_section(hint, value, name)
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(
                f"{name}: must be one of {', '.join(map(str, choices))}, got {value!r}"
            )
        return value
    if origin in (types.UnionType, typing.Union):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check_value(option, value, name)
            except ConfigError as error:
                errors.append(str(error))
        if len(errors) > 1:  # say every kind it may be
            kinds = " or ".join(_KINDS.get(option, str(option)) for option in options)
            raise ConfigError(f"{name}: expected {kinds}, got {value!r}")
        raise ConfigError(errors[0] if errors else f"{name}: bad value {value!r}")
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        _, item = typing.get_args(hint) or (str, Any)
        return {str(k): _check_value(item, v, f"{name}.{k}") for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        (item,) = {a for a in typing.get_args(hint) if a is not Ellipsis}
        return tuple(_check_value(item, v, f"{name}[{i}]") for i, v in enumerate(value))
    if hint is float:
        if isinstance(value, str) and FLOAT_TEXT.fullmatch(value.strip()):
            return float(value)  # "1e-9": YAML 1.1 reads a float without a dot as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if hint in (int, str, bool):
        if type(value) is not hint:
            raise ConfigError(f"{name}: expected {_KINDS[hint]}, got {value!r}")
        return value
    if hint is Any:
        return value
    raise ConfigError(f"{name}: unsupported config type {hint}")


def dump_config(config: RunConfig, path: str | Path) -> None:
    """Writes the resolved config as YAML (what `load_config` reads back)."""
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
