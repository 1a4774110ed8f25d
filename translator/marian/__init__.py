"""Importing Marian models (OPUS-MT, Hugging Face MarianMT) into model directories."""

from translator.marian.files import MarianImportError, read_model
from translator.marian.importer import ImportSummary, import_marian

__all__ = ["ImportSummary", "MarianImportError", "import_marian", "read_model"]
