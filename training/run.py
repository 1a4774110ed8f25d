"""One training run: from a `RunConfig` to a run directory with a final model.

    <run>/config.yaml      the resolved config of the run
    <run>/vocab/           the vocabulary (copied; a resumed run must use the same)
    <run>/checkpoints/     the last K checkpoints (model + optimizer + step)
    <run>/logs/            TensorBoard: loss, learning rate, tokens/s, val loss and BLEU
    <run>/curves.png       those curves, against updates and minutes (written at the end)
    <run>/best/            the model with the best validation BLEU (a model directory)
    <run>/model/           the final model (a model directory: translate/evaluate/export)

`train()` resumes from `<run>/checkpoints` when it holds a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras

from training.callbacks import Budget, Interrupt, NanGuard, PeriodicCheckpoint, Progress, Summaries
from training.checkpoints import Checkpoints, average_checkpoints, checkpoint_number
from training.config import RunConfig
from training.engines.backend import Strategy, engine, resolved
from training.engines.tf_trainer import TranslationTrainer, build_trainer
from training.finetune import (
    ARCHITECTURE_KEYS,
    InitModel,
    check_init_vocabulary,
    find_init_model,
    keep_the_better,
    load_init_weights,
    with_init_architecture,
)
from training.inputs import batch_shapes, log_mix, training_dataset, validation_dataset
from training.planning.lifecycle import PlanRequest, resolve_plan, saved_or_new_plan
from training.planning.measure import learn_speed, planned_config
from training.planning.rules import Plan
from training.record import RunRecord, TrainResult
from training.run_dir import check_inputs, load_run_vocabulary, prepare_run_dir
from training.summaries import CURVES_FILE, write_curves
from training.validation import TranslateFactory, bleu_callback
from translator.artifacts import save_model_dir
from translator.errors import TranslatorError
from translator.model import Transformer
from translator.pipelines.vocabulary import Vocabulary

log = logging.getLogger(__name__)


class TrainingError(TranslatorError, RuntimeError):
    """Training stopped abnormally (a NaN loss); the message names the step."""

    exit_code = 1


class TrainingInterruptedError(TranslatorError):
    """Ctrl-C stopped training; a checkpoint of the step it stopped at was saved."""

    exit_code = 130
    label = "interrupted"

    def __init__(self, step: int, checkpoint: str | None):
        super().__init__(
            f"stopped at step {step:,}, checkpoint {checkpoint}; run the same command again "
            "to resume from it"
        )
        self.step = step
        self.checkpoint = checkpoint


def train(
    config: RunConfig,
    run_dir: str | Path,
    *,
    translate_factory: TranslateFactory | None = None,
    verbose: int | None = None,
    planning: PlanRequest | None = None,
    deadline: float | None = None,
) -> TrainResult:
    """Trains (or resumes) a model as `config` says, in `run_dir`.

    Args:
        config: The run config.
        run_dir: The run directory; resumed when it holds checkpoints.
        planning: Plan the settings the user left unset before training (the plan is
            saved in the run directory; a resumed run trains the plan it started with).
        translate_factory: Builds the validation translator from the model and the
            vocabulary; defaults to greedy search (`translator.search`).
        verbose: 0: no progress output. Otherwise a log line every
            `train.log_every_steps` updates and, if 1 (default: when stderr is a
            terminal), a progress bar against the budget.
        deadline: A `time.monotonic()` value by which training must stop, whatever is
            left of `train.max_minutes` (the whole-job budget of a distillation), for a
            run of one process (each worker would read its own clock); None: the
            minutes alone.

    Returns:
        The `TrainResult`.

    Raises:
        ConfigError: bad config, missing files, a vocabulary that does not match the run.
        TrainingError: the loss became NaN (the last good checkpoint stays intact).
        TrainingInterruptedError: Ctrl-C; a checkpoint of the step it stopped at was saved.
        CorpusError: a training or validation corpus has no pair to learn from (all
            empty or over the length limits), before any step; or a bad corpus file.
    """
    # The run sets Keras' global dtype policy to its precision; the caller's comes back
    # after it (a later model built in this process, a test, is not the run's).
    policy = keras.config.dtype_policy()
    try:
        return _train(config, Path(run_dir), translate_factory, verbose, planning, deadline)
    finally:
        keras.config.set_dtype_policy(policy)


def _train(
    config: RunConfig,
    run_dir: Path,
    translate_factory: TranslateFactory | None,
    verbose: int | None,
    planning: PlanRequest | None,
    deadline: float | None,
) -> TrainResult:
    setup = _setup(config, planning)
    config, strategy, precision, vocabulary = setup.config, *setup.backend, setup.vocabulary
    plan = None
    if setup.planning is not None:
        plan = resolve_plan(config, setup.planning, run_dir, vocabulary, strategy, precision)
        config = planned_config(config, plan, setup.planning.set_keys)
        config = with_init_architecture(config, setup.init) if setup.init else config
        check_inputs(config)
    keras.utils.set_random_seed(config.train.seed)
    if strategy.is_chief():
        prepare_run_dir(run_dir, config, vocabulary)
    run = _build(config, vocabulary, strategy, run_dir, setup.init, deadline)
    train_data, valid_data = _datasets(config, vocabulary, strategy)
    watch = _callbacks(
        config, run, vocabulary, strategy, valid_data is not None, verbose, translate_factory
    )
    started = time.monotonic()
    history = _fit(config, run, train_data, valid_data, watch.callbacks)
    steps = _last_checkpoint(run, watch)
    pace = run.budget.steady_speed()
    if plan is not None and pace is not None and strategy.is_chief():
        cache = setup.planning.cache_dir or run_dir
        learn_speed(plan, pace, config, vocabulary, strategy, precision, cache)
    result = _finish(config, run, watch, history, steps, precision, time.monotonic() - started)
    return dataclasses.replace(result, plan=plan)


def preview_plan(config: RunConfig, request: PlanRequest, run_dir: str | Path) -> Plan:
    """The plan `train` would train (the run's saved one, if it has one); trains nothing.

    Measured speeds are cached in the run directory, so the training that follows does
    not measure them again.
    """
    setup = _setup(config, request)
    assert setup.planning is not None
    strategy, precision = setup.backend
    return saved_or_new_plan(
        setup.config, setup.planning, Path(run_dir), setup.vocabulary, strategy, precision
    )


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What a run (or its plan's preview) knows before it plans or builds anything."""

    # The config on this process' backend, with a fine-tuned model's architecture.
    config: RunConfig
    # The strategy and the precision policy's name.
    backend: tuple[Strategy, str]
    vocabulary: Vocabulary
    # The model fine-tuning starts from (None: from scratch).
    init: InitModel | None
    # What to plan (None: nothing), keeping a fine-tuned model's architecture.
    planning: PlanRequest | None


def _setup(config: RunConfig, planning: PlanRequest | None) -> _Setup:
    """The inputs checked, the backend's strategy made, the vocabulary read."""
    check_inputs(config)
    init = find_init_model(config.train.init_from) if config.train.init_from else None
    config, strategy, precision = on_backend(config)
    vocabulary = load_run_vocabulary(config)
    if init is not None:
        check_init_vocabulary(init, vocabulary, config.data.vocabulary)
        config = with_init_architecture(config, init)
        if planning is not None:  # the plan chooses only what fine-tuning can change
            planning = dataclasses.replace(planning, keys=planning.keys | ARCHITECTURE_KEYS)
    return _Setup(config, (strategy, precision), vocabulary, init, planning)


def on_backend(config: RunConfig) -> tuple[RunConfig, Strategy, str]:
    """The config on this process' backend, its strategy and its precision policy.

    The strategy comes first: a multi-worker one must be made before TensorFlow starts.
    """
    config = resolved(config)
    on = engine()
    strategy = on.make_strategy(config.train.strategy)
    precision = on.select_precision(config.train.precision, strategy)
    return on.adapt(config, strategy), strategy, precision


@dataclasses.dataclass
class _Run:
    """What training builds before its first step."""

    run_dir: Path
    strategy: Strategy
    transformer: Transformer
    trainer: TranslationTrainer
    budget: Budget
    checkpoints: Checkpoints
    # Batches consumed before this process started (updates x accumulation steps).
    micro_steps_done: int


@dataclasses.dataclass
class _Watch:
    """The callbacks of `fit` and the ones `train` reads afterwards."""

    callbacks: list[keras.callbacks.Callback]
    nan_guard: NanGuard
    interrupt: Interrupt
    # Validation BLEU (None without BLEU validation).
    bleu: Any


def _build(
    config: RunConfig,
    vocabulary: Vocabulary,
    strategy,
    run_dir: Path,
    init: InitModel | None,
    deadline: float | None = None,
) -> _Run:
    """The model, trainer, optimizer, budget and checkpoints, restored if the run exists.

    A new run with `init` starts from that model's weights; a resumed one from its
    checkpoint (which already holds them, fine-tuned).
    """
    model_config = config.model.transformer_config(
        vocabulary.source_vocab_size, vocabulary.target_vocab_size
    )
    log.info(
        "model %s, precision %s, %d replica(s)",
        model_config,
        keras.config.dtype_policy().name,
        strategy.num_replicas_in_sync,
    )
    on = engine()
    trainer, schedule = build_trainer(config, model_config, strategy, trainer_class=on.trainer)
    trainer.expect_shapes(batch_shapes(config, vocabulary))
    transformer = trainer.transformer
    budget = Budget(
        config.train.max_steps,
        config.train.max_minutes,
        schedule,
        strategy=strategy,
        scalar=on.scalar,
        deadline=deadline,
    )
    checkpoints = on.checkpoints(
        run_dir / "checkpoints",
        transformer,
        trainer.optimizer,
        config.checkpoint.keep_last,
        strategy,
        budget=budget.state(),
    )
    start_step = checkpoints.restore_latest()
    if start_step == 0 and init is not None:
        load_init_weights(transformer, init)
        log.info("fine-tuning: weights of %s", init.model_file)
    if start_step >= config.train.max_steps:
        log.info("run already at step %d >= max_steps", start_step)
    micro_steps = start_step * max(config.optimizer.accumulation_steps, 1)
    return _Run(run_dir, strategy, transformer, trainer, budget, checkpoints, micro_steps)


def _datasets(config: RunConfig, vocabulary: Vocabulary, strategy):
    """The training input from a given micro-step on, and the validation input."""
    data = config.data
    if data.is_mix():
        log_mix(config, vocabulary)
    valid_data = None
    if data.valid_source:
        valid_data = validation_dataset(config, vocabulary, strategy)
    return functools.partial(training_dataset, config, vocabulary, strategy), valid_data


def _callbacks(
    config: RunConfig,
    run: _Run,
    vocabulary: Vocabulary,
    strategy,
    validating: bool,
    verbose: int | None,
    translate_factory,
) -> _Watch:
    """The callbacks in the order they must run (guards first, checkpoints after BLEU)."""
    chief = strategy.is_chief()
    nan_guard, interrupt = NanGuard(), Interrupt(strategy)
    callbacks: list[keras.callbacks.Callback] = [nan_guard, interrupt, run.budget]
    if verbose is None:
        verbose = 1 if sys.stderr.isatty() else 2
    if verbose:
        callbacks.append(Progress(run.budget, config.train.log_every_steps, bar=verbose == 1))
    bleu = None
    if validating and config.eval.bleu:
        bleu = bleu_callback(
            config,
            run.transformer,
            vocabulary,
            run.run_dir,
            chief,
            nan_guard,
            interrupt,
            translate_factory,
        )
        callbacks.append(bleu)
    callbacks.append(PeriodicCheckpoint(run.checkpoints, config.checkpoint.every_steps, nan_guard))
    if chief:
        # Last: validation BLEU is in the epoch's logs by then.
        callbacks.append(Summaries(run.run_dir / "logs", run.budget, config.train.log_every_steps))
    return _Watch(callbacks, nan_guard, interrupt, bleu)


def _fit(
    config: RunConfig, run: _Run, train_data: Callable[[int], Any], valid_data, callbacks
) -> Any:
    """Keras' `fit` from the resumed step: one epoch per validation period.

    A run resumed inside a period first finishes that period alone (a `fit` of its
    remaining micro-steps), so it validates, checkpoints the best model and stops early
    at the same updates as a run never interrupted; Keras counts its epochs from where
    `fit` starts. `train_data(skip)` is the training input after `skip` micro-steps.
    """
    accumulation = max(config.optimizer.accumulation_steps, 1)
    period = config.eval.every_steps or config.train.max_steps
    period = max(1, period * accumulation)  # in micro-steps
    epochs = math.ceil(config.train.max_steps * accumulation / period)

    def fit(skip: int, steps: int, end_epoch: int) -> Any:
        return run.trainer.fit(
            train_data(skip),
            epochs=end_epoch,
            initial_epoch=skip // period,
            steps_per_epoch=steps,
            validation_data=valid_data,
            callbacks=callbacks,
            verbose=0,  # `Progress` shows the run against its budget, not Keras' epochs
            shuffle=False,  # the pipeline shuffles (with a seed, so resume is exact)
        )

    with warnings.catch_warnings():
        # Keras says "input ran out of data" whenever a callback stops training mid-epoch
        # (the budget, early stopping, the NaN guard); the input here is endless.
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        done, rest = run.micro_steps_done, -run.micro_steps_done % period
        if rest:  # resumed inside a period: finish it alone
            history = fit(done, rest, done // period + 1)
            done += rest
            # (Keras clears `stop_training` when a fit starts, not when it ends.)
            if run.trainer.stop_training or done // period >= epochs:
                return history
        return fit(done, period, epochs)


def _last_checkpoint(run: _Run, watch: _Watch) -> int:
    """Checks how training ended and checkpoints its last step.

    Raises:
        TrainingError: the loss became NaN.
        TrainingInterruptedError: Ctrl-C.
    """
    checkpoints = run.checkpoints
    if watch.nan_guard.failed_step is not None:
        raise TrainingError(
            f"the training loss became NaN at step {watch.nan_guard.failed_step}; the last "
            f"good checkpoint is {checkpoints.latest() or '(none yet)'}; lower the learning "
            "rate (optimizer.peak_learning_rate, or learning_rate_scale for inverse_sqrt), "
            "warm up longer (warmup_fraction or warmup_steps) or set optimizer.clip_norm"
        )
    steps = checkpoints.step
    latest = checkpoints.latest_written()
    if latest is None or steps != checkpoint_number(latest):
        checkpoints.save()
    if watch.interrupt.step is not None:
        raise TrainingInterruptedError(steps, checkpoints.latest())
    return steps


def _finish(
    config: RunConfig,
    run: _Run,
    watch: _Watch,
    history,
    steps: int,
    precision: str,
    seconds: float,
) -> TrainResult:
    """Averages the last checkpoints if asked, writes the model directory, sums up."""
    if config.checkpoint.average_last > 1:
        paths = run.checkpoints.all()[-config.checkpoint.average_last :]
        average_checkpoints(run.transformer, paths)
        log.info("final model: average of %d checkpoints", len(paths))
    bleu, budget = watch.bleu, run.budget
    if config.train.init_from and config.checkpoint.average_last <= 1:
        keep_the_better(run.transformer, run.run_dir, bleu)
    elif config.train.init_from:
        log.info("fine-tuning: the final model is the checkpoint average, not the best model")
    model_dir, curves = run.run_dir / "model", None
    if run.strategy.is_chief():
        save_model_dir(
            model_dir,
            run.transformer,
            run.run_dir / "vocab",
            RunRecord(
                step=steps,
                config=config.to_dict(),
                averaged_checkpoints=max(config.checkpoint.average_last, 1),
                best_validation_bleu=bleu.best if bleu and bleu.best >= 0 else None,
                best_validation_step=bleu.best_step if bleu else None,
                validation_bleu=tuple(bleu.history) if bleu else (),
                training_seconds=round(seconds, 1),
                budget_seconds=round(float(budget.elapsed_seconds.numpy()), 1),
                target_tokens=int(budget.target_tokens.numpy()),
                precision=precision,
            ).to_dict(),
        )
        curves = write_curves(run.run_dir / "logs", run.run_dir / CURVES_FILE)
        if curves is not None:
            log.info("curves: %s", curves)
    losses = history.history.get("loss", [float("nan")])
    return TrainResult(
        run_dir=run.run_dir,
        steps=steps,
        stop_reason=budget.reason or ("early stopping" if bleu and bleu.stopped_early else "done"),
        model_dir=model_dir,
        best_bleu=bleu.best if bleu and bleu.best >= 0 else None,
        best_step=bleu.best_step if bleu else None,
        bleu_history=bleu.history if bleu else [],
        final_loss=float(losses[-1]) if losses else float("nan"),
        target_tokens=int(budget.target_tokens.numpy()),
        model=run.transformer,
        curves=curves,
    )
