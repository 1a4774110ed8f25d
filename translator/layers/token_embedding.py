"""Token embedding scaled by sqrt(d_model), reusable as the tied output projection."""

from __future__ import annotations

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="translator")
class TokenEmbedding(keras.layers.Layer):
    """Embeds ids and multiplies by sqrt(d_model) (paper, section 3.4).

    The same table can embed source and target tokens (a joint vocabulary) and, through
    `project`, give the pre-softmax logits as `hidden @ table^T` (weight tying).

    Args:
        vocab_size: Number of ids, padding id 0 included.
        d_model: Embedding width.
        scale: Multiply embeddings by sqrt(d_model). Keep True with the paper's
            initialization N(0, d_model^-0.5), which makes scaled embeddings unit-variance.
        embeddings_initializer: Initializer of the `[vocab_size, d_model]` table.
        **kwargs: Standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: int ids `[batch, length]`.

    Returns:
        `[batch, length, d_model]` in the compute dtype.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        scale: bool = True,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = scale
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
            or keras.initializers.RandomNormal(mean=0.0, stddev=d_model**-0.5)
        )

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, inputs):
        vectors = ops.take(self.embeddings, ops.cast(inputs, "int32"), axis=0)
        vectors = ops.cast(vectors, self.compute_dtype)  # [batch, length, d_model]
        if self.scale:
            vectors = vectors * ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        return vectors

    def project(self, hidden):
        """Logits over the vocabulary with the transposed table (tied output layer).

        Args:
            hidden: `[..., d_model]`.

        Returns:
            float32 `[..., vocab_size]`: softmax runs in float32 under mixed precision.
        """
        table = ops.cast(self.embeddings, hidden.dtype)  # [vocab, d_model]
        # One 2-D matmul over all rows: a batch matmul's gradient would materialize a
        # [batch, d_model, vocab] product (decision D8).
        leading = ops.shape(hidden)[:-1]
        flat = ops.reshape(hidden, (-1, self.d_model))  # [rows, d_model]
        logits = ops.matmul(flat, ops.transpose(table))  # [rows, vocab]
        logits = ops.reshape(logits, (*leading, self.vocab_size))  # [..., vocab]
        return ops.cast(logits, "float32")

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "d_model": self.d_model,
                "scale": self.scale,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
