"""Learning-rate schedules: the paper's, and one fitted to the run's budget.

`InverseSquareRootSchedule` is the paper's (Vaswani et al. 2017, section 5.3): it never
ends, which suits open-ended training. `BudgetedSchedule` knows where the run ends (a step
or time budget) and anneals to ~0 there: on a budget of a few hundred or thousand updates
it trains a better model than a schedule still at a high rate when the budget runs out.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from translator.backends import kernels


@keras.saving.register_keras_serializable(package="translator")
class InverseSquareRootSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr(s) = scale * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5), s = update step from 1.

    Linear warmup for `warmup_steps` updates, then decay with the inverse square root.

    Args:
        d_model: Model width.
        warmup_steps: Updates of linear warmup.
        scale: Multiplier (the paper uses 1.0; 2.0 is common for small data).
        accumulation_steps: Keras calls the schedule with the micro-batch counter under
            gradient accumulation; dividing by this makes `s` count updates.
    """

    def __init__(
        self, d_model: int, warmup_steps: int, scale: float = 1.0, accumulation_steps: int = 1
    ):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.accumulation_steps = accumulation_steps

    def __call__(self, step):
        update = ops.cast(step // self.accumulation_steps, "float32") + 1.0
        warmup = float(max(self.warmup_steps, 1))
        rate = ops.minimum(ops.rsqrt(update), update * warmup**-1.5)
        return self.scale * self.d_model**-0.5 * rate

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "accumulation_steps": self.accumulation_steps,
        }


@keras.saving.register_keras_serializable(package="translator")
class BudgetedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warm up, then cool down to `final_fraction * peak` exactly where the budget ends.

    With progress p = update / total_updates: linear warmup over the first
    `warmup_fraction` of the run, then a linear or cosine decay to the end value at
    p = 1 ("budgeted training", Li et al. 2020). `total_updates` is a variable: under a
    time budget `training.callbacks.Budget` re-estimates it from the measured step time as
    the run goes, and it is saved in the checkpoints, so a resumed run keeps its curve.

    Args:
        peak_learning_rate: The rate at the end of the warmup.
        total_updates: Initial estimate of the updates the budget allows (the step
            budget; under a time budget, refined while training).
        warmup_fraction: Share of the run spent warming up linearly from ~0.
        decay: "linear" or "cosine" from the peak down to the end value.
        final_fraction: The end value as a fraction of the peak (0 = anneal to zero).
        accumulation_steps: As in `InverseSquareRootSchedule`: `s` counts updates.
    """

    def __init__(
        self,
        peak_learning_rate: float,
        total_updates: float,
        warmup_fraction: float = 0.1,
        decay: str = "linear",
        final_fraction: float = 0.0,
        accumulation_steps: int = 1,
    ):
        if decay not in ("linear", "cosine"):
            raise ValueError(f"decay must be 'linear' or 'cosine', got {decay!r}")
        if not 0.0 <= warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
        self.peak_learning_rate = peak_learning_rate
        self.warmup_fraction = warmup_fraction
        self.decay = decay
        self.final_fraction = final_fraction
        self.accumulation_steps = accumulation_steps
        # Read by the training step every update; assigned by the Budget callback.
        self.total_updates = kernels.schedule_variable(
            float(max(total_updates, 1)), "budget_total_updates"
        )

    def __call__(self, step):
        update = ops.cast(step // self.accumulation_steps, "float32") + 1.0
        progress = update / ops.maximum(ops.convert_to_tensor(self.total_updates), 1.0)
        warmup = self.warmup_fraction
        rising = progress / warmup if warmup > 0 else ops.ones_like(progress)
        # Share of the cool-down left: 1 at the peak, 0 at the end of the budget.
        left = ops.clip((1.0 - progress) / (1.0 - warmup), 0.0, 1.0)
        if self.decay == "cosine":
            left = 0.5 * (1.0 - ops.cos(math.pi * left))
        end = self.final_fraction
        falling = end + (1.0 - end) * left
        return self.peak_learning_rate * ops.minimum(rising, falling)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "total_updates": float(ops.convert_to_numpy(self.total_updates)),
            "warmup_fraction": self.warmup_fraction,
            "decay": self.decay,
            "final_fraction": self.final_fraction,
            "accumulation_steps": self.accumulation_steps,
        }
