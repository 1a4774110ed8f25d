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


def test_target_prefixes_give_the_graphs_ids(vocab_dirs, lines):
    # (The plain vocabulary: a joint one's graph path reads target prefixes with the
    # source side's UNK ids, where the host's reads them with the target side's.)
    vocabulary, host = load_vocabulary(vocab_dirs[0]), HostText(vocab_dirs[0])
    prepared = host.prepare(lines, text.UNBOUNDED_SOURCE_CUT)
    prefixes = [line[: len(line) // 3] for line in reversed(lines)]  # some empty
    graph = text.target_prefixes(tf.constant(prefixes), vocabulary.target, prepared.rows)
    np.testing.assert_array_equal(host.prefixes(prefixes, prepared.rows), graph.numpy())


def test_a_translator_on_the_hosts_path_translates_as_on_the_graphs(vocab_dirs, lines):
    """`Translator` where TensorFlow is not installed (the host's text path) returns the
    same n-best texts, scores and ids as with the graph's, prefixes and a tag included."""
    from tests.support.models import tiny_model
    from translator.inference import Translator
    from translator.search import SearchConfig
    from translator.text import GraphText
    from translator.text_path import HostTextPath

    vocabulary = load_vocabulary(vocab_dirs[0])
    model = tiny_model(vocabulary.target_vocab_size, seed=3, eos_bias=2.0)
    search = SearchConfig(beam_size=3, n_best=2, max_output_length=12)
    translator = Translator.from_model(model, vocabulary, search, tag="<2de>")
    assert isinstance(translator._text, GraphText)  # TensorFlow is installed here
    chosen = lines[:40] + EDGES
    prefixes = [line[:8] if index % 3 == 0 else "" for index, line in enumerate(chosen)]
    graph = translator.search(chosen, prefixes=prefixes)
    tag_id = vocabulary.tag_id("<2de>")
    translator._text = HostTextPath(vocabulary.host, translator.max_source_length, tag_id)
    host = translator.search(chosen, prefixes=prefixes)
    assert host.hypotheses == graph.hypotheses
    assert host.stats == graph.stats and graph.stats.empty == 3
    assert sum(len(h) for h in graph.hypotheses) > len(chosen)  # n-best filled
