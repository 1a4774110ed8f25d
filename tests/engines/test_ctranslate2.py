"""CTranslate2 export and decoding: equal to our model and our search, where the rules agree.

A small model is trained here (the reversal task, ~20 s) so that searches end on their own
and the equality checks compare real translations, not random ids at the length limit.
The tests need the optional extra (`pip install -e ".[ctranslate2]"`, which .ci/run
installs) and are skipped with that reason without it; the missing-package error is
checked either way.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import numpy as np
import pytest

from tests.support.corpora import write_copy_corpus
from tests.support.missing import need_module
from tests.support.runs import tiny_run_config
from translator.errors import ConfigError
from translator.search import SearchConfig


@pytest.fixture
def _ctranslate2():
    need_module("ctranslate2", 'pip install -e ".[ctranslate2]" (the dev extra has it)')


needs_ctranslate2 = pytest.mark.usefixtures("_ctranslate2")
# Our top-beam stop with CTranslate2's length penalty form: the search CTranslate2 runs.
TOP_BEAM = SearchConfig(beam_size=4, exact_stop=False, length_penalty_form="power")
GREEDY = SearchConfig(beam_size=1, length_penalty_form="power")
# A tag of the vocabulary (`--target-lang yy`), never trained on.
TAG = "<2yy>"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained 400 steps to reverse word sequences, and its exports."""
    from training.run import train
    from translator.artifacts import load_model_dir
    from translator.engines.ctranslate2_export import export_ctranslate2
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("ctranslate2")
    task = {
        "train": write_copy_corpus(root / "train", 3000, seed=1, reverse=True),
        "valid": write_copy_corpus(root / "valid", 300, seed=2, reverse=True),
        "vocab": root / "vocab",
    }
    build_vocabulary(
        [task["train"][0]],
        [task["train"][1]],
        task["vocab"],
        vocab_size=40,
        byte_fallback=False,
        user_symbols=(TAG,),  # one more piece: the tag the tagged translations carry
    )
    config = tiny_run_config(
        task,
        data={"pipeline": {"batch_tokens": 1024, "max_source_length": 32, "max_target_length": 32}},
        train={"max_steps": 400},
        checkpoint={"every_steps": 1000, "keep_last": 1},
    )
    train(config, root / "run", verbose=0)
    model = load_model_dir(root / "run")
    exports = {}
    if importlib.util.find_spec("ctranslate2") is not None:
        for quantization in ("float32", "int8"):
            exports[quantization] = export_ctranslate2(model, root / quantization, quantization)
    sources = task["valid"][0].read_text().splitlines()
    references = task["valid"][1].read_text().splitlines()
    return {"model": model, "exports": exports, "sources": sources, "references": references}


def _ours(trained, config):
    from translator.inference import Translator

    model = trained["model"]
    translator = Translator.from_model(model.model, model.vocabulary, config)
    return translator.search(trained["sources"]).hypotheses


def _theirs(trained, config, quantization="float32"):
    from translator.engines.ctranslate2_runtime import CTranslate2Decoder, load_ctranslate2
    from translator.inference import Translator

    loaded = load_ctranslate2(trained["exports"][quantization])
    translator = Translator(CTranslate2Decoder(loaded, config), loaded.vocabulary)
    return translator.search(trained["sources"]).hypotheses


def _compare(ours, theirs):
    """(sentences with equal 1-best ids, largest score difference among those)."""
    same = [(a[0], b[0]) for a, b in zip(ours, theirs, strict=True) if a[0].ids == b[0].ids]
    return len(same), max(abs(a.score - b.score) for a, b in same)


@needs_ctranslate2
@pytest.mark.parametrize("length_penalty", [0.0, 0.6])
def test_greedy_gives_exactly_our_ids_and_scores(trained, length_penalty):
    config = SearchConfig(beam_size=1, length_penalty=length_penalty, length_penalty_form="power")
    ours, theirs = _ours(trained, config), _theirs(trained, config)
    same, score_gap = _compare(ours, theirs)
    assert len(ours) >= 200 and same == len(ours)
    assert score_gap < 1e-3
    # Real translations, not hypotheses cut at the length limit.
    exact = sum(h[0].text == r for h, r in zip(ours, trained["references"], strict=True))
    assert exact / len(ours) > 0.5


@needs_ctranslate2
@pytest.mark.parametrize("length_penalty", [0.0, 0.6])
def test_beam_with_the_top_beam_stop_gives_our_ids_and_scores(trained, length_penalty):
    config = dataclasses.replace(TOP_BEAM, length_penalty=length_penalty, n_best=2)
    ours, theirs = _ours(trained, config), _theirs(trained, config)
    same, score_gap = _compare(ours, theirs)
    assert same >= 0.95 * len(ours)
    assert score_gap < 1e-3
    assert all(len(h) == 2 for h in theirs)  # n-best maps too


def _avx512() -> bool:
    try:
        return "avx512" in open("/proc/cpuinfo").read()
    except OSError:
        return True


# On an AVX2-only CPU CTranslate2 runs other int8 kernels and splits the cores between
# replicas differently: measured on one (2026-11-26), int8 kept 248 exact translations of
# 300 against float32's 284, and two replicas changed a few hypotheses, at the base
# commit as at this one. The checks hold on the AVX512 machines they were written on.
needs_avx512 = pytest.mark.skipif(not _avx512(), reason="CTranslate2 on an AVX2-only CPU")


@needs_ctranslate2
@needs_avx512
def test_int8_translates_close_to_float32(trained):
    config = SearchConfig(beam_size=1)
    full, int8 = _theirs(trained, config), _theirs(trained, config, "int8")
    references = trained["references"]
    exact = [
        sum(h[0].text == r for h, r in zip(hypotheses, references, strict=True))
        for hypotheses in (full, int8)
    ]
    assert exact[1] >= exact[0] - 0.05 * len(references), exact
    agree = sum(a[0].ids == b[0].ids for a, b in zip(full, int8, strict=True))
    assert agree >= 0.8 * len(full)


ARCHITECTURES = {
    "pre-norm, shared and tied": {},
    "post-norm": {"norm_first": False},
    "learned positions, GELU": {"position_encoding": "learned", "activation": "gelu"},
    "rotary positions": {"position_encoding": "rotary"},
    "SwiGLU, untied, separate tables": {
        "activation": "swiglu",
        "tie_output_projection": False,
        "share_embeddings": False,
        "layer_norm_epsilon": 0.01,  # far from CTranslate2's default, so it must be set
    },
    # What an imported Marian model brings (translator/marian).
    "Marian's: Swish, sines then cosines, embedding norm, output bias": {
        "norm_first": False,
        "activation": "swish",
        "sinusoid_layout": "marian",
        "embedding_norm": True,
        "output_bias": True,
        "zero_start_embedding": True,  # BOS's row is random: CTranslate2 must not read it
    },
    "Marian's GELU (sigmoid form), untied with its bias": {
        "activation": "gelu_sigmoid",
        "tie_output_projection": False,
    },
}


@needs_ctranslate2
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_converted_model_scores_like_ours(trained, tmp_path, name):
    """Teacher-forced log-probs of CTranslate2's model equal ours, architecture by architecture."""
    import ctranslate2
    import keras

    from translator.artifacts import TrainedModel
    from translator.config import TransformerConfig
    from translator.engines.ctranslate2_export import export_ctranslate2
    from translator.model import Transformer

    vocabulary = trained["model"].vocabulary
    keras.utils.set_random_seed(4)
    config = TransformerConfig.preset(
        "tiny", vocab_size=vocabulary.source_vocab_size, dropout=0.0, **ARCHITECTURES[name]
    )
    model = Transformer(config)
    model.build()
    for weight in model.weights:  # sharper attention and logits than at initialization, so
        weight.assign(weight * 2.0)  # that a wrong layout cannot hide in near-uniform weights
    if model.output_bias is not None:  # zeros at initialization: make a wrong one show
        model.output_bias.assign(np.random.default_rng(1).normal(0, 1, model.output_bias.shape))
    export = export_ctranslate2(TrainedModel.of(model, vocabulary, {}, tmp_path), tmp_path / "ct2")

    rng = np.random.default_rng(0)
    sources = [[*rng.integers(4, 39, n), 3] for n in (3, 9, 5)]  # pieces + EOS
    targets = [list(rng.integers(4, 39, n)) for n in (4, 2, 7)]  # before EOS
    source_ids = np.zeros((3, 10), np.int32)
    target_in = np.zeros((3, 8), np.int32)
    for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
        source_ids[row, : len(source)] = source
        target_in[row, : len(target) + 1] = [2, *target]  # BOS + target
    logits = model((source_ids, target_in), training=False)
    log_probs = np.asarray(keras.ops.log_softmax(logits, axis=-1))  # [3, 8, vocab]

    engine = ctranslate2.Translator(str(export), device="cpu")
    piece = vocabulary.source.id_to_piece
    scored = engine.score_batch(
        [[piece(int(i)) for i in s] for s in sources], [[piece(int(i)) for i in t] for t in targets]
    )
    for row, (target, result) in enumerate(zip(targets, scored, strict=True)):
        labels = [*target, 3]  # the target, then EOS
        expected = [log_probs[row, t, label] for t, label in enumerate(labels)]
        np.testing.assert_allclose(result.log_probs, expected, rtol=1e-4, atol=1e-4, err_msg=name)


def test_every_configurable_value_converts_and_is_checked_equal():
    """The converter knows every activation and position encoding the config accepts, and
    the equality test above covers each of them."""
    from translator import config
    from translator.engines import ctranslate2_export as converter

    assert set(config.ACTIVATIONS) == set(converter.ACTIVATIONS)
    assert set(config.POSITION_ENCODINGS) == set(converter.POSITION_ENCODINGS)
    fields = [_tiny_defaults() | fields for fields in ARCHITECTURES.values()]
    assert {f["activation"] for f in fields} == set(config.ACTIVATIONS)
    assert {f["position_encoding"] for f in fields} == set(config.POSITION_ENCODINGS)
    assert {f["norm_first"] for f in fields} == {True, False}
    assert {f["sinusoid_layout"] for f in fields} == set(config.SINUSOID_LAYOUTS)
    assert (
        {f["embedding_norm"] for f in fields} == {f["output_bias"] for f in fields} == {True, False}
    )


def _tiny_defaults() -> dict:
    from translator.config import TransformerConfig

    return TransformerConfig.preset("tiny", vocab_size=39).to_dict()


@needs_ctranslate2
def test_a_value_the_converter_lacks_fails_before_anything_is_written(trained, tmp_path):
    from translator.engines.ctranslate2_export import export_ctranslate2

    model = trained["model"]
    config = model.model.config
    unknown = dataclasses.replace(config)
    object.__setattr__(unknown, "activation", "geglu")  # as if the config learned a new one
    model.model.config = unknown
    try:
        with pytest.raises(ConfigError, match="activation 'geglu' has no CTranslate2"):
            export_ctranslate2(model, tmp_path / "out")
    finally:
        model.model.config = config
    assert not (tmp_path / "out").exists()


@needs_ctranslate2
def test_cli_export_then_translate_and_evaluate(trained, tmp_path, capsys):
    """The CLI path: the export, then translate and evaluate with it, blank lines kept."""
    import json

    from translator.cli import main

    run_dir = trained["model"].directory
    out = tmp_path / "ct2"
    export = ["export", "--format", "ctranslate2", "--model", str(run_dir), "--out", str(out)]
    assert main(export) == 0
    assert main(export) == 2  # an existing export is not replaced without --overwrite
    lines = [*trained["sources"][:20], "", "   ", "\t", *trained["sources"][20:40]]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n")
    search = ["--top-beam-stop", "--length-penalty-form", "power"]
    outputs = {}
    for engine, model in (("tensorflow", run_dir), ("ctranslate2", out)):
        target = tmp_path / f"{engine}.txt"
        args = ["translate", "--model", str(model), "-i", str(source), "-o", str(target), *search]
        assert main(args) == 0
        outputs[engine] = target.read_text().splitlines()
    assert len(outputs["ctranslate2"]) == len(lines)
    assert outputs["ctranslate2"][20:23] == ["", "", ""]
    same = sum(a == b for a, b in zip(*outputs.values(), strict=True))
    assert same >= 0.95 * len(lines)
    # --target-lang: both engines get the tag through the one text path, as greedy shows
    # (the engines' greedy searches are equal id for id).
    greedy = {}
    for engine, model in (("tensorflow", run_dir), ("ctranslate2", out)):
        for tag in ([], ["--target-lang", "yy"]):
            target = tmp_path / f"{engine}.{len(tag)}.txt"
            args = ["translate", "--model", str(model), "-i", str(source), "-o", str(target)]
            assert main([*args, "--beam-size", "1", *tag, *search]) == 0
            greedy[engine, bool(tag)] = target.read_text().splitlines()
    assert greedy["tensorflow", True] == greedy["ctranslate2", True]
    assert greedy["tensorflow", True][20:23] == ["", "", ""]  # an empty line gets no lone tag
    assert greedy["tensorflow", True] != greedy["tensorflow", False]  # the tag reached it
    capsys.readouterr()
    assert main([*args, "--tag", "<2zz>"]) == 2
    assert "tag '<2zz>'" in capsys.readouterr().err
    # A target prefix (CTranslate2's target_prefix): both engines continue it alike.
    prefix_file = tmp_path / "prefixes.txt"
    plain = greedy["tensorflow", False]
    words = [text.split(" ")[-1] if i % 2 else "" for i, text in enumerate(plain)]
    prefix_file.write_text("\n".join(words) + "\n")
    prefixed = {}
    for engine, model in (("tensorflow", run_dir), ("ctranslate2", out)):
        target = tmp_path / f"{engine}.prefixed.txt"
        args = ["translate", "--model", str(model), "-i", str(source), "-o", str(target)]
        assert main([*args, "--beam-size", "1", "--prefix-file", str(prefix_file), *search]) == 0
        prefixed[engine] = target.read_text().splitlines()
    assert prefixed["tensorflow"] == prefixed["ctranslate2"]
    pairs = zip(prefixed["tensorflow"], words, strict=True)
    assert all(text.startswith(word) for text, word in pairs)
    assert prefixed["tensorflow"] != plain
    capsys.readouterr()
    assert main([*args, "--sampling", "topk:3"]) == 2
    assert "--sampling runs on our engine only" in capsys.readouterr().err

    # Default settings: CTranslate2 runs its own rules, and says so; the report records them.
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(trained["references"][:40]) + "\n")
    source.write_text("\n".join(trained["sources"][:40]) + "\n")
    capsys.readouterr()
    args = ["evaluate", "--model", str(out), "--src", str(source), "--ref", str(reference)]
    assert main([*args, "--report", str(tmp_path / "report")]) == 0
    assert "ctranslate2 runs its own stop" in capsys.readouterr().err
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["search"]["engine"] == "ctranslate2"
    assert report["search"]["exact_stop"] is False
    assert report["search"]["length_penalty_form"] == "power"
    assert "compute_dtype" not in report["search"]  # not our search
    assert report["search"]["quantization"] == "float32"
    capsys.readouterr()
    assert main([*args, "--precision", "float32"]) == 2  # CTranslate2 has its own weights
    assert "--quantization" in capsys.readouterr().err


def test_missing_package_is_one_clear_error(monkeypatch, tmp_path):
    from translator.engines.ctranslate2_files import (
        CTranslate2NotInstalledError,
        import_ctranslate2,
    )

    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import fails as if absent
    with pytest.raises(CTranslate2NotInstalledError, match=r"pip install -e \".\[ctranslate2\]\""):
        import_ctranslate2()


@needs_ctranslate2
def test_both_engines_load_through_one_seam_and_meet_its_protocols(trained):
    """`load_translator` picks the engine; each implements `BatchDecoder` and
    `LoadedModel`, and returns its counts with its results."""
    from translator.engines import BatchDecoder, InferenceOptions, LoadedModel, load_translator

    sources = [*trained["sources"][:20], ""]
    engines = {
        "tensorflow": trained["model"].directory,
        "ctranslate2": trained["exports"]["float32"],
    }
    results = {}
    for engine, path in engines.items():
        loaded = load_translator(path, TOP_BEAM, InferenceOptions(engine=engine))
        assert isinstance(loaded.loaded, LoadedModel)
        assert isinstance(loaded.translator.decoder, BatchDecoder)
        assert loaded.translator.engine == engine
        translations = loaded.translator.search(sources)
        assert translations.stats.lines == 21 and translations.stats.empty == 1
        results[engine] = translations.texts
    assert results["tensorflow"][-1] == results["ctranslate2"][-1] == ""
    same = sum(a == b for a, b in zip(*results.values(), strict=True))
    assert same >= 18  # the same search on both engines: equal but for rare near-ties


@needs_ctranslate2
@needs_avx512
def test_replicas_take_the_batches_sent_at_once_and_translate_alike(trained):
    """`parallel_batches` loads as many CTranslate2 replicas (sharing the cores), and
    batches searched on them at once translate as one batch after another does."""
    from translator.constants import DEFAULT_PARALLEL_BATCHES
    from translator.engines import InferenceOptions, load_translator
    from translator.engines.base import CTRANSLATE2_REPLICAS

    path, sources = trained["exports"]["float32"], trained["sources"]
    results = []
    for parallel in (1, 2):
        options = InferenceOptions(batch_tokens=64, parallel_batches=parallel)
        translator = load_translator(path, TOP_BEAM, options).translator
        assert translator.decoder.model.engine.num_translators == parallel
        assert translator.parallel_batches == parallel
        results.append(translator.search(sources))
    # Unless asked: one replica on every core, and our search its own default.
    default = load_translator(path, TOP_BEAM).translator
    assert default.decoder.model.engine.num_translators == CTRANSLATE2_REPLICAS
    assert default.parallel_batches == CTRANSLATE2_REPLICAS
    ours = load_translator(trained["model"].directory, TOP_BEAM).translator
    assert ours.parallel_batches == DEFAULT_PARALLEL_BATCHES
    assert results[0].stats.batches >= 10
    assert results[1].hypotheses == results[0].hypotheses
    assert results[1].stats == results[0].stats


def test_inference_options_name_the_bad_option():
    from translator.engines import InferenceOptions
    from translator.errors import ConfigError

    for fields, option in (
        ({"batch_tokens": 0}, "--batch-tokens"),
        ({"parallel_batches": 0}, "--parallel-batches"),
        ({"max_source_length": 1}, "--max-source-length"),
        ({"engine": "onnx"}, "--engine"),
        ({"precision": "int4"}, "--precision"),
    ):
        with pytest.raises(ConfigError, match=option):
            InferenceOptions(**fields)


def _reversal_scores(hypotheses, sources) -> tuple[float, float]:
    """(share of links on the reversal's own pairs, the same for the diagonal) over the
    sentences translated exactly: word i of n is the target's word n - 1 - i."""
    hits = diagonal = links = 0
    for found, source in zip(hypotheses, sources, strict=True):
        words = source.split()
        if found[0].text.split() != words[::-1]:
            continue
        pairs = {tuple(map(int, pair.split("-"))) for pair in found[0].alignment.split()}
        hits += sum(j == len(words) - 1 - i for i, j in pairs)
        diagonal += sum(i == j for i, j in pairs)
        links += len(pairs)
    return hits / links, diagonal / links


@needs_ctranslate2
def test_alignments_follow_the_reversal_and_ctranslate2_gives_ours(trained):
    """The reversing model's attention links each word to its mirror, on our engine and
    on CTranslate2's own (`return_attention`, the layer the export names)."""
    from translator.engines.ctranslate2_runtime import CTranslate2Decoder, load_ctranslate2
    from translator.inference import Translator

    model, sources = trained["model"], trained["sources"]
    ours = Translator.from_model(model.model, model.vocabulary, GREEDY)
    ours = ours.search(sources, alignments=True).hypotheses
    loaded = load_ctranslate2(trained["exports"]["float32"])
    theirs = Translator(CTranslate2Decoder(loaded, GREEDY), loaded.vocabulary)
    theirs = theirs.search(sources, alignments=True).hypotheses
    mirrored, diagonal = _reversal_scores(ours, sources)
    assert mirrored > 0.8 and diagonal < 0.4  # the control: the diagonal is not it
    same = [a[0].alignment == b[0].alignment for a, b in zip(ours, theirs, strict=True)]
    assert sum(same) >= 0.98 * len(sources)


@needs_ctranslate2
def test_an_export_that_does_not_name_its_alignment_layer_says_so(trained):
    from translator.engines.ctranslate2_runtime import CTranslate2Decoder, load_ctranslate2
    from translator.errors import ConfigError
    from translator.inference import Translator

    loaded = load_ctranslate2(trained["exports"]["float32"])
    del loaded.info["alignment_layer"]  # as an export written before alignments
    translator = Translator(CTranslate2Decoder(loaded, GREEDY), loaded.vocabulary)
    assert translator.translate(trained["sources"][:2])  # translating still works
    with pytest.raises(ConfigError, match="export it again"):
        translator.search(trained["sources"][:2], alignments=True)
