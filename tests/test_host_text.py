"""The host's text path (numpy, `sentencepiece`) equals the graph's (`translator.text`).

The same lines, the same vocabulary: the same source ids, rows, lengths, empty and
truncated flags (tags and a length cut included), and the same texts and scores from
the same hypotheses; and it runs where TensorFlow cannot be imported.
"""

import json
import shutil

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from tests.support.corpora import read_gz_lines
from tests.support.no_tensorflow import run_without_tensorflow
from translator import text
from translator.constants import EOS_ID
from translator.host_text import HostText
from translator.pipelines.vocabulary import load_vocabulary

TAGS = ("<2de>", "<2en>")
# Lines the rules single out: empty, blank, a trailing newline, unusual spaces, bytes
# the model spells with byte fallback, and long ones (cut at the limit).
EDGES = ["", "   ", "\t\u3000", "A dog runs.\n", "two\n\n", " lead and trail ", "☃ 𝄞 日本語"]


@pytest.fixture(scope="module")
def vocab_dirs(subset_files, tmp_path_factory):
    """A tagged joint vocabulary, and a copy whose vocab.json reads a few ids as UNK
    (as an imported Marian model's does)."""
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("host_text")
    plain = root / "vocab"
    build_vocabulary([subset_files[0]], [subset_files[1]], plain, vocab_size=600, user_symbols=TAGS)
    unknown = root / "unknown"
    shutil.copytree(plain, unknown)
    metadata = json.loads((unknown / "vocab.json").read_text())
    processor = sentencepiece.SentencePieceProcessor(model_file=str(plain / "spm.model"))
    common = [processor.piece_to_id(piece) for piece in ("▁a", "▁A", ".", "▁in", "▁is")]
    assert 1 not in common  # pieces of the model, each read as UNK from now on
    metadata["read_as_unknown"] = {"source": common, "target": common[:2]}
    (unknown / "vocab.json").write_text(json.dumps(metadata))
    return plain, unknown


@pytest.fixture(scope="module")
def lines(multi30k_dir):
    validation = read_gz_lines(multi30k_dir / "val.en.gz")
    return validation[:300] + EDGES + [" ".join(validation[:12])]  # the last one is cut


@pytest.mark.parametrize("which", ["plain", "unknown"])
@pytest.mark.parametrize(("limit", "tagged"), [(text.UNBOUNDED_SOURCE_CUT, False), (24, True)])
def test_prepare_gives_the_graphs_ids_rows_and_flags(vocab_dirs, lines, which, limit, tagged):
    directory = vocab_dirs[0 if which == "plain" else 1]
    vocabulary, host = load_vocabulary(directory), HostText(directory)
    tag_id = vocabulary.tag_id("<2de>") if tagged else None
    graph = text.prepare(tf.constant(lines), vocabulary.source, limit, tag_id)
    ours = host.prepare(lines, limit, tag_id)
    for name in text.Prepared._fields:
        np.testing.assert_array_equal(getattr(ours, name), getattr(graph, name).numpy(), name)
    assert ours.empty.sum() == 3 and (ours.truncated.sum() > 0) == (limit == 24)
    if which == "unknown":  # the remap is exercised, not only present
        assert (ours.source_ids == 1).any()


def test_finish_gives_the_graphs_texts_and_scores(vocab_dirs, lines):
    vocabulary, host = load_vocabulary(vocab_dirs[1]), HostText(vocab_dirs[1])
    prepared = host.prepare(lines, text.UNBOUNDED_SOURCE_CUT)
    searched = len(prepared.rows)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 600, (searched, 2, 15)).astype(np.int32)  # PAD, BOS, EOS among them
    ids[:, 0, 10] = EOS_ID  # the best hypotheses end; the others may not
    scores = rng.normal(size=(searched, 2)).astype(np.float32)
    texts, graph_scores = text.finish(
        tf.constant(ids), tf.constant(scores), tf.constant(prepared.rows), len(lines),
        vocabulary.target,
    )  # fmt: skip
    ours, our_scores = host.finish(ids, scores, prepared.rows, len(lines))
    assert ours == [[t.decode("utf-8") for t in row] for row in texts.numpy()]
    np.testing.assert_array_equal(our_scores, graph_scores.numpy())
    assert host.decode(ids[:, 0]) == vocabulary.target.decode(ids[:, 0])


def test_it_runs_without_tensorflow(vocab_dirs):
    out = run_without_tensorflow(
        "import sys\n"
        "from translator.host_text import HostText\n"
        f"host = HostText({str(vocab_dirs[0])!r})\n"
        "prepared = host.prepare(['A dog runs.', '', 'Two men.'], 64)\n"
        "print(prepared.rows.tolist(), host.decode(prepared.source_ids), "
        "'tensorflow' in sys.modules)\n"
    )
    assert out.strip() == "[2, 0] ['Two men.', 'A dog runs.'] False"
