"""`import_marian` against CTranslate2's own converter of the same Marian files.

Each variant (tests.support.marian.VARIANTS) is written as OPUS-MT ships models, then
imported by us and converted by `ctranslate2.converters.OpusMTConverter`. Both translate
the same sentences: the same tokens, greedy and beam 4, and the same scores. The converter
is given Marian's own sinusoid table (`convert_with_ctranslate2`): its own is the paper's.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest

from tests.support.corpora import read_gz_lines
from tests.support.marian import (
    VARIANTS,
    convert_with_ctranslate2,
    write_huggingface_model,
    write_marian_model,
)
from tests.support.missing import DEV_EXTRA, need_module, need_multi30k
from translator.constants import BOS_ID, EOS_ID
from translator.search import SearchConfig

ctranslate2 = need_module("ctranslate2", DEV_EXTRA, module_level=True)

SENTENCES = 40
# Most tokens a translation may have, EOS included, in both engines.
LIMIT = 24
# No length penalty (the engines' forms differ). Greedy has no minimum length; beam 4 has
# one piece before EOS (else a random model's beams end at once), where the engines
# differ by design: CTranslate2 renormalizes the step's log-probabilities without EOS,
# ours keeps them. Every hypothesis shares that first step, so the ranking is the same
# and CTranslate2's scores are higher by -log(1 - P(EOS)) there (`_first_step_shift`).
LIMITS = dict(max_length_a=0.0, max_length_b=LIMIT, max_output_length=LIMIT, min_length=0)
SEARCHES = {
    "greedy": SearchConfig(beam_size=1, length_penalty=0.0, **LIMITS),
    "beam4": SearchConfig(
        beam_size=4, exact_stop=False, length_penalty=0.0, **{**LIMITS, "min_length": 1}
    ),
}
# Beam 4 compares, per variant, at least this many sentences whose beam ended after at
# least `MIN_PIECES` pieces (the variants' seeds and EOS biases see to it).
MIN_FINISHED_BEAMS, MIN_PIECES = 10, 3


def _sentencepiece(lines: list[str], size: int) -> bytes:
    """A SentencePiece model with its default ids (unk 0, bos 1, eos 2), as OPUS-MT's."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=size,
        character_coverage=1.0,
        minloglevel=2,
    )
    return model.getvalue()


def _multi30k(name: str, limit: int) -> list[str]:
    directory = need_multi30k()
    return read_gz_lines(directory / f"{name}.gz", limit)


@pytest.fixture(scope="module")
def sentencepiece_models():
    english, german = _multi30k("train.en", 3000), _multi30k("train.de", 3000)
    return _sentencepiece(english, 400), _sentencepiece(german, 420)


@pytest.fixture(scope="module")
def sources():
    return _multi30k("val.en", SENTENCES)


@pytest.fixture(scope="module")
def references():
    return _multi30k("val.de", SENTENCES)


@pytest.fixture(scope="module", params=VARIANTS, ids=lambda v: v.name)
def imported(request, tmp_path_factory, sentencepiece_models):
    """(variant, our imported model, CTranslate2's conversion, the Marian directory)."""
    from translator.artifacts import load_model_dir
    from translator.marian import import_marian

    variant = request.param
    root = tmp_path_factory.mktemp(variant.name)
    marian = write_marian_model(root / "marian", variant, *sentencepiece_models)
    summary = import_marian(marian, root / "ours")
    converted = convert_with_ctranslate2(marian, root / "ct2")
    theirs = ctranslate2.Translator(str(converted), device="cpu", inter_threads=1)
    return variant, load_model_dir(root / "ours"), theirs, marian, summary


def _ours(trained, sources, config, tag=""):
    """Our search: per sentence, its best hypothesis' pieces (EOS included) and score."""
    from translator.inference import Translator

    translator = Translator.from_model(trained.model, trained.vocabulary, config, tag=tag)
    piece = trained.vocabulary.target.id_to_piece
    return [
        ([piece(i) for i in hypotheses[0].ids] + ["</s>"], hypotheses[0].score)
        for hypotheses in translator.search(sources).hypotheses
    ]


def _source_tokens(marian, sources, tag=""):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(marian / "source.spm"))
    return [([tag] if tag else []) + processor.encode(s, out_type=str) for s in sources]


def _theirs(translator, marian, sources, config, tag=""):
    """CTranslate2's search of the same sentences, as `_ours` gives them."""
    results = translator.translate_batch(
        _source_tokens(marian, sources, tag),
        beam_size=config.beam_size,
        length_penalty=config.length_penalty,
        max_decoding_length=LIMIT,
        min_decoding_length=config.min_length,
        return_scores=True,
        return_end_token=True,
    )
    return [(r.hypotheses[0], r.scores[0]) for r in results]


def _first_step_shift(trained, line: str, tag: str) -> float:
    """-log(1 - P(EOS)) of our model's first decoding step for `line`: what CTranslate2's
    renormalization without EOS adds to every score under a minimum length of 1."""
    vocabulary = trained.vocabulary
    source_ids = [*vocabulary.source.encode([line])[0], EOS_ID]
    if tag:
        source_ids.insert(0, vocabulary.tag_id(tag))
    inputs = (np.array([source_ids]), np.array([[BOS_ID]]))
    logits = trained.model(inputs, training=False).numpy()[0, 0].astype(np.float64)
    log_eos = logits[EOS_ID] - np.logaddexp.reduce(logits)
    return float(-np.log1p(-np.exp(log_eos)))


def _tags(variant) -> list[str]:
    return [*variant.language_tokens[-1:], ""] if variant.language_tokens else [""]


def test_the_import_gives_ctranslate2s_log_probabilities(imported, sources, references):
    """Teacher-forced on the references: every token's log P, ours and CTranslate2's."""
    import sentencepiece as spm

    variant, trained, theirs, marian, _ = imported
    target_spm = spm.SentencePieceProcessor(model_file=str(marian / "target.spm"))
    targets = [target_spm.encode(line, out_type=str) for line in references]
    vocabulary = trained.vocabulary
    for tag in _tags(variant):
        tokens = _source_tokens(marian, sources, tag)
        expected = [r.log_probs for r in theirs.score_batch(tokens, targets)]  # EOS included
        for line, reference, log_probs in zip(sources, references, expected, strict=True):
            source_ids = [*vocabulary.source.encode([line])[0], 3]
            if tag:
                source_ids.insert(0, vocabulary.tag_id(tag))
            target_ids = vocabulary.target.encode([reference])[0]  # as score-pairs reads it
            inputs = (np.array([source_ids]), np.array([[2, *target_ids]]))
            logits = trained.model(inputs, training=False).numpy()[0].astype(np.float64)
            log_softmax = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
            ours = log_softmax[np.arange(len(target_ids) + 1), [*target_ids, 3]]
            np.testing.assert_allclose(ours, log_probs, atol=5e-4, rtol=1e-5, err_msg=line)


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_the_import_searches_as_ctranslate2s_conversion(imported, sources, search):
    """The same hypotheses, greedy and beam 4, and their scores.

    A random model's translation may run to the limit, where the engines differ by
    design (ours forces EOS there and scores it): such sentences compare their tokens
    before the limit (greedy), or are left out (beam, whose ranking the cut changes).
    """
    variant, trained, theirs, marian, _ = imported
    config = SEARCHES[search]
    compared = 0  # sentences compared whole, or (greedy) up to the limit
    for tag in _tags(variant):
        ours = _ours(trained, sources, config, tag)
        oracle = _theirs(theirs, marian, sources, config, tag)
        # Ended before the limit, after a few pieces (a lone </s> tests little).
        ended = [MIN_PIECES < len(b[0]) < LIMIT - 1 and b[0][-1] == "</s>" for b in oracle]
        for line, (pieces, score), (expected, expected_score), done in zip(
            sources, ours, oracle, ended, strict=True
        ):
            if done:  # CTranslate2's search scores stray from its score_batch by ~1e-3
                assert pieces == expected
                shift = _first_step_shift(trained, line, tag) if config.min_length else 0.0
                assert abs(score + shift - expected_score) < 2e-3
                compared += 1
            elif search == "greedy":
                assert pieces[: LIMIT - 1] == expected[: LIMIT - 1]
                compared += 1
    if search == "greedy":
        assert compared == len(_tags(variant)) * SENTENCES
    else:  # every variant: beams that ended after a few pieces, compared whole
        assert compared >= MIN_FINISHED_BEAMS, f"{variant.name}: {compared} beams ended"


def test_an_import_exported_to_marian_imports_to_the_same_translations(imported, sources, tmp_path):
    """`export --format marian` of an import, imported again: the same search, every variant."""
    from translator.artifacts import load_model_dir
    from translator.marian import import_marian
    from translator.marian.export import export_marian

    variant, trained, _, _, _ = imported
    export_marian(trained, tmp_path / "marian")
    import_marian(tmp_path / "marian", tmp_path / "again")
    again = load_model_dir(tmp_path / "again")
    for tag in _tags(variant):
        first, second = (
            _ours(model, sources, SEARCHES["beam4"], tag) for model in (trained, again)
        )
        assert [p for p, _ in second] == [p for p, _ in first]
        np.testing.assert_allclose([s for _, s in second], [s for _, s in first], atol=1e-4)


def test_the_import_reports_what_it_read(imported):
    variant, trained, _, _, summary = imported
    lines = "\n".join(summary.lines())
    assert ("pre-norm" if variant.pre_norm else "post-norm") in lines
    assert {"gelu": "gelu", "relu": "relu", "swish": "swish"}[variant.activation] in lines
    assert "eng -> deu fra" in lines
    config = trained.model.config
    assert (config.num_encoder_layers, config.d_model, config.num_heads) == (2, 32, 4)
    assert config.embedding_norm == variant.embedding_norm
    assert trained.vocabulary.metadata.tags == variant.language_tokens
    assert summary.missing_pieces >= variant.dropped_pieces


# MarianMT holds post-norm, tied models: the first variant alone.
@pytest.mark.parametrize("imported", VARIANTS[:1], indirect=True, ids=lambda v: v.name)
def test_the_huggingface_layout_imports_to_the_same_model(imported, tmp_path):
    from translator.artifacts import load_model_dir
    from translator.marian import import_marian

    _, trained, _, marian, _ = imported
    hf = write_huggingface_model(marian, tmp_path / "hf")
    summary = import_marian(hf, tmp_path / "ours")
    assert summary.layout == "huggingface"
    again = load_model_dir(tmp_path / "ours")
    assert again.model.config == trained.model.config
    for a, b in zip(again.model.weights, trained.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    assert (tmp_path / "ours" / "vocab" / "spm.model").exists() == (
        trained.directory / "vocab" / "spm.model"
    ).exists()


@pytest.mark.parametrize(
    "damage, message",
    [
        ("no_options", "no special:model.yml"),
        ("activation", "--transformer-ffn-activation 'tanh'"),
        ("vocab_size", "the vocabulary has"),
        ("no_target_spm", "no target.spm"),
        ("bpe", r"a BPE \(subword-nmt\) model"),
        ("pytorch", "pytorch_model.bin"),
        ("zip_without_source_spm", "opus.zip: no source.spm"),
    ],
)
def test_bad_input_is_one_error_and_nothing_written(
    damage, message, tmp_path, sentencepiece_models
):
    import yaml

    from translator.marian import MarianImportError, import_marian

    marian = write_marian_model(tmp_path / "marian", VARIANTS[0], *sentencepiece_models)
    npz = marian / "opus.model1.npz"
    params = dict(np.load(npz))
    if damage == "no_options":
        del params["special:model.yml"]
    elif damage == "activation":
        options = yaml.safe_load(bytes(params["special:model.yml"]).rstrip(b"\0"))
        options["transformer-ffn-activation"] = "tanh"
        text = yaml.safe_dump(options).encode() + b"\0"
        params["special:model.yml"] = np.frombuffer(text, dtype=np.int8)
    elif damage == "vocab_size":
        params["Wemb"] = params["Wemb"][:-3]
    elif damage == "no_target_spm":
        (marian / "target.spm").unlink()
    elif damage == "bpe":
        for name in ("source.spm", "target.spm"):
            (marian / name).unlink()
        (marian / "source.bpe").write_text("e r\n")
    elif damage == "pytorch":
        for path in marian.iterdir():
            path.unlink()
        (marian / "config.json").write_text("{}")
        (marian / "pytorch_model.bin").write_bytes(b"torch")
    if marian.exists() and npz.exists():
        np.savez(npz, **params)
    given = marian
    if damage == "zip_without_source_spm":
        import zipfile

        given = tmp_path / "opus.zip"
        with zipfile.ZipFile(given, "w") as zipped:
            for path in marian.iterdir():
                if path.name != "source.spm":
                    zipped.write(path, path.name)
    with pytest.raises(MarianImportError, match=message) as error:
        import_marian(given, tmp_path / "out")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_zip_imports_as_its_directory(tmp_path, sentencepiece_models):
    import zipfile

    from translator.marian import read_model

    marian = write_marian_model(tmp_path / "marian", VARIANTS[0], *sentencepiece_models)
    archive = tmp_path / "opus-2020-01-01.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in marian.iterdir():
            zipped.write(path, path.name)
    a, b = read_model(marian), read_model(archive)
    assert a.options == b.options and a.vocabularies == b.vocabularies
    assert sorted(a.params) == sorted(b.params)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert dataclasses.replace(a, origin=b.origin, params={}) == dataclasses.replace(b, params={})


@pytest.mark.parametrize("beam_size", [1, 4])
def test_our_ctranslate2_export_of_the_import_is_ctranslate2s_own_conversion(
    imported, sources, tmp_path, beam_size
):
    """Ours: our ids, BOS's zero row, masked logits; theirs: Marian's. Same translations."""
    from translator.engines.ctranslate2_export import export_ctranslate2

    variant, trained, theirs, marian, _ = imported
    exported = export_ctranslate2(trained, tmp_path / "ct2")
    ours = ctranslate2.Translator(str(exported), device="cpu", inter_threads=1)
    for tag in _tags(variant):
        tokens = _source_tokens(marian, sources, tag)
        options = dict(
            beam_size=beam_size,
            max_decoding_length=LIMIT,
            return_scores=True,
            return_end_token=True,
        )
        expected = theirs.translate_batch(tokens, **options)
        got = ours.translate_batch([[*t, "</s>"] for t in tokens], **options)  # ours: EOS given
        for a, b in zip(got, expected, strict=True):
            assert a.hypotheses[0] == b.hypotheses[0]
            assert abs(a.scores[0] - b.scores[0]) < 2e-4


def test_the_command_imports_and_translate_takes_the_target_language(
    tmp_path, sentencepiece_models, sources, capsys
):
    """`translator import marian`, then `translate --target-lang fra` = the `>>fra<<` tag."""
    from translator.artifacts import load_model_dir
    from translator.cli import main

    multilingual = next(v for v in VARIANTS if v.language_tokens)
    marian = write_marian_model(tmp_path / "marian", multilingual, *sentencepiece_models)
    assert main(["import", "marian", str(marian), "--out", str(tmp_path / "model")]) == 0
    report = capsys.readouterr().out
    assert "target-language tokens: >>deu<<, >>fra<<" in report
    assert "pre-norm" in report and "embedding LayerNorm" in report
    (tmp_path / "in.txt").write_text("\n".join(sources[:8]) + "\n")
    for tag in (">>fra<<", ">>deu<<"):
        command = [
            "translate",
            "--model",
            str(tmp_path / "model"),
            "--input",
            str(tmp_path / "in.txt"),
        ]
        assert main([*command, "--beam-size", "1", "--target-lang", tag[2:5]]) == 0
        lines = capsys.readouterr().out.splitlines()
        trained = load_model_dir(tmp_path / "model")
        config = SearchConfig(beam_size=1)
        from translator.inference import Translator

        expected = Translator.from_model(trained.model, trained.vocabulary, config, tag=tag)
        assert lines == expected.translate(sources[:8])
    assert main(["import", "marian", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    assert "nothing: neither a model directory nor a zip file" in capsys.readouterr().err


def test_recipe_fine_tunes_a_marian_model_and_every_command_takes_its_import(
    tmp_path, sentencepiece_models, capsys
):
    """`recipe --init-from MARIAN_DIR`: imported once into the work directory, fine-tuned
    from it, the report beside the model it started from; `evaluate` and `score-pairs`
    take the import; `train --init-from MARIAN_DIR` says to import it first."""
    from tests.support.cli import in_process
    from tests.support.corpora import write_lines

    marian = write_marian_model(tmp_path / "opus-mt", VARIANTS[0], *sentencepiece_models)
    files = {}
    for name, count in [("train", 300), ("val", 60)]:
        for side in ("en", "de"):
            lines = _multi30k(f"{name}.{side}", count)
            files[name, side] = write_lines(tmp_path / f"{name}.{side}", lines)
    recipe = [
        *("recipe", "--workdir", tmp_path / "work", "--minutes", "0.1"),
        *("--train", files["train", "en"], files["train", "de"]),
        *("--valid", files["val", "en"], files["val", "de"]),
        *("--test", files["val", "en"], files["val", "de"], "--init-from", marian),
    ]
    done = in_process(capsys, *recipe)
    assert done.returncode == 0, done.stderr[-3000:]
    pretrained = tmp_path / "work" / "pretrained"
    assert f"a Marian model, imported -> {pretrained}" in done.stdout
    assert "architecture: 2+2 layers, d_model 32" in done.stdout  # the import's report
    assert "(the model it fine-tuned: " in done.stdout  # validation before the first update
    assert (tmp_path / "work" / "eval" / "val" / "report.md").is_file()
    again = in_process(capsys, *recipe)
    assert again.returncode == 0 and "imported before" in again.stdout, again.stderr[-3000:]

    evaluated = in_process(
        capsys,
        *("evaluate", "--model", pretrained, "--src", files["val", "en"]),
        *("--ref", files["val", "de"], "--report", tmp_path / "eval", "--beam-size", "1"),
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "BLEU" in (tmp_path / "eval" / "report.md").read_text()
    scored = in_process(
        capsys,
        *("score-pairs", "--model", pretrained),
        *("--src", files["val", "en"], "--tgt", files["val", "de"]),
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert len(scored.stdout.splitlines()) == 60

    train = in_process(
        capsys, "train", "--run-dir", tmp_path / "run", "--set", f"train.init_from={marian}"
    )
    assert train.returncode == 2
    assert "is a Marian model; import it first" in train.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_the_savedmodel_of_an_import_translates_as_translate(
    tmp_path, sentencepiece_models, sources, capsys
):
    """`translator export` of an imported model, reloaded: the same texts as `translate`."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from translator.cli import main

    marian = write_marian_model(tmp_path / "marian", VARIANTS[0], *sentencepiece_models)
    model = tmp_path / "model"
    assert main(["import", "marian", str(marian), "--out", str(model)]) == 0
    assert main(["export", "--model", str(model), "--out", str(tmp_path / "export")]) == 0
    (tmp_path / "in.txt").write_text("\n".join(sources[:10]) + "\n")
    capsys.readouterr()
    command = ["translate", "--model", str(model), "--input", str(tmp_path / "in.txt")]
    assert main([*command, "--beam-size", "4", "--length-penalty", "0.6"]) == 0
    expected = capsys.readouterr().out.splitlines()
    loaded = tf.saved_model.load(str(tmp_path / "export" / "1"))
    out = loaded.signatures["serving_default"](tf.constant(sources[:10]))
    assert [t.decode() for t in out["translations"].numpy()] == expected
