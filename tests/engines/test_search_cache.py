"""The search cache: a search restored from it translates as the one built and traced.

Each test copies the serving tests' tiny model without its cache, so the cache it writes is
its own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.support.paths import SCRIPTS
from tests.support.runs import script_env
from tests.support.serving import PREFIXES, SEARCH, SENTENCES
from translator.engines import InferenceOptions, load_translator
from translator.engines.base import SEARCH_CACHE_ENTRIES
from translator.engines.search_cache import CACHE_DIR, GRAPH

UNCACHED = InferenceOptions(cache_search=False)


@pytest.fixture
def model_dir(exported, tmp_path):
    """Without the cache that other tests' cached loads of the shared model wrote there."""
    ignore = shutil.ignore_patterns(CACHE_DIR)
    return shutil.copytree(exported.model_dir, tmp_path / "model", ignore=ignore)


def entries(model_dir) -> list[str]:
    cache = model_dir / CACHE_DIR
    return (
        sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))
        if cache.exists()
        else []
    )


def nbest(translator, prefixes=None):
    found = translator.search(SENTENCES, prefixes=prefixes).hypotheses
    return [[h.text for h in hs] for hs in found], [[h.score for h in hs] for hs in found]


def test_a_fresh_process_restores_the_search_and_translates_alike(model_dir):
    texts, scores = nbest(load_translator(model_dir, SEARCH, UNCACHED).translator)
    prefixed, _ = nbest(load_translator(model_dir, SEARCH, UNCACHED).translator, PREFIXES)
    assert entries(model_dir) == []  # --no-search-cache writes nothing
    assert sum(len(hs) for hs in texts) > len(SENTENCES)  # n-best lists, not empty
    # The first cached load builds, traces and saves; it translates as without a cache.
    written = load_translator(model_dir, SEARCH, InferenceOptions()).translator
    assert nbest(written)[0] == texts
    assert len(entries(model_dir)) == 1
    # A new process restores it without building the model, until a prefix asks for one:
    # then once, though its small batches arrive two at a time.
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "cached_search.py"), str(model_dir), "24"],
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["described"]["search_cache"].startswith(str(model_dir / CACHE_DIR))
    assert report["builds"] == [0, 1] and report["prefixed_batches"] >= 3
    assert report["texts"] == texts
    # To float32 rounding: frozen, this random model's zero biases and unit layer-norm
    # scales fold away, and with them the patterns of oneDNN's fused kernels
    # (bench/RESULTS.md, "The first translation").
    for restored, built in zip(report["scores"], scores, strict=True):
        np.testing.assert_allclose(restored, built, rtol=1e-5)
    assert report["prefixed"] == prefixed


def test_an_entry_is_the_frozen_graph_after_grapplers_pass_on_the_cpu(model_dir):
    """Without a GPU the entry is the graph after Grappler's pass, every op placed on the
    CPU first (unplaced, the pass skips the CPU fusions: bench/RESULTS.md), weights
    frozen; it is marked so, and the mark never reaches TensorFlow's runtime."""
    from tensorflow.core.framework import function_pb2
    from tensorflow.python.eager import context

    from translator.engines.search_cache import _OPTIMIZED, CPU_DEVICE, _has_gpu, _register

    load_translator(model_dir, SEARCH)
    (entry,) = (model_dir / CACHE_DIR).iterdir()
    serialized = (entry / GRAPH).read_bytes()
    function = function_pb2.FunctionDef.FromString(serialized)
    ops = {node.op for node in function.node_def}
    assert "VarHandleOp" not in ops and "ReadVariableOp" not in ops  # weights frozen
    assert "While" not in ops and "StatelessWhile" not in ops  # the loop lowered
    assert function.attr[_OPTIMIZED].b == (not _has_gpu())
    if not _has_gpu():
        assert {node.device for node in function.node_def} == {CPU_DEVICE}
    name, optimized = _register(serialized)
    assert optimized == (not _has_gpu())
    registered = context.context().get_function_def(name.decode())
    assert registered.signature.name.startswith("translator_search_")
    assert _OPTIMIZED not in registered.attr


def test_the_key_follows_the_search_and_the_weights_and_old_entries_go(model_dir):
    searches = [
        dataclasses.replace(SEARCH, beam_size=SEARCH.n_best + i)
        for i in range(SEARCH_CACHE_ENTRIES + 1)
    ]
    for count, search in enumerate(searches, 1):
        load_translator(model_dir, search)
        assert len(entries(model_dir)) == min(count, SEARCH_CACHE_ENTRIES)
    kept = entries(model_dir)
    load_translator(model_dir, searches[-1])
    assert entries(model_dir) == kept  # a hit writes nothing
    load_translator(model_dir, searches[-1], InferenceOptions(precision="float32"))
    assert len(set(entries(model_dir)) - set(kept)) == 1  # another precision misses
    kept = entries(model_dir)
    weights = model_dir / "model.keras"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    load_translator(model_dir, searches[-1])
    assert len(set(entries(model_dir)) - set(kept)) == 1  # a retrained model misses


@pytest.mark.parametrize("between_nodes", [False, True], ids=["mid-field", "between-nodes"])
def test_an_unreadable_entry_is_rebuilt_and_said(model_dir, caplog, between_nodes):
    """A graph cut short is rebuilt, with a warning: cut inside a field it does not parse;
    cut between two of its nodes it parses, without its returns (a CI run's cut at half the
    file fell there by chance, and the search failed only when called)."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.framework import function_pb2

    def parses(data: bytes) -> bool:
        try:
            function_pb2.FunctionDef.FromString(data)
        except DecodeError:
            return False
        return True

    expected = nbest(load_translator(model_dir, SEARCH, UNCACHED).translator)[0]
    load_translator(model_dir, SEARCH)
    (entry,) = (model_dir / CACHE_DIR).iterdir()
    graph = entry / GRAPH
    data = graph.read_bytes()
    # A write cut short: the first cut at or below half the file that parses, or not.
    cut = next(c for c in range(len(data) // 2, 0, -1) if parses(data[:c]) == between_nodes)
    graph.write_bytes(data[:cut])
    with caplog.at_level(logging.WARNING):
        loaded = load_translator(model_dir, SEARCH)
    assert "unreadable search cache, rebuilding it" in caplog.text
    assert str(entry) in caplog.text
    assert nbest(loaded.translator)[0] == expected
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # written again, whole: the next load reads it
        restored = load_translator(model_dir, SEARCH).translator
    assert caplog.text == ""
    assert restored.decoder.describe()["search_cache"] == str(entry)
    assert nbest(restored)[0] == expected
