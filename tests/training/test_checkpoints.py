"""A damaged checkpoint: the resume falls back to the newest one that reads, and says so."""

import logging
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from training.checkpoints import CheckpointError, Checkpoints
from training.engines.tf_strategy import TfStrategy


def _state():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _checkpoints(directory):
    model, optimizer = _state()
    return Checkpoints(
        directory, model, optimizer, 3, TfStrategy(tf.distribute.get_strategy())
    ), model


@pytest.fixture
def saved(tmp_path):
    """Checkpoints at steps 10 and 20, and the weights each holds."""
    checkpoints, model = _checkpoints(tmp_path / "checkpoints")
    weights = {}
    for step in (10, 20):
        model.set_weights([np.full(w.shape, step, "float32") for w in model.get_weights()])
        checkpoints.optimizer.iterations.assign(step)
        checkpoints.save()
        weights[step] = model.get_weights()
    return tmp_path / "checkpoints", weights


def _damage(directory, how):
    data = next(directory.glob("ckpt-20.data-*"))
    if how == "truncated":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif how == "garbage":
        data.write_bytes(b"\x00garbage" * 64)
    elif how == "missing index":
        (directory / "ckpt-20.index").unlink()


@pytest.mark.parametrize("how", ["truncated", "garbage", "missing index"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_older_one(saved, how, caplog):
    directory, weights = saved
    _damage(directory, how)
    checkpoints, model = _checkpoints(directory)
    with caplog.at_level(logging.WARNING, logger="training.checkpoints"):
        assert checkpoints.restore_latest() == 10
    for got, want in zip(model.get_weights(), weights[10], strict=True):
        np.testing.assert_array_equal(got, want)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "ckpt-20 does not read" in warning and "trying an older one" in warning


def test_intact_checkpoints_resume_from_the_newest(saved):
    directory, weights = saved
    checkpoints, model = _checkpoints(directory)
    assert checkpoints.restore_latest() == 20
    np.testing.assert_array_equal(model.get_weights()[0], weights[20][0])


def test_when_no_checkpoint_reads_it_is_one_error_naming_each(saved):
    directory, _ = saved
    for data in directory.glob("ckpt-*.data-*"):
        data.write_bytes(b"garbage")
    (directory / "checkpoint").unlink()  # the state file too: the files on disk are found
    with pytest.raises(CheckpointError, match=r"no checkpoint reads \(ckpt-20: .*; ckpt-10: "):
        _checkpoints(directory)[0].restore_latest()
    shutil.rmtree(directory)
    assert _checkpoints(directory)[0].restore_latest() == 0  # none at all: a fresh start
