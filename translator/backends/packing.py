"""A batch's real tokens as rows, without its padding, and back.

A full pass over packed rows runs position-wise ops on the real tokens only, unpacking
them into the padded grid just for attention.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from translator.constants import PAD_ID


class PackedLayout(NamedTuple):
    """Where a batch's real tokens sit in its padded `[batch, length]` grid.

    `pack` gathers them into rows; `unpack` puts them back, zeros at the padding. Each is
    the other's gradient, so no gradient needs TensorFlow's slower scatter-add.
    """

    # int32 [tokens]: each real token's position in the flattened grid, in order.
    flat: tf.Tensor
    # int32 [batch * length]: each position's row among the tokens; `tokens` at padding.
    inverse: tf.Tensor
    # int32 [2]: the padded grid's (batch, length).
    grid: tf.Tensor

    @classmethod
    def of(cls, ids) -> PackedLayout:
        """The layout of the real (non-padding) tokens of `ids`, int `[batch, length]`."""
        real = tf.reshape(tf.not_equal(ids, PAD_ID), [-1])  # [batch * length]
        flat = tf.cast(tf.where(real)[:, 0], tf.int32)  # [tokens]
        row = tf.cumsum(tf.cast(real, tf.int32), exclusive=True)  # [batch * length]
        return cls(flat, tf.where(real, row, tf.size(flat)), tf.shape(ids))

    def pack(self, padded):
        """`[batch, length, ...]` -> `[tokens, ...]`."""
        return _pack(padded, self.flat, self.inverse, self.grid)

    def unpack(self, rows):
        """`[tokens, ...]` -> `[batch, length, ...]`, zeros at the padding."""
        return _unpack(rows, self.flat, self.inverse, self.grid)


def _gather_tokens(padded, flat):
    rows = tf.reshape(padded, tf.concat([[-1], tf.shape(padded)[2:]], axis=0))
    return tf.gather(rows, flat)  # [tokens, ...]


def _gather_grid(rows, inverse, grid):
    rows = tf.concat([rows, tf.zeros_like(rows[:1])], axis=0)  # a row of zeros last
    padded = tf.gather(rows, inverse)  # [batch * length, ...]
    return tf.reshape(padded, tf.concat([grid, tf.shape(rows)[1:]], axis=0))


@tf.custom_gradient
def _pack(padded, flat, inverse, grid):
    def gradient(upstream):  # [tokens, ...] -> the grid, zeros at the padding
        return _gather_grid(upstream, inverse, grid), None, None, None

    return _gather_tokens(padded, flat), gradient


@tf.custom_gradient
def _unpack(rows, flat, inverse, grid):
    def gradient(upstream):  # the grid's gradient at the tokens (padding: no input)
        return _gather_tokens(upstream, flat), None, None, None

    return _gather_grid(rows, inverse, grid), gradient
