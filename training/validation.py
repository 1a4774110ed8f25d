"""Validation BLEU during training.

The callback that translates the validation set with the model being trained, and the
greedy translator it uses by default.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import keras

from training.callbacks import Interrupt, NanGuard, update_step
from training.config import RunConfig
from translator.artifacts import save_model_dir
from translator.evaluation.metrics import Scoring
from translator.inference import Translator
from translator.io import read_lines
from translator.model import Transformer
from translator.pipelines.vocabulary import Vocabulary
from translator.search import SearchConfig

log = logging.getLogger(__name__)

# Builds the validation translator from the model and the vocabulary.
TranslateFactory = Callable[[Transformer, Vocabulary], Callable[[Sequence[str]], list[str]]]


class BleuValidation(keras.callbacks.Callback):
    """Translates the validation sources, scores them with sacreBLEU, keeps the best.

    Adds `val_bleu` to the epoch logs (so TensorBoard and the progress bar show it),
    calls `on_best(step, bleu)` when BLEU improves, and stops training after `patience`
    validations without improvement (0 = never).

    Args:
        translate: Maps source sentences to detokenized translations.
        sources: Validation source sentences.
        references: Their reference translations.
        on_best: Called with (step, bleu) on a new best, e.g. to save the model.
        patience: Early-stopping patience in validations; 0 disables it.
        nan_guard: Validation is skipped once the loss went NaN.
        interrupt: ... and once Ctrl-C stopped training.
        validate_first: Also validate before the first update (fine-tuning: the score of
            the model it starts from, which then counts as a best like any other).
        scoring: The target language's BLEU tokenizer (zh, ja-mecab, ko-mecab, 13a).
    """

    every_steps = 0  # it acts at epoch (validation) ends only

    def __init__(
        self,
        translate: Callable[[Sequence[str]], list[str]],
        sources: Sequence[str],
        references: Sequence[str],
        on_best: Callable[[int, float], None],
        patience: int,
        nan_guard: NanGuard,
        interrupt: Interrupt | None = None,
        validate_first: bool = False,
        scoring: Scoring | None = None,
    ):
        super().__init__()
        self.validate_first = validate_first
        self.bleu = (scoring or Scoring()).metrics()["bleu"]
        self.translate = translate
        self.sources = list(sources)
        self.references = list(references)
        self.on_best = on_best
        self.patience = patience
        self.nan_guard = nan_guard
        self.interrupt = interrupt
        self.best = -1.0
        self.best_step = 0
        self.since_best = 0
        self.history: list[tuple[int, float]] = []
        self.stopped_early = False

    def on_train_begin(self, logs=None):
        if self.validate_first and update_step(self.model) == 0:
            self.on_epoch_end(-1)

    def on_epoch_end(self, epoch, logs=None):
        if self.nan_guard.failed_step is not None:
            return
        if self.interrupt is not None and self.interrupt.step is not None:
            return
        started = time.monotonic()
        hypotheses = self.translate(self.sources)
        bleu = float(self.bleu.corpus_score(hypotheses, [self.references]).score)
        step = update_step(self.model)
        self.history.append((step, bleu))
        if logs is not None:
            logs["val_bleu"] = bleu
        log.info("step %d: validation BLEU %.2f (%.1fs)", step, bleu, time.monotonic() - started)
        if bleu > self.best:
            self.best, self.best_step, self.since_best = bleu, step, 0
            self.on_best(step, bleu)
        else:
            self.since_best += 1
            if self.patience and self.since_best >= self.patience:
                log.info("early stopping: no BLEU gain in %d validations", self.patience)
                self.stopped_early = True
                self.model.stop_training = True


def bleu_callback(
    config: RunConfig,
    transformer: Transformer,
    vocabulary: Vocabulary,
    run_dir: Path,
    chief: bool,
    nan_guard: NanGuard,
    interrupt: Interrupt,
    translate_factory: TranslateFactory | None,
) -> BleuValidation:
    """The run's `BleuValidation`: its validation set, its translator, its best model."""
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
