"""What greedy and beam search share: special ids, scoring, length limits, the result.

Definitions used throughout:

- A hypothesis Y is the generated tokens after BOS, up to and including EOS (forced at
  the length limit); |Y| counts its tokens *including* EOS.
- log P(Y) = sum over Y's tokens of the model's log-softmax over the full vocabulary,
  not renormalized for the never-generated PAD and BOS.
- score(Y) = log P(Y) / lp(Y) with the GNMT length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha
  (Wu et al. 2016, eq. 14), or with `length_penalty_form="power"`, lp(Y) = |Y| ** alpha
  (fairseq's and CTranslate2's form).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from keras import ops

from translator.backends import kernels
from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.search.config import SearchConfig

if TYPE_CHECKING:  # pragma: no cover
    from translator.tensors import Tensor

NEG_INF = float("-inf")


class SpecialIds(NamedTuple):
    """The ids a search treats specially (`translator.constants` by default)."""

    # Never generated; fills the ids after a hypothesis' end.
    pad: int = PAD_ID
    # Fed at position 0; never generated.
    bos: int = BOS_ID
    # Ends a hypothesis (forced at the length limit).
    eos: int = EOS_ID


class SearchResult(NamedTuple):
    """Best hypotheses per sentence, best first."""

    # Generated tokens, EOS included, then PAD (0): int32 [batch, n_best, length].
    ids: Tensor
    # log P(Y) / lp(Y), descending; -inf marks an empty slot: float32 [batch, n_best].
    scores: Tensor
    # |Y|: tokens of each hypothesis, EOS included; 0 for empty slots: int32 [batch, n_best].
    lengths: Tensor


# The ids of every model trained here (`translator.constants`).
DEFAULT_IDS = SpecialIds()


def length_penalty(lengths, alpha: float, form: str = "gnmt"):
    """The length penalty lp(Y): GNMT's ((5 + |Y|) / 6) ** alpha, or |Y| ** alpha.

    Both grow with |Y| (for alpha >= 0), which the exact stop of beam search relies on.

    Args:
        lengths: int or float tensor of any shape, |Y| with EOS counted.
        alpha: The exponent; 0 gives 1 everywhere.
        form: "gnmt" or "power" (`SearchConfig.length_penalty_form`).

    Returns:
        float32 tensor of the shape of `lengths`.
    """
    lengths = ops.cast(lengths, "float32")
    base = lengths if form == "power" else (5.0 + lengths) / 6.0
    return ops.power(base, alpha)


def output_length_limits(source_ids, config: SearchConfig, model_max_length: int | None = None):
    """Per-sentence output length limits and the static cache length of a batch.

    Args:
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: The `SearchConfig` (a, b and the static cap).
        model_max_length: Extra cap, for models with a learned position table.

    Returns:
        `(max_lengths, cache_length)`: int32 `[batch]`, the most tokens (EOS included)
        sentence i may produce, and an int32 scalar >= every limit, a function of the
        padded source width only (so one value per input-shape bucket): a Python int
        where the width is static, as a static cache needs.
    """
    cap = config.max_output_length
    if model_max_length is not None:
        cap = min(cap, model_max_length)

    def limit(length):  # float32 source length(s) -> int32 limit(s) in [1, cap]
        value = ops.floor(config.max_length_a * length + float(config.max_length_b))
        return ops.cast(ops.clip(value, 1.0, float(cap)), "int32")

    source_lengths = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "float32"), 1)
    # The limit grows with the source length, so the padded width bounds every sentence.
    width = source_ids.shape[1]
    if width is None:
        return limit(source_lengths), limit(ops.cast(ops.shape(source_ids)[1], "float32"))
    # The same float32 arithmetic, on the host: a static cache length.
    value = np.floor(
        np.float32(config.max_length_a) * np.float32(width) + np.float32(config.max_length_b)
    )
    return limit(source_lengths), int(np.clip(value, 1.0, float(cap)))  # [batch], int


def next_token_candidates(
    logits,
    step,
    max_lengths,
    k: int,
    min_length: int = 0,
    ids: SpecialIds = DEFAULT_IDS,
    forced=None,
    max_from_top: bool = True,
):
    """The `k` most probable allowed next tokens of each row and their log-probabilities.

    Never PAD, BOS, or EOS before `min_length`; only EOS at the length limit, only a forced
    prefix token. No full log-softmax or masked copy is made: the `k + 3` best raw logits
    hold the `k` best allowed ones, and the normalizer is subtracted from those.

    Args:
        logits: float `[rows, vocab]` from `decode_step`.
        step: int32 scalar, the position being generated (0 = first token after BOS).
        max_lengths: int32 `[rows]`, the length limit of each row's sentence.
        k: Candidates per row; at most the vocabulary size are returned.
        min_length: Static; EOS is no candidate while `step < min_length`.
        ids: The special ids.
        forced: int32 `[rows]`, the token each row must take (`forced_tokens`), -1 where
            free; or None.
        max_from_top: Take the normalizer's maximum from the top-k (two passes fewer);
            False: `log_sum_exp`'s own max reductions, which XLA fuses (faster there).
            The same values either way.

    Returns:
        `(log_probs, ids)`: float32 `[rows, k']`, descending, -inf for a slot with no
        allowed token (at the length limit, or a vocabulary smaller than k + 2), and
        int32 `[rows, k']`, where k' = min(k, vocab).
    """
    logits = ops.cast(logits, "float32")  # [rows, vocab]
    vocab = logits.shape[-1]
    k = k if vocab is None else min(k, vocab)
    never_count = 3 if min_length > 0 else 2  # PAD, BOS, and EOS before min_length
    wider = never_count + k if vocab is None else min(never_count + k, vocab)
    sealed = kernels.seal(logits)  # [rows, vocab] (one float32 cast on TensorFlow)
    best_logits, best_ids = top_k(sealed, wider)  # [rows, wider]
    top = (best_logits[:, :1], best_ids[:, :1]) if max_from_top else None  # [rows, 1] x2
    normalizer = log_sum_exp(logits, top)  # [rows, 1]
    never = ops.logical_or(ops.equal(best_ids, ids.pad), ops.equal(best_ids, ids.bos))
    if min_length > 0:
        too_short = ops.logical_and(ops.equal(best_ids, ids.eos), step < min_length)
        never = ops.logical_or(never, too_short)  # [rows, wider]
    best_logits, kept = ops.top_k(ops.where(never, NEG_INF, best_logits), k)  # [rows, k]
    best_ids = kernels.gather_batch(best_ids, kept)  # [rows, k]

    # At the limit: EOS in the first slot, nothing in the others.
    at_limit = ops.greater_equal(step + 1, max_lengths)[:, None]  # [rows, 1]
    first_slot = ops.equal(ops.arange(k), 0)[None, :]  # [1, k]
    eos_logit = logits[:, ids.eos : ids.eos + 1]  # [rows, 1]
    best_logits = ops.where(at_limit, ops.where(first_slot, eos_logit, NEG_INF), best_logits)
    best_ids = ops.where(at_limit, ids.eos, best_ids)
    if forced is not None:  # a prefix token: the only candidate, with its own log P
        forcing = ops.greater_equal(forced, 0)[:, None]  # [rows, 1]
        token = ops.maximum(forced, 0)[:, None]  # [rows, 1]
        forced_logit = kernels.gather_batch(logits, token)  # [rows, 1]
        best_logits = ops.where(forcing, ops.where(first_slot, forced_logit, NEG_INF), best_logits)
        best_ids = ops.where(forcing, token, best_ids)
    return best_logits - normalizer, best_ids


def allowed_log_probs(
    logits, step, max_lengths, min_length: int = 0, ids: SpecialIds = DEFAULT_IDS, forced=None
):
    """Every allowed next token's log-probability, -inf for the others: `[rows, vocab]`.

    The rules of `next_token_candidates`, over the whole vocabulary (for sampling).
    """
    logits = ops.cast(logits, "float32")  # [rows, vocab]
    log_probs = logits - log_sum_exp(logits)  # [rows, vocab]
    vocab = ops.shape(logits)[-1]
    token = ops.arange(vocab)[None, :]  # [1, vocab]
    allowed = ops.logical_and(ops.not_equal(token, ids.pad), ops.not_equal(token, ids.bos))
    if min_length > 0:
        allowed = ops.logical_and(allowed, ops.logical_or(token != ids.eos, step >= min_length))
    at_limit = ops.greater_equal(step + 1, max_lengths)[:, None]  # [rows, 1]
    allowed = ops.where(at_limit, ops.equal(token, ids.eos), allowed)  # [rows, vocab]
    if forced is not None:
        forcing = ops.greater_equal(forced, 0)[:, None]  # [rows, 1]
        allowed = ops.where(forcing, token == forced[:, None], allowed)
    return ops.where(allowed, log_probs, NEG_INF)


def forced_tokens(prefix_ids, sentence, step):
    """The target-prefix token each sentence must take at `step`: int32 `[active]`.

    Args:
        prefix_ids: int32 `[batch, width >= 1]`, each sentence's prefix pieces then PAD
            (`SearchInputs.prefix_ids`), or None.
        sentence: int32 `[active]`, the batch index of each active sentence.
        step: int32 scalar.

    Returns:
        The prefix's token at `step`, or -1 past its end; None without prefixes.
    """
    if prefix_ids is None:
        return None
    width = ops.shape(prefix_ids)[1]  # >= 1 (`search.prepare` pads a column)
    column = ops.take(prefix_ids, ops.minimum(step, width - 1), axis=1)  # [batch]
    token = kernels.gather(column, sentence)  # [active]
    inside = ops.logical_and(step < width, ops.not_equal(token, PAD_ID))
    return ops.where(inside, token, -1)


def log_sum_exp(logits, top=None):
    """`log(sum(exp(logits)))` over the last axis of float32 `[rows, n]`: `[rows, 1]`.

    As `max - log(max(softmax))` (exact, as the largest is >= 1/n): one fused softmax beats
    `tf.reduce_logsumexp`. With `top`, a read at the known argmax replaces the maxima.

    Args:
        logits: float32 `[rows, n]`.
        top: `(largest, at)`, float32 and int32 `[rows, 1]`: each row's largest value
            and a position of it; or None.
    """
    if top is None:
        largest = ops.max(logits, axis=-1, keepdims=True)  # [rows, 1]
        largest_p = ops.max(ops.softmax(logits), axis=-1, keepdims=True)
    else:
        largest, at = top  # [rows, 1] x2
        largest_p = kernels.gather_batch(ops.softmax(logits), at)  # [rows, 1]
    return largest - ops.log(largest_p)


# Chunk width of `top_k`'s first pass, and the narrowest last axis it is used for.
_TOP_K_CHUNK = 64
_TOP_K_MIN_WIDTH = 1024


def top_k(values, k: int):
    """`tf.math.top_k(values, k)` over the last axis of `[rows, n]`, faster for large n.

    Equal to `tf.math.top_k` in values (ids may differ among equal values), whose CPU
    kernel is slow for a vocabulary. Two passes: the maximum of each chunk of 64, then an
    exact top-k over the k chunks with the largest maxima, which hold the k largest values.

    Args:
        values: float `[rows, n]`.
        k: Static number of values per row, <= n.

    Returns:
        `(values, ids)`: float `[rows, k]`, descending, and int32 `[rows, k]`.
    """
    width = values.shape[-1]
    if k == 1:
        ids = kernels.argmax(values)[:, None]  # [rows, 1]
        return kernels.gather_batch(values, ids), ids
    chunks = None if width is None else -(-width // _TOP_K_CHUNK)
    if chunks is None or width < _TOP_K_MIN_WIDTH or k > chunks:
        return ops.top_k(values, k)
    padded = ops.pad(
        values, [[0, 0], [0, chunks * _TOP_K_CHUNK - width]], constant_values=NEG_INF
    )  # [rows, chunks * chunk]
    grouped = ops.reshape(padded, (-1, chunks, _TOP_K_CHUNK))
    _, best_chunks = ops.top_k(ops.max(grouped, axis=-1), k)  # [rows, k]
    selected = kernels.gather_batch(grouped, best_chunks)  # [rows, k, chunk]
    best, positions = ops.top_k(ops.reshape(selected, (-1, k * _TOP_K_CHUNK)), k)
    chunk_of = kernels.gather_batch(best_chunks, positions // _TOP_K_CHUNK)  # [rows, k]
    ids = chunk_of * _TOP_K_CHUNK + positions % _TOP_K_CHUNK
    return best, ops.minimum(ids, width - 1)  # a padding slot only ties at -inf


def write_at(ids, step, values):
    """Returns `ids` with `ids[..., step] = values` (a select, no scatter).

    Args:
        ids: int32 `[..., length]`.
        step: int32 scalar.
        values: int32 `[...]`.

    Returns:
        int32 `[..., length]`.
    """
    positions = ops.arange(ops.shape(ids)[-1])  # [length]
    return ops.where(ops.equal(positions, step), values[..., None], ids)


def trim(ids, lengths):
    """Drops the all-padding columns after the longest hypothesis, where shapes may change.

    Args:
        ids: int32 `[batch, n, cache_length]`.
        lengths: int32 `[batch, n]`.

    Returns:
        int32 `[batch, n, max(lengths)]` on TensorFlow; with static shapes (XLA on JAX)
        the ids as they are, trimmed by the caller on the host (`trim_host`).
    """
    return kernels.trim(ids, lengths)


def trim_host(result: SearchResult) -> SearchResult:
    """A result with NumPy arrays, its all-padding columns dropped (as `trim` does)."""
    ids, scores, lengths = (np.asarray(part) for part in result)
    width = max(int(lengths.max(initial=0)), 0)
    return SearchResult(ids[:, :, :width], scores, lengths)
