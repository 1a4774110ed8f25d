"""The config reference lists every key of the dataclasses, with a meaning, and works."""

import dataclasses

from tests.support.cli import translator
from tests.support.paths import REPO
from training.config import RunConfig, load_config
from training.config_reference import field_comments, keys, reference


def test_docs_config_md_is_the_generated_reference():
    # Regenerate with: python -m training.config_reference > docs/config.md
    assert (REPO / "docs" / "config.md").read_text("utf-8") == reference()


def test_every_key_has_a_meaning_and_its_default_is_what_the_config_holds():
    listed = list(keys())
    assert all(key.meaning for key in listed), [k.path for k in listed if not k.meaning]
    defaults = RunConfig()
    plain = [k for k in listed if "[]" not in k.path and "overrides." not in k.path]
    assert len(plain) > 40
    for key in plain:
        value = defaults
        for part in key.path.split("."):
            value = getattr(value, part)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            # Setting a key to its listed default through --set changes nothing.
            setting = "''" if key.default == '""' else key.default
            assert load_config(None, [f"{key.path}={setting}"]) == defaults, key.path


def test_every_field_of_every_section_is_listed():
    listed = {key.path for key in keys()}
    for section in dataclasses.fields(RunConfig):
        for name in field_comments(type(getattr(RunConfig(), section.name))):
            assert f"{section.name}.{name}" in listed or name == "pipeline", name
    pipeline = {key.path for key in keys() if key.path.startswith("data.pipeline.")}
    assert len(pipeline) == len(dataclasses.fields(RunConfig().data.pipeline))
    assert "model.overrides.d_model" in listed and "data.train[].weight" in listed


def test_train_help_config_prints_the_reference():
    result = translator("train", "--help-config")
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference()
