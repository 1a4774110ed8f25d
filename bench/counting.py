"""`CountingModel`: counts the decoder steps a search runs, to tell slow steps from wasted ones."""

import tensorflow as tf


class CountingModel:
    """Delegates to `model`, counting its `decode_step` calls and rows in variables (so in a
    `tf.function` and a `tf.while_loop` too); `reset()` zeroes them."""

    def __init__(self, model):
        self.model = model
        self.steps = tf.Variable(0, dtype=tf.int32, trainable=False)  # decode_step calls
        self.rows = tf.Variable(0, dtype=tf.int32, trainable=False)  # rows over those calls

    def __getattr__(self, name: str):  # config, built, encode, init_cache: the model's
        return getattr(self.model, name)

    def reset(self) -> None:
        self.steps.assign(0)
        self.rows.assign(0)

    def decode_step(self, token_ids, *args, **kwargs):
        self.steps.assign_add(1)
        self.rows.assign_add(tf.shape(token_ids)[0])
        return self.model.decode_step(token_ids, *args, **kwargs)
