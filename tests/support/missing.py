"""What a test needs and may not find: skipped on a developer's machine, failed under CI.

CI (`CI` set, as `.ci/run` runs) installs every dev extra and carries the Multi30k
mirror, so there a missing one is a broken CI, one line naming what is missing, never a
silent skip. Hardware skips (AVX-512, oneDNN) are not this: they stay skips.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from tests.support.corpora import MULTI30K_FILES, find_multi30k

# What installs a dev dependency.
DEV_EXTRA = 'pip install -e ".[dev]"'


def missing(message: str, module_level: bool = False) -> NoReturn:
    """Skips the test (or module) with `message`; under CI fails with it instead."""
    if os.environ.get("CI"):
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(message, allow_module_level=module_level)


def need_module(name: str, install: str, module_level: bool = False) -> ModuleType:
    """The module `name`, imported; `missing` (naming `install`) if it is not installed."""
    if importlib.util.find_spec(name) is None:
        missing(f"needs {name}: {install}", module_level)
    return importlib.import_module(name)


def need_multi30k() -> Path:
    """The Multi30k mirror's directory; `missing` if there is none."""
    directory = find_multi30k()
    if directory is None:
        missing(
            "Multi30k not found: set TRANSLATOR_DATA_MIRROR to a directory with "
            f"{', '.join(MULTI30K_FILES)} (or put them in <repo>/../shared/data/multi30k)"
        )
    return directory
