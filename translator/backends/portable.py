"""The kernels in `keras.ops`, for every backend but TensorFlow (JAX in practice).

Plain math; `translator.backends.tensorflow` has the same names with TensorFlow's kernels.
Shapes are static, as XLA needs.
"""

from __future__ import annotations

import keras
from keras import ops

#: Whether a search loop may change its shapes (shed finished sentences, grow the cache).
DYNAMIC_SHAPES = False


# ---- Layers --------------------------------------------------------------------------


def leading_dims(x, count: int) -> tuple:
    """The first `count` dimensions of `x` (static here: ints)."""
    return tuple(x.shape[:count])


def bias_add(x, bias):
    """`x + bias` over the last axis: `[..., n]` + `[n]`."""
    return x + bias


def dropout(inputs, rate: float, seed_generator):
    """Inverted dropout with Keras' own random draws (one float per element)."""
    return keras.random.dropout(inputs, rate, seed=seed_generator)


def fuses_here() -> bool:
    """Whether `LayerNorm` takes `fused_layer_norm` outside training: never here."""
    return False


def fused_layer_norm(inputs, gamma, beta, epsilon: float, dtype: str):
    """Layer norm of the last axis, statistics in float32: `[..., d]` in `dtype`."""
    x = ops.cast(inputs, "float32")
    mean = ops.mean(x, axis=-1, keepdims=True)
    variance = ops.var(x, axis=-1, keepdims=True)
    normalized = ops.cast((x - mean) * ops.rsqrt(variance + epsilon), dtype)
    return normalized * ops.cast(gamma, dtype) + ops.cast(beta, dtype)


def packed_layout(ids):
    """The layout of a batch's real tokens as packed rows; None: the padded grid here."""
    del ids
    return None


def write_step(cache, update, index):
    """`cache` `[batch, heads, length, head_dim]` with `update` written at `index`, in place."""
    zero = ops.zeros((), "int32")
    return ops.slice_update(cache, (zero, zero, ops.cast(index, "int32"), zero), update)


# ---- Training ------------------------------------------------------------------------


def schedule_variable(value: float, name: str):
    """A float32 scalar a learning-rate schedule reads each update and a callback sets."""
    return keras.Variable(value, dtype="float32", trainable=False, name=name)


# ---- Loss ----------------------------------------------------------------------------


def cross_entropy_terms(labels, logits, label_smoothing: float, compiled: bool = True):
    """`(loss_sum, token_count)` of the label-smoothed cross-entropy (see `losses`).

    A token's loss is `-(1 - ls) log p[label] - ls / V * sum(log p)`; `compiled` is unused.
    """
    del compiled
    logits = ops.cast(logits, "float32")  # [..., vocab]
    labels = ops.cast(labels, "int32")  # [...]
    vocab = logits.shape[-1]
    log_probs = ops.log_softmax(logits, axis=-1)
    picked = ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]  # [...]
    nll = -(1.0 - label_smoothing) * picked - label_smoothing / vocab * ops.sum(log_probs, -1)
    mask = ops.cast(ops.not_equal(labels, 0), "float32")
    return ops.sum(nll * mask), ops.sum(mask)


# ---- Search --------------------------------------------------------------------------


def gather(x, indices):
    """`x[indices]` along axis 0."""
    return ops.take(x, indices, axis=0)


def gather_batch(x, indices):
    """Per row r, `x[r, indices[r]]`: `[rows, n, ...]` by int `[rows, k]` -> `[rows, k, ...]`."""
    expanded = ops.reshape(indices, (*indices.shape, *([1] * (len(x.shape) - 2))))
    return ops.take_along_axis(x, expanded, axis=1)


def argmax(x):
    """The position of the largest value of each row of `[rows, n]`: int32 `[rows]`."""
    return ops.cast(ops.argmax(x, axis=-1), "int32")


def seal(logits):
    """The logits as they are (a TensorFlow graph needs a guard here; see there)."""
    return logits


def search_loop(keep_going, body, state, compact: bool, fixed: tuple[str, ...] = ()):
    """Runs `body` on the search state while `keep_going` holds (static shapes only)."""
    del fixed  # every field keeps its shape
    _static_only(compact)
    return ops.while_loop(keep_going, body, state)


def remaining(done, compact: bool):
    """Positions of the sentences that stay in the loop: all of them here."""
    _static_only(compact)
    return ops.arange(ops.shape(done)[0], dtype="int32")


def gather_rows_if_fewer(nest, rows, count):
    """Drops rows of a nest; only a loop with dynamic shapes does."""
    del nest, rows, count
    _static_only(True)


def trim(ids, lengths):
    """The ids as they are: a static shape keeps the padding columns (see `tensorflow.trim`)."""
    del lengths
    return ids


def uniform(shape, seed, minval: float, maxval: float):
    """Uniform float32 draws of `shape`, a function of the int32 `[2]` `seed` only."""
    return keras.random.uniform(
        shape, minval=minval, maxval=maxval, dtype="float32", seed=ops.cast(seed, "uint32")
    )


def _static_only(compact: bool) -> None:
    if compact:
        raise ValueError(
            f"a search that drops finished sentences needs dynamic shapes, which the "
            f"{keras.backend.backend()} backend does not give: use compact=False"
        )
