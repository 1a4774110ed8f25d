"""A TF Serving gRPC client for the translator model, with tensorflow-serving-api's stubs.

What `python -m serving.client --grpc HOST:PORT` runs; the answers have the shape of the
REST client's (`serving.client.translate`), so both print alike.
"""

from __future__ import annotations

from typing import Any

import grpc
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from translator.signatures import signature_of


def string_tensor(values: list[str]) -> tensor_pb2.TensorProto:
    """A DT_STRING vector [len(values)] of UTF-8 strings."""
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(values))]
        ),
        string_val=[value.encode("utf-8") for value in values],
    )


def _values(tensor: tensor_pb2.TensorProto) -> list[Any]:
    """An output tensor as nested lists of str or float (TensorFlow's own reading of it)."""
    import numpy as np
    import tensorflow as tf  # loaded already: the protos above belong to its package

    array = tf.make_ndarray(tensor)
    if array.dtype == object:
        decode = np.vectorize(lambda b: b.decode("utf-8", errors="replace"), otypes=[object])
        array = decode(array) if array.size else array
    return array.tolist()


def translate(
    sentences: list[str],
    target: str,
    name: str = "translator",
    n_best: bool = False,
    tag: str = "",
    chunk_size: int | None = None,
    timeout: float = 60,
) -> list[dict[str, Any]]:
    """Translates sentences over gRPC; one `{"translations": ..., "scores": ...}` each.

    Args:
        sentences: The sentences.
        target: The server's gRPC address, HOST:PORT.
        name: The model name.
        n_best: Every hypothesis (lists, best first), not only the best.
        tag: A tag for every sentence (the tagged signatures run); "" for none.
        chunk_size: Most sentences per request (None: one request).
        timeout: Seconds per request.

    Raises:
        RuntimeError: the server refused a request; the message has its gRPC code.
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    step = chunk_size or max(len(sentences), 1)
    predictions: list[dict[str, Any]] = []
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for start in range(0, len(sentences), step):
            chunk = sentences[start : start + step]
            request = predict_pb2.PredictRequest()
            request.model_spec.name = name
            request.model_spec.signature_name = signature_of(n_best, bool(tag))
            request.inputs["inputs"].CopyFrom(string_tensor(chunk))
            if tag:
                request.inputs["tags"].CopyFrom(string_tensor([tag] * len(chunk)))
            try:
                response = stub.Predict(request, timeout=timeout)
            except grpc.RpcError as error:
                raise RuntimeError(f"gRPC {error.code().name}: {error.details()}") from None
            columns = {key: _values(tensor) for key, tensor in response.outputs.items()}
            predictions += [
                {key: columns[key][i] for key in sorted(columns)} for i in range(len(chunk))
            ]
    return predictions


def status(target: str, name: str = "translator", timeout: float = 60) -> dict[str, Any]:
    """`ModelService.GetModelStatus`, as the REST status route's JSON.

    Raises:
        RuntimeError: the server refused; the message has its gRPC code.
    """
    from google.protobuf import json_format

    with grpc.insecure_channel(target) as channel:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = name
        try:
            response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                request, timeout=timeout
            )
        except grpc.RpcError as error:
            raise RuntimeError(f"gRPC {error.code().name}: {error.details()}") from None
    return json_format.MessageToDict(response, preserving_proto_field_name=True)
