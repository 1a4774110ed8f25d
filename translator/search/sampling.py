"""Sampling: each next token drawn from the model's (tempered, truncated) distribution.

Greedy search's loop; the allowed log-probabilities are divided by the temperature,
truncated (`topk:K` or the `topp:P` nucleus) and drawn from by the Gumbel-max trick, with
stateless noise over the *whole* batch's rows at `(seed, step)`, so a draw does not depend
on which rows are still decoding. Scores are log P / lp, as in the other searches.
"""

from __future__ import annotations

import keras
from keras import ops

from translator.backends import kernels
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
        kth = ops.top_k(scores, k)[0][:, -1:]  # [rows, 1]
        return ops.where(scores >= kth, scores, NEG_INF)
    ordered = ops.flip(ops.sort(scores, axis=-1), axis=-1)  # [rows, vocab], descending
    probs = ops.softmax(ordered)  # renormalized over the allowed tokens
    # The mass of the larger ones: the inclusive sums shifted one place right.
    before = ops.pad(ops.cumsum(probs, axis=-1)[:, :-1], [[0, 0], [1, 0]])
    # The smallest kept value: the last one whose larger values hold less than P.
    kept = ops.sum(ops.cast(before < value, "int32"), axis=-1)  # [rows], >= 1
    threshold = kernels.gather_batch(ordered, kept[:, None] - 1)  # [rows, 1]
    return ops.where(scores >= threshold, scores, NEG_INF)


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
        repeat = (lambda x: ops.repeat(x, samples, axis=0)) if samples > 1 else (lambda x: x)
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
            cache=keras.tree.map_structure(self.repeat, inputs.cache),
            max_lengths=self.max_lengths,
        )
        return super().initial_state(rows)

    def choose(self, state: GreedyState, logits):
        """A draw per active row and its log P: int32, float32 `[active]`."""
        log_probs = allowed_log_probs(
            logits,
            state.step,
            kernels.gather(self.max_lengths, state.sentence),
            self.config.min_length,
            self.special_ids,
            forced_tokens(self.prefix_ids, state.sentence, state.step),
        )  # [active, vocab]
        scores = truncate(log_probs / self.config.temperature, self.method, self.value)
        vocab = ops.shape(logits)[-1]
        seed = ops.stack([ops.convert_to_tensor(self.config.seed, "int32"), state.step])
        uniform = kernels.uniform(
            (ops.shape(self.max_lengths)[0], vocab), seed, minval=1e-20, maxval=1.0
        )  # [all rows, vocab]: a row's noise does not depend on the rows still active
        gumbel = -ops.log(-ops.log(kernels.gather(uniform, state.sentence)))
        token = kernels.argmax(scores + gumbel)  # [active]
        return token, kernels.gather_batch(log_probs, token[:, None])[:, 0]

    def finalize(self, state: GreedyState) -> SearchResult:
        result = super().finalize(state)  # [rows, 1, length], [rows, 1] x2
        samples = self.samples
        ids = ops.reshape(result.ids, (-1, samples, ops.shape(result.ids)[-1]))
        scores = ops.reshape(result.scores, (-1, samples))  # [batch, samples]
        lengths = ops.reshape(result.lengths, (-1, samples))
        order = ops.argsort(-scores, axis=1)  # best first (stable: ties keep draw order)
        return SearchResult(
            ids=kernels.gather_batch(ids, order),  # [batch, samples, length]
            scores=kernels.gather_batch(scores, order),  # [batch, samples]
            lengths=kernels.gather_batch(lengths, order),  # [batch, samples]
        )


def sample(
    inputs: SearchInputs,
    config: SearchConfig,
    compact: bool = kernels.DYNAMIC_SHAPES,
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
