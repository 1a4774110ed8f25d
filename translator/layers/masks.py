"""Attention masks. A mask is boolean, True where attention is allowed.

Shapes broadcast against attention scores `[batch, query_len, key_len]`.
"""

from __future__ import annotations

from keras import ops

from translator.constants import PAD_ID


def padding_mask(ids):
    """Key mask from token ids: True on real tokens.

    Args:
        ids: int `[batch, length]`, id 0 is padding.

    Returns:
        bool `[batch, 1, length]`, broadcastable over queries.
    """
    return ops.expand_dims(ops.not_equal(ids, PAD_ID), axis=1)  # [batch, 1, length]


def causal_mask(length):
    """Lower-triangular mask: query t sees keys 0..t.

    Returns:
        bool `[1, length, length]`.
    """
    positions = ops.arange(length)  # [length]
    return ops.expand_dims(positions[:, None] >= positions[None, :], axis=0)  # [1, length, length]


def cache_mask(index, max_length: int, query_length: int = 1):
    """Mask over a static decoding cache: query i (at position index + i) sees 0..index + i.

    Args:
        index: int scalar, position of the first query token.
        max_length: static length of the cache.
        query_length: number of query tokens written at `index`.

    Returns:
        bool `[1, query_length, max_length]`.
    """
    keys = ops.arange(max_length)  # [max_length]
    queries = ops.arange(query_length) + index  # [query_length]
    return ops.expand_dims(keys[None, :] <= queries[:, None], axis=0)
