"""Fixtures of the benchmarks' tests: Multi30k as the benchmarks find it, a fixed footer."""

from pathlib import Path

import pytest

from bench import harness
from tests.support.bench import COMMAND, DATE, MACHINE
from tests.support.missing import missing


@pytest.fixture
def multi30k() -> Path:
    """The Multi30k directory the benchmarks use (skips the test if there is none)."""
    try:
        return harness.find_data(None)
    except SystemExit:
        missing("Multi30k not found (set TRANSLATOR_DATA_MIRROR)")


@pytest.fixture
def fixed_footer(monkeypatch):
    """The command, date and machine lines without TensorFlow or the real clock."""
    monkeypatch.setattr(harness, "command_line", lambda: COMMAND)
    monkeypatch.setattr(harness, "today", lambda: DATE)
    monkeypatch.setattr(harness, "machine_summary", lambda: MACHINE)
    monkeypatch.setattr(harness, "LOAD_AT_START", "0.1/0.2/0.3")
