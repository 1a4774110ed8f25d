"""The compiled entry point: no retracing, SavedModel round trip, XLA."""

import numpy as np
import pytest
import tensorflow as tf

from tests.support.models import MarkovModel, markov_probs, random_sources, tiny_model
from translator.search import Decoder, SearchConfig, SearchResult

VOCAB = 16


@pytest.fixture(scope="module")
def model():
    return tiny_model(VOCAB, seed=3, logit_scale=2.0, eos_bias=2.0, constant_eos=True)


def batches():
    """Batches of different sizes and source widths (the same ones at every call)."""
    rng = np.random.default_rng(21)
    return [
        random_sources(rng, lengths, VOCAB) for lengths in ([3], [7, 2, 5, 4], [12, 9], [2] * 5)
    ]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_one_trace_for_every_batch_shape(model, beam_size):
    decoder = Decoder(model, SearchConfig(beam_size=beam_size, n_best=beam_size))
    for source in batches():
        result = decoder(source)
        assert isinstance(result, SearchResult)
        assert tuple(result.scores.shape) == (len(source), beam_size)
    assert decoder.translate.experimental_get_tracing_count() == 1


def test_saved_model_round_trip_gives_identical_output(model, tmp_path):
    decoder = Decoder(model, SearchConfig(beam_size=3, n_best=2, length_penalty=0.6))
    expected = [decoder(source) for source in batches()]
    tf.saved_model.save(decoder, str(tmp_path / "decoder"))
    loaded = tf.saved_model.load(str(tmp_path / "decoder"))
    for source, want in zip(batches(), expected, strict=True):
        got = loaded.translate(tf.constant(source))
        for name in SearchResult._fields:
            np.testing.assert_array_equal(np.asarray(getattr(got, name)), getattr(want, name))

    # Plain TensorFlow ops only, so stock TF Serving can run it: no Python callbacks and
    # no XLA-only ops (anywhere, including the while_loop body functions).
    graph = decoder.translate.get_concrete_function().graph.as_graph_def()
    op_types = {node.op for node in graph.node}
    op_types |= {node.op for f in graph.library.function for node in f.node_def}
    assert "While" in op_types or "StatelessWhile" in op_types
    assert not {op for op in op_types if "PyFunc" in op or op.startswith("Xla")}


def test_search_compiles_with_xla():
    """The search itself is XLA-compatible (shown with a model made of plain gathers)."""
    probs = markov_probs(VOCAB, steps=40, rows={})
    probs *= np.random.default_rng(0).uniform(0.2, 1.0, size=probs.shape)  # not uniform
    model = MarkovModel(probs / probs.sum(-1, keepdims=True))
    config = SearchConfig(beam_size=3, n_best=2)
    plain, xla = Decoder(model, config), Decoder(model, config, jit_compile=True)
    for source in batches()[:2]:  # XLA compiles once per input shape
        want, got = plain(source), xla(source)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_allclose(got.scores, want.scores, atol=1e-5)


@pytest.mark.parametrize(
    "shapes",
    [  # XLA compiles a Transformer's search anew per input shape (~10 s each on a CPU)
        pytest.param(slice(1, 2), id="one-shape"),  # 4 sentences of 2 to 7 tokens
        pytest.param(slice(None), id="every-shape", marks=pytest.mark.slow),
    ],
)
def test_xla_compiled_transformer_search_matches(model, shapes):
    config = SearchConfig(beam_size=3, n_best=2)
    plain, xla = Decoder(model, config), Decoder(model, config, jit_compile=True)
    for source in batches()[shapes]:
        want, got = plain(source), xla(source)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_allclose(got.scores, want.scores, atol=1e-5)
