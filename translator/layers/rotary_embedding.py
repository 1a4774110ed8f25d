"""Rotary position embedding (RoPE, Su et al. 2021) for attention heads."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="translator")
class RotaryEmbedding(keras.layers.Layer):
    """Rotates pairs of feature channels by a position-dependent angle.

    Makes query-key dot products depend on relative position only. Channel i of each
    half pairs (GPT-NeoX layout), rotated by `position / max_wavelength ** (2i / head_dim)`.

    Args:
        max_wavelength: The longest wavelength of the rotation frequencies.
        **kwargs: Standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[batch, length, heads, head_dim]`, head_dim even.
        start_index: Position of the first token (int scalar; a cache index when decoding).

    Returns:
        The rotated inputs, same shape and dtype.
    """

    def __init__(self, max_wavelength: float = 10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength
        self.built = True

    def call(self, inputs, start_index=0):
        length, head_dim = ops.shape(inputs)[1], ops.shape(inputs)[-1]
        half = head_dim // 2
        exponents = ops.arange(half, dtype="float32") * 2.0 / head_dim  # [half]
        inverse_frequency = 1.0 / ops.power(self.max_wavelength, exponents)  # [half]
        positions = ops.cast(ops.arange(length) + start_index, "float32")  # [length]
        angles = positions[:, None] * inverse_frequency[None, :]  # [length, half]
        cos = ops.cast(ops.cos(angles), inputs.dtype)[None, :, None, :]  # [1, length, 1, half]
        sin = ops.cast(ops.sin(angles), inputs.dtype)[None, :, None, :]
        first, second = inputs[..., :half], inputs[..., half:]
        return ops.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
