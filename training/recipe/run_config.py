"""The training config of a recipe run, built typed, and what its plan keeps.

The default config with the user's `--set`, then the corpus, the vocabulary and the
budget of the recipe, but for the keys the user set (theirs win).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from training.config import DATA, TRAIN, ConfigKey, RunConfig, TrainCorpus
from training.planning.lifecycle import PlanRequest
from training.recipe.corpus import RecipeCorpus
from training.recipe.settings import RecipePaths, RecipeSettings, TrainFiles, one_plain_pair
from training.recipe.vocab import vocabulary_kept

# A section's fields the recipe sets, by name.
Fields = dict[str, str | float | tuple[TrainCorpus, ...]]


def run_request(
    paths: RecipePaths,
    settings: RecipeSettings,
    corpus: RecipeCorpus,
    prepared: Path | None = None,
) -> tuple[RunConfig, PlanRequest]:
    """The run config and its plan request (training on `prepared`, when given).

    Raises:
        ConfigError: a bad `--set`, naming its key.
    """
    config, user = settings.config.config, settings.config.set_keys
    sections = {DATA: _data_fields(paths, corpus, prepared), TRAIN: _train_fields(settings)}
    for section, fields in sections.items():
        kept = {name: v for name, v in fields.items() if not section.child(name).within(user)}
        config = _replace_section(config, section, kept)
    recipe_keys = frozenset(
        section.child(name) for section, fields in sections.items() for name in fields
    )
    kept = vocabulary_kept(paths, settings)
    request = PlanRequest(
        keys=settings.config.keys | recipe_keys,
        set_keys=user | recipe_keys,
        cache_dir=paths.workdir,
        vocabulary=kept.choice.reason,
        measured_seconds=kept.measuring_seconds,
        known_speeds=kept.known_speeds,
    )
    return config, request


def _data_fields(paths: RecipePaths, corpus: RecipeCorpus, prepared: Path | None) -> Fields:
    """The corpus (its files, or prepared), the validation set, the vocabulary (`data.*`)."""
    train = _corpus_fields(corpus.train)
    if prepared is not None:
        train = {"train_source": "", "train_target": "", "train": (), "prepared": str(prepared)}
    fields: Fields = {
        **train,
        "valid_source": str(corpus.valid[0]),
        "valid_target": str(corpus.valid[1]),
        "source_lang": corpus.source_lang,
        "target_lang": corpus.target_lang,
    }
    if corpus.valid_tag:
        fields["valid_tag"] = corpus.valid_tag
    fields["vocabulary"] = str(paths.vocabulary)
    return fields


def _corpus_fields(train: tuple[TrainFiles, ...]) -> Fields:
    """The training data: one pair of files, or `data.train`, a weighted list."""
    if one_plain_pair(train):
        return {"train_source": str(train[0].source), "train_target": str(train[0].target)}
    corpora = tuple(TrainCorpus(str(c.source), str(c.target), c.weight, c.tag) for c in train)
    return {"train_source": "", "train_target": "", "train": corpora}


def _train_fields(settings: RecipeSettings) -> Fields:
    """The budget, and the model to fine-tune (`train.*`)."""
    fields: Fields = {"max_minutes": float(settings.minutes)}
    if settings.init_from is not None:
        fields["init_from"] = str(settings.init_from)
    return fields


def _replace_section(config: RunConfig, section: ConfigKey, fields: Fields) -> RunConfig:
    """`config` with fields of one top-level section replaced."""
    (name,) = section.path
    return dataclasses.replace(
        config, **{name: dataclasses.replace(getattr(config, name), **fields)}
    )
