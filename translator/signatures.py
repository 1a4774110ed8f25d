"""The exported SavedModel's signatures: their names and what they take and return.

TensorFlow-free, so `translator export --help`, the export's metadata and the server all
read one description.
"""

from __future__ import annotations

# TF Serving's default signature key: what a request without "signature_name" runs.
SERVING_SIGNATURE = "serving_default"
# The n-best lists, `n_best` translations per sentence, best first.
N_BEST_SIGNATURE = "n_best"


def describe_signatures(n_best: int | str = "N") -> dict[str, str]:
    """Each signature's inputs and outputs, with `n_best` as the n-best lists' size."""
    return {
        SERVING_SIGNATURE: "inputs string [batch] -> translations string [batch], "
        "scores float32 [batch]",
        N_BEST_SIGNATURE: f"inputs string [batch] -> translations string [batch, {n_best}], "
        f"scores float32 [batch, {n_best}]",
    }
