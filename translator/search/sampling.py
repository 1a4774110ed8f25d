"""Sampling: each next token drawn from the model's (tempered, truncated) distribution.

The loop is greedy search's (`Greedy`: one row per hypothesis, compaction, the length
limits, `min_length`, forced prefixes); only the choice of the next token differs:

1. The allowed tokens' log-probabilities (`common.allowed_log_probs`) are divided by the
   temperature.
2. `topk:K` keeps the K largest (K = 0: all); `topp:P` keeps the fewest largest whose
   tempered probability reaches P (the nucleus; the most probable token always stays).
3. The token is drawn by the Gumbel-max trick: argmax of the kept values plus Gumbel
   noise, which draws from their softmax. The noise of a row comes from
   `stateless_uniform` over the *whole* batch's rows at `(seed, step)`, indexed by the
   row's own number, so a hypothesis' draws depend on the seed, its row and the step
   only: not on which other rows are still decoding (compacted or not, XLA or not).

A hypothesis' score is the model's own log P of its tokens over the length penalty,
as for greedy and beam search (the temperature and the truncation shape the draw, not
the score). `num_samples` draws per sentence are `num_samples` rows of the same source,
sorted best first into the sentence's n-best slots.
"""

from __future__ import annotations

import tensorflow as tf

from translator.search.common import (
    DEFAULT_IDS,
    NEG_INF,
    SearchResult,
    SpecialIds,
    allowed_log_probs,
    forced_tokens,
)
from translator.search.config import SearchConfig
from translator.search.driver import SearchInputs, decode
from translator.search.greedy import Greedy, GreedyState


def truncate(scores, method: str, value: float):
    """Keeps the top-k or nucleus of each row of tempered log-probabilities.

    Args:
        scores: float32 `[rows, vocab]`, tempered log-probabilities; -inf = not allowed.
        method: "topk" or "topp" (`SearchConfig.sampling_rule`).
        value: K (0: keep all) or P.

    Returns:
        `scores` with the dropped tokens at -inf: float32 `[rows, vocab]`.
    """
    if method == "topk":
        k = int(value)
        if k == 0 or (scores.shape[-1] is not None and k >= scores.shape[-1]):
            return scores
        kth = tf.math.top_k(scores, k).values[:, -1:]  # [rows, 1]
        return tf.where(scores >= kth, scores, NEG_INF)
    ordered = tf.sort(scores, axis=-1, direction="DESCENDING")  # [rows, vocab]
    probs = tf.nn.softmax(ordered)  # renormalized over the allowed tokens
    before = tf.math.cumsum(probs, axis=-1, exclusive=True)  # mass of the larger ones
    # The smallest kept value: the last one whose larger values hold less than P.
    kept = tf.reduce_sum(tf.cast(before < value, tf.int32), axis=-1)  # [rows], >= 1
    threshold = tf.gather(ordered, kept[:, None] - 1, batch_dims=1)  # [rows, 1]
    return tf.where(scores >= threshold, scores, NEG_INF)


class Sampling(Greedy):
    """The sampling strategy of `translator.search.driver.decode` (module docstring).

    Args:
        config: The `SearchConfig` (sampling, temperature, seed, num_samples,
            min_length, length penalty).
        max_lengths: int32 `[batch]`, each sentence's length limit.
        special_ids: The special ids.
        prefix_ids: int32 `[batch, width]`, target prefixes to force, or None.
    """

    def __init__(self, config: SearchConfig, max_lengths, special_ids: SpecialIds, prefix_ids=None):
        samples = config.num_samples
        repeat = (lambda x: tf.repeat(x, samples, axis=0)) if samples > 1 else (lambda x: x)
        # Row r is draw r % samples of sentence r // samples.
        super().__init__(
            config,
            repeat(max_lengths),
            special_ids,
            None if prefix_ids is None else repeat(prefix_ids),
        )
        self.method, self.value = config.sampling_rule
        self.samples = samples
        self.repeat = repeat

    def initial_state(self, inputs: SearchInputs) -> GreedyState:
        rows = inputs._replace(
            cache=tf.nest.map_structure(self.repeat, inputs.cache),
            max_lengths=self.max_lengths,
        )
        return super().initial_state(rows)

    def choose(self, state: GreedyState, logits) -> tuple[tf.Tensor, tf.Tensor]:
        """A draw per active row and its log P: int32, float32 `[active]`."""
        log_probs = allowed_log_probs(
            logits,
            state.step,
            tf.gather(self.max_lengths, state.sentence),
            self.config.min_length,
            self.special_ids,
            forced_tokens(self.prefix_ids, state.sentence, state.step),
        )  # [active, vocab]
        scores = truncate(log_probs / self.config.temperature, self.method, self.value)
        vocab = tf.shape(logits)[-1]
        seed = tf.stack([tf.constant(self.config.seed, tf.int32), state.step])
        uniform = tf.random.stateless_uniform(
            [tf.size(self.max_lengths), vocab], seed, minval=1e-20, maxval=1.0
        )  # [all rows, vocab]: a row's noise does not depend on the rows still active
        gumbel = -tf.math.log(-tf.math.log(tf.gather(uniform, state.sentence)))
        token = tf.argmax(scores + gumbel, axis=-1, output_type=tf.int32)  # [active]
        return token, tf.gather(log_probs, token[:, None], batch_dims=1)[:, 0]

    def finalize(self, state: GreedyState) -> SearchResult:
        result = super().finalize(state)  # [rows, 1, length], [rows, 1] x2
        samples = self.samples
        ids = tf.reshape(result.ids, [-1, samples, tf.shape(result.ids)[-1]])
        scores = tf.reshape(result.scores, [-1, samples])  # [batch, samples]
        lengths = tf.reshape(result.lengths, [-1, samples])
        order = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)  # best first
        return SearchResult(
            ids=tf.gather(ids, order, batch_dims=1),  # [batch, samples, length]
            scores=tf.gather(scores, order, batch_dims=1),  # [batch, samples]
            lengths=tf.gather(lengths, order, batch_dims=1),  # [batch, samples]
        )


def sample(
    inputs: SearchInputs,
    config: SearchConfig,
    compact: bool = True,
    special_ids: SpecialIds = DEFAULT_IDS,
) -> SearchResult:
    """Translates a batch by drawing `config.num_samples` hypotheses per sentence.

    Args:
        inputs: The step function, cache and length limits (`search.prepare`).
        config: A `SearchConfig` with `sampling` set.
        compact: Drop done rows from the loop (`driver.decode`); False for XLA. The draws
            are the same either way.
        special_ids: The special ids.

    Returns:
        A `SearchResult` with `num_samples` hypotheses per sentence, best first.
    """
    strategy = Sampling(config, inputs.max_lengths, special_ids, inputs.prefix_ids)
    return decode(strategy, inputs, compact)
