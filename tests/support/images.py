"""Checks of the pictures the toolkit draws: real PNGs with something on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def assert_png(path: str | Path, min_bytes: int = 10_000, min_size: int = 200) -> np.ndarray:
    """Asserts `path` decodes as a PNG of at least `min_size` pixels a side, not blank.

    Returns:
        The decoded pixels, [height, width, channels].
    """
    from PIL import Image

    path = Path(path)
    assert path.is_file(), f"{path}: missing"
    assert path.stat().st_size >= min_bytes, f"{path}: {path.stat().st_size} bytes"
    with Image.open(path) as image:
        assert image.format == "PNG", f"{path}: {image.format}"
        pixels = np.asarray(image.convert("RGB"))
    height, width, _ = pixels.shape
    assert min(height, width) >= min_size, f"{path}: {width}x{height}"
    # Drawn, not blank: many distinct colours (lines, text, antialiasing).
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) >= 16, f"{path}: {len(colours)} colours"
    return pixels


def markdown_images(path: str | Path) -> dict[str, Path]:
    """The images a Markdown file links (`![alt](target)`): {target: path beside the file}."""
    import re

    path = Path(path)
    targets = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", path.read_text(encoding="utf-8"))
    return {target: path.parent / target for target in targets}
