"""`translator export --format marian`: our model in Marian's files, read back by CTranslate2's
converter (the oracle) and by our import."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.corpora import write_copy_corpus
from tests.support.marian import convert_with_ctranslate2
from tests.support.missing import DEV_EXTRA, need_module
from tests.support.runs import tiny_run_config
from translator.search import SearchConfig

ctranslate2 = need_module("ctranslate2", DEV_EXTRA, module_level=True)

# What Marian can express: sines then cosines, a zero start, Swish, post-norm.
MARIAN_SHAPE = {
    "sinusoid_layout": "marian",
    "zero_start_embedding": True,
    "activation": "swish",
    "norm_first": False,
}
SEARCH = SearchConfig(beam_size=4, exact_stop=False, length_penalty=0.0, min_length=0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model of Marian's shape, trained 150 updates to reverse word sequences."""
    from training.run import train
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("marian_export")
    task = {
        "train": write_copy_corpus(root / "train", 3000, seed=1, reverse=True),
        "valid": write_copy_corpus(root / "valid", 100, seed=2, reverse=True),
        "vocab": root / "vocab",
    }
    build_vocabulary(
        [task["train"][0]], [task["train"][1]], task["vocab"], vocab_size=39, byte_fallback=False
    )
    config = tiny_run_config(
        task,
        model={"preset": "tiny", "overrides": {**MARIAN_SHAPE, "dropout": 0.0}},
        train={"max_steps": 150},
        optimizer={"peak_learning_rate": 0.003},
    )
    result = train(config, root / "run", verbose=0)
    return result.model_dir, task["valid"][0].read_text().splitlines()[:60]


def _search(model_dir, sources):
    from translator.artifacts import load_model_dir
    from translator.inference import Translator

    loaded = load_model_dir(model_dir)
    translator = Translator.from_model(loaded.model, loaded.vocabulary, SEARCH)
    piece = loaded.vocabulary.target.id_to_piece
    return [
        ([piece(i) for i in h[0].ids], h[0].score) for h in translator.search(sources).hypotheses
    ]


def test_an_export_reads_back_in_ctranslate2_and_in_our_import(trained, tmp_path):
    import sentencepiece as spm

    from translator.cli import main
    from translator.marian import import_marian

    model_dir, sources = trained
    assert (
        main(
            [
                "export",
                "--format",
                "marian",
                "--model",
                str(model_dir),
                "--out",
                str(tmp_path / "m"),
            ]
        )
        == 0
    )
    ours = _search(model_dir, sources)
    assert sum(bool(p) for p, _ in ours) > len(sources) // 2  # real translations

    # CTranslate2's converter of Marian models reads the export: the same search.
    convert_with_ctranslate2(tmp_path / "m", tmp_path / "ct2")
    engine = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "m" / "source.spm"))
    results = engine.translate_batch(
        [processor.encode(s, out_type=str) for s in sources],
        beam_size=4,
        return_scores=True,
        max_decoding_length=64,
        length_penalty=0.0,
    )
    # Marian's softmax has no PAD or BOS, whose small probabilities ours keeps: its log P
    # of the same tokens is a little higher, which may reorder a near tie of the beam.
    same = [(s, r) for (p, s), r in zip(ours, results, strict=True) if p == r.hypotheses[0]]
    assert len(same) >= 0.9 * len(sources)
    assert all(s - 1e-4 <= r.scores[0] < s + 0.2 for s, r in same)

    # The import of the export masks PAD and BOS as Marian lacks them: CTranslate2's
    # tokens, and its log P of them (its `score_batch`; the search's own scores differ
    # from that by up to ~1.3e-3, measured 2026-11-27, so they are held to 2e-3).
    import_marian(tmp_path / "m", tmp_path / "back")
    again = _search(tmp_path / "back", sources)
    assert [p for p, _ in again] == [r.hypotheses[0] for r in results]
    tokens = [processor.encode(s, out_type=str) for s in sources]
    scored = engine.score_batch(tokens, [r.hypotheses[0] for r in results])
    np.testing.assert_allclose(
        [s for _, s in again], [sum(r.log_probs) for r in scored], atol=2e-5, rtol=1e-5
    )
    np.testing.assert_allclose([s for _, s in again], [r.scores[0] for r in results], atol=2e-3)


def test_what_marian_cannot_express_is_named_before_anything_is_written():
    from translator.config import TransformerConfig
    from translator.marian.export import check_exportable
    from translator.marian.files import MarianImportError

    config = TransformerConfig.preset("tiny", vocab_size=40)  # ours: interleaved, BOS row
    with pytest.raises(MarianImportError, match=r"paper.s sinusoids.*BOS start embedding"):
        check_exportable(config)
    rotary = TransformerConfig.preset(
        "tiny", vocab_size=40, position_encoding="rotary", activation="swiglu"
    )
    with pytest.raises(MarianImportError, match=r"activation 'swiglu'.*rotary positions"):
        check_exportable(rotary)
