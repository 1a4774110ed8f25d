"""The trained-model directory: what `translate`, `evaluate` and `export` load.

A model directory holds:

    model.keras      the Transformer (keras.saving format)
    vocab/           the vocabulary it was trained with (as written by build-vocab)
    metadata.json    how it was made: step, validation scores, run config, sources

Commands also accept a training run directory, whose final model is `<run>/model/`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from translator.errors import TranslatorError
from translator.io import atomic_directory

if TYPE_CHECKING:  # pragma: no cover
    from translator.config import TransformerConfig
    from translator.model import Transformer
    from translator.pipelines.vocabulary import Vocabulary

MODEL_FILE = "model.keras"
VOCAB_DIR = "vocab"
METADATA_FILE = "metadata.json"
RUN_MODEL_DIR = "model"


class ModelDirError(TranslatorError, ValueError):
    """A path is not a usable model directory; the message says why."""


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """A model directory read without building the model: what a cached search needs."""

    # The model directory itself.
    directory: Path
    # The vocabulary it was trained with.
    vocabulary: Vocabulary
    # Contents of metadata.json.
    metadata: dict[str, Any]
    # The architecture, from the `.keras` file's config.
    model_config: TransformerConfig

    @property
    def model_file(self) -> Path:
        """The weights file (for a report's checksum)."""
        return self.directory / MODEL_FILE


@dataclasses.dataclass(frozen=True)
class TrainedModel(ModelFiles):
    """A loaded model directory: its files and the model built from them."""

    # The Transformer, built, weights loaded.
    model: Transformer

    @classmethod
    def of(
        cls, model: Transformer, vocabulary: Vocabulary, metadata: dict[str, Any], directory: Path
    ) -> TrainedModel:
        """A `TrainedModel` of a model in memory (its architecture from the model)."""
        return cls(Path(directory), vocabulary, metadata, model.config, model)


def save_model_dir(
    directory: str | Path,
    model: Transformer,
    vocabulary_dir: str | Path,
    metadata: dict[str, Any],
) -> Path:
    """Writes a model directory atomically (a temporary sibling, then a rename).

    Args:
        directory: Where the model directory goes.
        model: The `Transformer`.
        vocabulary_dir: Its vocabulary directory (copied).
        metadata: JSON-serializable facts about the model.

    Returns:
        The directory.
    """
    with atomic_directory(directory) as staging:
        model.save(staging / MODEL_FILE)
        shutil.copytree(vocabulary_dir, staging / VOCAB_DIR)
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=str) + "\n")
    return Path(directory)


def resolve_model_dir(path: str | Path) -> Path:
    """The model directory for a model directory or a training run directory.

    Raises:
        ModelDirError: naming the path and what is missing.
    """
    path = Path(path)
    if not path.exists():
        raise ModelDirError(f"{path}: no such directory")
    if (path / MODEL_FILE).is_file():
        return path
    if (path / RUN_MODEL_DIR / MODEL_FILE).is_file():
        return path / RUN_MODEL_DIR
    raise ModelDirError(
        f"{path}: neither a model directory (no {MODEL_FILE}) nor a finished training run "
        f"(no {RUN_MODEL_DIR}/{MODEL_FILE}); has `translator train` finished?"
    )


def model_tags(path: str | Path | None) -> tuple[str, ...]:
    """The tags of a model directory's vocabulary, read without TensorFlow; () if none."""
    from translator.pipelines.vocab import METADATA_FILE, VocabularyMetadata

    try:
        vocab = resolve_model_dir(path) / VOCAB_DIR / METADATA_FILE  # type: ignore[arg-type]
        return VocabularyMetadata.from_json(vocab.read_text("utf-8")).tags
    except (TypeError, OSError, TranslatorError):
        return ()  # not a model directory: whatever loads it says why


def model_languages(metadata: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The source and target languages a model's record states, None where it does not.

    Its run's `data.source_lang` and `data.target_lang`, else an import's (OPUS-MT states
    them), else the suffixes of the corpus it trained on (`train.en.gz`).
    """
    from translator.languages import language_of

    data = (metadata.get("config") or {}).get("data") or {}
    imported = (metadata.get("imported_from") or {}).get("languages") or (None, None)
    first = next(iter(data.get("train") or ()), {})  # a mix's first corpus
    files = [data.get(f"train_{side}") or first.get(side) for side in ("source", "target")]
    return tuple(
        data.get(f"{side}_lang") or recorded or language_of(file or "") or None
        for side, recorded, file in zip(("source", "target"), imported, files, strict=True)
    )  # type: ignore[return-value]


def read_model_config(model_file: str | Path) -> TransformerConfig:
    """The `TransformerConfig` of a saved `.keras` Transformer, read without TensorFlow.

    Raises:
        ModelDirError: the file is not a saved translator Transformer.
    """
    import zipfile

    from translator.config import TransformerConfig

    try:
        with zipfile.ZipFile(model_file) as archive:
            saved = json.loads(archive.read("config.json"))
        return TransformerConfig.from_dict(saved["config"]["config"])
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise ModelDirError(f"{model_file}: not a saved translator Transformer ({error})") from None


def read_model_dir(path: str | Path) -> ModelFiles:
    """Reads a model directory's vocabulary, metadata and architecture, not its weights.

    Raises:
        ModelDirError: a missing file, or a vocabulary whose sizes differ from the model's.
    """
    from translator.pipelines.vocabulary import load_vocabulary

    directory = resolve_model_dir(path)
    if not (directory / VOCAB_DIR).is_dir():
        raise ModelDirError(f"{directory}: no {VOCAB_DIR}/ directory")
    config = read_model_config(directory / MODEL_FILE)
    vocabulary = load_vocabulary(directory / VOCAB_DIR)
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    expected = (config.source_vocab_size, config.target_vocab_size)
    if sizes != expected:
        raise ModelDirError(
            f"{directory}: vocabulary sizes {sizes} do not match the model's {expected}"
        )
    metadata_path = directory / METADATA_FILE
    metadata = json.loads(metadata_path.read_text()) if metadata_path.is_file() else {}
    return ModelFiles(directory, vocabulary, metadata, config)


def load_model_dir(path: str | Path) -> TrainedModel:
    """Loads a model directory (or a run directory's final model).

    Raises:
        ModelDirError: a missing file, or a vocabulary whose sizes differ from the model's.
    """
    return load_model(read_model_dir(path))


def load_model(files: ModelFiles) -> TrainedModel:
    """Builds the model of a model directory already read (`read_model_dir`).

    Raises:
        ModelDirError: the weights file is not a translator Transformer.
    """
    import keras

    import translator.losses  # noqa: F401  (registers serializable classes)
    from translator.model import Transformer

    model = keras.saving.load_model(files.model_file, compile=False)
    if not isinstance(model, Transformer):
        raise ModelDirError(f"{files.model_file}: not a translator Transformer")
    return TrainedModel(**vars(files), model=model)
