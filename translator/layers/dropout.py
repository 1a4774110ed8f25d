"""Dropout from 16 random bits per element: the same regularizer, cheaper on CPU."""

from __future__ import annotations

import keras
import tensorflow as tf

# Keep decisions compare 16 random bits with the rate; 2**16 levels make the rate exact
# to 1.5e-5 (0.1 becomes 6,553/65,536), and the scale below uses the rate as applied.
_LEVELS = 2**16


@keras.saving.register_keras_serializable(package="translator")
class FastDropout(keras.layers.Dropout):
    """Inverted dropout drawing two keep/drop decisions from each random 32-bit word.

    `keras.layers.Dropout` draws one float per element (`stateless_dropout`); on a
    2-core CPU the dropouts of a training step were a measurable share of it, and this
    layer does the same work in much less time (figures: bench/RESULTS.md, design
    measurements; `bench.training` measures the whole step). Each element is kept with
    probability `1 - rate` (to 1/65,536) and scaled by the inverse of the applied keep
    probability, so the expectation is unchanged, as in Keras.

    Args:
        rate: Fraction of the inputs to drop, in [0, 1).
        seed: Seed of the layer's random stream (`keras.random.SeedGenerator`).
        **kwargs: Standard `keras.layers.Layer` arguments. (`noise_shape` is not
            supported: Keras' layer serves that case.)

    Call arguments:
        inputs: Any shape.
        training: Drops only when True.

    Returns:
        The inputs' shape and dtype.
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs):
        if kwargs.get("noise_shape") is not None:
            raise ValueError("FastDropout: noise_shape is not supported")
        kwargs.pop("noise_shape", None)
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        threshold = round(self.rate * _LEVELS)  # drop where bits < threshold
        scale = _LEVELS / (_LEVELS - threshold)  # 1 / applied keep probability
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), 2**31 - 1), tf.int32)
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

    def get_config(self):
        config = super().get_config()
        config.pop("noise_shape", None)
        return config
