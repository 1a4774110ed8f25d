"""Importing Marian models (OPUS-MT, Hugging Face MarianMT) into model directories."""

from translator.marian.files import MarianImportError, is_marian_model, read_model
from translator.marian.importer import ImportSummary, import_marian

__all__ = ["ImportSummary", "MarianImportError", "import_marian", "is_marian_model", "read_model"]
