"""Errors of the text pipeline: each names the file (and line or count) at fault.

They derive from `PipelineError`, so a command line handler catches one type and
prints the message; none of them wraps a traceback the user would need to read.
"""

from __future__ import annotations

from translator.errors import TranslatorError


class PipelineError(TranslatorError):
    """Base of every error about data, vocabularies or downloads the user can fix."""


class CorpusError(PipelineError, ValueError):
    """A corpus file is missing, unreadable, not UTF-8, or misaligned with its pair."""


class VocabularyError(PipelineError, ValueError):
    """A vocabulary cannot be built or loaded (bad settings, missing or altered files)."""


class DownloadError(PipelineError, RuntimeError):
    """A dataset file cannot be fetched, or its bytes do not match the expected sha256."""
