"""Initializer helpers shared by the layers (no layer lives here)."""

from __future__ import annotations

import keras


def clone_initializer(initializer):
    """A fresh copy of `initializer` for one more weight.

    Keras 3 draws an unseeded initializer's seed once, when it is made, so one instance
    used for several weights of the same shape fills them with identical values (a
    layer's query, key and value kernels would start equal). Each weight gets a copy
    made from the config: unseeded, each copy draws its own seed; seeded, the copies
    repeat the given seed, as asked.
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())
