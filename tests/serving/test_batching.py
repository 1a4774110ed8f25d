"""The batcher, the REST protocol helpers and the shipped TF Serving configs, without a model."""

import concurrent.futures
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from serving.batching import (
    Batcher,
    BatcherStoppedError,
    BatchingConfig,
    QueueFullError,
    read_batching_parameters,
)
from serving.protocol import RequestLimits, dumps, format_predict, parse_predict

SERVING = Path(__file__).resolve().parents[2] / "serving"


class Recorder:
    """A fake model: upper-cases sentences and records each batch it was given."""

    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None):
        self.batches: list[tuple[str, list[bytes]]] = []
        self.delay, self.gate = delay, gate
        # Set when a batch reaches the model: waited on instead of sleeping, so that a
        # loaded machine's slow thread start cannot reorder what a test sets up.
        self.entered = threading.Event()

    def __call__(self, signature, inputs):
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        time.sleep(self.delay)
        self.batches.append((signature, list(inputs)))
        if b"boom" in inputs:
            raise RuntimeError("model failure")
        return {"text": np.array([s.upper() for s in inputs], object)}


def started(run, **config) -> Batcher:
    batcher = Batcher(run, BatchingConfig(**config))
    batcher.start()
    return batcher


def test_concurrent_requests_are_merged_and_answered_in_order():
    run = Recorder(delay=0.01)
    batcher = started(run, max_batch_size=8, batch_timeout_micros=50_000)
    requests = [[f"r{i}s{j}".encode() for j in range(1 + i % 3)] for i in range(32)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = list(pool.map(lambda r: batcher.submit("sig", r), requests))
        results = [f.result(10) for f in futures]
    assert batcher.stop()
    for request, result in zip(requests, results, strict=True):
        assert result["text"].tolist() == [s.upper() for s in request]
    sizes = [len(inputs) for _, inputs in run.batches]
    assert sum(sizes) == sum(len(r) for r in requests)  # each sentence decoded once
    assert max(sizes) <= 8 and len(sizes) < len(requests)  # merged, within the limit
    assert batcher.stats.sentences == sum(sizes) and batcher.stats.batches == len(sizes)


def test_large_request_is_split_over_batches_and_reassembled():
    run = Recorder()
    batcher = started(run, max_batch_size=4, batch_timeout_micros=0)
    sentences = [f"s{i}".encode() for i in range(10)]
    result = batcher.submit("sig", sentences).result(10)
    batcher.stop()
    assert result["text"].tolist() == [s.upper() for s in sentences]
    assert [len(inputs) for _, inputs in run.batches] == [4, 4, 2]


def test_without_batching_each_request_is_one_whole_batch():
    run = Recorder(delay=0.01)
    batcher = started(run, max_batch_size=2, enabled=False)
    futures = [batcher.submit("sig", [b"a"] * n) for n in (1, 5, 3)]
    assert [len(f.result(10)["text"]) for f in futures] == [1, 5, 3]
    batcher.stop()
    assert [len(inputs) for _, inputs in run.batches] == [1, 5, 3]


def under_load(batcher: Batcher, run: Recorder, gate: threading.Event) -> None:
    """Leaves `batcher` out of light traffic: its last batch served two requests."""
    gate.clear()
    run.entered.clear()
    alone = batcher.submit("load", [b"l0"])  # alone: runs at once, held at the gate
    assert run.entered.wait(10)
    queued = [batcher.submit("load", [f"l{i}".encode()]) for i in (1, 2)]
    gate.set()
    for future in (alone, *queued):
        future.result(10)


class Clock:
    """A simulated clock for the batcher's timeouts: it moves only when a test moves it,
    so what is waited for is decided by the order of events, never by the machine's load.
    (The batcher's waits stay real: a request, or a deadline passed, ends them.)"""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_lone_request_is_not_held_for_the_timeout():
    """Light traffic (one client): each request runs at once, as with batching off. Held
    for the minute's timeout, `result(10)` would time out. Under load a lone request
    waits for the clients that may join it: the next one shares its batch."""
    run = Recorder()
    config = BatchingConfig(max_batch_size=2, batch_timeout_micros=60_000_000)
    batcher = Batcher(run, config, clock=Clock())
    batcher.start()
    for sentence in (b"a", b"b", b"c"):
        batcher.submit("sig", [sentence]).result(10)
    assert [inputs for _, inputs in run.batches] == [[b"a"], [b"b"], [b"c"]]
    gate = threading.Event()
    run.gate = gate
    under_load(batcher, run, gate)
    run.entered.clear()
    lone = batcher.submit("sig", [b"d"])
    run.entered.wait(0.2)  # (a batcher that ran "d" at once would have by now: the control)
    joined = batcher.submit("sig", [b"e"])
    lone.result(10), joined.result(10)
    batcher.stop()
    assert run.batches[-1] == ("sig", [b"d", b"e"])


def test_timeout_waits_for_a_second_request_and_signatures_never_mix():
    gate = threading.Event()
    run = Recorder(gate=gate)
    batcher = started(run, max_batch_size=8, batch_timeout_micros=1_000_000)
    under_load(batcher, run, gate)
    first = batcher.submit("a", [b"x"])
    other = batcher.submit("b", [b"y"])
    second = batcher.submit("a", [b"z"])
    for future in (first, other, second):
        future.result(10)
    batcher.stop()
    assert run.batches[-2:] == [("a", [b"x", b"z"]), ("b", [b"y"])]


def test_after_a_busy_batch_the_next_one_waits_for_late_requests():
    """Clients answered by one batch still make the next: its wait starts when it can run,
    not when its request came (TF Serving's rule, the control: "b" would run alone)."""
    gate, clock = threading.Event(), Clock()
    run = Recorder(gate=gate)
    batcher = Batcher(run, BatchingConfig(max_batch_size=2, batch_timeout_micros=400_000), clock)
    batcher.start()
    under_load(batcher, run, gate)
    gate.clear()
    run.entered.clear()
    first = [batcher.submit("sig", [s]) for s in (b"a1", b"a2")]  # one batch, held
    assert run.entered.wait(10)  # it is running (blocked on the gate)
    waiting = batcher.submit("sig", [b"b"])  # queued while the worker is busy
    clock.now += 10.0  # far past its timeout, while the worker is still busy
    gate.set()
    for future in first:
        future.result(10)
    run.entered.clear()
    run.entered.wait(0.2)  # (a batcher that ran "b" alone would have by now: the control)
    late = batcher.submit("sig", [b"c"])  # an answered client's next request
    waiting.result(10), late.result(10)
    batcher.stop()
    assert [inputs for _, inputs in run.batches][-2:] == [[b"a1", b"a2"], [b"b", b"c"]]


def test_full_queue_refuses_and_failures_reach_only_their_batch():
    gate = threading.Event()
    run = Recorder(gate=gate)
    batcher = started(run, max_batch_size=2, batch_timeout_micros=0, max_enqueued_batches=2)
    running = batcher.submit("sig", [b"a", b"b"])  # taken by the worker, waits on the gate
    while not batcher.stats.requests or batcher._waiting["sig"]:
        time.sleep(0.001)
    queued = [batcher.submit("sig", [b"c", b"d"]), batcher.submit("sig", [b"boom"])]
    with pytest.raises(QueueFullError, match="queue is full"):
        batcher.submit("sig", [b"e", b"f"])
    gate.set()
    assert running.result(10)["text"].tolist() == [b"A", b"B"]
    assert queued[0].result(10)["text"].tolist() == [b"C", b"D"]
    with pytest.raises(RuntimeError, match="model failure"):
        queued[1].result(10)
    assert batcher.submit("sig", [b"g"]).result(10)["text"].tolist() == [b"G"]  # still serving
    assert batcher.stop()
    with pytest.raises(BatcherStoppedError):
        batcher.submit("sig", [b"h"])


def test_stop_finishes_queued_requests_first():
    run = Recorder(delay=0.05)
    batcher = started(run, max_batch_size=1, batch_timeout_micros=0)
    futures = [batcher.submit("sig", [f"{i}".encode()]) for i in range(5)]
    assert batcher.stop(timeout=10) and not batcher.alive
    assert [f.result(0)["text"][0] for f in futures] == [f"{i}".encode() for i in range(5)]


def test_shipped_batching_parameters_and_model_config_parse():
    applied, ignored = read_batching_parameters(SERVING / "batching_parameters.txt")
    # The shipped file (for TF Serving) and `translator serve`'s defaults agree.
    assert applied.pop("max_request_sentences") == RequestLimits().max_sentences
    assert BatchingConfig(**applied) == BatchingConfig()
    assert ignored == ["num_batch_threads"]
    from serving.protos import read_model_server_config

    (model,) = read_model_server_config(SERVING / "models.config").model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == (
        "translator",
        "/models/translator",
        "tensorflow",
    )
    assert model.model_version_policy.latest.num_versions == 1


def test_bad_batching_parameters_name_the_line(tmp_path):
    path = tmp_path / "batching.txt"
    path.write_text("max_batch_size { value: 8 }\nbatch_timeout_micros { 5 }\n")
    with pytest.raises(ValueError, match=r"batching.txt:2:24 : .*Int64Value.* no field named"):
        read_batching_parameters(path)
    path.write_text("# TF Serving's\nmax_batch_size { value: 8 }\nmax_batch_sise { value: 8 }\n")
    with pytest.raises(ValueError, match=r"batching.txt:3:1 : .*no field named \"max_batch_sise"):
        read_batching_parameters(path)


def test_responses_take_tf_servings_shapes():
    outputs = {
        "scores": np.array([[-1.5, -np.inf]], np.float32),
        "translations": np.array([[b"Hallo", b""]], object),
    }
    keys = ("scores", "translations")
    rows = format_predict(outputs, keys, columnar=False)
    assert rows == {"predictions": [{"scores": [-1.5, -np.inf], "translations": ["Hallo", ""]}]}
    columns = format_predict(outputs, keys, columnar=True)
    assert columns == {"outputs": {"scores": [[-1.5, -np.inf]], "translations": [["Hallo", ""]]}}
    single = format_predict({"y": np.array([1.0, 2.0])}, ("y",), columnar=False)
    assert single == {"predictions": [1.0, 2.0]}  # one output: no names
    assert json.loads(dumps(rows)) == rows and b"-Infinity" in dumps(rows)


def test_b64_and_unicode_inputs_become_bytes():
    body = json.dumps({"instances": ["Zoë", {"b64": "/w=="}]}).encode()
    parsed = parse_predict(body, {"serving_default": ("inputs",)}, RequestLimits())
    assert parsed.inputs == ["Zoë".encode(), b"\xff"] and not parsed.columnar
