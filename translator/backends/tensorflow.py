"""TensorFlow's kernels: the same functions as `translator.backends.portable`, faster here.

Each is a measured fast path (decisions D1, D8, D10, D11). Imported only under TensorFlow.
"""

from __future__ import annotations

import tensorflow as tf
from keras import ops

from translator.backends.packing import PackedLayout

#: A search loop may change its shapes (compaction, `GrowingCache`).
DYNAMIC_SHAPES = True

# `dropout` compares 16 random bits with the rate: exact to 1.5e-5.
_LEVELS = 2**16


# ---- Layers --------------------------------------------------------------------------


def leading_dims(x, count: int) -> tuple:
    """The first `count` dimensions of `x`: ints where static, scalar tensors otherwise.

    One shape read for all unknown ones: `keras.ops.shape(x)[i]` adds nodes on every call.
    """
    static = tuple(x.shape[:count])
    if all(dim is not None for dim in static):
        return static
    dynamic = tf.unstack(tf.shape(x)[:count], num=count)
    return tuple(dynamic[i] if dim is None else dim for i, dim in enumerate(static))


def bias_add(x, bias):
    """`x + bias` over the last axis, as `BiasAdd` (what Grappler fuses into the matmul)."""
    return tf.nn.bias_add(x, bias)


def dropout(inputs, rate: float, seed_generator):
    """Inverted dropout drawing two keep/drop decisions from each random 32-bit word.

    Cheaper than Keras' one float per element; the expectation is unchanged.
    """
    threshold = round(rate * _LEVELS)  # drop where bits < threshold
    scale = _LEVELS / (_LEVELS - threshold)
    seed = tf.cast(tf.math.floormod(seed_generator.next(), 2**31 - 1), tf.int32)
    shape = tf.shape(inputs)
    last = inputs.shape[-1] if inputs.shape.rank else None
    if last is not None and last % 2 == 0:  # the usual [..., d_model]: no copy
        words_shape = tf.concat([shape[:-1], [last // 2]], axis=0)
        size = None
    else:
        size = tf.size(inputs)
        words_shape = [(size + 1) // 2]
    words = tf.random.stateless_uniform(
        words_shape, seed=seed, minval=None, maxval=None, dtype=tf.uint32
    )  # two 16-bit draws per word
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])
    if size is not None:
        bits = bits[:size]
    keep = tf.reshape(bits >= tf.constant(threshold, tf.uint16), shape)
    return inputs * (tf.cast(keep, inputs.dtype) * tf.cast(scale, inputs.dtype))


def fuses_here() -> bool:
    """Whether oneDNN fuses `fused_layer_norm`'s pattern where a graph is traced now.

    TensorFlow's default on x86 CPUs with AVX512 VNNI, BF16 or AMX (`TF_ENABLE_ONEDNN_OPTS`
    overrides). Never with a GPU, whose batch-norm kernels refuse an epsilon under 1e-5.
    """
    return _onednn_enabled() and not tf.config.list_logical_devices("GPU")


def _onednn_enabled() -> bool:
    """Whether TensorFlow runs with oneDNN's graph rewrites (a private API: False without)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:  # pragma: no cover (another TensorFlow: Keras' ops)
        return False
    return bool(_pywrap_util_port.IsMklEnabled())


def fused_layer_norm(inputs, gamma, beta, epsilon: float, dtype: str):
    """Layer norm of the last axis in the one spelling oneDNN runs as one kernel.

    Grappler turns rows reshaped into the channels of a training-mode `FusedBatchNormV3`,
    then `* gamma + beta`, into one `_MklLayerNorm`. Written in `dtype`: Grappler would
    move a float32 cast past the reshape and hide the pattern.
    """
    inputs = tf.cast(inputs, dtype)
    shape = tf.shape(inputs)
    rows = tf.reduce_prod(shape[:-1])
    # [1, rows, d, 1] in NCHW: each row a channel, normalized over its d values.
    grid = tf.reshape(inputs, tf.stack([1, rows, shape[-1], 1]))
    ones = tf.fill(tf.reshape(rows, [1]), 1.0)
    zeros = tf.fill(tf.reshape(rows, [1]), 0.0)
    empty = tf.constant([], tf.float32)  # no running statistics: training mode
    normalized = tf.raw_ops.FusedBatchNormV3(
        x=grid,
        scale=ones,
        offset=zeros,
        mean=empty,
        variance=empty,
        epsilon=epsilon,
        data_format="NCHW",
        is_training=True,
    )[0]
    return tf.reshape(normalized, shape) * tf.cast(gamma, dtype) + tf.cast(beta, dtype)


def packed_layout(ids) -> PackedLayout:
    """Where the real tokens of `ids` sit, for a full pass on them alone (packed rows)."""
    return PackedLayout.of(ids)


def write_step(cache, update, index):
    """`cache` `[batch, heads, length, head_dim]` with position `index` overwritten.

    A scatter, whose cost hardly grows with the cache length; not `slice_update`, which
    lowers to an XLA-only op that stock TF Serving cannot run.
    """
    batch, heads, _, head_dim = ops.shape(cache)
    rows = ops.repeat(ops.arange(batch), heads)  # [batch * heads]
    head_ids = ops.tile(ops.arange(heads), [batch])  # [batch * heads]
    at = ops.stack([rows, head_ids, ops.full_like(rows, index)], axis=1)  # [b * h, 3]
    return ops.scatter_update(cache, at, ops.reshape(update, (-1, head_dim)))


# ---- Training ------------------------------------------------------------------------


def schedule_variable(value: float, name: str):
    """A float32 scalar a schedule reads and the chief's callback sets (first replica's)."""
    return tf.Variable(
        value,
        trainable=False,
        dtype=tf.float32,
        name=name,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


# ---- Loss ----------------------------------------------------------------------------


def _cross_entropy(labels, logits, label_smoothing):
    logits = tf.cast(logits, tf.float32)  # [..., vocab]
    labels = tf.cast(labels, tf.int32)  # [...]
    vocab = tf.shape(logits)[-1]
    # The smoothed target q = (1 - ls) onehot + ls / V, for the fused one-pass kernel.
    spread = label_smoothing / tf.cast(vocab, tf.float32)
    target = tf.one_hot(labels, vocab, on_value=1.0 - label_smoothing + spread, off_value=spread)
    nll = tf.nn.softmax_cross_entropy_with_logits(target, logits)  # [...]
    mask = tf.cast(tf.not_equal(labels, 0), tf.float32)
    return tf.reduce_sum(nll * mask), tf.reduce_sum(mask)


# XLA fuses it into a few passes over the `[tokens, vocab]` logits; compiled once per
# logits shape (hence the trainer pads the scored rows to a multiple).
_fused_cross_entropy = tf.function(_cross_entropy, jit_compile=True, reduce_retracing=True)


def cross_entropy_terms(labels, logits, label_smoothing: float, compiled: bool = True):
    """`(loss_sum, token_count)` of the label-smoothed cross-entropy (see `losses`).

    `compiled`: as its own XLA program; False inside a step XLA compiles whole.
    """
    terms = _fused_cross_entropy if compiled else _cross_entropy
    return terms(labels, logits, float(label_smoothing))


# ---- Search --------------------------------------------------------------------------


def gather(x, indices):
    """`x[indices]` along axis 0 (`tf.gather`: no negative-index fix-up nodes)."""
    return tf.gather(x, indices)


def gather_batch(x, indices):
    """Per row r, `x[r, indices[r]]`: `[rows, n, ...]` by int `[rows, k]` -> `[rows, k, ...]`."""
    return tf.gather(x, indices, batch_dims=1)


def argmax(x):
    """Each row's argmax of `[rows, n]`: int32 `[rows]` (Keras' adds a pass for -0.0)."""
    return tf.argmax(x, axis=-1, output_type=tf.int32)


def seal(logits):
    """The logits behind an `EnsureShape`, which Grappler does not move a cast past.

    Else it moves the widening cast below a top-k's pad and reshape, casting twice.
    """
    return tf.ensure_shape(logits, logits.shape)


def search_loop(keep_going, body, state, compact: bool, fixed: tuple[str, ...] = ()):
    """`tf.while_loop` over `(search_state,)`; with `compact`, its active rows may shrink.

    Fields not in `fixed` may shrink along axis 0; a `GrowingCache` grows too.
    """
    if not compact:
        return tf.while_loop(keep_going, body, state)
    (initial,) = state
    return tf.while_loop(
        keep_going, body, state, shape_invariants=(_shrinking_invariants(initial, fixed),)
    )


def _shrinking_invariants(state, fixed):
    def invariant(name, value):
        if name in fixed:
            return tf.nest.map_structure(lambda x: x.shape, value)
        return _shrinking(value)

    return type(state)(*(invariant(name, value) for name, value in state._asdict().items()))


def _shrinking(value, growing_axis: int | None = None):
    """Shapes with axis 0 unknown, and the `growing_axis` a NamedTuple declares."""
    if isinstance(value, tuple):
        axis = getattr(type(value), "growing_axis", growing_axis)
        parts = [_shrinking(part, axis) for part in value]
        return type(value)(*parts) if hasattr(value, "_fields") else type(value)(parts)
    shape = [None, *value.shape[1:]]
    if growing_axis is not None:
        shape[growing_axis] = None
    return tf.TensorShape(shape)


def remaining(done, compact: bool):
    """Positions of the sentences that stay in the loop after a step: int32 `[stay]`."""
    if not compact:
        return tf.range(tf.size(done))
    return tf.cast(tf.reshape(tf.where(tf.logical_not(done)), [-1]), tf.int32)


def gather_rows_if_fewer(nest, rows, count):
    """`tf.gather(x, rows)` over a nest; skipped (no cache copy) when `rows` keeps all `count`."""
    return tf.cond(
        tf.size(rows) < count,
        lambda: tf.nest.map_structure(lambda x: tf.gather(x, rows), nest),
        lambda: nest,
    )


def trim(ids, lengths):
    """Drops the all-padding columns after the longest hypothesis.

    Args:
        ids: int32 `[batch, n, cache_length]`.
        lengths: int32 `[batch, n]`.

    Returns:
        int32 `[batch, n, max(lengths)]`.
    """
    return ids[:, :, : tf.maximum(tf.reduce_max(lengths), 0)]  # 0 for an empty batch


def uniform(shape, seed, minval: float, maxval: float):
    """Uniform float32 draws of `shape`, a function of the int32 `[2]` `seed` only."""
    return tf.random.stateless_uniform(shape, seed, minval=minval, maxval=maxval)
