"""`CountingModel`: counts the decoder steps a search runs, to measure what a search costs.

With compaction a sentence's rows run until its own search is done; without it (XLA)
every row runs until the batch's last sentence is done. Steps per returned token tell
"the steps are slow" from "the search runs steps that return nothing".
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


class CountingModel:
    """Delegates to a model and counts its `decode_step` calls and rows, in the graph.

    The counters are variables, so they count inside a `tf.function` and a
    `tf.while_loop` too. Reset them with `reset()`.

    Args:
        model: A model with `encode`, `init_cache`, `decode_step` and `config`.
    """

    def __init__(self, model: Any):
        self.model = model
        self.config = model.config
        self.built = model.built  # what `translator.search.Decoder` checks
        self.steps = tf.Variable(0, dtype=tf.int32, trainable=False)  # decode_step calls
        self.rows = tf.Variable(0, dtype=tf.int32, trainable=False)  # rows over those calls

    def reset(self) -> None:
        """Sets both counters to 0."""
        self.steps.assign(0)
        self.rows.assign(0)

    def encode(self, *args, **kwargs):
        return self.model.encode(*args, **kwargs)

    def init_cache(self, *args, **kwargs):
        return self.model.init_cache(*args, **kwargs)

    def decode_step(self, token_ids, *args, **kwargs):
        """Counts one step of `tf.shape(token_ids)[0]` rows, then runs the model's."""
        self.steps.assign_add(1)
        self.rows.assign_add(tf.shape(token_ids)[0])
        return self.model.decode_step(token_ids, *args, **kwargs)
