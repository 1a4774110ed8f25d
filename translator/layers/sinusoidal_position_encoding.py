"""The paper's fixed sinusoidal position encoding (Vaswani et al. 2017, section 3.5)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="translator")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Adds PE(pos, 2i) = sin(pos / w^(2i/d)), PE(pos, 2i+1) = cos(pos / w^(2i/d)).

    PE(pos + k) is a fixed rotation of PE(pos), so relative offsets are linear in the
    encoding. No weights; any length works.

    Args:
        max_wavelength: w above (the paper uses 10000).
        layout: "interleaved" (as above) or "marian": Marian's own table, sines in
            channels 0 .. d/2 - 1 and cosines in d/2 .. d - 1 at frequencies
            w^(-i/(d/2 - 1)), i < d/2 (tensor2tensor's timing signal). Hugging Face's and
            CTranslate2's Marian ports use the paper's w^(-2i/d) instead, which is not
            the table OPUS-MT models were trained with.
        **kwargs: Standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[batch, length, d_model]` embeddings, d_model even.
        start_index: Position of the first token (a cache index when decoding).

    Returns:
        `inputs + PE[start_index : start_index + length]`, `[batch, length, d_model]`.
    """

    def __init__(self, max_wavelength: float = 10000.0, layout: str = "interleaved", **kwargs):
        super().__init__(**kwargs)
        if layout not in ("interleaved", "marian"):
            raise ValueError(f"layout must be 'interleaved' or 'marian', got {layout!r}")
        self.max_wavelength = max_wavelength
        self.layout = layout
        self.built = True

    def encoding(self, length, d_model: int, start_index=0):
        """The encoding table `[length, d_model]` (float32) for positions from start_index."""
        positions = ops.cast(ops.arange(length) + start_index, "float32")  # [length]
        half = d_model // 2
        if self.layout == "marian":  # the last frequency is exactly 1 / w
            exponents = ops.arange(half, dtype="float32") / max(half - 1, 1)  # [d_model / 2]
        else:
            exponents = ops.arange(0, d_model, 2, dtype="float32") / d_model  # [d_model / 2]
        angles = positions[:, None] / ops.power(self.max_wavelength, exponents)[None, :]
        if self.layout == "marian":
            return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)  # [len, d]
        # Interleave so channel 2i is sin and 2i+1 is cos of the same angle.
        table = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # [length, d/2, 2]
        return ops.reshape(table, (length, d_model))  # [length, d_model]

    def call(self, inputs, start_index=0):
        length, d_model = ops.shape(inputs)[1], inputs.shape[-1]
        table = self.encoding(length, d_model, start_index)  # [length, d_model]
        return inputs + ops.cast(table, inputs.dtype)[None, :, :]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength, "layout": self.layout})
        return config
