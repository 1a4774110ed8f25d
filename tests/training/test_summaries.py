"""A run's TensorBoard events: written by tensorboardX, read back without TensorFlow."""

import time

import numpy as np
import tensorflow as tf

from training.summaries import EventWriter, read_scalars


def test_events_of_tf_summary_and_of_the_writer_read_back_in_order(tmp_path):
    """A run resumed across versions keeps its older `tf.summary` points (tensors) before
    the writer's (simple values); two writers opened in the same second keep both files
    (tensorboardX names a file by the second, and would truncate the first)."""
    old = tf.summary.create_file_writer(str(tmp_path / "train"))
    with old.as_default(step=5):
        tf.summary.scalar("loss", 2.5)
        tf.summary.scalar("learning_rate", 1e-4)
    old.close()
    time.sleep(1.1)  # (file names sort by their second)
    for step, loss in ((10, 2.0), (20, 1.5)):  # one second, two writers
        writer = EventWriter(tmp_path / "train")
        writer.write(step, {"loss": loss, "learning_rate": 3e-4})
        writer.close()
    scalars = read_scalars(tmp_path)["train"]
    assert scalars["loss"] == [(5, 2.5), (10, 2.0), (20, 1.5)]
    steps, rates = zip(*scalars["learning_rate"], strict=True)
    assert steps == (5, 10, 20)
    np.testing.assert_allclose(rates, [1e-4, 3e-4, 3e-4], rtol=1e-6)


def test_a_record_cut_short_ends_the_file_without_an_error(tmp_path):
    """A killed writer can leave half a record: the points before it are read."""
    writer = EventWriter(tmp_path / "validation")
    writer.write(1, {"bleu": 10.0})
    writer.write(2, {"bleu": 12.0})
    writer.close()
    (path,) = (tmp_path / "validation").iterdir()
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    assert read_scalars(tmp_path)["validation"]["bleu"] == [(1, 10.0)]
