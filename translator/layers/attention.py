"""Scaled dot-product multi-head attention with an explicit key/value cache."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import keras
from keras import ops

from translator.backends import kernels
from translator.layers.dropout import FastDropout
from translator.layers.initializers import clone_initializer
from translator.layers.rotary_embedding import RotaryEmbedding

if TYPE_CHECKING:  # pragma: no cover
    from translator.tensors import Tensor

# Added to masked scores (softmax runs in float32); finite, so an all-masked row gives
# uniform weights, not NaN.
_MASKED_SCORE = -1e9


class GrowingCache(NamedTuple):
    """A self-attention cache of the written positions only: no write copies a whole cache.

    Faster (decision D9), but XLA needs the static cache.
    """

    # [batch, heads, written, head_dim] each.
    keys: Tensor
    values: Tensor

    # The axis that grows (for a loop's shape invariants).
    growing_axis = 2


class HeadsProjection(keras.layers.EinsumDense):
    """An `EinsumDense` of `[batch, length, ...]` inputs, computed as one 2-D matmul.

    For `btd,dnh->btnh` and `btnh,nhd->btd`, which Keras runs as a batch matmul
    broadcasting the kernel; a 2-D matmul is faster at a decoding step's shape.
    """

    def call(self, inputs, training=None):
        contracted = len(inputs.shape) - 2  # the dims after [batch, length]
        fan_in = math.prod(self.kernel.shape[:contracted])
        out_dims = tuple(self.kernel.shape[contracted:])
        kernel = ops.cast(ops.reshape(self.kernel, (fan_in, -1)), self.compute_dtype)
        outputs = ops.matmul(ops.reshape(inputs, (-1, fan_in)), kernel)  # [rows, fan_out]
        if self.bias is not None:
            outputs = outputs + ops.cast(ops.reshape(self.bias, (-1,)), self.compute_dtype)
        return ops.reshape(outputs, (*kernels.leading_dims(inputs, 2), *out_dims))


@keras.saving.register_keras_serializable(package="translator")
class MultiHeadAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(head_dim)) V over several heads (paper, section 3.2).

    Self-attention when `key_value` is omitted, else cross-attention. Decoding passes an
    explicit `(keys, values)` cache, each `[batch, heads, length, head_dim]`:

    - Self-attention: `empty_cache(batch, max_length)`, written at `cache_index` (the
      caller masks unwritten positions), or `empty_cache(batch)`, a `GrowingCache`.
    - Cross-attention: `compute_key_value(encoder_output)`, read-only. `sources` cache
      rows may serve `sources * group` query rows (a sentence's beams), which attend as
      one entry of `group * query_length` queries, with the mask `[sources, 1, key]`.

    Args:
        num_heads: Number of heads.
        head_dim: Size of each head for queries, keys and values.
        output_dim: Width of the output; defaults to the query's last dimension.
        use_bias: Biases on the four projections.
        dropout: Dropout rate on the attention weights.
        rotary_embedding: Rotate queries and keys with RoPE by their positions (for
            self-attention; positions start at `cache_index` when decoding).
        kernel_initializer: Initializer of the projection kernels.
        **kwargs: Standard `keras.layers.Layer` arguments.

    Call arguments:
        query: `[batch, query_length, query_dim]`.
        key_value: `[batch, key_length, key_dim]`; None for self-attention.
        attention_mask: bool, True where attention is allowed, broadcastable to
            `[batch, query_length, key_length]` (see `translator.layers.masks`).
        cache: Key/value cache as described above, or None.
        cache_index: int scalar; with `cache`, the write position (self-attention).
        training: Applies dropout when True.
        return_attention_scores: Also return the weights `[batch, heads, query, key]`
            (`[sources, heads, group * query, key]` with a shared cross-attention cache).
        layout: With `query` as packed rows `[tokens, query_dim]` (a full pass without
            RoPE): their `PackedLayout`; the output is rows `[tokens, output_dim]`.
        key_value_layout: The `PackedLayout` of a packed `key_value` (None: a padded
            `key_value`, whatever the query's layout).

    Returns:
        `output` `[batch, query_length, output_dim]`; `(output, cache)` when a cache is
        given (the updated one for self-attention); with `return_attention_scores`, the
        weights are appended to that.
    """

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        output_dim: int | None = None,
        use_bias: bool = True,
        dropout: float = 0.0,
        rotary_embedding: bool = False,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.output_dim = output_dim
        self.use_bias = use_bias
        self.dropout = dropout
        self.rotary_embedding = rotary_embedding
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, query_shape, key_value_shape=None):
        key_value_shape = key_value_shape or query_shape
        heads_bias = "nh" if self.use_bias else None
        output_dim = self.output_dim or query_shape[-1]

        def projection(name, input_shape):
            layer = HeadsProjection(
                "btd,dnh->btnh",
                output_shape=(None, self.num_heads, self.head_dim),
                bias_axes=heads_bias,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name=name,
            )
            layer.build(input_shape)
            return layer

        self.query_dense = projection("query", query_shape)
        self.key_dense = projection("key", key_value_shape)
        self.value_dense = projection("value", key_value_shape)
        self.output_dense = HeadsProjection(
            "btnh,nhd->btd",
            output_shape=(None, output_dim),
            bias_axes="d" if self.use_bias else None,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name="output",
        )
        self.output_dense.build((None, None, self.num_heads, self.head_dim))
        self.weights_dropout = FastDropout(
            self.dropout, dtype=self.dtype_policy, name="weights_dropout"
        )
        self.rotary = (
            RotaryEmbedding(dtype=self.dtype_policy, name="rotary")
            if self.rotary_embedding
            else None
        )
        self.built = True

    def compute_key_value(self, key_value):
        """Projects a sequence once into a read-only cross-attention cache.

        Args:
            key_value: `[batch, key_length, key_dim]` (the encoder output).

        Returns:
            `(keys, values)`, each `[batch, heads, key_length, head_dim]`.
        """
        return _project_side_by_side(key_value, (self.key_dense, self.value_dense))

    def empty_cache(self, batch, max_length=None):
        """An all-zero self-attention cache for `max_length` positions.

        Args:
            batch: int (or scalar tensor), rows of the cache.
            max_length: Static number of positions (int or scalar tensor), or None for
                a `GrowingCache`.

        Returns:
            `(keys, values)`, each `[batch, heads, max_length, head_dim]` in the compute
            dtype; with no `max_length`, a `GrowingCache` of 0 positions.
        """
        length = 0 if max_length is None else max_length
        empty = ops.zeros((batch, self.num_heads, length, self.head_dim), self.compute_dtype)
        return (empty, empty) if max_length is not None else GrowingCache(empty, empty)

    def call(
        self,
        query,
        key_value=None,
        attention_mask=None,
        cache=None,
        cache_index=None,
        training=None,
        return_attention_scores=False,
        layout=None,
        key_value_layout=None,
    ):
        if layout is not None and (cache is not None or self.rotary is not None):
            raise ValueError("packed rows (`layout`) are for a full pass without RoPE")
        if cache is None and self.rotary is None:  # a full pass (training, the encoder)
            q, key, value = self._full_pass_projections(query, key_value, layout, key_value_layout)
        else:
            q, key, value, cache = self._cached_projections(query, key_value, cache, cache_index)
        output, weights = self._attend(q, key, value, attention_mask, training)
        output = ops.transpose(output, (0, 2, 1, 3))  # [sources, group * query, heads, hd]
        if layout is not None:  # [tokens, heads, head_dim], as one "sentence" of tokens
            output = self.output_dense(layout.pack(output)[None])[0]  # [tokens, output_dim]
        else:
            rows, query_length = kernels.leading_dims(query, 2)
            output = ops.reshape(output, (rows, query_length, self.num_heads, self.head_dim))
            output = self.output_dense(output)  # [rows, query, output_dim]
        result = (output,) if cache is None else (output, cache)
        if return_attention_scores:
            result = (*result, weights)
        return result[0] if len(result) == 1 else result

    def _full_pass_projections(self, query, key_value, layout, key_value_layout):
        """Queries (scaled), keys and values of a full pass, heads-first.

        One input's projections run as one wider matmul (decision D1), with
        `1 / sqrt(head_dim)` folded into the query's kernel and bias; the weights stay
        three layers.

        Returns:
            `(query, keys, values)`, each `[batch, heads, length, head_dim]`.
        """
        scale = 1.0 / math.sqrt(self.head_dim)
        if key_value is None:
            projections = (self.query_dense, self.key_dense, self.value_dense)
            return _project_side_by_side(query, projections, layout, query_scale=scale)
        (q,) = _project_side_by_side(query, (self.query_dense,), layout, query_scale=scale)
        key, value = _project_side_by_side(
            key_value, (self.key_dense, self.value_dense), key_value_layout
        )
        return q, key, value

    def _cached_projections(self, query, key_value, cache, cache_index):
        """Queries, keys, values and updated cache of a call with a cache or RoPE.

        The decoding path (see the class); self-attention projects side by side.

        Returns:
            `(query [sources, heads, group * query, head_dim] scaled, keys, values,
            cache)`, keys and values `[sources, heads, key_length, head_dim]`.
        """
        start = 0 if cache_index is None else cache_index
        if cache is not None and cache_index is None:
            q = self.query_dense(query)  # [batch, query_length, heads, head_dim]
            key, value = cache  # precomputed cross-attention: [batch, heads, length, head_dim]
        elif key_value is None:  # self-attention: [batch, new_length, heads, head_dim] each
            projections = (self.query_dense, self.key_dense, self.value_dense)
            q, key, value = _project_side_by_side(query, projections, heads_first=False)
        else:
            q = self.query_dense(query)
            key, value = self.key_dense(key_value), self.value_dense(key_value)
        if self.rotary is not None:
            q = self.rotary(q, start_index=start)

        if cache is None or cache_index is not None:
            if self.rotary is not None:
                key = self.rotary(key, start_index=start)
            if isinstance(cache, GrowingCache):  # [batch, heads, written, head_dim] each
                key = ops.concatenate([cache.keys, _heads_first(key)], axis=2)
                value = ops.concatenate([cache.values, _heads_first(value)], axis=2)
                cache = GrowingCache(key, value)
            elif cache is not None:
                key = _write_cache(cache[0], _heads_first(key), cache_index)
                value = _write_cache(cache[1], _heads_first(value), cache_index)
                cache = (key, value)  # [batch, heads, max_length, head_dim] each

        if cache is None:  # a full pass with RoPE: [batch, length, heads, head_dim]
            key, value = _heads_first(key), _heads_first(value)
        # A shared cross-attention cache's `group` query rows attend as one entry (class).
        (sources,) = kernels.leading_dims(key, 1)
        scale = ops.cast(1.0 / math.sqrt(self.head_dim), q.dtype)
        q = ops.reshape(q * scale, (sources, -1, self.num_heads, self.head_dim))
        return _heads_first(q), key, value, cache

    def _attend(self, query, key, value, attention_mask, training):
        """Attention of scaled heads-first queries over heads-first keys/values.

        Batch matmuls on heads-first operands (the decoding cache's layout, so one path
        serves both) and an additive mask on `[batch, 1, query, key]`.

        Args:
            query: `[sources, heads, group * query, head_dim]`, times `1 / sqrt(head_dim)`.
            key: `[sources, heads, key, head_dim]`.
            value: `[sources, heads, key, head_dim]`.
            attention_mask: See `call`.
            training: Applies dropout when True.

        Returns:
            `(context [sources, heads, group * query, head_dim], weights
            [sources, heads, group * query, key])`.
        """
        scores = ops.matmul(query, ops.swapaxes(key, -1, -2))  # [sources, heads, gq, key]
        scores = ops.cast(scores, "float32")  # softmax in float32 under mixed precision
        if attention_mask is not None:
            allowed = ops.expand_dims(ops.cast(attention_mask, "bool"), axis=1)  # [b, 1, q, k]
            scores = scores + ops.where(allowed, 0.0, _MASKED_SCORE)  # broadcast over heads
        weights = ops.softmax(scores, axis=-1)
        dropped = self.weights_dropout(weights, training=training)
        context = ops.matmul(ops.cast(dropped, value.dtype), value)  # [src, heads, gq, hd]
        return context, weights

    def compute_output_shape(self, query_shape, key_value_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "head_dim": self.head_dim,
                "output_dim": self.output_dim,
                "use_bias": self.use_bias,
                "dropout": self.dropout,
                "rotary_embedding": self.rotary_embedding,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


def _project_side_by_side(inputs, projections, layout=None, heads_first=True, query_scale=1.0):
    """Several `HeadsProjection`s of one input as one matmul.

    Args:
        inputs: `[batch, length, d_in]`, or `[tokens, d_in]` packed rows with `layout`.
        projections: `HeadsProjection`s into heads (`btd,dnh->btnh`), all of one dtype
            policy and of the same heads and head size.
        layout: The `PackedLayout` of packed `inputs`: the outputs are unpacked into
            its padded grid, zeros at the padding.
        heads_first: Each output `[batch, heads, length, head_dim]`, else as the
            projections give it, `[batch, length, heads, head_dim]`.
        query_scale: A factor folded into the first projection's kernel and bias.

    Returns:
        A tuple, one output per projection.
    """
    first = projections[0]
    fan_in, heads, head_dim = first.kernel.shape
    dtype = first.compute_dtype

    def side_by_side(weights, shape):
        parts = [ops.reshape(weight, shape) for weight in weights]
        if query_scale != 1.0:
            parts[0] = parts[0] * query_scale
        return ops.cast(parts[0] if len(parts) == 1 else ops.concatenate(parts, -1), dtype)

    kernel = side_by_side([p.kernel for p in projections], (fan_in, heads * head_dim))
    outputs = ops.matmul(ops.reshape(inputs, (-1, fan_in)), kernel)  # [rows, n * h * hd]
    if first.bias is not None:
        outputs = kernels.bias_add(
            outputs, side_by_side([p.bias for p in projections], (heads * head_dim,))
        )
    if layout is not None:
        outputs = layout.unpack(outputs)  # [batch, length, n * h * hd]
    batch, length = kernels.leading_dims(inputs if layout is None else outputs, 2)
    outputs = ops.reshape(outputs, (batch, length, len(projections), heads, head_dim))
    if not heads_first:
        return tuple(ops.unstack(outputs, axis=2))
    # [n, batch, heads, length, head_dim]: one transpose for all of them.
    return tuple(ops.unstack(ops.transpose(outputs, (2, 0, 3, 1, 4)), axis=0))


def _heads_first(x):
    """`[batch, length, heads, head_dim]` -> `[batch, heads, length, head_dim]`."""
    return ops.transpose(x, (0, 2, 1, 3))


def _write_cache(cache, update, index):
    """Returns `cache` with `update` written at positions `index ..`.

    One step's token goes in with the backend's `kernels.write_step`; several tokens (a
    prompt) with a select on a position mask.

    Args:
        cache: `[batch, heads, max_length, head_dim]`.
        update: `[batch, heads, new_length, head_dim]`.
        index: int scalar, the position of `update[:, :, 0]`.

    Returns:
        `[batch, heads, max_length, head_dim]`.
    """
    if update.shape[2] == 1:  # one decoding step
        return kernels.write_step(cache, update, index)
    # Several tokens (a prompt): each cache position takes its update row, if any.
    max_length = ops.shape(cache)[2]
    positions = ops.arange(max_length)  # [max_length]
    new_length = ops.shape(update)[2]
    offsets = positions - index  # [max_length]
    written = ops.logical_and(offsets >= 0, offsets < new_length)[:, None]  # [max_length, 1]
    placed = ops.take(update, ops.clip(offsets, 0, new_length - 1), axis=2)  # like cache
    return ops.where(written, placed, cache)
