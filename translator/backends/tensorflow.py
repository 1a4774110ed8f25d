"""TensorFlow's kernels: the same functions as `translator.backends.portable`, faster here.

Each one is a measured fast path of the TensorFlow backend (figures: bench/RESULTS.md,
design measurements); the reason is on each function. Imported only under TensorFlow.
"""

from __future__ import annotations

import tensorflow as tf
from keras import ops

from translator.backends.packing import PackedLayout

#: A search loop may change its shapes: finished sentences leave it (compaction) and the
#: self-attention cache grows with the written positions (`GrowingCache`).
DYNAMIC_SHAPES = True

# Keep decisions of `dropout` compare 16 random bits with the rate; 2**16 levels make the
# rate exact to 1.5e-5 (0.1 becomes 6,553/65,536).
_LEVELS = 2**16


# ---- Layers --------------------------------------------------------------------------


def leading_dims(x, count: int) -> tuple:
    """The first `count` dimensions of `x`: ints where static, scalar tensors otherwise.

    One shape read and one slice for all the unknown ones, however many:
    `keras.ops.shape(x)[i]` slices out every unknown dimension on each call, and a
    traced search reads shapes in every layer of every step, nodes that a SavedModel
    load deserializes and Grappler rewrites before the first translation.
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

    Keras' dropout draws one float per element; on a 2-core CPU the dropouts were a
    measurable share of a training step, and 16-bit draws do the same work in much less
    time. Each element is kept with probability `1 - rate` (to 1/65,536) and scaled by
    the inverse of the keep probability as applied, so the expectation is unchanged.
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

    TensorFlow's default on x86 CPUs with AVX512 VNNI, BF16 or AMX
    (`TF_ENABLE_ONEDNN_OPTS` overrides); elsewhere the batch norm stays unfused, slower
    than Keras' ops. Never where TensorFlow sees a GPU, whose batch-norm kernels refuse
    an epsilon under 1e-5. (`LayerNorm` adds its own conditions.)
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

    Grappler, with oneDNN's rewrites on, turns the rows reshaped into the channels of a
    training-mode `FusedBatchNormV3` with unit scale and zero offset, then `* gamma +
    beta`, into a single `_MklLayerNorm`. Written in `dtype`: a cast to float32 first
    would be moved past the reshape by Grappler and hide the pattern. The statistics are
    float32 either way.
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

    A scatter of the `batch * heads` new vectors (`TensorScatterUpdate`), whose cost
    hardly grows with the cache length, unlike a select over the whole cache. Not
    `slice_update`: on TensorFlow that lowers to an XLA-only op, and this graph must
    also run in stock TF Serving.
    """
    batch, heads, _, head_dim = ops.shape(cache)
    rows = ops.repeat(ops.arange(batch), heads)  # [batch * heads]
    head_ids = ops.tile(ops.arange(heads), [batch])  # [batch * heads]
    at = ops.stack([rows, head_ids, ops.full_like(rows, index)], axis=1)  # [b * h, 3]
    return ops.scatter_update(cache, at, ops.reshape(update, (-1, head_dim)))


# ---- Training ------------------------------------------------------------------------


def schedule_variable(value: float, name: str):
    """A float32 scalar a learning-rate schedule reads each update and a callback sets.

    A `tf.Variable` read from the first replica: saved in TensorFlow checkpoints under
    its own name, and set once by the chief's callback, whatever the strategy.
    """
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
    # The smoothed target q = (1 - ls) onehot + ls / V: the fused kernel gives the
    # cross-entropy against q and its gradient (softmax - q) in one pass, with no
    # gather or scatter over the vocabulary.
    spread = label_smoothing / tf.cast(vocab, tf.float32)
    target = tf.one_hot(labels, vocab, on_value=1.0 - label_smoothing + spread, off_value=spread)
    nll = tf.nn.softmax_cross_entropy_with_logits(target, logits)  # [...]
    mask = tf.cast(tf.not_equal(labels, 0), tf.float32)
    return tf.reduce_sum(nll * mask), tf.reduce_sum(mask)


# XLA fuses the cast, the smoothed targets, the softmax and its gradient into a few
# passes over the `[tokens, vocab]` logits, the largest tensor of a training step.
# Compiled once per logits shape (hence the trainer pads the scored rows to a multiple).
_fused_cross_entropy = tf.function(_cross_entropy, jit_compile=True, reduce_retracing=True)


def cross_entropy_terms(labels, logits, label_smoothing: float, compiled: bool = True):
    """`(loss_sum, token_count)` of the label-smoothed cross-entropy (see `losses`).

    `compiled`: as its own XLA program; False inside a step that XLA compiles whole (a
    nested XLA function traced outside XLA makes such a step recompile every update).
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
    """The position of the largest value of each row of `[rows, n]`: int32 `[rows]`.

    `tf.argmax` alone: Keras' argmax adds a pass that orders -0.0 below 0.0.
    """
    return tf.argmax(x, axis=-1, output_type=tf.int32)


def seal(logits):
    """The logits behind an `EnsureShape`.

    Under mixed precision the logits come from a cast to float32, and Grappler moves a
    widening cast below the "value-preserving" ops that read it (a top-k's pad and
    reshape), which would cast the logits a second time beside the softmax's copy;
    `EnsureShape` is not such an op to it, so one cast serves both.
    """
    return tf.ensure_shape(logits, logits.shape)


def search_loop(keep_going, body, state, compact: bool, fixed: tuple[str, ...] = ()):
    """`tf.while_loop` over `(search_state,)`; with `compact`, its active rows may shrink.

    The fields named in `fixed` keep their shapes (the step, the whole
    batch's results); in every other field axis 0 indexes the active sentences (or their
    rows) and may shrink, and a `GrowingCache` grows along its `growing_axis`.
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
    """`tf.gather(x, rows)` over a nest, skipped when `rows` keeps all `count` rows.

    A gather copies the whole tensor (the decoding cache is a search's largest state),
    so it runs only when a sentence left.
    """
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
