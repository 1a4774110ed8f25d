"""The paper's learning-rate schedule (Vaswani et al. 2017, section 5.3)."""

from __future__ import annotations

import keras
from keras import ops


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
