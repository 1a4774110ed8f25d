import pytest

from training.budgets import SETTINGS, setting_for
from training.cli import DEFAULT_CONFIG
from training.config import load_config
from training.recipe import RecipePaths, RecipeSettings, run_config


def test_each_budget_gets_the_setting_of_the_largest_budget_that_fits():
    budgets = sorted(setting.minutes for setting in SETTINGS)
    assert setting_for(budgets[0] / 2).minutes == budgets[0]  # shorter: the smallest
    for low, high in zip(budgets, [*budgets[1:], budgets[-1] * 10], strict=True):
        assert setting_for(low).minutes == low
        assert setting_for((low + high) / 2).minutes == low
    with pytest.raises(ValueError, match="positive"):
        setting_for(0)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"{s.minutes:g}min")
def test_every_setting_is_a_valid_config_and_was_chosen_on_validation(setting):
    config = load_config(DEFAULT_CONFIG, [*setting.overrides, "train.max_minutes=5"])
    assert config.optimizer.schedule == "budgeted"  # fitted to the budget
    assert config.model.transformer_config(setting.vocab_size, setting.vocab_size).d_model > 0
    assert "validation" in setting.chosen_by and "test" not in setting.chosen_by


def test_the_recipe_trains_the_budget_setting_and_user_overrides_win(tmp_path):
    paths = RecipePaths(tmp_path)
    user = ("optimizer.peak_learning_rate=0.0001",)
    config = run_config(paths, RecipeSettings(minutes=7, mirror=None, vocab_size=None))
    expected = load_config(DEFAULT_CONFIG, list(setting_for(7).overrides))
    assert config.model == expected.model and config.optimizer == expected.optimizer
    assert config.train.max_minutes == 7 and config.data.vocabulary == str(paths.vocabulary)
    mine = run_config(
        paths, RecipeSettings(minutes=7, mirror=None, vocab_size=None, overrides=user)
    )
    assert mine.optimizer.peak_learning_rate == 0.0001
    assert mine.model == expected.model
