import re

import pytest

from training.config import DEFAULT_CONFIG, ConfigError, RunConfig, dump_config, load_config


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_default_recipe_loads_and_round_trips(tmp_path):
    config = load_config(DEFAULT_CONFIG)
    assert config.model.preset == "small" and config.optimizer.schedule == "budgeted"
    assert config.data.pipeline.batch_tokens == 4096
    assert config.optimizer.beta_2 == 0.98 and config.optimizer.epsilon == 1e-9
    assert config.optimizer.label_smoothing == 0.1
    out = tmp_path / "again.yaml"
    dump_config(config, out)
    assert load_config(out) == config


def test_overrides_are_typed_and_nested(tmp_path):
    config = load_config(
        DEFAULT_CONFIG,
        [
            "optimizer.warmup_steps=123",
            "train.max_minutes=2.5",
            "data.pipeline.batch_tokens=1024",
            "model.overrides.position_encoding=rotary",
            "eval.bleu=false",
        ],
    )
    assert config.optimizer.warmup_steps == 123
    assert config.train.max_minutes == 2.5
    assert config.data.pipeline.batch_tokens == 1024
    assert config.model.overrides["position_encoding"] == "rotary"
    assert config.eval.bleu is False
    assert config.model.transformer_config(100, 100).position_encoding == "rotary"


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        (
            "optimizer: {warmpu_steps: 10}",
            [],
            r"optimizer\.warmpu_steps: unknown key; did you mean 'warmup_steps'",
        ),
        ("trian: {}", [], r"trian: unknown key"),
        (
            "optimizer: {warmup_steps: ten}",
            [],
            r"optimizer\.warmup_steps: expected an integer, got 'ten'",
        ),
        ("train: {strategy: gpu}", [], r"train\.strategy: must be one of auto, one_device"),
        ("data: {pipeline: {batch_tokens: 0}}", [], r"data\.pipeline: .*batch_tokens must be >= 1"),
        (
            "",
            ["data.pipeline.bucket_widht=8"],
            r"data\.pipeline\.bucket_widht: unknown key; did you mean 'bucket_width'",
        ),
        ("", ["eval.every_steps"], r"--set expects key=value"),
        (
            "",
            ["model.overrides.d_model=[128, 256]"],
            r"model\.overrides\.d_model: expected true or false or an integer or a number or a "
            r"string, got \[128, 256\]",
        ),
        ("- a\n- b", [], r"top level must be a mapping"),
    ],
)
def test_errors_name_the_offending_key(tmp_path, text, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), overrides)


def test_bad_model_override_is_named_when_building_the_model():
    config = load_config(None, ["model.overrides.num_haeds=4"])
    with pytest.raises(ValueError, match="num_haeds"):
        config.model.transformer_config(100, 100)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"config file not found: .*nope\.yaml"):
        load_config(tmp_path / "nope.yaml")


def test_defaults_are_the_paper_optimizer():
    config = RunConfig()
    assert (config.optimizer.beta_1, config.optimizer.beta_2) == (0.9, 0.98)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.every_steps=-1", "eval.every_steps: must be >= 0, got -1"),
        ("train.max_minutes=-5", "train.max_minutes: must be >= 0, got -5"),
        ("train.max_steps=-1", "train.max_steps: must be >= 0, got -1"),
        ("checkpoint.every_steps=0", "checkpoint.every_steps: must be >= 1, got 0"),
        ("checkpoint.keep_last=0", "checkpoint.keep_last: must be >= 1, got 0"),
        ("optimizer.warmup_steps=0", "optimizer.warmup_steps: must be >= 1, got 0"),
        ("optimizer.warmup_fraction=1", "optimizer.warmup_fraction: must be < 1, got 1"),
        ("optimizer.peak_learning_rate=0", "optimizer.peak_learning_rate: must be > 0"),
        ("optimizer.label_smoothing=-0.1", "optimizer.label_smoothing: must be >= 0"),
        ("model.overrides.dropout=1.0", "model.overrides.dropout: must be in [0, 1), got 1.0"),
        ("model.overrides.dropout=-0.1", "model.overrides.dropout: must be in [0, 1)"),
        ("data.pipeline.batch_tokens=0", "batch_tokens must be >= 1, got 0"),
    ],
)
def test_a_value_out_of_range_is_one_error_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


def test_a_float_in_exponent_notation_is_a_number_not_a_string():
    # YAML 1.1 reads "1e-9" (no dot) as a string; a user typing it means the number.
    config = load_config(None, ["optimizer.epsilon=1e-9", "optimizer.peak_learning_rate=3E-3"])
    assert (config.optimizer.epsilon, config.optimizer.peak_learning_rate) == (1e-9, 0.003)
    message = "optimizer.epsilon: expected a number, got 'e-9'"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, ["optimizer.epsilon=e-9"])
