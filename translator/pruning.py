"""A smaller model cut from a trained one: the same encoder, some of its decoder blocks.

A distillation's student at its teacher's width starts from the teacher's weights
rather than random ones (layer dropping, Sajjad et al. 2023; the decoder is cut because
decoding time is mostly the decoder's, Kasai et al. 2021): the embeddings, the output
layer and every encoder block are copied, and the student's decoder blocks are the
teacher's blocks `blocks`, in order. A student learns the teacher's translations faster
from there than from random weights (bench/RESULTS.md, "Students for CPU serving").
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from translator.artifacts import METADATA_FILE

if TYPE_CHECKING:  # pragma: no cover
    from translator.model import Transformer

_DECODER_BLOCK = re.compile(r"(^|/)decoder_block_(\d+)/")
# The model directory's metadata key that records a cut: the model and the blocks kept.
CUT_FROM = "cut_from"


def evenly_spaced_blocks(layers: int, kept: int) -> tuple[int, ...]:
    """`kept` of `layers` decoder blocks, evenly spaced from the first to the last.

    One block is the last (it feeds the final norm and the output layer, as the cut
    model's one block must).

    Raises:
        ValueError: `kept` is not between 1 and `layers`.
    """
    if not 1 <= kept <= layers:
        raise ValueError(f"cannot keep {kept} of {layers} decoder blocks")
    if kept == 1:
        return (layers - 1,)
    return tuple(round(i * (layers - 1) / (kept - 1)) for i in range(kept))


def keep_decoder_blocks(model: Transformer, blocks: tuple[int, ...]) -> Transformer:
    """A new, built model with `model`'s weights and only its decoder blocks `blocks`.

    Args:
        model: A built Transformer.
        blocks: Indices of `model`'s decoder blocks, in the new model's order.

    Returns:
        The cut model (float32 variables, the default dtype policy); every weight is
        a copy of the weight of the same name in `model`, a decoder block's from block
        `blocks[i]`.

    Raises:
        ValueError: no blocks, or an index outside `model`'s decoder.
    """
    from translator.model import Transformer

    layers = model.config.num_decoder_layers
    if not blocks or any(not 0 <= index < layers for index in blocks):
        raise ValueError(
            f"decoder blocks {list(blocks)}: the model has {layers} (0 to {layers - 1})"
        )
    cut = Transformer(dataclasses.replace(model.config, num_decoder_layers=len(blocks)))
    cut.build()
    weights = {_relative(weight.path): weight for weight in model.weights}
    for weight in cut.weights:
        name = _DECODER_BLOCK.sub(
            lambda match: f"{match[1]}decoder_block_{blocks[int(match[2])]}/",
            _relative(weight.path),
            count=1,
        )
        weight.assign(weights[name].value)
    return cut


def is_cut_model(path: str | Path) -> bool:
    """Whether the model directory `path` records a cut (its metadata's `cut_from`)."""
    metadata = Path(path) / METADATA_FILE
    try:
        return CUT_FROM in json.loads(metadata.read_text("utf-8"))
    except (OSError, ValueError):
        return False  # not a model directory, or no record: whatever loads it says why


def _relative(path: str) -> str:
    """A weight's path below its model (`decoder_block_0/ffn/...`): models' names differ."""
    return path.split("/", 1)[1]
