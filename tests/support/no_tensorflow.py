"""A process as the accelerator machines give one: Keras on JAX, and no TensorFlow.

    python -m tests.support.no_tensorflow MODULE [ARGS...]

runs `python -m MODULE ARGS...` with `KERAS_BACKEND=jax` and an import hook that refuses
`tensorflow` and its packages, so a module that still needs TensorFlow fails here, not on
the lent GPU. `tests.support.jax_worker` installs the same hook (`block_tensorflow`).
"""

from __future__ import annotations

import os
import runpy
import sys

BLOCKED = ("tensorflow", "tensorflow_text", "tf_keras")


class _NoTensorFlow:
    """An import hook that refuses TensorFlow (and its packages)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: this run has no TensorFlow")


def block_tensorflow() -> None:
    """Chooses Keras' JAX backend and makes every later TensorFlow import raise."""
    os.environ["KERAS_BACKEND"] = "jax"
    sys.meta_path.insert(0, _NoTensorFlow())


if __name__ == "__main__":
    block_tensorflow()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
