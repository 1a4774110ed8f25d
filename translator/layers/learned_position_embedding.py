"""Learned absolute position embeddings (as in BERT and OpenNMT's option)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="translator")
class LearnedPositionEmbedding(keras.layers.Layer):
    """Adds a trained vector per absolute position.

    Args:
        max_length: Number of positions in the table; later positions are clamped to
            the last row (TensorFlow's gather on CPU would fail).
        embeddings_initializer: Initializer of the `[max_length, d_model]` table.
        **kwargs: Standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[batch, length, d_model]` embeddings.
        start_index: Position of the first token (a cache index when decoding).

    Returns:
        `inputs + table[start_index : start_index + length]`, `[batch, length, d_model]`.
    """

    def __init__(self, max_length: int, embeddings_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, inputs_shape[-1]),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        positions = ops.minimum(ops.arange(length) + start_index, self.max_length - 1)
        table = ops.take(self.position_embeddings, positions, axis=0)  # [length, d_model]
        return inputs + ops.cast(table, inputs.dtype)[None, :, :]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            }
        )
        return config
