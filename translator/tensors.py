"""The type of a backend's tensor, for type hints only (nothing here runs).

Model and search code is written in `keras.ops`, which takes and returns the backend's
own tensors: TensorFlow's, JAX's, or numpy arrays. Hints name this alias rather than
one backend's type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeAlias

    import jax
    import numpy as np
    import tensorflow as tf

    Tensor: TypeAlias = tf.Tensor | jax.Array | np.ndarray
