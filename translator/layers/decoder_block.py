"""One Transformer decoder block: masked self-attention, cross-attention, feed-forward."""

from __future__ import annotations

import keras

from translator.layers.block_base import BlockBase


@keras.saving.register_keras_serializable(package="translator")
class DecoderBlock(BlockBase):
    """Masked self-attention, cross-attention over the encoder output, then the FFN.

    Takes the arguments of `BlockBase`; RoPE (`rotary_embedding`) applies to
    self-attention only, since source and target positions are not comparable.

    Call arguments:
        inputs: `[batch, target_length, d_model]`.
        encoder_output: `[batch, source_length, d_model]`; may be omitted when
            `cross_attention_cache` is given.
        self_attention_mask: bool, broadcastable to `[batch, target_length, key_length]`:
            causal and target padding for a full pass, `masks.cache_mask` when decoding.
        cross_attention_mask: bool, broadcastable to `[batch, target_length, source_length]`.
        self_attention_cache: `(keys, values)`, each `[batch, heads, max_length, head_dim]`
            (from `self_attention.empty_cache`), or None.
        cross_attention_cache: `(keys, values)`, each `[sources, heads, source_length,
            head_dim]` (`cross_attention.compute_key_value`), or None; `batch` may be a
            multiple of `sources` (see `MultiHeadAttention`).
        cache_index: int scalar, position of the first input token in the cache.
        training: Applies dropout when True.
        layout: With `inputs` as packed rows `[tokens, d_model]` (a full pass): their
            `PackedLayout` (see `MultiHeadAttention`); the output is rows too.
        encoder_layout: The `PackedLayout` of a packed `encoder_output`.
        return_cross_attention: Also return the cross-attention weights, float32
            `[batch, heads, target_length, source_length]` (a padded full pass).

    Returns:
        `[batch, target_length, d_model]` (`[tokens, d_model]` packed), or
        `(output, self_attention_cache)` updated at `cache_index` when a self-attention
        cache is given; with `return_cross_attention`, `(output, weights)`.
    """

    def build(self, inputs_shape, encoder_output_shape=None):
        self._build_self_attention_and_feed_forward(inputs_shape)
        self.cross_attention = self._build_attention(
            "cross_attention", inputs_shape, encoder_output_shape or inputs_shape
        )
        self.cross_attention_norm = self._build_norm("cross_attention_norm", inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        self_attention_cache=None,
        cross_attention_cache=None,
        cache_index=None,
        training=None,
        layout=None,
        encoder_layout=None,
        return_cross_attention=False,
    ):
        def self_attention(h):
            result = self.self_attention(
                h,
                attention_mask=self_attention_mask,
                cache=self_attention_cache,
                cache_index=cache_index,
                training=training,
                layout=layout,
            )
            return result if self_attention_cache is not None else (result, None)

        def cross_attention(h):
            result = self.cross_attention(
                h,
                key_value=None if cross_attention_cache is not None else encoder_output,
                attention_mask=cross_attention_mask,
                cache=cross_attention_cache,
                training=training,
                return_attention_scores=return_cross_attention,
                layout=layout,
                key_value_layout=encoder_layout,
            )
            if return_cross_attention:  # (output, [cache,] weights)
                return result[0], result[-1]
            return (result[0] if cross_attention_cache is not None else result), None

        x, new_cache = self._residual(inputs, self_attention, self.self_attention_norm, training)
        x, weights = self._residual(x, cross_attention, self.cross_attention_norm, training)
        x = self._feed_forward_sublayer(x, training)  # [batch, target_length, d_model]
        if return_cross_attention:
            return x, weights
        return x if self_attention_cache is None else (x, new_cache)
