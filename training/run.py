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
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras

from training.backend import Strategy, engine, resolved
from training.callbacks import (
    BleuValidation,
    Budget,
    Interrupt,
    NanGuard,
    PeriodicCheckpoint,
    Progress,
    Summaries,
)
from training.checkpoints import Checkpoints, average_checkpoints, checkpoint_number
from training.config import (
    MAX_MINUTES,
    RUN_CONFIG_FILE,
    ConfigError,
    ConfigKey,
    RunConfig,
    dump_config,
    load_config,
)
from training.finetune import (
    ARCHITECTURE_KEYS,
    InitModel,
    check_init_vocabulary,
    find_init_model,
    load_init_weights,
    with_init_architecture,
)
from training.inputs import batch_shapes, training_dataset, validation_dataset
from training.plan import Plan
from training.planning import PLAN_FILE, load_plan, plan_run, planned_config, save_plan
from training.record import RunRecord
from training.summaries import CURVES_FILE, write_curves
from training.trainer import TranslationTrainer, build_trainer
from translator.artifacts import MODEL_FILE, save_model_dir
from translator.errors import TranslatorError
from translator.evaluation.metrics import Scoring
from translator.inference import Translator
from translator.io import read_lines
from translator.model import Transformer
from translator.pipelines.vocabulary import Vocabulary, load_vocabulary
from translator.search import SearchConfig

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


@dataclasses.dataclass
class TrainResult:
    """What a finished run produced."""

    # The run directory.
    run_dir: Path
    # Optimizer updates done in total (across resumes).
    steps: int
    # Why training stopped.
    stop_reason: str
    # The final model directory (<run>/model).
    model_dir: Path
    # Best validation BLEU and its step (None without BLEU validation).
    best_bleu: float | None
    best_step: int | None
    # Validation BLEU after each validation: (step, BLEU).
    bleu_history: list[tuple[int, float]]
    # Training loss of the last epoch.
    final_loss: float
    # Real (non-padding) target tokens trained on, across resumes.
    target_tokens: int
    # The trained Transformer (averaged when checkpoint.average_last > 1).
    model: Transformer
    # The plan the run trained (None when nothing was planned).
    plan: Plan | None = None
    # The curves of the run as a PNG (None when nothing was logged, or not the chief).
    curves: Path | None = None


def summary_line(result: TrainResult) -> str:
    """What a run bought: the plan, the updates made, the validation BLEU reached."""
    planned = ""
    if result.plan is not None:
        plan = result.plan
        bought = f", {plan.epochs:,.1f} epochs" if plan.updates else ""
        planned = (
            f" of the plan's ~{plan.updates:,}" if plan.updates else ""
        ) + f" ({plan.shape.describe()}, {plan.batch_tokens:,} batch tokens{bought}; RUN/plan.json)"
    best = (
        f"; best validation BLEU {result.best_bleu:.2f} at step {result.best_step:,}"
        if result.best_bleu is not None
        else ""
    )
    return f"trained {result.steps:,} updates{planned} ({result.stop_reason}){best}"


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """Plan what the user left unset (`training.planning`), for the run's budget."""

    # The keys the user set, in the config file or on the command line
    # (`training.config.GivenConfig.keys`): never planned.
    keys: frozenset[ConfigKey]
    # The keys this command gives (`--set`, the recipe's options): they win over the
    # plan's values, a saved plan's too.
    set_keys: frozenset[ConfigKey] = frozenset()
    # Where measured speeds are cached (None: the run directory).
    cache_dir: Path | None = None


def check_inputs(config: RunConfig) -> None:
    """Fails early, naming the key, for missing data files or vocabulary directory.

    Pure Python: it runs before the strategy is made, which for MultiWorkerMirrored
    must happen before TensorFlow starts.
    """
    data = config.data
    if data.train and (data.train_source or data.train_target):
        raise ConfigError("data.train and data.train_source/train_target: give one of them")
    if data.prepared and (data.train or data.train_source or data.train_target):
        raise ConfigError(
            "data.prepared and data.train/train_source/train_target: give one of them (a "
            "prepared corpus holds the training pairs)"
        )
    if data.prepared and not Path(data.prepared).is_dir():
        raise ConfigError(
            f"data.prepared: directory not found: {data.prepared} (make one with "
            "`translator data prepare`)"
        )
    files = {"data.valid_source": data.valid_source, "data.valid_target": data.valid_target}
    for index, corpus in enumerate(data.corpora()):
        where = f"data.train[{index}]." if data.train else "data.train_"
        if not corpus.weight > 0:
            raise ConfigError(
                f"{where}weight: must be > 0, got {corpus.weight} (remove the corpus to leave "
                "it out)"
            )
        for side in ("source", "target"):
            if not getattr(corpus, side):
                raise ConfigError(f"{where}{side}: required")
            files[f"{where}{side}"] = getattr(corpus, side)
    if bool(data.valid_source) != bool(data.valid_target):
        raise ConfigError("data.valid_source and data.valid_target: give both or neither")
    for key, path in files.items():
        if path and not Path(path).is_file():
            raise ConfigError(f"{key}: file not found: {path}")
    if not data.vocabulary:
        raise ConfigError("data.vocabulary: required (a directory from `translator build-vocab`)")
    if not Path(data.vocabulary).is_dir():
        raise ConfigError(
            f"data.vocabulary: directory not found: {data.vocabulary} "
            "(build one with `translator build-vocab`)"
        )


def _load_vocabulary(config: RunConfig) -> Vocabulary:
    try:
        return load_vocabulary(config.data.vocabulary)
    except Exception as error:  # the vocabulary module names the file
        raise ConfigError(f"data.vocabulary: {error}") from error


def _prepare_run_dir(run_dir: Path, config: RunConfig, vocabulary: Vocabulary) -> None:
    """Writes config and vocabulary, or checks them against a run being resumed."""
    vocab_copy = run_dir / "vocab"
    if vocab_copy.is_dir():
        previous = load_vocabulary(vocab_copy)
        if (previous.source_sha256, previous.target_sha256) != (
            vocabulary.source_sha256,
            vocabulary.target_sha256,
        ):
            raise ConfigError(
                f"data.vocabulary: {config.data.vocabulary} differs from the vocabulary of "
                f"the run being resumed ({vocab_copy}); use a new run directory"
            )
        previous_config = load_config(run_dir / RUN_CONFIG_FILE)
        began_on = previous_config.train.backend
        if began_on not in ("auto", config.train.backend):  # its checkpoints are that backend's
            raise ConfigError(
                f"train.backend: the run in {run_dir} began on {began_on}; resume it there "
                f"(--set train.backend={began_on}), or start a new run directory from its "
                "model with --init-from"
            )
        if previous_config.model != config.model:
            raise ConfigError(
                f"model: differs from the run being resumed ({run_dir / RUN_CONFIG_FILE}): "
                f"{previous_config.model} vs {config.model}; use a new run directory"
            )
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(config.data.vocabulary, vocab_copy)
    dump_config(config, run_dir / RUN_CONFIG_FILE)


def train(
    config: RunConfig,
    run_dir: str | Path,
    *,
    translate_factory: Callable[[Transformer, Vocabulary], Callable[[Sequence[str]], list[str]]]
    | None = None,
    verbose: int | None = None,
    planning: PlanRequest | None = None,
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
        return _train(config, Path(run_dir), translate_factory, verbose, planning)
    finally:
        keras.config.set_dtype_policy(policy)


def _train(
    config: RunConfig,
    run_dir: Path,
    translate_factory: Callable[[Transformer, Vocabulary], Callable[[Sequence[str]], list[str]]]
    | None,
    verbose: int | None,
    planning: PlanRequest | None,
) -> TrainResult:
    check_inputs(config)
    init = find_init_model(config.train.init_from) if config.train.init_from else None
    config, strategy, precision = on_backend(config)
    vocabulary = _load_vocabulary(config)
    config, planning = _fine_tuning(config, planning, init, vocabulary)
    plan = None
    if planning is not None:
        plan = resolve_plan(config, planning, run_dir, vocabulary, strategy, precision)
        config = planned_config(config, plan, planning.set_keys)
        config = with_init_architecture(config, init) if init is not None else config
        check_inputs(config)
    keras.utils.set_random_seed(config.train.seed)
    if strategy.is_chief():
        _prepare_run_dir(run_dir, config, vocabulary)
    run = _build(config, vocabulary, strategy, run_dir, init)
    train_data, valid_data = _datasets(config, vocabulary, strategy)
    watch = _callbacks(
        config, run, vocabulary, strategy, valid_data is not None, verbose, translate_factory
    )
    started = time.monotonic()
    history = _fit(config, run, train_data, valid_data, watch.callbacks)
    steps = _last_checkpoint(run, watch)
    result = _finish(config, run, watch, history, steps, precision, time.monotonic() - started)
    return dataclasses.replace(result, plan=plan)


def preview_plan(config: RunConfig, request: PlanRequest, run_dir: str | Path) -> Plan:
    """The plan `train` would train (the run's saved one, if it has one); trains nothing.

    Measured speeds are cached in the run directory, so the training that follows does
    not measure them again.
    """
    run_dir = Path(run_dir)
    check_inputs(config)
    init = find_init_model(config.train.init_from) if config.train.init_from else None
    config, strategy, precision = on_backend(config)
    vocabulary = _load_vocabulary(config)
    config, request = _fine_tuning(config, request, init, vocabulary)
    saved = load_plan(run_dir)
    if saved is not None and MAX_MINUTES in request.set_keys:
        return _rebudgeted(saved, config.train.max_minutes)  # as `train` will; nothing saved
    if saved is not None:
        return saved
    return plan_run(
        config, request.keys, vocabulary, strategy, precision, request.cache_dir or run_dir
    )


def on_backend(config: RunConfig) -> tuple[RunConfig, Strategy, str]:
    """The config on this process' backend, its strategy and its precision policy.

    The strategy comes first: a multi-worker one must be made before TensorFlow starts.
    """
    config = resolved(config)
    on = engine()
    strategy = on.make_strategy(config.train.strategy)
    precision = on.select_precision(config.train.precision, strategy)
    return on.adapt(config, strategy), strategy, precision


def _fine_tuning(
    config: RunConfig, planning: PlanRequest | None, init: InitModel | None, vocabulary: Vocabulary
) -> tuple[RunConfig, PlanRequest | None]:
    """With `--init-from`: the model's architecture, kept by the plan; else unchanged."""
    if init is None:
        return config, planning
    check_init_vocabulary(init, vocabulary, config.data.vocabulary)
    if planning is not None:  # the plan chooses only what fine-tuning can change
        planning = dataclasses.replace(planning, keys=planning.keys | ARCHITECTURE_KEYS)
    return with_init_architecture(config, init), planning


def resolve_plan(
    config: RunConfig,
    request: PlanRequest,
    run_dir: Path,
    vocabulary: Vocabulary,
    strategy,
    precision: str,
) -> Plan:
    """The run's saved plan, or a new one (measured, chosen, saved and logged)."""
    plan = load_plan(run_dir)
    if plan is not None:
        log.info("plan: resuming with the plan in %s", run_dir / PLAN_FILE)
        if MAX_MINUTES in request.set_keys:
            plan = _new_time_budget(plan, config.train.max_minutes, run_dir, strategy)
    else:
        plan = plan_run(
            config, request.keys, vocabulary, strategy, precision, request.cache_dir or run_dir
        )
        if strategy.is_chief():
            save_plan(plan, run_dir)
        log.info("plan: saved in %s", run_dir / PLAN_FILE)
    for line in plan.describe():
        log.info("plan: %s", line)
    return plan


def _rebudgeted(plan: Plan, minutes: float) -> Plan:
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


def _new_time_budget(plan: Plan, minutes: float, run_dir: Path, strategy) -> Plan:
    """The saved plan under a resume's `minutes`, said in one warning and saved.

    More minutes continue a finished or interrupted run from its last checkpoint, along its
    learning-rate schedule stretched to the new end; the plan's other choices stay.
    """
    new = _rebudgeted(plan, minutes)
    if new is plan:
        return plan
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
    if strategy.is_chief():
        save_plan(new, run_dir)
    return new


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
    config: RunConfig, vocabulary: Vocabulary, strategy, run_dir: Path, init: InitModel | None
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
        _log_mix(config, vocabulary)
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
        bleu = _bleu_callback(
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
    if checkpoints.latest_written() is None or steps != _checkpoint_step(checkpoints):
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
        _keep_the_better(run, bleu)
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


def _keep_the_better(run: _Run, bleu: BleuValidation | None) -> None:
    """Fine-tuning whose last validation is below its best: the final model is the best.

    The best may be the model fine-tuning started from (validated before the first
    update, step 0): a fine-tuning that only hurts then keeps it, and says so.
    """
    if bleu is None or not bleu.history or bleu.history[-1][1] >= bleu.best:
        return
    best = run.run_dir / "best" / MODEL_FILE
    if not best.is_file():
        return
    run.transformer.load_weights(best)
    last_step, last = bleu.history[-1]
    start = "the model fine-tuning started from"
    which = start if bleu.best_step == 0 else f"step {bleu.best_step}'s"
    log.info(
        "fine-tuning: validation BLEU %.2f at the end (step %d) is below %.2f at step %d: "
        "the final model is %s",
        last,
        last_step,
        bleu.best,
        bleu.best_step,
        which,
    )


def _checkpoint_step(checkpoints: Checkpoints) -> int:
    latest = checkpoints.latest_written()
    return checkpoint_number(latest) if latest else -1


# Batches of the training mix counted for the log line that reports it.
MIX_REPORT_BATCHES = 100


def _log_mix(config: RunConfig, vocabulary: Vocabulary) -> None:
    """Logs each corpus' weight and its share of the pairs actually drawn."""
    from translator.pipelines.dataset import WeightedCorpus, drawn_shares, make_mixed_dataset

    data = config.data
    corpora = data.corpora()
    mix = make_mixed_dataset(
        [WeightedCorpus(c.source, c.target, c.weight, c.tag) for c in corpora],
        vocabulary,
        data.pipeline,
    )
    shares = drawn_shares(mix, len(corpora), MIX_REPORT_BATCHES)
    total = sum(corpus.weight for corpus in corpora)
    for corpus, share in zip(corpora, shares, strict=True):
        log.info(
            "mix: %s%s: weight %.1f%%, drawn %.1f%% of the pairs of the first %d batches",
            corpus.source,
            f" (tag {corpus.tag})" if corpus.tag else "",
            100 * corpus.weight / total,
            100 * share,
            MIX_REPORT_BATCHES,
        )


def _bleu_callback(
    config, transformer, vocabulary, run_dir, chief, nan_guard, interrupt, translate_factory
):
    limit = config.eval.max_sentences
    sources = read_lines(config.data.valid_source, limit)
    references = read_lines(config.data.valid_target, limit)
    factory = translate_factory or functools.partial(greedy_translator, tag=config.data.valid_tag)

    def on_best(step: int, bleu: float) -> None:
        if chief:
            save_model_dir(
                run_dir / "best",
                transformer,
                run_dir / "vocab",
                {"step": step, "validation_bleu": bleu, "config": config.to_dict()},
            )

    return BleuValidation(
        factory(transformer, vocabulary),
        sources,
        references,
        on_best,
        config.eval.early_stopping_patience,
        nan_guard,
        interrupt,
        validate_first=bool(config.train.init_from),
        scoring=Scoring(target_lang=config.data.target_lang),
    )


def greedy_translator(
    model: Transformer, vocabulary: Vocabulary, tag: str = ""
) -> Callable[[Sequence[str]], list[str]]:
    """Greedy translation for validation BLEU, through the one decoding path."""
    config = SearchConfig(beam_size=1)
    return Translator.from_model(model, vocabulary, config, tag=tag).translate
