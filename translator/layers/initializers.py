"""Initializer helpers shared by the layers (no layer lives here)."""

from __future__ import annotations

import keras


def clone_initializer(initializer):
    """A fresh copy of `initializer`: Keras 3 seeds one once, so weights would start equal."""
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())
