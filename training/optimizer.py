"""The optimizer of a run: Adam with the learning-rate schedule its config names.

Backend-free (no TensorFlow): the trainer on TensorFlow and the JAX step build it alike.
"""

from __future__ import annotations

import keras

from training.config import RunConfig
from training.schedule import BudgetedSchedule, InverseSquareRootSchedule


def make_schedule(config: RunConfig, d_model: int) -> BudgetedSchedule | InverseSquareRootSchedule:
    """The learning-rate schedule that `config.optimizer.schedule` names."""
    opt = config.optimizer
    accumulation = max(opt.accumulation_steps, 1)
    if opt.schedule == "inverse_sqrt":
        return InverseSquareRootSchedule(
            d_model,
            opt.warmup_steps,
            scale=opt.learning_rate_scale,
            accumulation_steps=accumulation,
        )
    return BudgetedSchedule(
        opt.peak_learning_rate,
        total_updates=config.train.max_steps,  # refined by the Budget callback under a time budget
        warmup_fraction=opt.warmup_fraction,
        decay=opt.decay,
        final_fraction=opt.final_learning_rate_fraction,
        accumulation_steps=accumulation,
    )


def make_optimizer(
    config: RunConfig,
    d_model: int,
    schedule: keras.optimizers.schedules.LearningRateSchedule | None = None,
) -> keras.optimizers.Optimizer:
    """Adam with the config's schedule (`make_schedule` unless given) and accumulation."""
    opt = config.optimizer
    accumulation = opt.accumulation_steps if opt.accumulation_steps > 1 else None
    return keras.optimizers.Adam(
        learning_rate=schedule or make_schedule(config, d_model),
        beta_1=opt.beta_1,
        beta_2=opt.beta_2,
        epsilon=opt.epsilon,
        gradient_accumulation_steps=accumulation,
    )
