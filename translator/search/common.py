"""What greedy and beam search share: special ids, scoring, length limits, the result.

Definitions used throughout (and by the tests that check them):

- A hypothesis Y is the list of generated tokens after BOS, up to and including EOS.
  Every returned hypothesis ends with EOS (EOS is forced at the length limit), and
  |Y| counts its tokens *including* EOS.
- log P(Y) = sum over Y's tokens of the model's log-softmax over the full vocabulary
  (EOS included; PAD and BOS are never generated, but their probability mass is not
  redistributed: scores are the model's own log-probabilities).
- score(Y) = log P(Y) / lp(Y) with the GNMT length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha
  (Wu et al. 2016, eq. 14), or with `length_penalty_form="power"`, lp(Y) = |Y| ** alpha
  (fairseq's and CTranslate2's form).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import tensorflow as tf

from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.search.config import SearchConfig

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

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

    # Generated tokens, EOS included, then PAD (0): int32 [batch, n_best, length], where
    # length is the longest returned hypothesis of the batch.
    ids: tf.Tensor | np.ndarray
    # log P(Y) / lp(Y), descending along n_best; -inf marks an empty slot (fewer than
    # n_best hypotheses exist, e.g. a 1-token limit): float32 [batch, n_best].
    scores: tf.Tensor | np.ndarray
    # |Y|: tokens of each hypothesis, EOS included; 0 for empty slots: int32 [batch, n_best].
    lengths: tf.Tensor | np.ndarray


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
    lengths = tf.cast(lengths, tf.float32)
    base = lengths if form == "power" else (5.0 + lengths) / 6.0
    return tf.pow(base, alpha)


def output_length_limits(source_ids, config: SearchConfig, model_max_length: int | None = None):
    """Per-sentence output length limits and the static cache length of a batch.

    Args:
        source_ids: int32 `[batch, source_length]`, 0 = padding.
        config: The `SearchConfig` (a, b and the static cap).
        model_max_length: Extra cap, for models with a learned position table.

    Returns:
        `(max_lengths, cache_length)`: int32 `[batch]`, the most tokens (EOS included)
        sentence i may produce, and an int32 scalar >= every limit, a function of the
        padded source width only (so one value per input-shape bucket).
    """
    cap = config.max_output_length
    if model_max_length is not None:
        cap = min(cap, model_max_length)

    def limit(length):  # float32 source length(s) -> int32 limit(s) in [1, cap]
        value = tf.floor(config.max_length_a * length + float(config.max_length_b))
        return tf.cast(tf.clip_by_value(value, 1.0, float(cap)), tf.int32)

    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.float32), 1)
    padded_width = tf.cast(tf.shape(source_ids)[1], tf.float32)
    # The limit grows with the source length, so the padded width bounds every sentence.
    return limit(source_lengths), limit(padded_width)  # [batch], scalar


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

    Log-probabilities are the model's own log-softmax over the full vocabulary, not
    renormalized. PAD and BOS are never candidates, nor EOS before position
    `min_length`; at the last position a sentence may fill (`step + 1 == max_lengths`),
    EOS is the only one (the limit wins over `min_length`); where a target prefix forces
    a token (`forced`), it is the only one. Only the `k` best are needed
    (a beam keeps `beam_size` of `beam_size x vocab` extensions, and they are among the
    `beam_size` best of each row), so the full `[rows, vocab]` log-softmax is never
    materialized: the softmax normalizer is subtracted from the `k` selected logits.
    Nor is a masked copy of the logits: the never-allowed ids are at most 3, so the
    `k + 3` best raw logits hold the `k` best allowed ones. Their first is the row's
    largest logit, at the softmax's largest value, so the normalizer needs no max
    reductions of its own (`log_sum_exp` with `top`).

    Args:
        logits: float `[rows, vocab]` from `decode_step`.
        step: int32 scalar, the position being generated (0 = first token after BOS).
        max_lengths: int32 `[rows]`, the length limit of each row's sentence.
        k: Candidates per row; at most the vocabulary size are returned.
        min_length: Static; EOS is no candidate while `step < min_length`.
        ids: The special ids.
        forced: int32 `[rows]`, the token each row must take (`forced_tokens`), -1 where
            free; or None.
        max_from_top: Take the normalizer's maximum from the top-k (two passes over
            `[rows, vocab]` fewer); False: `log_sum_exp`'s own max reductions, which
            XLA fuses with the softmax and measured faster in an XLA-compiled search
            (figures: bench/RESULTS.md, design measurements). The same values either way.

    Returns:
        `(log_probs, ids)`: float32 `[rows, k']`, descending, -inf for a slot with no
        allowed token (at the length limit, or a vocabulary smaller than k + 2), and
        int32 `[rows, k']`, where k' = min(k, vocab).
    """
    logits = tf.cast(logits, tf.float32)  # [rows, vocab]
    vocab = logits.shape[-1]
    k = k if vocab is None else min(k, vocab)
    never_count = 3 if min_length > 0 else 2  # PAD, BOS, and EOS before min_length
    wider = never_count + k if vocab is None else min(never_count + k, vocab)
    # Under mixed precision the logits come from a cast to float32. Grappler moves a
    # widening cast below the "value-preserving" ops reading it (the top-k's pad and
    # reshape), which would cast the logits a second time beside the softmax's copy;
    # `EnsureShape` is not such an op to it, so one cast serves both (figures:
    # bench/RESULTS.md, design measurements).
    sealed = tf.ensure_shape(logits, logits.shape)  # [rows, vocab]
    best_logits, best_ids = top_k(sealed, wider)  # [rows, wider]
    top = (best_logits[:, :1], best_ids[:, :1]) if max_from_top else None  # [rows, 1] x2
    normalizer = log_sum_exp(logits, top)  # [rows, 1]
    never = tf.logical_or(tf.equal(best_ids, ids.pad), tf.equal(best_ids, ids.bos))
    if min_length > 0:
        too_short = tf.logical_and(tf.equal(best_ids, ids.eos), step < min_length)
        never = tf.logical_or(never, too_short)  # [rows, wider]
    best_logits, kept = tf.math.top_k(tf.where(never, NEG_INF, best_logits), k)  # [rows, k]
    best_ids = tf.gather(best_ids, kept, batch_dims=1)  # [rows, k]

    # At the limit: EOS in the first slot, nothing in the others.
    at_limit = tf.greater_equal(step + 1, max_lengths)[:, None]  # [rows, 1]
    first_slot = tf.equal(tf.range(k), 0)[None, :]  # [1, k]
    eos_logit = logits[:, ids.eos : ids.eos + 1]  # [rows, 1]
    best_logits = tf.where(at_limit, tf.where(first_slot, eos_logit, NEG_INF), best_logits)
    best_ids = tf.where(at_limit, ids.eos, best_ids)
    if forced is not None:  # a prefix token: the only candidate, with its own log P
        forcing = tf.greater_equal(forced, 0)[:, None]  # [rows, 1]
        token = tf.maximum(forced, 0)[:, None]  # [rows, 1]
        forced_logit = tf.gather(logits, token, batch_dims=1)  # [rows, 1]
        best_logits = tf.where(forcing, tf.where(first_slot, forced_logit, NEG_INF), best_logits)
        best_ids = tf.where(forcing, token, best_ids)
    return best_logits - normalizer, best_ids


def allowed_log_probs(
    logits, step, max_lengths, min_length: int = 0, ids: SpecialIds = DEFAULT_IDS, forced=None
):
    """Every allowed next token's log-probability, -inf for the others: `[rows, vocab]`.

    The rules of `next_token_candidates` (the model's own log-softmax, not
    renormalized; PAD, BOS, EOS before `min_length`, EOS alone at the limit, a forced
    prefix token alone), over the whole vocabulary, as sampling needs it.
    """
    logits = tf.cast(logits, tf.float32)  # [rows, vocab]
    log_probs = logits - log_sum_exp(logits)  # [rows, vocab]
    vocab = tf.shape(logits)[-1]
    token = tf.range(vocab)[None, :]  # [1, vocab]
    allowed = tf.logical_and(tf.not_equal(token, ids.pad), tf.not_equal(token, ids.bos))
    if min_length > 0:
        allowed = tf.logical_and(allowed, tf.logical_or(token != ids.eos, step >= min_length))
    at_limit = tf.greater_equal(step + 1, max_lengths)[:, None]  # [rows, 1]
    allowed = tf.where(at_limit, tf.equal(token, ids.eos), allowed)  # [rows, vocab]
    if forced is not None:
        allowed = tf.where(tf.greater_equal(forced, 0)[:, None], token == forced[:, None], allowed)
    return tf.where(allowed, log_probs, NEG_INF)


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
    width = tf.shape(prefix_ids)[1]  # >= 1 (`search.prepare` pads a column)
    column = tf.gather(prefix_ids, tf.minimum(step, width - 1), axis=1)  # [batch]
    token = tf.gather(column, sentence)  # [active]
    inside = tf.logical_and(step < width, tf.not_equal(token, PAD_ID))
    return tf.where(inside, token, -1)


def log_sum_exp(logits, top=None):
    """`log(sum(exp(logits)))` over the last axis of float32 `[rows, n]`: `[rows, 1]`.

    As `max - log(max(softmax))`: the softmax's largest value is `exp(max - lse)`, at
    least 1/n, so its log is exact to float32 rounding. One fused softmax kernel and two
    max reductions measured faster on CPU than `tf.reduce_logsumexp`'s max, subtract,
    exp and sum passes. With `top`, each row's largest logit and its id (a top-k's
    first), both max reductions go: the softmax's largest value is read at that id
    (exp(0) = 1 over the sum there), the same value. Without XLA that measured faster;
    in an XLA-compiled search much slower, so it keeps the reductions. Figures:
    bench/RESULTS.md, design measurements.

    Args:
        logits: float32 `[rows, n]`.
        top: `(largest, at)`, float32 and int32 `[rows, 1]`: each row's largest value
            and a position of it; or None.
    """
    if top is None:
        largest = tf.reduce_max(logits, axis=-1, keepdims=True)  # [rows, 1]
        largest_p = tf.reduce_max(tf.nn.softmax(logits), axis=-1, keepdims=True)
    else:
        largest, at = top  # [rows, 1] x2
        largest_p = tf.gather(tf.nn.softmax(logits), at, batch_dims=1)  # [rows, 1]
    return largest - tf.math.log(largest_p)


# Chunk width of `top_k`'s first pass, and the narrowest last axis it is used for.
_TOP_K_CHUNK = 64
_TOP_K_MIN_WIDTH = 1024


def top_k(values, k: int):
    """`tf.math.top_k(values, k)` over the last axis of `[rows, n]`, faster for large n.

    Equal to `tf.math.top_k` in values; the ids can differ among exactly equal values.
    For a large n (a vocabulary) the CPU kernel of `tf.math.top_k` is the slowest op of
    a decoding step. Two passes are cheaper: the maximum of each chunk of 64 (a plain,
    vectorized reduction), then an exact top-k over the k chunks with the largest maxima,
    which hold the k largest values (every value outside them has k larger chunk
    maxima, so k larger values, above it). With k = 1 it is an argmax.

    Args:
        values: float `[rows, n]`.
        k: Static number of values per row, <= n.

    Returns:
        `(values, ids)`: float `[rows, k]`, descending, and int32 `[rows, k]`.
    """
    width = values.shape[-1]
    if k == 1:
        ids = tf.argmax(values, axis=-1, output_type=tf.int32)[:, None]  # [rows, 1]
        return tf.gather(values, ids, batch_dims=1), ids
    chunks = None if width is None else -(-width // _TOP_K_CHUNK)
    if chunks is None or width < _TOP_K_MIN_WIDTH or k > chunks:
        return tf.math.top_k(values, k)
    rows = tf.shape(values)[0]
    padded = tf.pad(
        values, [[0, 0], [0, chunks * _TOP_K_CHUNK - width]], constant_values=NEG_INF
    )  # [rows, chunks * chunk]
    grouped = tf.reshape(padded, [rows, chunks, _TOP_K_CHUNK])
    _, best_chunks = tf.math.top_k(tf.reduce_max(grouped, axis=-1), k)  # [rows, k]
    selected = tf.gather(grouped, best_chunks, batch_dims=1)  # [rows, k, chunk]
    best, positions = tf.math.top_k(tf.reshape(selected, [rows, k * _TOP_K_CHUNK]), k)
    chunk_of = tf.gather(best_chunks, positions // _TOP_K_CHUNK, batch_dims=1)  # [rows, k]
    ids = chunk_of * _TOP_K_CHUNK + positions % _TOP_K_CHUNK
    return best, tf.minimum(ids, width - 1)  # a padding slot only ties at -inf


def write_at(ids, step, values):
    """Returns `ids` with `ids[..., step] = values` (a select, no scatter).

    Args:
        ids: int32 `[..., length]`.
        step: int32 scalar.
        values: int32 `[...]`.

    Returns:
        int32 `[..., length]`.
    """
    positions = tf.range(tf.shape(ids)[-1])  # [length]
    return tf.where(tf.equal(positions, step), values[..., None], ids)


def shrinking_invariants(state: NamedTuple, fixed: tuple[str, ...]) -> NamedTuple:
    """`tf.while_loop` shape invariants of a compacting search's state.

    Args:
        state: The initial loop state, a NamedTuple of tensor nests.
        fixed: Its fields that keep their shapes (the step, the per-sentence results of
            the whole batch); in every other field axis 0 indexes the active sentences
            (or their rows) and may shrink.

    Returns:
        The same NamedTuple of `tf.TensorShape` nests.
    """

    def invariant(name, value):
        if name in fixed:
            return tf.nest.map_structure(lambda x: x.shape, value)
        return shrinking(value)

    return type(state)(*(invariant(name, value) for name, value in state._asdict().items()))


def shrinking(value, growing_axis: int | None = None):
    """Shapes with axis 0 unknown, and the `growing_axis` a NamedTuple declares.

    (`translator.layers.GrowingCache` does: its length changes every step.)
    """
    if isinstance(value, tuple):
        axis = getattr(type(value), "growing_axis", growing_axis)
        parts = [shrinking(part, axis) for part in value]
        return type(value)(*parts) if hasattr(value, "_fields") else type(value)(parts)
    shape = [None, *value.shape[1:]]
    if growing_axis is not None:
        shape[growing_axis] = None
    return tf.TensorShape(shape)


def trim(ids, lengths):
    """Drops the all-padding columns after the longest hypothesis.

    Args:
        ids: int32 `[batch, n, cache_length]`.
        lengths: int32 `[batch, n]`.

    Returns:
        int32 `[batch, n, max(lengths)]`.
    """
    return ids[:, :, : tf.maximum(tf.reduce_max(lengths), 0)]  # 0 for an empty batch
