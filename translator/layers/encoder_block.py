"""One Transformer encoder block: self-attention, then the feed-forward network."""

from __future__ import annotations

import keras

from translator.layers.block_base import BlockBase


@keras.saving.register_keras_serializable(package="translator")
class EncoderBlock(BlockBase):
    """Self-attention and FFN sublayers, each with dropout, a residual and LayerNorm.

    Takes the arguments of `BlockBase`.

    Call arguments:
        inputs: `[batch, source_length, d_model]`.
        attention_mask: bool, broadcastable to `[batch, source_length, source_length]`
            (usually `masks.padding_mask(source_ids)`).
        training: Applies dropout when True.
        layout: With `inputs` as packed rows `[tokens, d_model]`: their `PackedLayout`
            (see `MultiHeadAttention`); the output is rows too.

    Returns:
        `[batch, source_length, d_model]` (or `[tokens, d_model]`).
    """

    def build(self, inputs_shape):
        self._build_self_attention_and_feed_forward(inputs_shape)
        self.built = True

    def call(self, inputs, attention_mask=None, training=None, layout=None):
        x, _ = self._residual(
            inputs,
            lambda h: (
                self.self_attention(
                    h, attention_mask=attention_mask, training=training, layout=layout
                ),
                None,
            ),
            self.self_attention_norm,
            training,
        )
        return self._feed_forward_sublayer(x, training)  # [batch, source_length, d_model]
