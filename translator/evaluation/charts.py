"""The charts of an evaluation report, and the one way this toolkit saves a chart as PNG.

    figure = new_figure(8, 4)
    axes = figure.subplots()
    ...
    save_png(figure, "chart.png")

A `Figure` on the Agg canvas, not `pyplot` (no global state, no display), written
atomically; matplotlib is imported lazily.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from translator.io import write_atomic

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from translator.evaluation.scoring import Comparison, LengthBucket

# Pixels per inch of every PNG: a 10 x 4 inch figure is 1000 x 400 pixels.
DPI = 100
# Colours of "this system" and "the baseline" in every chart (matplotlib's first two).
SYSTEM_COLOUR = "tab:blue"
BASELINE_COLOUR = "tab:orange"
# chrF2 beside BLEU in one chart.
CHRF_COLOUR = "tab:green"


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of `width` x `height` inches on the Agg canvas, constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # attaches itself: savefig renders without pyplot
    return figure


def save_png(figure: Figure, path: str | os.PathLike[str]) -> Path:
    """Renders `figure` as a PNG at `DPI` and writes it to `path` atomically.

    Returns:
        `path`, as a `Path`.
    """
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    write_atomic(path, buffer.getvalue())
    return Path(path)


def draw_source_length(
    buckets: Sequence[LengthBucket],
    path: str | os.PathLike[str],
    *,
    bleu: float | None = None,
    chrf: float | None = None,
) -> Path:
    """Bars of BLEU and chrF2 per source-length bucket, with each bucket's sentence count.

    Args:
        buckets: The non-empty buckets, shortest first (`Evaluation.by_source_length`).
        path: The PNG to write.
        bleu: The whole test set's BLEU, drawn as a dashed line (skipped if None).
        chrf: The whole test set's chrF2, likewise.

    Returns:
        `path`.
    """
    figure = new_figure(max(6.0, 1.2 * len(buckets) + 2), 5)
    axes = figure.subplots()
    positions = range(len(buckets))
    width = 0.38
    for offset, key, label, colour, overall in (
        (-width / 2, "bleu", "BLEU", SYSTEM_COLOUR, bleu),
        (width / 2, "chrf", "chrF2", CHRF_COLOUR, chrf),
    ):
        values = [getattr(b, key) for b in buckets]
        bars = axes.bar([p + offset for p in positions], values, width, label=label, color=colour)
        axes.bar_label(bars, fmt="%.1f", fontsize=8, padding=2)
        if overall is not None:
            axes.axhline(
                overall, color=colour, linestyle="--", linewidth=1, label=f"{label}, all sentences"
            )
    # The count under each bucket: a bucket of three sentences has a noisy score.
    axes.set_xticks(list(positions), [f"{b.label}\n({b.sentences:,} sent.)" for b in buckets])
    axes.set_xlabel("source length (words; a Chinese or Japanese character is one)")
    axes.set_ylabel("score")
    axes.set_xlim(-0.7, len(buckets) - 0.3)  # one bucket alone keeps bars of the same width
    axes.set_ylim(0, 108)  # room for the value above a bar of 100
    axes.set_title("BLEU and chrF2 by source length")
    axes.grid(True, axis="y", alpha=0.3)
    # Below the axes: inside, it would hide the bars of any bucket it sat over.
    figure.legend(loc="outside lower center", ncol=4, fontsize=8)
    return save_png(figure, path)


def draw_bootstrap(
    comparisons: Sequence[Comparison],
    path: str | os.PathLike[str],
    *,
    samples: int | None = None,
    seed: int | None = None,
) -> Path:
    """Histograms of both systems' scores over the paired bootstrap resamples, per metric.

    One panel per metric: both distributions on the same bins, each whole-test-set score
    as a line, and the difference and p-value above.

    Args:
        comparisons: `Evaluation.comparison`, with their resampled scores.
        path: The PNG to write.
        samples: Resamples of the test, for the title.
        seed: Its seed, for the title.

    Returns:
        `path`.
    """
    import numpy as np

    figure = new_figure(4.2 * len(comparisons), 4)
    axes_row = figure.subplots(1, len(comparisons), squeeze=False)[0]
    for axes, c in zip(axes_row, comparisons, strict=True):
        both = np.concatenate([c.system_resamples, c.baseline_resamples])
        bins = np.histogram_bin_edges(both, bins=40) if both.size else 10
        for name, resamples, score, colour in (
            ("baseline", c.baseline_resamples, c.baseline, BASELINE_COLOUR),
            ("this system", c.system_resamples, c.system, SYSTEM_COLOUR),
        ):
            axes.hist(resamples, bins=bins, alpha=0.55, color=colour, label=name)
            axes.axvline(score, color=colour, linewidth=1.5)
        mark = " *" if c.p_value < 0.05 else ""
        axes.set_title(
            f"{c.label}: difference {c.difference:+.2f}, p = {c.p_value:.4f}{mark}", fontsize=10
        )
        better = "higher" if c.higher_is_better else "lower"
        axes.set_xlabel(f"{c.label} of a resample ({better} is better)")
        axes.set_ylabel("resamples")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    settings = ", ".join(
        part
        for part in (
            None if samples is None else f"{samples:,} resamples",
            None if seed is None else f"seed {seed}",
        )
        if part
    )
    figure.suptitle(
        "Paired bootstrap resampling"
        + (f" ({settings})" if settings else "")
        + "; lines: scores on the whole test set"
    )
    return save_png(figure, path)
