"""What `translator recipe --minutes M` trains: one setting per time budget.

A budget buys a number of updates; the best model for a few hundred updates is not the
best for ten thousand. Each setting here was chosen for its budget on Multi30k
*validation* BLEU (greedy, the training run's own final validation), never on a test set;
`chosen_by` names the trials. The recipe takes the setting of the largest budget that
fits in the user's minutes (the smallest one below 5 minutes), and a user's `--set`
overrides still win over it.
"""

from __future__ import annotations

import dataclasses

# The shape the short budgets train: 4+4 layers of width 128 (FFN 256, 4 heads), the
# "Transformer-Tiny" of Wu et al. 2021 for Multi30k: a third of `small`'s parameters and
# ~1.6x its updates per minute on a 2-core CPU.
NARROW = "num_encoder_layers: 4, num_decoder_layers: 4, d_model: 128, ffn_dim: 256, num_heads: 4"


@dataclasses.dataclass(frozen=True)
class BudgetSetting:
    """The training settings chosen for one time budget."""

    # The budget, in minutes of training, the setting was chosen for.
    minutes: float
    # `--set key=value` overrides of the default run config (training/configs/).
    overrides: tuple[str, ...]
    # The joint SentencePiece vocabulary size it trains with.
    vocab_size: int
    # How it was chosen: the validation trials and their BLEU.
    chosen_by: str

    def describe(self) -> str:
        """One line for the recipe's output: the budget it was chosen for and its settings."""
        return f"the {self.minutes:g}-minute setting ({'; '.join(self.overrides)})"


SETTINGS: tuple[BudgetSetting, ...] = (
    BudgetSetting(
        minutes=5,
        overrides=(
            f"model.overrides={{{NARROW}, dropout: 0.1}}",
            "optimizer.peak_learning_rate=0.003",
            "optimizer.warmup_fraction=0.05",
            "eval.every_steps=0",  # validate once, at the end: the budget goes to updates
            "checkpoint.average_last=0",  # the schedule anneals to 0: nothing to smooth
        ),
        vocab_size=8000,
        chosen_by=(
            "5-minute trials, validation BLEU (greedy): narrow 4+4 at peak lr 0.003 28.0 "
            "(841 updates) vs small 3+3 d_model 256 at 0.002 25.5 (528 updates)"
        ),
    ),
)


def setting_for(minutes: float) -> BudgetSetting:
    """The setting of the largest budget <= `minutes` (the smallest one if none is).

    Raises:
        ValueError: for a budget that is not positive.
    """
    if minutes <= 0:
        raise ValueError(f"the time budget must be positive, got {minutes:g} minutes")
    fitting = [setting for setting in SETTINGS if setting.minutes <= minutes]
    if not fitting:
        return min(SETTINGS, key=lambda setting: setting.minutes)
    return max(fitting, key=lambda setting: setting.minutes)
