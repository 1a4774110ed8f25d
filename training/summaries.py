"""A run's TensorBoard scalars read back, and drawn as curves in one PNG.

`callbacks.Summaries` writes them while training (`<run>/logs/train` and
`<run>/logs/validation`, one point per logging interval or validation, against the
optimizer's update count); this module reads the event files with TensorFlow's own
reader, so the picture at the end of a run shows exactly what TensorBoard shows.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

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


def _read_split(split_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of one split's event files.

    The files are read in name order (their names start with the creation time), so
    the points of a resumed run follow those of the runs before it.
    """
    tags: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(split_dir.glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.HasField("tensor"):
                    number = float(tf.make_ndarray(value.tensor))
                else:  # TF1-style simple values
                    number = float(value.simple_value)
                tags.setdefault(value.tag, []).append((int(event.step), number))
    return tags


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
