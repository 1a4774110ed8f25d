"""Errors of the text pipeline: each names the file (and line or count) at fault.

They derive from `PipelineError`, so a command line handler catches one type and
prints the message; none of them wraps a traceback the user would need to read.
"""

from __future__ import annotations

# The two that `translator.io` raises too live beside the base error, below the pipelines.
from translator.errors import CorpusError, PipelineError

__all__ = ["CorpusError", "DownloadError", "PipelineError", "VocabularyError"]


class VocabularyError(PipelineError, ValueError):
    """A vocabulary cannot be built or loaded (bad settings, missing or altered files)."""


class DownloadError(PipelineError, RuntimeError):
    """A dataset file cannot be fetched, or its bytes do not match the expected sha256."""
