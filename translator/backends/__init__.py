"""The one seam between the model's math and a backend's own kernels.

The layers, the loss and the search are written in `keras.ops`, so they run on every
Keras backend. Where a backend has a faster or needed kernel of its own (TensorFlow's
16-bit dropout masks, fused layer norm, packed rows and search loop that sheds finished
sentences; XLA's in-place cache write on JAX), the code calls `kernels.NAME`: the module
of the backend this process runs, chosen here once, at import. Both modules offer the
same functions (`translator.backends.portable` lists them), so no caller branches on the
backend, and TensorFlow is never imported on another one.
"""

from __future__ import annotations

import importlib

import keras

#: The Keras backend of this process ("tensorflow", "jax", ...), fixed at import.
BACKEND = keras.backend.backend()

#: The kernels of `BACKEND`: `translator.backends.tensorflow` on TensorFlow, else the
#: portable `keras.ops` versions.
kernels = importlib.import_module(
    "translator.backends.tensorflow" if BACKEND == "tensorflow" else "translator.backends.portable"
)

__all__ = ["BACKEND", "kernels"]
