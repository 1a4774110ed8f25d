"""TF Serving's REST predict protocol for string-vector signatures: parsing and formatting.

Requests (https://www.tensorflow.org/tfx/serving/api_rest, Predict API):

    {"signature_name": "n_best",                  optional; default "serving_default"
     "instances": ["A man.", {"b64": "..."}, {"inputs": "A dog."}]}    row format
    {"inputs": ["A man.", "A dog."]}  or  {"inputs": {"inputs": [...]}}  columnar format

A signature with several inputs (the export's `tagged`: `inputs` and `tags`) takes them
by name, as TF Serving does: `{"instances": [{"inputs": "A man.", "tags": "<2de>"}]}` or
`{"inputs": {"inputs": ["A man."], "tags": ["<2de>"]}}`; each sentence is then a tuple
of its inputs' values, in the signature's input order.

Responses: row requests get `{"predictions": [{"scores": ..., "translations": ...}, ...]}`
(one object per instance, as for any signature with several named outputs); columnar
requests get `{"outputs": {"scores": [...], "translations": [...]}}`. A signature with one
output drops the names, as TF Serving does. Floats may be `-Infinity` (an empty n-best
slot), which TF Serving writes too and Python's json module reads. Errors are
`{"error": "<message>"}` with a 4xx status that says whose fault it is.

This module does no I/O and imports neither TensorFlow nor the web stack.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from serving.config import MAX_REQUEST_SENTENCES
from translator.signatures import SERVING_SIGNATURE

ROW_KEY = "instances"
COLUMN_KEY = "inputs"
SIGNATURE_KEY = "signature_name"


class RequestError(Exception):
    """A request the server refuses; `status` is the HTTP status (4xx)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status


@dataclasses.dataclass(frozen=True)
class RequestLimits:
    """Size limits of one predict request."""

    # Most sentences in one request.
    max_sentences: int = MAX_REQUEST_SENTENCES
    # Largest request body, bytes.
    max_bytes: int = 1 << 20


# One sentence of a request: its text (UTF-8, or the decoded b64), or, for a signature
# with several inputs, the value of each input in the signature's order.
Row = bytes | tuple[bytes, ...]


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    """A parsed predict request."""

    signature: str
    # The sentences, in request order.
    inputs: list[Row]
    # True for the columnar ("inputs") format, False for rows ("instances").
    columnar: bool


def _request_object(body: bytes, limits: RequestLimits) -> dict[str, Any]:
    """The request body as a JSON object, within the size limit."""
    if len(body) > limits.max_bytes:
        raise too_large(len(body), limits.max_bytes)
    try:
        request = json.loads(body)
    except UnicodeDecodeError as error:
        raise RequestError(f"the request body is not UTF-8 text: {error}") from error
    except json.JSONDecodeError as error:
        raise RequestError(
            f"malformed JSON in the request body: {error.msg} at line {error.lineno} "
            f"column {error.colno}"
        ) from error
    if not isinstance(request, dict):
        raise RequestError(
            f"the request body must be a JSON object with an {ROW_KEY!r} or {COLUMN_KEY!r} "
            f"key, got {_kind(request)}"
        )
    return request


def _signature(request: dict[str, Any], signatures: Mapping[str, tuple[str, ...]]) -> str:
    """The signature a request names (or the default), after checking its keys."""
    unknown = sorted(set(request) - {SIGNATURE_KEY, ROW_KEY, COLUMN_KEY})
    if ROW_KEY in request and COLUMN_KEY in request:
        raise RequestError(
            f"a request has either {ROW_KEY!r} (row format) or {COLUMN_KEY!r} (columnar "
            "format), not both"
        )
    if ROW_KEY not in request and COLUMN_KEY not in request:
        got = f"; got key(s) {', '.join(map(repr, unknown))}" if unknown else ""
        raise RequestError(f"missing {ROW_KEY!r} or {COLUMN_KEY!r} key in the request{got}")
    if unknown:
        raise RequestError(
            f"unknown key(s) {', '.join(map(repr, unknown))} in the request; expected "
            f"{SIGNATURE_KEY!r} and {ROW_KEY!r} or {COLUMN_KEY!r}"
        )
    signature = request.get(SIGNATURE_KEY, SERVING_SIGNATURE)
    if not isinstance(signature, str):
        raise RequestError(f"{SIGNATURE_KEY!r} must be a string, got {_kind(signature)}")
    signature = signature or SERVING_SIGNATURE
    if signature not in signatures:
        raise RequestError(
            f'Serving signature name: "{signature}" not found in signature def; the model '
            f"has {', '.join(sorted(signatures))}"
        )
    return signature


def parse_predict(
    body: bytes, signatures: Mapping[str, tuple[str, ...]], limits: RequestLimits
) -> PredictRequest:
    """Parses and checks a predict request body.

    Args:
        body: The raw request body.
        signatures: The input keys of each servable signature, by signature name.
        limits: Size limits.

    Returns:
        The `PredictRequest`.

    Raises:
        RequestError: saying what is wrong (400, or 413 over a size limit).
    """
    request = _request_object(body, limits)
    signature = _signature(request, signatures)
    input_keys = signatures[signature]
    if len(input_keys) > 1:
        if ROW_KEY in request:
            inputs = _parse_named_rows(request[ROW_KEY], input_keys)
        else:
            inputs = _parse_named_columns(request[COLUMN_KEY], input_keys)
    elif ROW_KEY in request:
        inputs = _parse_rows(request[ROW_KEY], input_keys[0])
    else:
        inputs = _parse_columns(request[COLUMN_KEY], input_keys[0])
    check_sentence_count(len(inputs), limits)
    return PredictRequest(signature=signature, inputs=inputs, columnar=COLUMN_KEY in request)


def check_sentence_count(count: int, limits: RequestLimits) -> None:
    """Refuses (413) a request of more sentences than the limit."""
    if count > limits.max_sentences:
        raise RequestError(
            f"the request has {count} sentences, more than the limit of "
            f"{limits.max_sentences} per request; split it",
            status=413,
        )


def check_text(inputs: Sequence[Row]) -> None:
    """Refuses (400) a request with a string that is not UTF-8 text, naming its sentence.

    The model would read such bytes as some other text and translate that; both APIs
    refuse it here alike (a REST body must be UTF-8 already, but its b64 values not).
    """
    for index, row in enumerate(inputs):
        for value in row if isinstance(row, tuple) else (row,):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as error:
                raise RequestError(f"sentence {index}: not UTF-8 text ({error})") from None


def too_large(size: int, limit: int, exact: bool = True) -> RequestError:
    """The error for a body of `size` bytes (at least, unless `exact`) over `limit`."""
    amount = f"{size:,} bytes" if exact else f"over {size - 1:,} bytes"
    return RequestError(
        f"the request body has {amount}, more than the limit of {limit:,} bytes",
        status=413,
    )


def _parse_rows(instances: Any, input_key: str) -> list[Row]:
    _check_instances(instances, "strings")
    inputs: list[Row] = []
    for index, instance in enumerate(instances):
        where = f"{ROW_KEY}[{index}]"
        if isinstance(instance, dict) and "b64" not in instance:
            # A named-input object: {"inputs": value}.
            if set(instance) != {input_key}:
                raise RequestError(
                    f"{where}: an object instance must have exactly the key {input_key!r}, "
                    f"got {', '.join(map(repr, instance)) or 'no keys'}"
                )
            instance, where = instance[input_key], f"{where}.{input_key}"
        inputs.append(_string(instance, where))
    return inputs


def _check_instances(instances: Any, what: str) -> None:
    if not isinstance(instances, list):
        raise RequestError(f"{ROW_KEY!r} must be a list of {what}, got {_kind(instances)}")
    if not instances:
        raise RequestError(f"{ROW_KEY!r} is an empty list; send at least one sentence")


def _named(value: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    """`value` as an object with exactly the signature's input keys."""
    if not isinstance(value, dict) or set(value) != set(keys):
        got = _kind(value)
        if isinstance(value, dict):
            got = ", ".join(map(repr, value)) or "no keys"
        raise RequestError(
            f"{where}: the signature takes {len(keys)} inputs, so it must be an object with "
            f"the keys {', '.join(map(repr, keys))}; got {got}"
        )
    return value


def _parse_named_rows(instances: Any, keys: tuple[str, ...]) -> list[Row]:
    _check_instances(instances, "objects (the signature takes several inputs)")
    rows: list[Row] = []
    for index, instance in enumerate(instances):
        where = f"{ROW_KEY}[{index}]"
        values = _named(instance, keys, where)
        rows.append(tuple(_string(values[key], f"{where}.{key}") for key in keys))
    return rows


def _parse_named_columns(columns: Any, keys: tuple[str, ...]) -> list[Row]:
    values = _named(columns, keys, COLUMN_KEY)
    lists = []
    for key in keys:
        where = f"{COLUMN_KEY}.{key}"
        column = values[key]
        if not isinstance(column, list):
            raise RequestError(f"{where} must be a list of strings, got {_kind(column)}")
        if not column:
            raise RequestError(f"{where} is an empty list; send at least one sentence")
        if len(column) != len(values[keys[0]]):
            raise RequestError(
                f"{where} has {len(column)} values and {COLUMN_KEY}.{keys[0]} "
                f"{len(values[keys[0]])}; give one per sentence"
            )
        lists.append([_string(value, f"{where}[{i}]") for i, value in enumerate(column)])
    return list(zip(*lists, strict=True))


def _parse_columns(columns: Any, input_key: str) -> list[Row]:
    where = COLUMN_KEY
    if isinstance(columns, dict) and "b64" not in columns:
        if set(columns) != {input_key}:
            raise RequestError(
                f"{COLUMN_KEY!r} as an object must have exactly the key {input_key!r}, got "
                f"{', '.join(map(repr, columns)) or 'no keys'}"
            )
        columns, where = columns[input_key], f"{COLUMN_KEY}.{input_key}"
    if not isinstance(columns, list):
        raise RequestError(
            f"{where} must be a list of strings (the input is a string tensor [batch]), got "
            f"{_kind(columns)}"
        )
    if not columns:
        raise RequestError(f"{where} is an empty list; send at least one sentence")
    return [_string(value, f"{where}[{index}]") for index, value in enumerate(columns)]


def _string(value: Any, where: str) -> bytes:
    """A JSON string, or TF Serving's {"b64": "..."} binary encoding, as bytes."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate escape such as "\\ud800"
            raise RequestError(f"{where}: not valid Unicode text: {error.reason}") from error
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error as error:
            raise RequestError(f"{where}: invalid base64 in 'b64': {error}") from error
    raise RequestError(f"{where}: expected a string, got {_kind(value)}")


def _kind(value: Any) -> str:
    """A short description of a JSON value for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def format_predict(
    outputs: Mapping[str, np.ndarray], output_keys: tuple[str, ...], columnar: bool
) -> dict[str, Any]:
    """The response body of a predict request.

    Args:
        outputs: Arrays by output key, one row per sentence.
        output_keys: The signature's output keys, in response order.
        columnar: The request's format.

    Returns:
        `{"outputs": ...}` for columnar requests, `{"predictions": [...]}` for rows.
    """
    columns = {key: _to_json(outputs[key]) for key in output_keys}
    if columnar:
        return {"outputs": columns[output_keys[0]] if len(output_keys) == 1 else columns}
    count = len(next(iter(columns.values())))
    if len(output_keys) == 1:
        return {"predictions": columns[output_keys[0]]}
    return {"predictions": [{key: columns[key][i] for key in output_keys} for i in range(count)]}


def _to_json(array: np.ndarray) -> list[Any]:
    """Nested lists of str (UTF-8 decoded) or float, for a numpy output array."""
    if array.dtype == object or array.dtype.kind == "S":
        decode = np.vectorize(lambda b: b.decode("utf-8", errors="replace"), otypes=[object])
        return decode(array).tolist() if array.size else array.tolist()
    return array.tolist()


def dumps(body: Any) -> bytes:
    """JSON bytes; non-finite floats as NaN/Infinity/-Infinity, as TF Serving writes them."""
    return json.dumps(body, ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode()
