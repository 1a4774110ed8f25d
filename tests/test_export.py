"""`translator export`: the SavedModel, reloaded without `translator`, translates as `translate`.

What is compared, exactly: `Translator` (the engine of `translator translate`) with the
export's settings and a token budget large enough that all SENTENCES form one batch, and
one call of the exported signature on the same SENTENCES. Both strip trailing newlines,
cut sources to MAX_SOURCE_LENGTH tokens, set empty sentences aside, sort the rest by
length (stably) and pad to a multiple of 8, so the model sees the same int32 batch: texts
and float32 scores must be identical, not merely close. (Other batch compositions change
scores in the last bits; the server tests account for that.) The export traces its layer
norms portably, as Keras' ops (`portable_layer_norms`: TF Serving may run it on a GPU),
where `Translator` on a CPU fuses them, a float32 rounding apart
(tests/layers/test_layer_norm.py); here `Translator` traces portably too, so both run
one graph.
"""

import hashlib
import json
import math

import numpy as np
import pytest

from tests.support.serving import (
    BEST,
    MAX_SOURCE_LENGTH,
    PREFIXES,
    SAMPLING,
    SEARCH,
    SENTENCES,
    TAGS,
)
from translator.cli import main as cli_main
from translator.layers.layer_norm import portable_layer_norms


@pytest.fixture(autouse=True)
def _portable_layer_norms():
    with portable_layer_norms():  # searches traced in a test: the export's graph
        yield


@pytest.fixture(scope="module")
def trained(exported):
    from translator.artifacts import load_model_dir

    return load_model_dir(exported.model_dir)


def translator_for(trained, config, tag=""):
    """Our `Translator` as the SavedModel's signatures run: a string is one segment, cut at
    the limit (`search_segments`); `translate` splits before (tests/commands)."""
    from translator.inference import Translator

    return Translator.from_model(
        trained.model,
        trained.vocabulary,
        config,
        batch_tokens=1 << 20,  # one batch for all SENTENCES, as one export call
        max_source_length=MAX_SOURCE_LENGTH,
        tag=tag,
    )


def test_fresh_process_export_equals_translate(trained, reference):
    assert reference["project_modules"] == []  # loaded with tensorflow + tensorflow_text only
    engine = translator_for(trained, BEST)
    translations = engine.search_segments(SENTENCES)
    hypotheses, stats = translations.hypotheses, translations.stats
    assert stats.batches == 1 and stats.truncated == 1 and stats.empty == 4
    want_texts = [h[0].text if h else "" for h in hypotheses]
    want_scores = [h[0].score if h else 0.0 for h in hypotheses]  # empty: "" with score 0
    assert reference["batch"]["translations"] == want_texts
    # float32 on both sides: equal values, bit for bit.
    assert np.array_equal(np.float32(reference["batch"]["scores"]), np.float32(want_scores))
    assert any(want_texts) and len(set(want_texts)) > 3  # a real comparison, not all empty


def test_fresh_process_n_best_equals_translate_n_best(trained, reference):
    hypotheses = translator_for(trained, SEARCH).search_segments(SENTENCES).hypotheses
    got = reference["batch_n_best"]
    for index, sentence_hypotheses in enumerate(hypotheses):
        texts, scores = got["translations"][index], got["scores"][index]
        assert len(texts) == len(scores) == SEARCH.n_best
        if not sentence_hypotheses:  # an empty sentence: "" with 0, then empty slots
            assert texts == [""] * SEARCH.n_best
            assert scores == [0.0] + [-math.inf] * (SEARCH.n_best - 1)
            continue
        count = len(sentence_hypotheses)
        assert texts[:count] == [h.text for h in sentence_hypotheses]
        assert np.array_equal(
            np.float32(scores[:count]), np.float32([h.score for h in sentence_hypotheses])
        )
        assert all(s == -math.inf for s in scores[count:]) and texts[count:] == [""] * (
            SEARCH.n_best - count
        )
        assert scores[:count] == sorted(scores[:count], reverse=True)


def test_the_aligned_signature_aligns_as_translate_alignments_does(trained, reference):
    """`aligned` in a fresh process == `Translator`'s alignments: the same words linked."""
    engine = translator_for(trained, BEST)
    hypotheses = engine.search_segments(SENTENCES, alignments=True).hypotheses
    want = [h[0].alignment if h else "" for h in hypotheses]
    got = reference["aligned"]
    assert got["translations"] == reference["batch"]["translations"]
    assert got["alignments"] == want
    # Each pair within the words of its sentence, every translated word linked (each
    # target word's pieces attend somewhere). (The random model writes bytes that are not
    # UTF-8, whose words may differ from the text's: `PieceWords.of_sentencepiece`;
    # tests/test_alignment.py holds the words to the text's on real text.)
    for sentence, pairs in zip(SENTENCES, want, strict=True):
        links = [tuple(map(int, pair.split("-"))) for pair in pairs.split()]
        assert all(i < len(sentence.split()) for i, _ in links)
        assert {j for _, j in links} == set(range(max((j + 1 for _, j in links), default=0)))
    assert sum(bool(pairs) for pairs in want) == len(SENTENCES) - 4  # all but the empty


def test_the_tagged_signature_tags_as_translate_tag_does(trained, reference):
    """`tagged` with tag T for every sentence == `translate --tag T`; "" == untagged."""
    assert reference["tagged"][""] == reference["batch"]
    texts = {}
    for tag in TAGS:
        hypotheses = translator_for(trained, BEST, tag).search_segments(SENTENCES).hypotheses
        want = [h[0].text if h else "" for h in hypotheses]
        got = reference["tagged"][tag]
        assert got["translations"] == want
        assert np.array_equal(
            np.float32(got["scores"]), np.float32([h[0].score if h else 0.0 for h in hypotheses])
        )
        texts[tag] = want
    # The tag reaches the model: each one translates differently (random weights).
    assert texts[TAGS[0]] != texts[TAGS[1]] != reference["batch"]["translations"]
    # Tags taking turns in one call: each sentence as in the call with its own tag.
    mixed = reference["tagged_mixed"]
    for index, tag in enumerate(mixed["tags"]):
        assert mixed["translations"][index] == texts[tag][index]
        alone = reference["tagged"][tag]["scores"][index]
        assert abs(mixed["scores"][index] - alone) <= 1e-4


def test_the_prefixed_signature_continues_each_prefix_as_translate_does(trained, reference):
    assert reference["prefixed_empty"] == reference["batch"]  # no prefix: the plain search
    hypotheses = (
        translator_for(trained, BEST).search_segments(SENTENCES, prefixes=PREFIXES).hypotheses
    )
    got = reference["prefixed"]
    assert got["translations"] == [h[0].text if h else "" for h in hypotheses]
    assert np.array_equal(
        np.float32(got["scores"]), np.float32([h[0].score if h else 0.0 for h in hypotheses])
    )
    for sentence, prefix, text in zip(SENTENCES, PREFIXES, got["translations"], strict=True):
        if sentence.strip():
            assert text.startswith(prefix), (prefix, text)
        else:
            assert text == ""  # an empty sentence stays empty, prefix or not
    assert got["translations"] != reference["batch"]["translations"]


def test_the_sample_signature_draws_as_translate_sampling_does(trained, reference):
    hypotheses = translator_for(trained, SAMPLING).search_segments(SENTENCES).hypotheses
    got = reference["sample"]
    for index, drawn in enumerate(hypotheses):
        texts, scores = got["translations"][index], got["scores"][index]
        assert len(texts) == SAMPLING.num_samples
        if not drawn:
            assert texts == [""] * SAMPLING.num_samples
            continue
        assert texts == [h.text for h in drawn]
        assert np.array_equal(np.float32(scores), np.float32([h.score for h in drawn]))
        assert scores == sorted(scores, reverse=True)
    # Draws, not the search: some differ from the beam's best.
    best = [row[0] for row in got["translations"]]
    assert best != reference["batch"]["translations"]


def test_the_tagged_signature_refuses_an_unknown_tag_and_a_tag_count_mismatch(exported):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    tagged = tf.saved_model.load(str(exported.version_dir)).signatures["tagged"]
    inputs = tf.constant(["Baku dofi.", "Mela."])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"unknown tag .*<2de>, <2en>"):
        tagged(inputs=inputs, tags=tf.constant(["<2de>", "<2fr>"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="one tag per sentence"):
        tagged(inputs=inputs, tags=tf.constant(["<2de>"]))


def test_export_layout_signatures_and_assets(exported):
    from tensorflow.core.protobuf import saved_model_pb2

    assert exported.version_dir == exported.base / "1"
    # The SentencePiece model is an asset, byte for byte the vocabulary's.
    vocab = json.loads((exported.vocab_dir / "vocab.json").read_text())
    source = vocab["models"]["source"]
    asset = exported.version_dir / "assets" / source["file"]
    assert hashlib.sha256(asset.read_bytes()).hexdigest() == source["sha256"]
    metadata = json.loads((exported.version_dir / "assets.extra" / "translator.json").read_text())
    assert metadata["search"] == SEARCH.to_dict()
    assert metadata["max_source_length"] == MAX_SOURCE_LENGTH
    assert metadata["tags"] == list(TAGS) and metadata["tag"] == ""
    assert set(metadata["signatures"]) == {
        "serving_default",
        "n_best",
        "tagged",
        "tagged_n_best",
        "prefixed",
        "aligned",
        "sample",
    }
    assert metadata["sampling"] == SAMPLING.to_dict()

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((exported.version_dir / "saved_model.pb").read_bytes())
    graph = saved_model.meta_graphs[0]
    signatures = graph.signature_def
    for name, n_best, keys in (
        ("serving_default", None, ["inputs"]),
        ("n_best", SEARCH.n_best, ["inputs"]),
        ("tagged", None, ["inputs", "tags"]),
        ("tagged_n_best", SEARCH.n_best, ["inputs", "tags"]),
        ("prefixed", None, ["inputs", "prefixes"]),
        ("sample", SAMPLING.num_samples, ["inputs"]),
        ("aligned", None, ["inputs"]),
    ):
        signature = signatures[name]
        assert signature.method_name == "tensorflow/serving/predict"
        assert sorted(signature.inputs) == keys
        for tensor in signature.inputs.values():
            assert tensor.dtype == 7  # DT_STRING
            assert [d.size for d in tensor.tensor_shape.dim] == [-1]
        outputs = {"translations", "scores"} | ({"alignments"} if name == "aligned" else set())
        assert set(signature.outputs) == outputs
        shape = [-1] if n_best is None else [-1, n_best]
        for output in signature.outputs.values():
            assert [d.size for d in output.tensor_shape.dim] == shape
    # Stock TF Serving can run it: no XLA and no Python callbacks anywhere in the graph.
    ops = {node.op for node in graph.graph_def.node}
    ops |= {node.op for f in graph.graph_def.library.function for node in f.node_def}
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"} <= ops
    assert "While" in ops or "StatelessWhile" in ops
    assert not {op for op in ops if op.startswith("Xla") or "PyFunc" in op}


def test_each_signature_is_traced_once(exported):
    """The graph holds one trace of each exported function: the save traces what it saves.

    A concrete function taken before `tf.saved_model.save` is keyed outside its save
    context, so the save traced the search again and wrote both traces (twice the graph:
    more seconds to export and to load).
    """
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((exported.version_dir / "saved_model.pb").read_bytes())
    graph = saved_model.meta_graphs[0]
    nodes = graph.object_graph_def.nodes
    # The module's own functions (the root's children), as "__inference_<name>_<number>".
    traced = [
        name.rsplit("_", 1)[0]
        for child in nodes[0].children
        if nodes[child.node_id].WhichOneof("kind") == "function"
        for name in nodes[child.node_id].function.concrete_functions
    ]
    assert len(traced) == 7  # one per signature (test_export_layout_signatures_and_assets)
    library = [f.signature.name.rsplit("_", 1)[0] for f in graph.graph_def.library.function]
    assert {stem: library.count(stem) for stem in traced} == dict.fromkeys(traced, 1)


def test_export_command_errors_are_clean(exported, tmp_path, capsys):
    # An existing version is never overwritten by accident (checked before any work).
    code = cli_main(
        [
            "export",
            "--model",
            str(exported.model_dir),
            "--out",
            str(exported.base),
            "--version",
            "1",
        ]
    )
    assert code == 2 and "already exists" in capsys.readouterr().err
    code = cli_main(["export", "--model", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2 and "neither a model directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    code = cli_main(
        [
            "export",
            "--model",
            str(exported.model_dir),
            "--out",
            str(tmp_path),
            "--beam-size",
            "2",
            "--n-best",
            "3",
        ]
    )
    assert code == 2 and "n_best must be in [1, beam_size=2]" in capsys.readouterr().err


def test_next_version_follows_the_highest_number(tmp_path):
    from translator.export import next_version

    assert next_version(tmp_path / "missing") == 1
    for name in ("1", "7", "03", ".8.tmp", "notes"):
        (tmp_path / name).mkdir()
    assert next_version(tmp_path) == 8
