"""TF Serving's gRPC API for one model: `PredictionService` and `ModelService`.

The services and messages are `tensorflow-serving-api`'s own (the stubs production
clients use), so a client written for TF Serving talks to `translator serve --grpc-port`
unchanged:

    PredictionService.Predict            every string-vector signature of the export, and
                                         the server's `html` (serving.markup)
    PredictionService.GetModelMetadata   the SignatureDefs (metadata_field "signature_def")
    ModelService.GetModelStatus          the served version, AVAILABLE while serving

A predict request goes through the same `Predictor` as a REST one (limits, `--tag`, the
batcher), so sentences of gRPC and REST requests are decoded in the same batches. Errors
carry TF Serving's status codes and messages (its predict_util.cc, get_model_status_impl.cc
and get_model_metadata_impl.cc): NOT_FOUND for another model or version,
FAILED_PRECONDITION for an unknown signature, INVALID_ARGUMENT for inputs that do not fit
the signature, RESOURCE_EXHAUSTED over a size limit (gRPC's own for the message size),
UNAVAILABLE when the queue is full or the server stops, INTERNAL if the model fails,
DEADLINE_EXCEEDED past the client's deadline. Inputs are string vectors whose shape
matches their values exactly (TF Serving would also repeat a last value to fill a longer
shape; this server refuses that as INVALID_ARGUMENT).
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Mapping

import grpc
import numpy as np
from google.protobuf import any_pb2
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.protocol import RequestError, Row
from serving.service import Predictor
from translator.signatures import SERVING_SIGNATURE

logger = logging.getLogger(__name__)

# The gRPC code of each HTTP status a `RequestError` carries.
STATUS_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}
# Requests handled at once; each waits on the batcher while its sentences are decoded,
# so this many clients can have their sentences in one batch. gRPC refuses more at once
# (RESOURCE_EXHAUSTED) rather than queue them where the batcher's limit cannot see them.
MAX_WORKERS = 64
SIGNATURE_DEF_FIELD = "signature_def"


class _RefusedError(Exception):
    """A request the API refuses with `code` and `message`."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _refuse(error: RequestError) -> _RefusedError:
    code = STATUS_CODES.get(error.status, grpc.StatusCode.INVALID_ARGUMENT)
    return _RefusedError(code, error.message)


class GrpcService(
    prediction_service_pb2_grpc.PredictionServiceServicer,
    model_service_pb2_grpc.ModelServiceServicer,
):
    """The handlers; Classify, Regress, MultiInference and reloads answer UNIMPLEMENTED."""

    def __init__(self, predictor: Predictor):
        self.predictor = predictor
        self.model = predictor.model

    def _model_spec(self, spec) -> None:
        """Checks a request's `ModelSpec` names this model (and version, if any)."""
        if not spec.name:
            raise _RefusedError(grpc.StatusCode.INVALID_ARGUMENT, "Missing model name in request.")
        choice = spec.WhichOneof("version_choice")
        version = str(spec.version.value) if choice == "version" else None
        label = spec.version_label if choice == "version_label" else None
        try:
            self.predictor.find(spec.name, version, label)
        except RequestError as error:
            raise _refuse(error) from None

    def Predict(self, request, context):  # noqa: N802 (the service's method name)
        try:
            return self._predict(request, context.time_remaining())
        except _RefusedError as refused:
            context.abort(refused.code, refused.message)
        except Exception as error:  # a bug here: the client still gets one clear line
            logger.exception("Predict failed")
            context.abort(grpc.StatusCode.INTERNAL, f"Predict failed: {error}")

    def _predict(self, request, seconds: float | None) -> predict_pb2.PredictResponse:
        self._model_spec(request.model_spec)
        signature = request.model_spec.signature_name or SERVING_SIGNATURE
        info = self.predictor.signatures.get(signature)
        if info is None:
            raise _RefusedError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f'Serving signature key "{signature}" not found. The model has '
                f"{', '.join(sorted(self.predictor.signatures))}",
            )
        rows = parse_inputs(request.inputs, info.input_keys)
        keys = _output_keys(request.output_filter, info.output_keys)
        try:
            future = self.predictor.submit(signature, rows)
        except RequestError as error:
            raise _refuse(error) from None
        try:
            outputs = future.result(timeout=seconds)  # the client's deadline, if it set one
        except concurrent.futures.TimeoutError:
            raise _RefusedError(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the translation did not finish in time"
            ) from None
        except Exception as error:  # the model failed on this batch
            raise _RefusedError(grpc.StatusCode.INTERNAL, f"the model failed: {error}") from None
        response = predict_pb2.PredictResponse()
        response.model_spec.name = self.model.name
        response.model_spec.signature_name = signature
        response.model_spec.version.value = self.model.version
        for key in keys:
            response.outputs[key].CopyFrom(tensor_proto(outputs[key]))
        return response

    def GetModelMetadata(self, request, context):  # noqa: N802
        try:
            self._model_spec(request.model_spec)
            if not request.metadata_field:
                raise _RefusedError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "GetModelMetadataRequest must specify at least one metadata_field",
                )
            for field in request.metadata_field:
                if field != SIGNATURE_DEF_FIELD:
                    raise _RefusedError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"Metadata field {field} is not supported",
                    )
        except _RefusedError as refused:
            context.abort(refused.code, refused.message)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        for name, signature_def in self.predictor.signature_def_protos.items():
            signatures.signature_def[name].CopyFrom(signature_def)
        packed = any_pb2.Any()
        packed.Pack(signatures)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = self.model.name
        response.model_spec.version.value = self.model.version
        response.metadata[SIGNATURE_DEF_FIELD].CopyFrom(packed)
        return response

    def GetModelStatus(self, request, context):  # noqa: N802
        spec = request.model_spec
        if not spec.name:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Missing model name in request.")
        if spec.name != self.model.name:
            context.abort(
                grpc.StatusCode.NOT_FOUND, f"Could not find any versions of model {spec.name}"
            )
        if spec.HasField("version") and spec.version.value != self.model.version:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"Could not find version {spec.version.value} of model {spec.name}",
            )
        states = get_model_status_pb2.ModelVersionStatus.State
        response = get_model_status_pb2.GetModelStatusResponse()
        status = response.model_version_status.add()
        status.version = self.model.version
        status.state = states.AVAILABLE if self.predictor.batcher.alive else states.END
        return response


def parse_inputs(inputs: Mapping[str, tensor_pb2.TensorProto], keys: tuple[str, ...]) -> list[Row]:
    """The sentences of a request's input tensors, each a string vector [batch].

    Args:
        inputs: The request's tensors by input name.
        keys: The signature's input keys, sentences first.

    Returns:
        One `Row` per sentence: its bytes, or a tuple of each input's bytes in `keys` order.

    Raises:
        _RefusedError: INVALID_ARGUMENT, naming the input and what does not fit.
    """
    if set(inputs) != set(keys):
        extra = sorted(set(inputs) - set(keys))
        missing = sorted(set(keys) - set(inputs))
        raise _RefusedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"input size does not match signature: {len(inputs)}!={len(keys)} "
            f"len({{{','.join(sorted(inputs))}}}) != len({{{','.join(sorted(keys))}}}). "
            f"Sent extra: {{{','.join(extra)}}}. Missing but required: {{{','.join(missing)}}}.",
        )
    columns = [_strings(key, inputs[key]) for key in keys]
    for key, column in zip(keys[1:], columns[1:], strict=True):
        if len(column) != len(columns[0]):
            raise _RefusedError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"input {key!r} has {len(column)} values and {keys[0]!r} {len(columns[0])}; "
                "give one per sentence",
            )
    if len(keys) == 1:
        return list(columns[0])
    return list(zip(*columns, strict=True))


def _strings(key: str, tensor: tensor_pb2.TensorProto) -> list[bytes]:
    """A DT_STRING tensor of shape [batch] as its values."""
    if tensor.dtype != types_pb2.DT_STRING:
        name = types_pb2.DataType.Name(tensor.dtype)
        raise _RefusedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"input {key!r}: expects a string tensor (DT_STRING) but {name} is provided",
        )
    dims = [dim.size for dim in tensor.tensor_shape.dim]
    values = list(tensor.string_val)
    if tensor.tensor_shape.unknown_rank or len(dims) != 1:
        raise _RefusedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"input {key!r}: expects shape [batch] (one string per sentence), got "
            f"{'unknown rank' if tensor.tensor_shape.unknown_rank else dims}",
        )
    if dims[0] != len(values):
        raise _RefusedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"input {key!r}: its shape [{dims[0]}] does not match its {len(values)} values",
        )
    if not values:
        raise _RefusedError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"input {key!r} is empty; send at least one sentence",
        )
    return values


def _output_keys(output_filter, output_keys: tuple[str, ...]) -> tuple[str, ...]:
    """The outputs a request asks for (all when its output_filter is empty)."""
    for index, alias in enumerate(output_filter):
        if alias not in output_keys:
            raise _RefusedError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"output tensor alias not found in signature: {alias} Outputs expected to be "
                f"in the set {{{','.join(output_keys)}}}.",
            )
        if alias in output_filter[:index]:
            raise _RefusedError(
                grpc.StatusCode.INVALID_ARGUMENT, f"duplicate output tensor alias: {alias}"
            )
    return tuple(output_filter) or output_keys


def tensor_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """A numpy output (bytes or float32) as TF Serving writes it: values in the typed field."""
    proto = tensor_pb2.TensorProto()
    proto.tensor_shape.CopyFrom(
        tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in array.shape]
        )
    )
    if array.dtype == object or array.dtype.kind == "S":
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(array.ravel().tolist())
    elif array.dtype == np.float32:
        proto.dtype = types_pb2.DT_FLOAT
        proto.float_val.extend(array.ravel().tolist())
    else:  # pragma: no cover (the export's outputs are strings and float32 scores)
        raise TypeError(f"no TensorProto field for an output of dtype {array.dtype}")
    return proto


def start_grpc_server(predictor: Predictor, host: str, port: int) -> grpc.Server:
    """Starts the gRPC API on `host:port`, its handlers on a pool of `MAX_WORKERS` threads.

    A message over `predictor.limits.max_bytes` is refused by gRPC itself
    (RESOURCE_EXHAUSTED), as a REST body over it gets 413.

    Raises:
        OSError: the address cannot be listened on.
    """
    server = grpc.server(
        concurrent.futures.ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="grpc"),
        options=[
            ("grpc.max_receive_message_length", predictor.limits.max_bytes),
            ("grpc.so_reuseport", 0),  # a port in use is an error, not shared
        ],
        maximum_concurrent_rpcs=MAX_WORKERS,
    )
    service = GrpcService(predictor)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(service, server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(service, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as error:  # grpcio >= 1.60 raises instead of returning 0
        raise OSError(f"could not listen for gRPC on {host}:{port}: {error}") from None
    if not bound:
        raise OSError(f"could not listen for gRPC on {host}:{port}")
    server.start()
    return server
