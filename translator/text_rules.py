"""The text path's rules that need no TensorFlow.

Shared by `translator.text` (the graph's path) and `translator.host_text` (numpy's).
"""

from __future__ import annotations

# Sources are padded to a multiple of this length: fewer distinct shapes, little padding.
LENGTH_MULTIPLE = 8
# Zero or more characters for which Python's str.isspace is true, as an RE2 pattern.
WHITESPACE_PATTERN = r"[\t\n\x0b\x0c\r\x1c-\x1f\x85\p{Z}]*"

# The source cut of a model with unbounded positions: bounds a batch's memory.
UNBOUNDED_SOURCE_CUT = 1024


def default_max_source_length(config) -> int:
    """A model's source cut (and CTranslate2 table rows): its position limit, else the default."""
    return config.position_limit or UNBOUNDED_SOURCE_CUT


def padded_length(length):
    """`length` rounded up to a multiple of `LENGTH_MULTIPLE` (ints or int tensors)."""
    return (length + LENGTH_MULTIPLE - 1) // LENGTH_MULTIPLE * LENGTH_MULTIPLE


def batch_ranges(lengths, batch_tokens: int):
    """Cuts length-sorted sources into batches of at most `batch_tokens` padded tokens.

    Args:
        lengths: Source lengths, ascending (`Prepared.lengths`).
        batch_tokens: Most padded source tokens per batch; a longer single source still
            gets a batch of its own.

    Yields:
        `(start, end, width)`: the batch's rows `[start, end)` and its padded width.
    """
    start = 0
    for end in range(1, len(lengths) + 1):
        width = padded_length(int(lengths[end - 1]))  # the longest so far: ascending
        if end - 1 > start and (end - start) * width > batch_tokens:
            yield start, end - 1, padded_length(int(lengths[end - 2]))
            start = end - 1
    if start < len(lengths):
        yield start, len(lengths), padded_length(int(lengths[-1]))
