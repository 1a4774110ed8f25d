"""Starting a run from a trained model's weights (`--init-from`): fine-tuning.

Only the weights come from the model. The optimizer, the learning-rate schedule, the
budget and the best-checkpoint record start fresh, so a finished budgeted run can be
trained on, on a new corpus, for a new budget. The architecture is the model's (a
`model.*` setting that contradicts it is an error), and so must the vocabulary be: the
same pieces with the same ids, checked by the SentencePiece models' sha256. Dropout is
not architecture: the config or the plan may change it.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from training.config import MODEL_OVERRIDES, MODEL_PRESET, ModelSection, RunConfig
from translator.artifacts import MODEL_FILE, VOCAB_DIR, read_model_config, resolve_model_dir
from translator.config import ARCHITECTURE_FIELDS, DROPOUT_FIELDS, TransformerConfig
from translator.errors import ConfigError
from translator.marian.files import is_marian_model

if TYPE_CHECKING:  # pragma: no cover
    from training.validation import BleuValidation
    from translator.model import Transformer
    from translator.pipelines.vocabulary import Vocabulary

log = logging.getLogger(__name__)

# The `--set` keys that fix the architecture (the planner then keeps it); a fine-tuning
# run may set the dropout rates apart from its model's.
ARCHITECTURE_KEYS = frozenset(MODEL_OVERRIDES.child(field) for field in ARCHITECTURE_FIELDS)


@dataclasses.dataclass(frozen=True)
class InitModel:
    """The trained model a run starts from."""

    # What `--init-from` named: a model directory, a run directory or a .keras file.
    source: Path
    # The weights file.
    model_file: Path
    # Its vocabulary directory; None for a bare .keras file (then only sizes are checked).
    vocabulary_dir: Path | None
    # Its architecture, read from the file without TensorFlow.
    config: TransformerConfig


def find_init_model(path: str | Path) -> InitModel:
    """Resolves `--init-from` and reads the model's architecture (TensorFlow-free).

    Raises:
        ConfigError: naming `train.init_from` and what is wrong with the path.
    """
    source = Path(path)
    if is_marian_model(source):
        raise ConfigError(
            f"train.init_from: {source} is a Marian model; import it first (translator import "
            f"marian {source} --out MODEL_DIR), or give it to `translator recipe --init-from`"
        )
    try:
        if source.is_file():
            vocabulary = source.parent / VOCAB_DIR
            model_file = source
            vocabulary_dir = vocabulary if vocabulary.is_dir() else None
        else:
            directory = resolve_model_dir(source)
            model_file, vocabulary_dir = directory / MODEL_FILE, directory / VOCAB_DIR
        config = read_model_config(model_file)
    except Exception as error:  # ModelDirError and OSError name the path
        raise ConfigError(f"train.init_from: {error}") from None
    return InitModel(source, model_file, vocabulary_dir, config)


def with_init_architecture(config: RunConfig, init: InitModel) -> RunConfig:
    """`config` with the model section set to `init`'s architecture.

    The config's dropout settings are kept (the model's where it sets none).

    Raises:
        ConfigError: naming the first `model.*` setting that contradicts the model.
    """
    model = config.model
    sizes = (init.config.source_vocab_size, init.config.target_vocab_size)
    wanted = model.transformer_config(*sizes)
    # A preset other than the default sets every field; else only the overrides given do.
    set_by_user = (
        ARCHITECTURE_FIELDS
        if model.preset != ModelSection().preset
        else [field for field in ARCHITECTURE_FIELDS if field in model.overrides]
    )
    for field in set_by_user:
        ours, theirs = getattr(wanted, field), getattr(init.config, field)
        if ours != theirs:
            key = MODEL_OVERRIDES.child(field) if field in model.overrides else MODEL_PRESET
            raise ConfigError(
                f"{key}: sets {field} {ours!r}, but the --init-from model "
                f"{init.source} has {field} {theirs!r}; leave model.* unset to fine-tune it"
            )
    fields = {name: getattr(init.config, name) for name in ARCHITECTURE_FIELDS + DROPOUT_FIELDS}
    fields.update({k: v for k, v in model.overrides.items() if k in DROPOUT_FIELDS})
    return dataclasses.replace(config, model=ModelSection(model.preset, fields))


def check_init_vocabulary(init: InitModel, vocabulary: Vocabulary, vocabulary_dir: str) -> None:
    """Refuses a run vocabulary other than the model's.

    Raises:
        ConfigError: naming both vocabularies by their sha256 (or sizes, for a bare
            .keras file).
    """
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    expected = (init.config.source_vocab_size, init.config.target_vocab_size)
    if init.vocabulary_dir is None:
        if sizes != expected:
            raise ConfigError(
                f"data.vocabulary: {vocabulary_dir} has sizes {sizes}, the --init-from model "
                f"{init.source} was trained with sizes {expected}"
            )
        return
    from translator.pipelines.vocabulary import load_vocabulary

    theirs = load_vocabulary(init.vocabulary_dir)
    ours_hash = (vocabulary.source_sha256, vocabulary.target_sha256)
    theirs_hash = (theirs.source_sha256, theirs.target_sha256)
    if ours_hash != theirs_hash:
        raise ConfigError(
            f"data.vocabulary: {vocabulary_dir} (sha256 {_short(ours_hash)}) is not the "
            f"vocabulary of the --init-from model {init.source} ({init.vocabulary_dir}, "
            f"sha256 {_short(theirs_hash)}); fine-tuning needs the model's own vocabulary"
        )


def load_init_weights(transformer: Transformer, init: InitModel) -> None:
    """Copies the model's weights into the run's (built) Transformer."""
    import keras

    import translator.losses  # noqa: F401  (registers serializable classes)

    trained = keras.saving.load_model(init.model_file, compile=False)
    transformer.set_weights(trained.get_weights())


def _short(hashes: tuple[str, str]) -> str:
    source, target = (value[:12] for value in hashes)
    return source if source == target else f"{source}/{target}"


def keep_the_better(transformer: Transformer, run_dir: Path, bleu: BleuValidation | None) -> None:
    """Fine-tuning whose last validation is below its best: the final model is the best.

    The best may be the model fine-tuning started from (validated before the first
    update, step 0): a fine-tuning that only hurts then keeps it, and says so.
    """
    if bleu is None or not bleu.history or bleu.history[-1][1] >= bleu.best:
        return
    best = run_dir / "best" / MODEL_FILE
    if not best.is_file():
        return
    transformer.load_weights(best)
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
