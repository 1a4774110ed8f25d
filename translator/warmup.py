"""An export's warm-up requests: TF Serving's `assets.extra/tf_serving_warmup_requests`.

A signature's first call is slow, so TF Serving and `translator serve` replay this file
(TFRecord of `PredictionLog` predict requests, string inputs `[batch]`) before serving.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from translator.errors import TranslatorError
from translator.signatures import INPUTS_KEY, SERVING_SIGNATURE

# TF Serving's file name, in the version directory's assets.extra/.
WARMUP_FILE = "tf_serving_warmup_requests"
# Two short sentences, so the search stops within a few steps, and an empty one, which a
# batch sets aside. One batch size is enough: no size traces again.
WARMUP_SENTENCES = ("Hello.", "A short sentence.", "")


class WarmupError(TranslatorError, ValueError):
    """The warm-up file is unreadable or does not fit the model; the message names it."""


@dataclasses.dataclass(frozen=True)
class WarmupRequest:
    """One predict request of the warm-up file."""

    signature: str
    # Each input's values by input key, one per sentence (all of one length, at least 1).
    inputs: dict[str, tuple[bytes, ...]]

    @property
    def size(self) -> int:
        """Sentences in the request."""
        return len(next(iter(self.inputs.values())))


def warmup_path(version_dir: str | os.PathLike[str]) -> Path:
    """Where an export version keeps its warm-up requests."""
    return Path(version_dir) / "assets.extra" / WARMUP_FILE


def export_requests(input_keys: Mapping[str, Sequence[str]]) -> list[WarmupRequest]:
    """The export's warm-up: one request per signature, in the order given.

    Args:
        input_keys: Each signature's input keys (string tensors `[batch]`), by name.
    """
    sentences = tuple(sentence.encode("utf-8") for sentence in WARMUP_SENTENCES)
    return [
        WarmupRequest(
            signature,
            {key: sentences if key == INPUTS_KEY else (b"",) * len(sentences) for key in keys},
        )
        for signature, keys in input_keys.items()
    ]


def write_warmup_requests(path: str | os.PathLike[str], requests: Sequence[WarmupRequest]) -> None:
    """Writes `requests` as TF Serving's warm-up file (TFRecord of PredictionLog)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    with tf.io.TFRecordWriter(str(path)) as writer:
        for request in requests:
            predict = predict_pb2.PredictRequest()
            predict.model_spec.signature_name = request.signature
            for key, values in request.inputs.items():
                tensor = predict.inputs[key]
                tensor.dtype = tf.string.as_datatype_enum
                tensor.tensor_shape.dim.add(size=len(values))
                tensor.string_val.extend(values)
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=predict)
            )
            writer.write(log.SerializeToString())


def read_warmup_requests(path: str | os.PathLike[str]) -> list[WarmupRequest]:
    """The requests of a warm-up file, checked as far as no model is needed.

    Raises:
        WarmupError: naming the file (and the record): not TFRecord, not PredictionLog, a
            log other than a predict request, or inputs that are not string vectors of
            one length.
        OSError: the file cannot be read.
    """
    import tensorflow as tf
    from google.protobuf.message import DecodeError
    from tensorflow_serving.apis import prediction_log_pb2

    path = Path(path)
    with open(path, "rb"):  # a missing or unreadable file is an OSError, named by it
        pass
    requests: list[WarmupRequest] = []
    records = iter(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
    while True:
        index = len(requests)
        try:
            record = next(records)
        except StopIteration:
            break
        except tf.errors.OpError as error:  # DataLossError: corrupt or truncated
            # TensorFlow's message without the op's names around it.
            reason = re.sub(r"\{\{.*?\}\}\s*|\s*\[Op:.*", "", error.message.splitlines()[0])
            raise WarmupError(
                f"{path}: not a readable TFRecord file (record {index}: {reason})"
            ) from None
        try:
            log = prediction_log_pb2.PredictionLog.FromString(record)
        except DecodeError as error:
            raise WarmupError(f"{path}: record {index} is not a PredictionLog: {error}") from None
        requests.append(_predict_request(log, f"{path}: record {index}"))
    if not requests:
        raise WarmupError(f"{path}: no warm-up requests in the file")
    return requests


def _predict_request(log, where: str) -> WarmupRequest:
    """The `WarmupRequest` of one PredictionLog; `where` names it in errors."""
    from tensorflow.core.framework import types_pb2

    kind = log.WhichOneof("log_type")
    if kind != "predict_log":
        raise WarmupError(f"{where}: a {kind or 'empty log'}; only predict_log is replayed")
    request = log.predict_log.request
    inputs: dict[str, tuple[bytes, ...]] = {}
    for key, tensor in request.inputs.items():
        dims = [dim.size for dim in tensor.tensor_shape.dim]
        if tensor.dtype != types_pb2.DT_STRING or len(dims) != 1 or dims[0] < 1:
            raise WarmupError(
                f"{where}: input {key!r} must be a non-empty string vector, got "
                f"{types_pb2.DataType.Name(tensor.dtype)} of shape {dims}"
            )
        if len(tensor.string_val) != dims[0]:
            raise WarmupError(
                f"{where}: input {key!r} has shape [{dims[0]}] but {len(tensor.string_val)} values"
            )
        inputs[key] = tuple(tensor.string_val)
    if not inputs:
        raise WarmupError(f"{where}: a request without inputs")
    if len({len(values) for values in inputs.values()}) > 1:
        sizes = ", ".join(f"{key} {len(values)}" for key, values in sorted(inputs.items()))
        raise WarmupError(f"{where}: inputs of different lengths ({sizes})")
    # TF Serving runs a request that names no signature with the default one.
    return WarmupRequest(request.model_spec.signature_name or SERVING_SIGNATURE, inputs)
