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
from pathlib import Path

BLOCKED = ("tensorflow", "tensorflow_text", "tf_keras")


class _NoTensorFlow:
    """An import hook that refuses TensorFlow (and its packages)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: this run has no TensorFlow")


def block_tensorflow() -> None:
    """Chooses Keras' JAX backend and makes every later TensorFlow import raise, here and
    in the Python processes this one starts (`no_tensorflow_site/sitecustomize.py`)."""
    os.environ["KERAS_BACKEND"] = "jax"
    if not any(isinstance(hook, _NoTensorFlow) for hook in sys.meta_path):
        sys.meta_path.insert(0, _NoTensorFlow())
    site = str(Path(__file__).resolve().parent / "no_tensorflow_site")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if site not in paths:
        repo = str(Path(__file__).resolve().parents[2])  # (sitecustomize imports `tests`)
        os.environ["PYTHONPATH"] = os.pathsep.join([site, repo, *filter(None, paths)])


def run_without_tensorflow(code: str) -> str:
    """Runs Python `code` in a new process of this checkout with TensorFlow blocked (and
    Keras on JAX); returns its standard output. Fails the test if the process fails."""
    import subprocess

    from tests.support.paths import REPO

    script = "from tests.support.no_tensorflow import block_tensorflow\nblock_tensorflow()\n"
    done = subprocess.run(
        [sys.executable, "-c", script + code], cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


if __name__ == "__main__":
    block_tensorflow()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
