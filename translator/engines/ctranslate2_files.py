"""The layout of a CTranslate2 export: what makes a directory one, and the package import.

    OUT/model.bin, config.json, *vocabulary.json   CTranslate2's model
    OUT/vocab/                                      our SentencePiece vocabulary
    OUT/translator.json                             the model's TransformerConfig and facts

Imports neither TensorFlow nor CTranslate2 (an optional extra).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from translator.artifacts import VOCAB_DIR, ModelDirError
from translator.errors import TranslatorError

if TYPE_CHECKING:  # pragma: no cover
    from translator.pipelines.tokenizer import SentencePieceTokenizer

# What marks a directory as ours: the TransformerConfig and facts of the export.
INFO_FILE = "translator.json"
# CTranslate2's weights file.
MODEL_BIN = "model.bin"


class CTranslate2NotInstalledError(TranslatorError):
    """The optional ctranslate2 package is not installed."""


def import_ctranslate2() -> ModuleType:
    """The ctranslate2 module, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise CTranslate2NotInstalledError(
            'CTranslate2 is not installed: pip install -e ".[ctranslate2]" '
            "(or pip install ctranslate2)"
        ) from None
    return ctranslate2


def is_ctranslate2_dir(path: str | Path) -> bool:
    """True for a directory written by `export_ctranslate2`."""
    path = Path(path)
    return (path / INFO_FILE).is_file() and (path / MODEL_BIN).is_file()


def check_ctranslate2_dir(path: str | Path) -> Path:
    """The directory, or `ModelDirError` saying what is missing."""
    path = Path(path)
    for name in (MODEL_BIN, INFO_FILE, VOCAB_DIR):
        if not (path / name).exists():
            raise ModelDirError(
                f"{path}: not a CTranslate2 export of `translator export --format "
                f"ctranslate2` (no {name})"
            )
    return path


def vocabulary_pieces(tokenizer: SentencePieceTokenizer) -> list[str]:
    """The pieces of a SentencePiece tokenizer, by id (CTranslate2 works on pieces)."""
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
