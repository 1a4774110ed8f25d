"""TF Serving's configuration files, read by their protobuf schemas.

`--model_config_file` (`ModelServerConfig`) comes from the `tensorflow-serving-api`
package. Its pip wheel does not ship `session_bundle_config_pb2`, so the schema of
`--batching_parameters_file` (`tensorflow.serving.BatchingParameters`) is declared here
with TF Serving's field names, numbers and types, and parsed by protobuf's own text
format: a file that TF Serving would reject (an unknown field, a wrong type, a broken
brace) is rejected here too, with its line and column.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from translator.errors import ConfigError

_INT64 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
_BOOL = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# tensorflow_serving/servables/tensorflow/session_bundle_config.proto, BatchingParameters:
# (name, number, type, label, message type).
_BATCHING_FIELDS = (
    ("max_batch_size", 1, _MESSAGE, _OPTIONAL, ".google.protobuf.Int64Value"),
    ("batch_timeout_micros", 2, _MESSAGE, _OPTIONAL, ".google.protobuf.Int64Value"),
    ("max_enqueued_batches", 3, _MESSAGE, _OPTIONAL, ".google.protobuf.Int64Value"),
    ("num_batch_threads", 4, _MESSAGE, _OPTIONAL, ".google.protobuf.Int64Value"),
    ("thread_pool_name", 5, _MESSAGE, _OPTIONAL, ".google.protobuf.StringValue"),
    ("allowed_batch_sizes", 6, _INT64, _REPEATED, None),
    ("pad_variable_length_inputs", 7, _BOOL, _OPTIONAL, None),
    # With splitting, max_batch_size is the largest request (the scheduler's
    # input_batch_size_limit) and max_execution_batch_size the largest model call.
    ("enable_large_batch_splitting", 8, _MESSAGE, _OPTIONAL, ".google.protobuf.BoolValue"),
    ("max_execution_batch_size", 9, _MESSAGE, _OPTIONAL, ".google.protobuf.Int64Value"),
)


@functools.cache
def batching_parameters_class() -> type:
    """The `tensorflow.serving.BatchingParameters` message class."""
    from google.protobuf import wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    schema = descriptor_pb2.FileDescriptorProto(
        name="translator/serving/batching_parameters.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = schema.message_type.add(name="BatchingParameters")
    for name, number, kind, label, type_name in _BATCHING_FIELDS:
        field = message.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name
    pool.Add(schema)
    descriptor = pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
    return message_factory.GetMessageClass(descriptor)


def parse_text(path: str | os.PathLike[str], message: Any) -> Any:
    """Parses the text-format proto file at `path` into `message`.

    Raises:
        ConfigError: naming the file, line and column of what TF Serving would reject.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8") as file:
        text = file.read()
    try:
        return text_format.Parse(text, message)
    except text_format.ParseError as error:
        raise ConfigError(f"{path}:{error}") from None


def read_batching_parameters(path: str | os.PathLike[str]) -> Any:
    """The `BatchingParameters` of a TF Serving `--batching_parameters_file`."""
    return parse_text(path, batching_parameters_class()())


def read_model_server_config(path: str | os.PathLike[str]) -> Any:
    """The `ModelServerConfig` of a TF Serving `--model_config_file`.

    Needs tensorflow-serving-api (the dev extra: the tests check the shipped config).
    """
    from tensorflow_serving.config import model_server_config_pb2

    return parse_text(path, model_server_config_pb2.ModelServerConfig())
