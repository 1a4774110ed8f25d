"""The exported SavedModel's signatures: their names and what they take and return.

TensorFlow-free, so `translator export --help`, the export's metadata and the server all
read one description; and the metadata file beside them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# The export's settings and model metadata, in `<version>/assets.extra/`.
METADATA_FILE = "translator.json"

# TF Serving's default signature key: what a request without "signature_name" runs.
SERVING_SIGNATURE = "serving_default"
# The n-best lists, `n_best` translations per sentence, best first.
N_BEST_SIGNATURE = "n_best"
# The same two with a second input, `tags`: one tag per sentence ("" for the export's own).
# Exported when the vocabulary has tags.
TAGGED_SIGNATURE = "tagged"
TAGGED_N_BEST_SIGNATURE = "tagged_n_best"
# The tagged signature of each untagged one.
TAGGED_OF = {SERVING_SIGNATURE: TAGGED_SIGNATURE, N_BEST_SIGNATURE: TAGGED_N_BEST_SIGNATURE}
# The input keys: the sentences, and the tagged and prefixed signatures' second input.
INPUTS_KEY = "inputs"
TAGS_KEY = "tags"
PREFIXES_KEY = "prefixes"
# The 1-best translation continuing a target prefix per sentence ("" for none).
PREFIXED_SIGNATURE = "prefixed"
# The best translation and its word alignment: Pharaoh pairs "i-j", source word i to
# target word j, from 0 (`translator.alignment`).
ALIGNED_SIGNATURE = "aligned"
# Sampled translations (`translator export --sampling ...`), best first.
SAMPLE_SIGNATURE = "sample"


def signature_of(n_best: bool, tagged: bool) -> str:
    """The signature giving each sentence's best (or every) hypothesis, tagged or not."""
    untagged = N_BEST_SIGNATURE if n_best else SERVING_SIGNATURE
    return TAGGED_OF[untagged] if tagged else untagged


def describe_signatures(
    n_best: int | str = "N", tagged: bool = True, samples: int | str | None = "S"
) -> dict[str, str]:
    """Each signature's inputs and outputs, with `n_best` as the n-best lists' size.

    `tagged`: include the tagged signatures (an export whose vocabulary has tags).
    `samples`: the draws per sentence of the sample signature (None: none exported).
    """
    best = "translations string [batch], scores float32 [batch]"
    lists = f"translations string [batch, {n_best}], scores float32 [batch, {n_best}]"
    described = {
        SERVING_SIGNATURE: f"inputs string [batch] -> {best}",
        N_BEST_SIGNATURE: f"inputs string [batch] -> {lists}",
    }
    if tagged:
        both = "inputs string [batch], tags string [batch]"
        described[TAGGED_SIGNATURE] = f"{both} -> {best}"
        described[TAGGED_N_BEST_SIGNATURE] = f"{both} -> {lists}"
    described[PREFIXED_SIGNATURE] = f"inputs string [batch], prefixes string [batch] -> {best}"
    described[ALIGNED_SIGNATURE] = f"inputs string [batch] -> {best}, alignments string [batch]"
    if samples is not None:
        drawn = f"translations string [batch, {samples}], scores float32 [batch, {samples}]"
        described[SAMPLE_SIGNATURE] = f"inputs string [batch] -> {drawn}"
    return described


def read_metadata(version_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """An export's `assets.extra/translator.json` ({} for a SavedModel written elsewhere)."""
    path = Path(version_dir) / "assets.extra" / METADATA_FILE
    return json.loads(path.read_text("utf-8")) if path.is_file() else {}
