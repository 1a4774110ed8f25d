"""Shared pytest setup: quiet TensorFlow, fixed seeds."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
    yield


@pytest.fixture(autouse=True)
def _speed_cache(tmp_path_factory, monkeypatch):
    """Each test its own machine speed cache (the planner's), also in its subprocesses."""
    monkeypatch.setenv("TRANSLATOR_CACHE_DIR", str(tmp_path_factory.mktemp("speed-cache")))
