"""What encoder and decoder blocks share: arguments, sublayers, residual wiring.

Private: the public layers are `EncoderBlock` and `DecoderBlock`.
"""

from __future__ import annotations

import keras

from translator.layers.attention import MultiHeadAttention
from translator.layers.dropout import FastDropout
from translator.layers.feed_forward import FeedForward
from translator.layers.layer_norm import LayerNorm


class BlockBase(keras.layers.Layer):
    """Self-attention and FFN sublayers with dropout, residuals and LayerNorm.

    Args:
        num_heads: Attention heads; the input width must divide evenly into them.
        ffn_dim: Inner width of the feed-forward network.
        activation: Feed-forward activation ("relu", "gelu", "swiglu").
        dropout: Dropout on each sublayer's output before the residual add.
        attention_dropout: Dropout on the attention weights.
        activation_dropout: Dropout after the feed-forward activation.
        norm_first: Pre-norm (default: stable to train) or the paper's post-norm.
        layer_norm_epsilon: Epsilon of the LayerNormalizations.
        rotary_embedding: Apply RoPE inside self-attention.
        **kwargs: Standard `keras.layers.Layer` arguments.
    """

    def __init__(
        self,
        num_heads: int,
        ffn_dim: int,
        activation: str = "relu",
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        norm_first: bool = True,
        layer_norm_epsilon: float = 1e-6,
        rotary_embedding: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.ffn_dim = ffn_dim
        self.activation = activation
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.rotary_embedding = rotary_embedding

    def _build_attention(self, name, query_shape, key_value_shape=None, rotary=False):
        attention = MultiHeadAttention(
            self.num_heads,
            query_shape[-1] // self.num_heads,
            dropout=self.attention_dropout,
            rotary_embedding=rotary,
            dtype=self.dtype_policy,
            name=name,
        )
        attention.build(query_shape, key_value_shape)
        return attention

    def _build_norm(self, name, inputs_shape):
        norm = LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)
        norm.build(inputs_shape)
        return norm

    def _build_self_attention_and_feed_forward(self, inputs_shape):
        self.self_attention = self._build_attention(
            "self_attention", inputs_shape, rotary=self.rotary_embedding
        )
        self.self_attention_norm = self._build_norm("self_attention_norm", inputs_shape)
        self.feed_forward = FeedForward(
            self.ffn_dim,
            activation=self.activation,
            dropout=self.activation_dropout,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm = self._build_norm("feed_forward_norm", inputs_shape)
        self.residual_dropout = FastDropout(
            self.dropout, dtype=self.dtype_policy, name="residual_dropout"
        )

    def _residual(self, inputs, sublayer, norm, training):
        """`x + Dropout(f(LN(x)))` (pre-norm) or `LN(x + Dropout(f(x)))` (post-norm).

        Args:
            inputs: `[batch, length, d_model]`.
            sublayer: Maps `[batch, length, d_model]` to `(output, extra)`; `extra` (a
                cache, or None) is passed through.
            norm: This sublayer's LayerNormalization.
            training: Applies dropout when True.

        Returns:
            `(output [batch, length, d_model], extra)`.
        """
        if self.norm_first:
            output, extra = sublayer(norm(inputs, training=training))
            return inputs + self.residual_dropout(output, training=training), extra
        output, extra = sublayer(inputs)
        residual = inputs + self.residual_dropout(output, training=training)
        return norm(residual, training=training), extra

    def _feed_forward_sublayer(self, inputs, training):
        output, _ = self._residual(
            inputs,
            lambda h: (self.feed_forward(h, training=training), None),
            self.feed_forward_norm,
            training,
        )
        return output

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "ffn_dim": self.ffn_dim,
                "activation": self.activation,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation_dropout": self.activation_dropout,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "rotary_embedding": self.rotary_embedding,
            }
        )
        return config
