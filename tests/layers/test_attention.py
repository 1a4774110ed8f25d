import keras
import numpy as np
import pytest

from tests.support.layers import run_layer_test
from translator.layers import GrowingCache, MultiHeadAttention
from translator.layers.attention import _heads_first
from translator.layers.masks import cache_mask, causal_mask

RNG = np.random.default_rng(0)
BATCH, LENGTH, SOURCE, D_MODEL, HEADS = 2, 5, 7, 16, 4


def _x(*shape):
    return RNG.standard_normal(shape).astype("float32")


@pytest.mark.parametrize("rotary", [False, True])
def test_layer_contract_self_attention(tmp_path, rotary):
    mask = np.broadcast_to(np.tril(np.ones((LENGTH, LENGTH), bool)), (BATCH, LENGTH, LENGTH))
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=HEADS, head_dim=D_MODEL // HEADS, dropout=0.1, rotary_embedding=rotary),
        _x(BATCH, LENGTH, D_MODEL),
        dict(attention_mask=mask.copy()),
        expected_output_shape=(BATCH, LENGTH, D_MODEL),
        tmp_path=tmp_path,
    )


def test_layer_contract_cross_attention(tmp_path):
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=HEADS, head_dim=8, output_dim=12, use_bias=False),
        _x(BATCH, LENGTH, D_MODEL),
        dict(key_value=_x(BATCH, SOURCE, 24)),
        expected_output_shape=(BATCH, LENGTH, 12),
        tmp_path=tmp_path,
    )


def test_worked_example_through_the_layer():
    """The seeds' worked example: one head, no bias, Q = X W_Q, K = X W_K, V = X W_V."""
    x = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], "float32")
    w_q = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]], "float32")
    w_k = np.array([[0, 1, 1, 0], [1, 0, 0, 1], [0, 1, 0, 1], [1, 0, 1, 0]], "float32")
    w_v = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]], "float32")
    layer = MultiHeadAttention(num_heads=1, head_dim=4, use_bias=False)
    layer.build((1, 3, 4))
    layer.query_dense.kernel.assign(w_q[:, None, :])  # [d_in, heads, head_dim]
    layer.key_dense.kernel.assign(w_k[:, None, :])
    layer.value_dense.kernel.assign(w_v[:, None, :])
    layer.output_dense.kernel.assign(np.eye(4, dtype="float32")[None, :, :])  # identity
    output, weights = layer(x[None], return_attention_scores=True)
    weights, output = np.asarray(weights)[0, 0], np.asarray(output)[0]

    # Row 0 and the first output row as the seeds give them (rounded there).
    np.testing.assert_allclose(weights[0], [0.006, 0.880, 0.114], atol=5e-3)
    np.testing.assert_allclose(output[0], [0.24, 1.99, 3.75, 1.99], atol=1.5e-2)

    # Exact values by hand: scores Q K^T / sqrt(4) are [1, 6, 4], [6, 4, 8], [4, 8, 8].
    # (The seeds' rows 1 and 2, [0.035, 0.483, 0.483] and [0.002, 0.499, 0.499], do not
    # follow from these matrices under any convention; rows 1 and 2 below do.)
    def softmax(s):
        e = np.exp(np.array(s, "float64") - max(s))
        return e / e.sum()

    expected = np.stack([softmax([1, 6, 4]), softmax([6, 4, 8]), softmax([4, 8, 8])])
    np.testing.assert_allclose(weights, expected, atol=1e-6)
    np.testing.assert_allclose(output, expected @ (x @ w_v), atol=1e-5)


def test_masked_keys_get_zero_weight_and_do_not_change_output():
    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4)
    query, keys = _x(1, 3, D_MODEL), _x(1, 6, D_MODEL)
    mask = np.array([[[1, 1, 1, 1, 0, 0]]], bool)  # last two keys are padding
    output, weights = layer(
        query, key_value=keys, attention_mask=mask, return_attention_scores=True
    )
    assert np.all(np.asarray(weights)[..., 4:] == 0.0)
    changed = keys.copy()
    changed[:, 4:] = 100.0  # anything at masked positions
    np.testing.assert_allclose(
        layer(query, key_value=changed, attention_mask=mask), output, atol=1e-6
    )


def test_fully_masked_row_is_finite():
    layer = MultiHeadAttention(num_heads=2, head_dim=4)
    output = layer(_x(1, 2, 8), attention_mask=np.zeros((1, 2, 2), bool))
    assert np.all(np.isfinite(np.asarray(output)))


@pytest.mark.parametrize("rotary", [False, True])
def test_self_attention_cache_matches_full_causal_pass(rotary):
    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4, rotary_embedding=rotary)
    x = _x(BATCH, LENGTH, D_MODEL)
    full = np.asarray(layer(x, attention_mask=causal_mask(LENGTH)))
    max_length = LENGTH + 3  # room left over: unwritten slots must stay invisible
    cache = layer.empty_cache(BATCH, max_length)
    for t in range(LENGTH):
        step, cache = layer(
            x[:, t : t + 1], attention_mask=cache_mask(t, max_length), cache=cache, cache_index=t
        )
        np.testing.assert_allclose(np.asarray(step)[:, 0], full[:, t], atol=1e-5)
    # The cache holds exactly the keys/values of the prefix, zeros after it.
    for part in cache:  # keys, values: [batch, heads, max_length, head_dim]
        assert tuple(part.shape) == (BATCH, HEADS, max_length, 4)
        assert np.all(np.asarray(part)[:, :, :LENGTH] != 0.0)
        assert np.all(np.asarray(part)[:, :, LENGTH:] == 0.0)


@pytest.mark.parametrize("rotary", [False, True])
def test_growing_cache_matches_full_causal_pass(rotary):
    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4, rotary_embedding=rotary)
    x = _x(BATCH, LENGTH, D_MODEL)
    full = np.asarray(layer(x, attention_mask=causal_mask(LENGTH)))
    cache = layer.empty_cache(BATCH)
    assert isinstance(cache, GrowingCache) and tuple(cache.keys.shape) == (BATCH, HEADS, 0, 4)
    for t in range(LENGTH):
        step, cache = layer(x[:, t : t + 1], cache=cache, cache_index=t)  # no mask needed
        assert isinstance(cache, GrowingCache)
        assert tuple(cache.keys.shape) == tuple(cache.values.shape) == (BATCH, HEADS, t + 1, 4)
        np.testing.assert_allclose(step[:, 0], full[:, t], atol=1e-5)


def test_cache_accepts_several_tokens_at_once():
    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4)
    x = _x(BATCH, LENGTH, D_MODEL)
    full = np.asarray(layer(x, attention_mask=causal_mask(LENGTH)))
    cache = layer.empty_cache(BATCH, 8)
    first, cache = layer(x[:, :3], attention_mask=cache_mask(0, 8, 3), cache=cache, cache_index=0)
    rest, _ = layer(x[:, 3:], attention_mask=cache_mask(3, 8, 2), cache=cache, cache_index=3)
    np.testing.assert_allclose(np.concatenate([first, rest], axis=1), full, atol=1e-5)


def test_cross_attention_cache_matches_direct_call():
    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4)
    query, memory = _x(BATCH, LENGTH, D_MODEL), _x(BATCH, SOURCE, D_MODEL)
    mask = np.ones((BATCH, 1, SOURCE), bool)
    mask[1, 0, 5:] = False
    direct = layer(query, key_value=memory, attention_mask=mask)
    kv = layer.compute_key_value(memory)
    assert [tuple(part.shape) for part in kv] == [(BATCH, HEADS, SOURCE, 4)] * 2
    cached, returned = layer(query, attention_mask=mask, cache=kv)
    np.testing.assert_allclose(cached, direct, atol=1e-6)
    for got, want in zip(returned, kv, strict=True):
        np.testing.assert_array_equal(got, want)  # read-only


def test_shared_cross_attention_cache_serves_groups_of_rows():
    """3 query rows per cache row (a sentence's beams) == the cache repeated per row."""
    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4)
    group = 3
    query, memory = _x(BATCH * group, 1, D_MODEL), _x(BATCH, SOURCE, D_MODEL)
    mask = np.ones((BATCH, 1, SOURCE), bool)
    mask[1, 0, 4:] = False
    direct = layer(query[3:4], key_value=memory[1:2], attention_mask=mask[1:2])  # builds
    kv = layer.compute_key_value(memory)
    shared, _ = layer(query, attention_mask=mask, cache=kv)
    repeated_kv = tuple(np.repeat(part, group, axis=0) for part in kv)
    repeated, _ = layer(query, attention_mask=np.repeat(mask, group, axis=0), cache=repeated_kv)
    assert tuple(shared.shape) == (BATCH * group, 1, D_MODEL)
    np.testing.assert_allclose(shared, repeated, atol=1e-6)
    # Row 3 (group 1) reads sentence 1.
    np.testing.assert_allclose(shared[3:4], direct, atol=1e-6)


def test_rotary_scores_depend_only_on_relative_position():
    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4, rotary_embedding=True)
    x = _x(1, LENGTH, D_MODEL)
    causal = np.asarray(causal_mask(LENGTH))
    _, at_zero = layer(x, attention_mask=causal, return_attention_scores=True)
    # The same tokens written 37 positions later (via the cache index), with the empty
    # slots before them masked out, attend identically.
    offset = 37
    mask = np.zeros((1, LENGTH, LENGTH + offset), bool)
    mask[:, :, offset:] = causal
    _, _, shifted = layer(
        x,
        attention_mask=mask,
        cache=layer.empty_cache(1, LENGTH + offset),
        cache_index=offset,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(np.asarray(shifted)[..., offset:], at_zero, atol=1e-5)
    # Without RoPE-relative behaviour (positions absolute) this would differ: sanity
    # check that the rotation is position dependent at all.
    _, moved = layer(x[:, ::-1], attention_mask=causal, return_attention_scores=True)
    assert not np.allclose(moved, at_zero)


@pytest.mark.parametrize("seeded", [False, True])
def test_projections_start_different(seeded):
    """Query, key and value kernels of one layer are separate random draws.

    (Keras 3 repeats an unseeded initializer's values for every weight it fills, so one
    shared instance would start the three equal: attention symmetric at step 0.)
    """
    initializer = keras.initializers.GlorotUniform(seed=3 if seeded else None)
    layer = MultiHeadAttention(HEADS, D_MODEL // HEADS, kernel_initializer=initializer)
    layer.build((None, None, D_MODEL))
    kernels = [layer.query_dense.kernel, layer.key_dense.kernel, layer.value_dense.kernel]
    kernels = [np.asarray(k) for k in kernels]
    if seeded:  # a seed asks for repeatable draws: each weight repeats it
        assert all(np.array_equal(kernels[0], k) for k in kernels[1:])
    else:
        assert not np.allclose(kernels[0], kernels[1])
        assert not np.allclose(kernels[0], kernels[2])
        assert not np.allclose(kernels[1], kernels[2])


@pytest.mark.parametrize("cross", [False, True])
def test_full_pass_projections_side_by_side_match_one_at_a_time(cross):
    """A full pass projects with the kernels side by side, in one matmul. Reading keys
    and values from a cache, the layer projects the query alone; the keys and values
    come from the `HeadsProjection`s one at a time. Outputs and gradients agree."""
    import tensorflow as tf

    layer = MultiHeadAttention(num_heads=HEADS, head_dim=4, output_dim=12)
    query, memory = _x(BATCH, LENGTH, D_MODEL), _x(BATCH, SOURCE, D_MODEL)
    weight = tf.constant(_x(BATCH, LENGTH, 12))
    layer(query, key_value=memory if cross else None)  # builds
    source = memory if cross else query
    mask = None if cross else causal_mask(LENGTH)

    def run(side_by_side):
        with tf.GradientTape() as tape:
            if side_by_side:
                output = layer(query, key_value=memory if cross else None, attention_mask=mask)
            else:
                keys = _heads_first(layer.key_dense(source))  # [batch, heads, length, hd]
                values = _heads_first(layer.value_dense(source))
                output, _ = layer(query, attention_mask=mask, cache=(keys, values))
            loss = tf.reduce_sum(output * weight)
        return output, tape.gradient(loss, layer.trainable_variables)

    (fused, fused_grads), (plain, plain_grads) = run(True), run(False)
    np.testing.assert_allclose(fused, plain, atol=1e-5)
    assert len(fused_grads) == len(layer.trainable_variables) == 8  # 4 kernels, 4 biases
    for variable, got, want in zip(
        layer.trainable_variables, fused_grads, plain_grads, strict=True
    ):
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=variable.path)
