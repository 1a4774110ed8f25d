"""The vocabulary's size: by the corpus where the budget covers it, by the budget where not.

Two limits, as the model's size has (`training.planning.rules.choose_shape`):

- **The data limit** (`choose_vocab_size`): a joint vocabulary grows with the corpus'
  characters, 8,000 pieces at Multi30k's size (small corpora want small vocabularies;
  Sennrich and Zhang 2019): above that size as characters ** 0.4, below it faster, by
  `VOCAB_SMALL_SLOPE` pieces per e-fold of characters (a tenth of Multi30k's text:
  about 1,800 pieces, where the power law said 3,200). The recipe builds this one first.
- **The compute limit** (`choose_budget_vocab_size`): where that vocabulary buys fewer
  than `VOCAB_MIN_EPOCHS` epochs, the output layer's cost decides. Its projection and
  softmax are a large share of a small model's FLOPs per token (43% of `narrow`'s at 8,000
  pieces), so a smaller vocabulary trains more sentences in the same minutes, at a cost
  in coverage: more pieces per sentence (`PIECES_EXPONENT`) and rarer words split. The
  plan takes the largest size, down to `VOCAB_SMALLEST_SHARE` of the data limit's, that
  buys `VOCAB_MIN_GAIN` more epochs than the data limit's (none: it keeps that). A size's
  speed: a step's time is linear in the size, so the chosen shape is timed at its own
  size and at the smallest candidate's, on the same batches, the two models in turn (the
  machine's drift falls on both), outside the budget (`training.planning.timing`), and
  training's plan on the size built reads its speed from them (`resized_speeds`); where
  workers would have to agree on it, scaled by FLOPs instead. The output layer's share
  of the time can be far from its share of the FLOPs: on a CPU with AMX the matrix
  products are cheap and the rest of the step is not.

The evidence is in bench/RESULTS.md, "Vocabulary by the budget" (decision D20): a smaller
vocabulary that bought 14% or 18% more epochs gained, ones that bought 3% or fewer lost. The
gain asked for lies between those cells; the epochs' threshold and the smallest share are
set, not fit: no cell yet measures a budget of 3 to 20 epochs on a machine whose output layer
is costly, nor sizes under half the data limit's. Pure Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from training.planning.rules import Shape

# Characters of Multi30k's training pairs (both sides), the data limit's reference,
# the joint vocabulary's pieces there, and how they grow with the characters above it
# (set on Multi30k's subsets; no larger corpus has measured a gain from another size).
REFERENCE_CORPUS_CHARACTERS = 3_820_000
REFERENCE_VOCAB_SIZE = 8000
VOCAB_EXPONENT = 0.4
# Below the reference: pieces lost per e-fold fewer characters (log-linear, steeper
# than the power law there). Fit on validation at 3,000, 5,000 and 10,000 of
# Multi30k's pairs, whose best sizes (2,000, 3,000 and 5,000) hold for any slope from
# 2,530 to 2,850 (bench/RESULTS.md, "Vocabulary by the budget").
VOCAB_SMALL_SLOPE = 2700
# The data limit's bounds (the paper's 37k-piece vocabulary was for 4.5M pairs, where the
# rule gives the upper one).
MIN_VOCAB_SIZE, MAX_VOCAB_SIZE = 1000, 32000
# The line falls under 2,000 pieces below about 2,600 pairs, yet 2,000 beat 1,000 by 3
# BLEU on 1,500 pairs (196,102 characters; two seeds, and the other direction) and was
# the best tried at 3,000, while on 750 pairs (99,087) 1,000 won (bench/RESULTS.md): at
# least this many pieces down to the log midpoint of those two corpora.
SMALL_VOCAB_FLOOR, SMALL_CORPUS_CHARACTERS = 2000, 140_000
# Below this many epochs bought at the data limit's size, the budget limits the
# vocabulary (set, not fit: see the module docstring).
VOCAB_MIN_EPOCHS = 6.0
# The smallest vocabulary the budget may choose, as a share of the data limit's: the
# coverage a smaller one loses is unmeasured (set, not fit).
VOCAB_SMALLEST_SHARE = 0.5
# A smaller size must buy this much more than the data limit's epochs: +14% gained 1.55
# BLEU at 1.4 epochs, +3% lost 0.78 at 4.5 (bench/RESULTS.md).
VOCAB_MIN_GAIN = 0.08
# Target pieces grow as a vocabulary shrinks, as size ** -PIECES_EXPONENT: between the
# two corpora measured (Multi30k, 8,000 to 4,000 pieces: 0.15; both its directions,
# 11,000 to 6,000: 0.10; bench/RESULTS.md).
PIECES_EXPONENT = 0.12

# The cost of a target token (FLOPs, or seconds) to a shape under a joint vocabulary of a
# size.
TokenCost = Callable[["Shape", int], float]


@dataclasses.dataclass(frozen=True)
class VocabularyChoice:
    """The plan's vocabulary size and why."""

    # Pieces of the joint vocabulary (the target side's, where the two differ).
    size: int
    reason: str
    # False: the run's vocabulary is given (the user's, a fine-tuned model's, or sized
    # before this plan); it is kept.
    planned: bool = True
    # A target token's cost under the vocabulary the plan weighed (the data limit's) over
    # under this size, as the plan weighed it: the speed this size trains at, relative.
    speedup: float = 1.0


@dataclasses.dataclass(frozen=True)
class VocabularyTrade:
    """What the plan weighs the vocabulary's size with."""

    # The run's vocabulary now: its size (the target side's).
    size: int
    # A target token's cost to a shape under a joint vocabulary of a size: its FLOPs,
    # or seconds where two sizes were timed (`basis` says which).
    cost: TokenCost
    # Why the run's vocabulary is kept (the user's, a fine-tuned model's, or one sized
    # before this plan); None: the plan may choose a smaller one.
    fixed: str | None = None
    basis: str = "FLOPs"

    @property
    def timed(self) -> bool:
        """Whether the costs are timed (else FLOPs)."""
        return self.basis != "FLOPs"

    def output_share(self, shape: Shape, size: int) -> float:
        """The output layer's share of a token's cost (linear in the size)."""
        whole, half = self.cost(shape, size), self.cost(shape, max(size // 2, 1))
        return (whole - half) / (size - max(size // 2, 1)) * size / whole


def choose_vocab_size(characters: int) -> int:
    """The data limit: 8,000 pieces at Multi30k's size; above, as characters ** 0.4.

    Below Multi30k's size, `VOCAB_SMALL_SLOPE` fewer pieces per e-fold fewer characters.
    Rounded to a thousand, within [`MIN_VOCAB_SIZE`, `MAX_VOCAB_SIZE`], and at least
    `SMALL_VOCAB_FLOOR` from `SMALL_CORPUS_CHARACTERS` on.
    """
    return min(max(_rounded(characters), _floor(characters)), MAX_VOCAB_SIZE)


def _floor(characters: int) -> int:
    """The fewest pieces the data limit gives a corpus of `characters`."""
    return SMALL_VOCAB_FLOOR if characters >= SMALL_CORPUS_CHARACTERS else MIN_VOCAB_SIZE


def _rounded(characters: int) -> int:
    """The data limit's curve at `characters`, rounded to a thousand, unbounded."""
    ratio = max(characters, 1) / REFERENCE_CORPUS_CHARACTERS
    if _power_law(characters):
        ideal = REFERENCE_VOCAB_SIZE * ratio**VOCAB_EXPONENT
    else:
        ideal = REFERENCE_VOCAB_SIZE + VOCAB_SMALL_SLOPE * math.log(ratio)
    return int(round(ideal / 1000) * 1000)


def _power_law(characters: int) -> bool:
    """Whether the data limit's power law (at or above Multi30k's size) sizes the corpus."""
    return characters >= REFERENCE_CORPUS_CHARACTERS


def vocab_size_reason(characters: int) -> str:
    """`choose_vocab_size`'s reason, in the plan's words."""
    reference = REFERENCE_CORPUS_CHARACTERS / 1e6
    ratio = f"{characters:,} characters / Multi30k's {reference:.2f}M"
    if _power_law(characters):
        rule = f"{REFERENCE_VOCAB_SIZE:,} x ({ratio}) ** {VOCAB_EXPONENT}"
    else:
        rule = f"{REFERENCE_VOCAB_SIZE:,} + {VOCAB_SMALL_SLOPE:,} x ln({ratio})"
    rounded = _rounded(characters)
    if rounded < _floor(characters):
        return f"{rule}, at least {_floor(characters):,}"
    if rounded > MAX_VOCAB_SIZE:
        return f"{rule}, at most {MAX_VOCAB_SIZE:,}"
    return rule


def vocab_candidates(size: int) -> tuple[int, ...]:
    """Sizes the budget may choose below `size`: thousands, largest first, `size` included."""
    smallest = max(MIN_VOCAB_SIZE, round(size * VOCAB_SMALLEST_SHARE))
    smaller = range((size - 1) // 1000 * 1000, smallest - 1, -1000)
    return (size, *(s for s in smaller if s >= MIN_VOCAB_SIZE))


def pieces_at(pieces: float, size: int, built: int) -> float:
    """Target pieces of an epoch under a vocabulary of `size`, from the count at `built`."""
    return pieces * (built / size) ** PIECES_EXPONENT


def choose_budget_vocab_size(
    epochs_at: Callable[[int], float],
    built: int,
    share_at: Callable[[int], float],
    basis: str = "FLOPs",
    speedup_at: Callable[[int], float] | None = None,
) -> VocabularyChoice:
    """The compute limit: the largest smaller size buying `VOCAB_MIN_GAIN` more epochs.

    Args:
        epochs_at: Epochs the budget buys under a vocabulary of a size (its speed scaled
            from the measured one by a token's cost, its pieces by `pieces_at`).
        built: The vocabulary's size now (the data limit's, or all that the corpus
            supports).
        share_at: The output layer's share of a token's cost at a size (to report).
        basis: What the costs are: FLOPs, or timed sizes (to report).
        speedup_at: A size's speed over the built size's (`VocabularyChoice.speedup`).

    Returns:
        The choice, its reason naming both limits.
    """
    bought = epochs_at(built)
    if bought >= VOCAB_MIN_EPOCHS:
        return VocabularyChoice(
            built,
            f"the data limit: it buys {bought:,.1f} epochs, at least {VOCAB_MIN_EPOCHS:g} "
            "(the budget does not limit it)",
        )
    wanted = bought * (1 + VOCAB_MIN_GAIN)
    gaining = [size for size in vocab_candidates(built)[1:] if epochs_at(size) >= wanted]
    cost = f"its output layer {share_at(built):.0%} of a token's cost; {basis}"
    if not gaining:
        return VocabularyChoice(
            built,
            f"the data limit: it buys {bought:,.1f} epochs, under {VOCAB_MIN_EPOCHS:g}, but "
            f"no size down to {VOCAB_SMALLEST_SHARE:g} of it buys {VOCAB_MIN_GAIN:.0%} more "
            f"({cost})",
        )
    chosen = gaining[0]
    return VocabularyChoice(
        chosen,
        f"the compute limit: the data limit's {built:,} pieces buy {bought:,.1f} epochs, "
        f"under {VOCAB_MIN_EPOCHS:g}; {chosen:,} is the largest that buys "
        f"{VOCAB_MIN_GAIN:.0%} more: {epochs_at(chosen):,.1f} epochs (its output layer "
        f"{share_at(built):.0%} of a token's cost at {built:,}, {share_at(chosen):.0%} at "
        f"{chosen:,}; {basis})",
        speedup=speedup_at(chosen) if speedup_at else 1.0,
    )
