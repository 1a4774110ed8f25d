"""A run's TensorBoard scalars: written, read back, and drawn as curves in one PNG.

`callbacks.Summaries` writes them while training (`<run>/logs/train` and
`<run>/logs/validation`, one point per logging interval or validation, against the
optimizer's update count) through tensorboardX, which needs no TensorFlow: a JAX run on
an accelerator machine has none. Reading parses the same event files (TFRecord framing,
TensorBoard's `Event` protocol buffer), those of `tf.summary` included (older runs), so
the picture at the end of a run shows what TensorBoard shows.
"""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError
from tensorboardX import SummaryWriter
from tensorboardX.proto.event_pb2 import Event

from translator.evaluation.charts import new_figure, save_png

# The subdirectories of a run's log directory: one event stream each.
SPLITS = ("train", "validation")
# The picture of a finished run's curves, in its run directory.
CURVES_FILE = "curves.png"

# {split: {tag: [(step, value), ...] in the order written}}
Scalars = dict[str, dict[str, list[tuple[int, float]]]]


def read_scalars(log_dir: str | Path) -> Scalars:
    """Every scalar summary under `log_dir`/{train,validation}, by split and tag."""
    return {split: _read_split(Path(log_dir) / split) for split in SPLITS}


def last_step(split_dir: str | Path) -> int:
    """The highest step of any scalar in one split's event files (-1 when none)."""
    points = _read_split(Path(split_dir)).values()
    return max((step for tag in points for step, _ in tag), default=-1)


class EventWriter:
    """One split's event file: scalars against a step, flushed at each write."""

    _opened = itertools.count()

    def __init__(self, split_dir: str | Path):
        # The file's name has the time in whole seconds: the process and a count make it
        # new even when the same second opens another (tensorboardX would truncate it).
        suffix = f".{os.getpid()}.{next(self._opened):04d}"
        self._writer = SummaryWriter(str(split_dir), flush_secs=3600, filename_suffix=suffix)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, float(value), step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def _read_split(split_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of one split's event files.

    The files are read in name order (their names start with the creation time), so
    the points of a resumed run follow those of the runs before it.
    """
    tags: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(split_dir.glob("events.out.tfevents.*")):
        for event in _events(path):
            for value in event.summary.value:
                if value.HasField("tensor"):  # tf.summary's scalars
                    number = _tensor_scalar(value.tensor)
                else:  # tensorboardX's (and TF1's) simple values
                    number = float(value.simple_value)
                tags.setdefault(value.tag, []).append((int(event.step), number))
    return tags


def _events(path: Path):
    """The `Event`s of one file; a record cut short (a killed writer) ends it."""
    data = path.read_bytes()
    offset = 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)  # then the length's CRC
        start, end = offset + 12, offset + 12 + length
        if end + 4 > len(data):
            return
        try:
            yield Event.FromString(data[start:end])
        except DecodeError:
            return
        offset = end + 4  # the data's CRC


# TensorProto dtypes of a scalar summary: DT_FLOAT, DT_DOUBLE.
_TENSOR_DTYPES = {1: np.float32, 2: np.float64}


def _tensor_scalar(tensor) -> float:
    """The number in a scalar `TensorProto` (`tf.summary.scalar`'s value)."""
    if tensor.tensor_content:
        return float(np.frombuffer(tensor.tensor_content, _TENSOR_DTYPES[tensor.dtype])[0])
    return float((tensor.float_val or tensor.double_val)[0])


# (split, tag, title) of each row of the curves figure.
_PANELS = (
    ("train", "loss", "training loss (per target token)"),
    ("train", "learning_rate", "learning rate"),
    ("validation", "bleu", "validation BLEU (greedy)"),
)


def write_curves(log_dir: str | Path, path: str | Path) -> Path | None:
    """Draws the run's curves, against updates and against minutes, into a PNG.

    Three rows (training loss, learning rate, validation BLEU) by two columns (x: the
    optimizer's updates; x: the budget's minutes, resumes included). A panel whose
    scalar was never written (a run without validation) says so instead of a curve.

    Returns:
        `path`, or None when the logs hold no point at all (nothing to draw).
    """
    scalars = read_scalars(log_dir)
    if not any(scalars[split] for split in SPLITS):
        return None
    figure = new_figure(10, 9)
    figure.suptitle(f"{Path(log_dir).resolve().parent.name}: training curves")
    axes = figure.subplots(len(_PANELS), 2, squeeze=False)
    for row, (split, tag, title) in enumerate(_PANELS):
        points = scalars[split].get(tag, [])
        minutes = dict(scalars[split].get("minutes", []))
        for column, label in enumerate(("updates", "minutes")):
            ax = axes[row][column]
            ax.set_title(title, fontsize=10)
            ax.set_xlabel(label)
            ax.grid(True, alpha=0.3)
            if column == 0:
                xs, ys = [s for s, _ in points], [v for _, v in points]
            else:
                timed = [(minutes[s], v) for s, v in points if s in minutes]
                xs, ys = [m for m, _ in timed], [v for _, v in timed]
            if not xs:
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
                continue
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
            if tag == "learning_rate":
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    return save_png(figure, path)
