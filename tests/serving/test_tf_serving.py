"""Parity with stock TF Serving: batching parameters, warm-up requests, the pinned image.

What TF Serving does is read from its own schemas and files (tensorflow-serving-api's
PredictionLog, the BatchingParameters text proto), never from this project's readers, so
a reader that drifts from TF Serving fails here. Nothing here starts a server.
"""

import argparse
import re
import shutil
from pathlib import Path

import pytest

from serving.cli import register, serving_config
from serving.config import MAX_REQUEST_SENTENCES, BatchingConfig
from serving.process import free_port
from serving.protocol import RequestLimits
from serving.protos import read_batching_parameters as read_proto
from tests.support.paths import REPO
from translator.cli import main as cli_main
from translator.errors import ConfigError

SERVING = REPO / "serving"
SHIPPED = SERVING / "batching_parameters.txt"
WARMUP = Path("assets.extra") / "tf_serving_warmup_requests"


def serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["serve", "--model", "unused", *argv])


def test_both_servers_split_a_request_larger_than_a_batch_alike(tmp_path):
    """TF Serving's reading of the shipped file is `translator serve`'s default behaviour."""
    shipped = read_proto(SHIPPED)
    # TF Serving: requests up to max_batch_size, split over calls of max_execution_batch_size.
    assert shipped.enable_large_batch_splitting.value
    largest, per_call = shipped.max_batch_size.value, shipped.max_execution_batch_size.value
    assert per_call < largest  # a request larger than a batch is split, not refused
    assert (largest, per_call) == (MAX_REQUEST_SENTENCES, BatchingConfig().max_batch_size)
    assert RequestLimits().max_sentences == MAX_REQUEST_SENTENCES
    with_file = serving_config(serve_args("--batching-parameters", str(SHIPPED)))
    assert with_file == serving_config(serve_args()) == (BatchingConfig(), largest)

    def read(text: str, *flags: str) -> tuple[int, int]:
        path = tmp_path / "batching.txt"
        path.write_text(text)
        config, max_request_sentences = serving_config(
            serve_args("--batching-parameters", str(path), *flags)
        )
        return config.max_batch_size, max_request_sentences

    # Without splitting, TF Serving refuses a request over max_batch_size: so does serve.
    assert read("max_batch_size { value: 8 }") == (8, 8)
    assert read("max_batch_size { value: 8 } max_execution_batch_size { value: 2 }") == (8, 8)
    # With splitting and no max_execution_batch_size, calls are max_batch_size too.
    assert read("max_batch_size { value: 8 } enable_large_batch_splitting { value: true }") == (
        8,
        8,
    )
    splitting = (
        "max_batch_size { value: 8 } enable_large_batch_splitting { value: true } "
        "max_execution_batch_size { value: 3 }"
    )
    assert read(splitting) == (3, 8)
    assert read(splitting, "--max-batch-size", "2", "--max-request-sentences", "5") == (2, 5)
    with pytest.raises(ConfigError, match=r"batching.txt: max_execution_batch_size \(9\)"):
        read(splitting.replace("value: 3", "value: 9"))


def test_the_clients_default_chunk_is_the_largest_request_both_servers_take(tmp_path):
    from serving.client import default_chunk_size

    assert default_chunk_size() == read_proto(SHIPPED).max_batch_size.value
    # Only the top-level field counts: not a comment, not max_execution_batch_size.
    path = tmp_path / "batching.txt"
    path.write_text(
        "# max_batch_size { value: 1 }\nmax_execution_batch_size { value: 2 }\n"
        "max_batch_size {\n  value: 7\n}\n"
    )
    assert default_chunk_size(path) == read_proto(path).max_batch_size.value == 7
    with pytest.raises(RuntimeError, match="pass --chunk-size"):
        default_chunk_size(tmp_path / "missing.txt")


def test_the_tf_serving_image_is_pinned_to_the_exports_tensorflow(exported):
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((exported.version_dir / "saved_model.pb").read_bytes())
    exported_by = saved_model.meta_graphs[0].meta_info_def.tensorflow_version
    assert exported_by == tf.__version__
    pinned = re.search(r'"tensorflow==(\d+\.\d+)\.\*"', (REPO / "pyproject.toml").read_text())
    assert pinned is not None and exported_by.startswith(pinned.group(1) + ".")
    images = [
        (path.name, match.group(1))
        for path in sorted(SERVING.iterdir())
        if path.suffix in {".md", ".config", ".txt", ".py"}
        for match in re.finditer(r"tensorflow/serving(?![/\w])(:[\w.-]+)?", path.read_text())
    ]
    assert {name for name, _ in images} >= {"README.md", "models.config"}
    for name, tag in images:
        assert tag is not None, f"{name}: tensorflow/serving without a tag"
        assert re.fullmatch(r":(\d+\.\d+)\.\d+(-\w+)?", tag), f"{name}: {tag}"
        assert tag[1:].split(".")[:2] == exported_by.split(".")[:2], f"{name}: {tag}"


def test_the_export_writes_tf_servings_warmup_requests(exported):
    """Read as TF Serving reads it: TFRecord of PredictionLog, one request per signature."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow_serving.apis import prediction_log_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((exported.version_dir / "saved_model.pb").read_bytes())
    signature_defs = saved_model.meta_graphs[0].signature_def
    signatures = {k: v for k, v in signature_defs.items() if not k.startswith("__")}  # init op
    records = list(tf.data.TFRecordDataset(str(exported.version_dir / WARMUP)))
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in records]
    assert [log.WhichOneof("log_type") for log in logs] == ["predict_log"] * len(logs)
    requests = [log.predict_log.request for log in logs]
    names = [request.model_spec.signature_name for request in requests]
    assert sorted(names) == sorted(signatures) and len(names) == 7
    for name, request in zip(names, requests, strict=True):
        assert request.model_spec.name == ""  # any --model_name serves it
        assert sorted(request.inputs) == sorted(signatures[name].inputs)
        values = {key: tf.make_ndarray(tensor).tolist() for key, tensor in request.inputs.items()}
        sentences = values.pop("inputs")
        assert 1 < len(sentences) <= 8 and any(s.strip() for s in sentences)  # short, real
        for other in values.values():  # a tag or a prefix: "" (the export's own, none)
            assert other == [b""] * len(sentences)


class Recorder:
    """A fake model: records what it runs; fails where told to."""

    def __init__(self, fail: str = ""):
        self.calls: list[tuple[str, list]] = []
        self.fail = fail

    def __call__(self, signature, rows):
        if signature == self.fail:
            raise RuntimeError("InvalidArgument: unknown tag\n  [[node ...]]")
        self.calls.append((signature, list(rows)))
        return {}


INPUT_KEYS = {
    "serving_default": ("inputs",),
    "n_best": ("inputs",),
    "tagged": ("inputs", "tags"),
    "tagged_n_best": ("inputs", "tags"),
    "prefixed": ("inputs", "prefixes"),
    "sample": ("inputs",),
    "aligned": ("inputs",),
}


def test_serve_replays_each_warmup_request_as_a_request_of_rows(exported, tmp_path):
    from serving.model import replay_warmup
    from translator.warmup import WarmupError, WarmupRequest, write_warmup_requests

    run = Recorder()
    line = replay_warmup(exported.version_dir, INPUT_KEYS, run)
    assert sorted(signature for signature, _ in run.calls) == sorted(INPUT_KEYS)
    for signature, rows in run.calls:
        assert len(rows) == 3
        if len(INPUT_KEYS[signature]) == 1:
            assert all(isinstance(row, bytes) for row in rows)
        else:  # the signature's input order, the extra input ""
            assert all(isinstance(row, tuple) and row[1] == b"" for row in rows)
    assert f"warmed up with 7 requests (21 sentences) of {exported.version_dir / WARMUP}" in line

    # An export older than the file: said so, and each signature warmed with one sentence.
    run = Recorder()
    line = replay_warmup(tmp_path, INPUT_KEYS, run)
    assert line.startswith(f"no warm-up requests: {tmp_path / WARMUP} is missing")
    assert [(s, len(rows)) for s, rows in run.calls] == [(s, 1) for s in INPUT_KEYS]

    # A request the model cannot take, or one it fails on: the file and record are named.
    (tmp_path / "assets.extra").mkdir()
    requests = [
        WarmupRequest("serving_default", {"inputs": (b"a",)}),
        WarmupRequest("nope", {"inputs": (b"a",)}),
    ]
    write_warmup_requests(tmp_path / WARMUP, requests)
    with pytest.raises(WarmupError, match=r"/tf_serving_warmup_requests: record 1 \(nope\): the"):
        replay_warmup(tmp_path, INPUT_KEYS, Recorder())
    requests[1] = WarmupRequest("tagged", {"inputs": (b"a",)})
    write_warmup_requests(tmp_path / WARMUP, requests)
    with pytest.raises(WarmupError, match=r"record 1 \(tagged\): inputs inputs; the signature"):
        replay_warmup(tmp_path, INPUT_KEYS, Recorder())
    requests[1] = WarmupRequest("tagged", {"inputs": (b"a",), "tags": (b"<2xx>",)})
    write_warmup_requests(tmp_path / WARMUP, requests)
    with pytest.raises(WarmupError, match=r"record 1 \(tagged\): the model failed on it: Inv"):
        replay_warmup(tmp_path, INPUT_KEYS, Recorder(fail="tagged"))


def test_a_corrupt_warmup_file_stops_serve_with_one_line_naming_it(exported, tmp_path, capsys):
    from translator.warmup import WarmupError, read_warmup_requests

    base = tmp_path / "export"
    shutil.copytree(exported.base, base)
    path = base / exported.version_dir.name / WARMUP
    path.write_bytes(path.read_bytes()[:-5])  # a truncated last record
    with pytest.raises(WarmupError, match=f"^{re.escape(str(path))}: not a readable TFRecord"):
        read_warmup_requests(path)
    path.write_bytes(b"\x00" * 12 + b"not a record")
    code = cli_main(["serve", "--model", str(base), "--port", str(free_port())])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"translator serve: error: {path}: "), err
