"""A plan over a run's life.

Made once and saved, read back when the run resumes, and given a new time budget when a
resume names one. `training.run` calls these.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from training.config import MAX_MINUTES, ConfigError, ConfigKey, RunConfig
from training.engines.backend import Strategy
from training.planning.measure import PLAN_FILE, RUN_VOCABULARY, load_plan, plan_run, save_plan
from training.planning.rules import Plan, Shape, Speed
from translator.pipelines.vocabulary import Vocabulary

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """Plan what the user left unset (`training.planning.measure`), for the run's budget."""

    # The keys the user set, in the config file or on the command line
    # (`training.config.GivenConfig.keys`): never planned.
    keys: frozenset[ConfigKey]
    # The keys this command gives (`--set`, the recipe's options): they win over the
    # plan's values, a saved plan's too.
    set_keys: frozenset[ConfigKey] = frozenset()
    # Where measured speeds are cached (None: the run directory).
    cache_dir: Path | None = None
    # A shape chosen before planning, and why (a distillation's student; the config's
    # model section is it): kept, as a shape the user set is.
    shape: tuple[Shape, str] | None = None
    # Why the run's vocabulary is kept; None: the plan sizes it by the budget (the
    # recipe's vocabulary stage then builds that size).
    vocabulary: str | None = RUN_VOCABULARY
    # Seconds already spent timing for this run (the plan that sized the vocabulary):
    # charged to the budget.
    measured_seconds: float = 0.0
    # Speeds known without a timing, by speed-cache entry (a vocabulary built again at
    # the size that plan chose: `training.planning.speed_cache.resized_speeds`).
    known_speeds: tuple[tuple[str, Speed], ...] = ()


def resolve_plan(
    config: RunConfig,
    request: PlanRequest,
    run_dir: Path,
    vocabulary: Vocabulary,
    strategy: Strategy,
    precision: str,
) -> Plan:
    """The run's saved plan, or a new one (measured, chosen, saved and logged)."""
    saved = load_plan(run_dir)
    if saved is not None:
        log.info("plan: resuming with the plan in %s", run_dir / PLAN_FILE)
    plan = _chosen(saved, config, request, run_dir, vocabulary, strategy, precision)
    if plan is not saved:  # a new plan, or the saved one under a resume's new budget
        if saved is not None:
            _say_new_budget(saved, config.train.max_minutes, run_dir)
        if strategy.is_chief():
            save_plan(plan, run_dir)
        if saved is None:
            log.info("plan: saved in %s", run_dir / PLAN_FILE)
    for line in plan.describe():
        log.info("plan: %s", line)
    return plan


def saved_or_new_plan(
    config: RunConfig,
    request: PlanRequest,
    run_dir: Path,
    vocabulary: Vocabulary,
    strategy: Strategy,
    precision: str,
) -> Plan:
    """The plan `resolve_plan` would give, saving and logging nothing (`--plan`)."""
    saved = load_plan(run_dir)
    return _chosen(saved, config, request, run_dir, vocabulary, strategy, precision)


def _chosen(
    saved: Plan | None,
    config: RunConfig,
    request: PlanRequest,
    run_dir: Path,
    vocabulary: Vocabulary,
    strategy: Strategy,
    precision: str,
) -> Plan:
    """The saved plan (under the resume's new budget, if it gives one), else a new one."""
    if saved is None:
        cache = request.cache_dir or run_dir
        return plan_run(
            config,
            request.keys,
            vocabulary,
            strategy,
            precision,
            cache,
            request.shape,
            request.vocabulary,
            request.measured_seconds,
            request.known_speeds,
        )
    if MAX_MINUTES in request.set_keys:
        return rebudgeted(saved, config.train.max_minutes)
    return saved


def rebudgeted(plan: Plan, minutes: float) -> Plan:
    """The saved `plan` under the `minutes` a resume gives it (in all, measuring included).

    Raises:
        ConfigError: `minutes` leave no time to train after the plan's measuring.
    """
    if plan.budget.seconds is None:
        return plan  # an update budget: train.max_minutes applies as the config says
    planned = (plan.budget.seconds + plan.measuring_seconds) / 60
    if round(minutes * 60) == round(planned * 60):
        return plan
    if minutes * 60 <= plan.measuring_seconds:
        raise ConfigError(
            f"train.max_minutes: {minutes:g} leaves no time to train this run (planned for "
            f"{planned:.3g} minutes, {plan.measuring_seconds:.0f} s of them measuring speeds); "
            "give more, or leave it out to keep the plan's"
        )
    seconds = minutes * 60 - plan.measuring_seconds
    return plan.with_budget(dataclasses.replace(plan.budget, seconds=seconds))


def _say_new_budget(plan: Plan, minutes: float, run_dir: Path) -> None:
    """One warning: the saved plan now runs for a resume's `minutes`.

    More minutes continue a finished or interrupted run from its last checkpoint, along its
    learning-rate schedule stretched to the new end; the plan's other choices stay.
    """
    planned = (plan.budget.seconds + plan.measuring_seconds) / 60
    what = (
        "training goes on from the last checkpoint, the learning-rate schedule stretched "
        "to the new end"
        if minutes > planned
        else "the run stops once it has trained that long (at its next update if it has)"
    )
    log.warning(
        "train.max_minutes: %g minutes in all, where the run was planned for %.3g: %s; %s updated",
        minutes,
        planned,
        what,
        run_dir / PLAN_FILE,
    )
