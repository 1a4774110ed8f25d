"""Reading a tensor's leading dimensions with as few graph nodes as possible.

`keras.ops.shape(x)[i]` reads the whole shape and slices out every unknown dimension on
each call, used or not. A traced search reads shapes in every layer of every step, and
each node it adds is deserialized by a SavedModel load and rewritten by Grappler before
the first translation (bench/RESULTS.md, "Time to the first translation"). Private to
the layers.
"""

from __future__ import annotations

import tensorflow as tf


def leading_dims(x, count: int) -> tuple:
    """The first `count` dimensions of `x`: ints where static, scalar tensors otherwise.

    One shape read and one slice for all the unknown ones, however many.

    Args:
        x: A tensor of rank >= `count`.
        count: How many leading dimensions.

    Returns:
        A tuple of `count` ints or int32 scalars.
    """
    static = tuple(x.shape[:count])
    if all(dim is not None for dim in static):
        return static
    dynamic = tf.unstack(tf.shape(x)[:count], num=count)
    return tuple(dynamic[i] if dim is None else dim for i, dim in enumerate(static))
