"""Errors of the text pipeline: each names the file (and line or count) at fault.

They derive from `PipelineError`, so a command line handler catches one type and
prints the message; none of them wraps a traceback the user would need to read.
"""

from __future__ import annotations

# The two that `translator.io` raises too live beside the base error, below the pipelines.
from translator.errors import CorpusError, PipelineError

__all__ = ["CorpusError", "DownloadError", "PipelineError", "VocabularyError"]


class VocabularyError(PipelineError, ValueError):
    """A vocabulary cannot be built or loaded (bad settings, missing or altered files).

    Args:
        message: What went wrong, naming the file or setting.
        supported_size: When the corpus cannot fill the size asked for, the most pieces
            SentencePiece says it supports (else None).
    """

    def __init__(self, message: str, supported_size: int | None = None):
        super().__init__(message)
        self.supported_size = supported_size


class DownloadError(PipelineError, RuntimeError):
    """A dataset file cannot be fetched, or its bytes do not match the expected sha256."""
