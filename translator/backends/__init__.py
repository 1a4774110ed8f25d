"""The one seam between the model's math and a backend's own kernels.

The model code is written in `keras.ops`; where a backend has a faster or needed kernel
of its own, it calls `kernels.NAME`, the module of this process' backend, chosen once at
import. Both modules offer the same functions, so no caller branches on the backend.
Beside them, what only one backend has: the search compiled as a TensorFlow module
(`tf_decoder`, run under `graph_options`) or as a JAX program (`jax_decoder`).
"""

from __future__ import annotations

import importlib

import keras

#: The Keras backend of this process ("tensorflow", "jax", ...), fixed at import.
BACKEND = keras.backend.backend()

#: The kernels of `BACKEND`: TensorFlow's, else the portable `keras.ops` versions.
kernels = importlib.import_module(
    "translator.backends.tensorflow" if BACKEND == "tensorflow" else "translator.backends.portable"
)

__all__ = ["BACKEND", "kernels"]
