"""The served model: the newest version under an export base, loaded with TensorFlow only.

Like TF Serving, `translator serve` is given the export base (`EXPORT_BASE/<version>/`
directories, as `translator export` writes them) and serves the highest version. Loading
needs `tensorflow` and `tensorflow_text` (for the SentencePiece ops), no `translator`
code: any SavedModel whose signatures take string vectors works. An export's
`assets.extra/translator.json`, where there is one, names the tags its tagged signatures
know, so that a request with another tag is refused alone instead of failing its batch.
Before it serves, `warm_up` replays the export's `assets.extra/tf_serving_warmup_requests`,
as TF Serving does (`translator.warmup`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serving.batching import RunFunction  # `ServedModel.run`, or the batcher in front of it
from translator.errors import TranslatorError
from translator.signatures import INPUTS_KEY, SERVING_SIGNATURE, TAGGED_OF, read_metadata
from translator.warmup import WarmupError, read_warmup_requests, warmup_path

SAVED_MODEL_FILE = "saved_model.pb"


class ModelLoadError(TranslatorError, RuntimeError):
    """The export base holds no servable model; the message says what is wrong."""


def find_latest_version(export_base: str | os.PathLike[str]) -> tuple[int, Path]:
    """The highest numeric version directory holding a SavedModel.

    Raises:
        ModelLoadError: naming the path and what is missing.
    """
    base = Path(export_base)
    if not base.exists():
        raise ModelLoadError(f"{base}: no such directory")
    if not base.is_dir():
        raise ModelLoadError(f"{base}: not a directory")
    if (base / SAVED_MODEL_FILE).is_file():
        raise ModelLoadError(
            f"{base} is a SavedModel itself; pass its parent directory, the export base that "
            "holds numbered versions (as TF Serving's model_base_path)"
        )
    versions = sorted(
        (int(p.name), p)
        for p in base.iterdir()
        if p.name.isdigit() and int(p.name) > 0 and (p / SAVED_MODEL_FILE).is_file()
    )
    if not versions:
        raise ModelLoadError(
            f"{base}: no version directory (a number such as 1/) with a {SAVED_MODEL_FILE}; "
            "write one with `translator export --model RUN_DIR --out "
            f"{base}`"
        )
    return versions[-1]


@dataclasses.dataclass(frozen=True)
class SignatureInfo:
    """What the server needs to know about one signature."""

    # The input keys, e.g. ("inputs",), or ("inputs", "tags") for a tagged signature; all
    # string vectors [batch].
    input_keys: tuple[str, ...]
    # Output keys, sorted (TF Serving orders named outputs by name).
    output_keys: tuple[str, ...]


class ServedModel:
    """One loaded SavedModel version and its string-vector signatures.

    Args:
        name: The model name of the REST API (`/v1/models/<name>`).
        export_base: The directory of numbered versions.
    """

    def __init__(self, name: str, export_base: str | os.PathLike[str]):
        self.name = name
        self.version, self.path = find_latest_version(export_base)
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        try:
            self._loaded = tf.saved_model.load(str(self.path))
        except Exception as error:  # TF raises many types; all mean "not loadable"
            raise ModelLoadError(f"{self.path}: cannot load the SavedModel: {error}") from error
        self._functions: dict[str, Any] = {}
        self.signatures: dict[str, SignatureInfo] = {}
        for signature, function in self._loaded.signatures.items():
            info = _string_vector_signature(function)
            if info is not None:
                self._functions[signature] = function
                self.signatures[signature] = info
        if SERVING_SIGNATURE not in self.signatures:
            found = ", ".join(sorted(self._loaded.signatures)) or "none"
            raise ModelLoadError(
                f"{self.path}: no '{SERVING_SIGNATURE}' signature taking string tensors "
                f"[batch] (signatures: {found}); export the model with `translator export`"
            )
        # Every SignatureDef of the SavedModel (`GetModelMetadata`), and as JSON (REST).
        self.signature_def_protos = _signature_def_protos(self.path)
        self.signature_defs = as_json(self.signature_def_protos)
        # What `translator export` recorded (assets.extra/translator.json; {} if none).
        self.metadata: dict[str, Any] = read_metadata(self.path)
        # The tags the tagged signatures take ("" for the export's own); () if unknown.
        self.tags: tuple[str, ...] = tuple(self.metadata.get("tags", ()))

    def tagged(self, signature: str) -> str | None:
        """The tagged signature of an untagged one, if the model has it."""
        tagged = TAGGED_OF.get(signature)
        return tagged if tagged in self.signatures else None

    def unknown_tag(self, tag: bytes) -> str | None:
        """Why the model would refuse `tag` ("" is always taken), or None if it takes it."""
        text = tag.decode("utf-8", errors="replace")
        if not text or not self.tags or text in self.tags:
            return None
        return f"unknown tag {text!r}; the model's tags: {', '.join(self.tags)}"

    def run(self, signature: str, inputs: Sequence[bytes | tuple[bytes, ...]]) -> dict[str, Any]:
        """Runs one signature on a batch of sentences.

        Args:
            signature: A key of `signatures`.
            inputs: The sentences: UTF-8 bytes, or for a signature with several inputs a
                tuple of each input's bytes, in `input_keys` order.

        Returns:
            numpy arrays by output key, each with `len(inputs)` rows.
        """
        import tensorflow as tf

        from translator.backends.graph_options import lean_graph_options

        keys = self.signatures[signature].input_keys
        columns = [inputs] if len(keys) == 1 else list(zip(*inputs, strict=True))
        tensors = {
            key: tf.constant(list(column), tf.string)
            for key, column in zip(keys, columns, strict=True)
        }
        with lean_graph_options():  # the search's graph, optimized as `translate` does
            outputs = self._functions[signature](**tensors)  # each [batch] or [batch, n]
        return {key: value.numpy() for key, value in outputs.items()}

    def warm_up(self, run: RunFunction | None = None) -> str:
        """Replays the export's warm-up requests: the first call of a signature is slow.

        Args:
            run: What runs a request, as for a real one (default: `run`).

        Returns:
            The line to log: how many requests, from where, in how long.

        Raises:
            WarmupError: the file is unreadable, or a request does not fit the model or
                fails; the message names the file and the record.
        """
        input_keys = {name: info.input_keys for name, info in self.signatures.items()}
        return replay_warmup(self.path, input_keys, run or self.run)


def replay_warmup(
    version_dir: Path, input_keys: Mapping[str, tuple[str, ...]], run: RunFunction
) -> str:
    """Runs the warm-up requests of an export version through `run`, in file order.

    An export without the file (older than it) gets one sentence per signature instead.

    Args:
        version_dir: The SavedModel's directory.
        input_keys: The served signatures' input keys (`SignatureInfo.input_keys`).
        run: Runs one signature on a batch of sentences.

    Returns:
        The line to log.

    Raises:
        WarmupError: naming the file and the record.
    """
    path = warmup_path(version_dir)
    start = time.monotonic()
    if not path.is_file():
        for signature, keys in input_keys.items():
            extra = len(keys) - 1  # a tag or prefix: "" (none)
            run(signature, [(b"warm up", *[b""] * extra) if extra else b"warm up"])
        return (
            f"no warm-up requests: {path} is missing (an export older than them); warmed up "
            f"each signature with one sentence in {time.monotonic() - start:.1f} s"
        )
    try:
        requests = read_warmup_requests(path)
    except OSError as error:
        raise WarmupError(f"{path}: cannot read the warm-up requests: {error}") from None
    for index, request in enumerate(requests):
        where = f"{path}: record {index} ({request.signature})"
        keys = input_keys.get(request.signature)
        if keys is None:
            raise WarmupError(
                f"{where}: the model has no such signature taking string vectors (it has "
                f"{', '.join(sorted(input_keys))})"
            )
        if set(request.inputs) != set(keys):
            raise WarmupError(
                f"{where}: inputs {', '.join(sorted(request.inputs))}; the signature takes "
                f"{', '.join(keys)}"
            )
        columns = [request.inputs[key] for key in keys]
        rows = list(columns[0]) if len(keys) == 1 else list(zip(*columns, strict=True))
        try:
            run(request.signature, rows)
        except Exception as error:  # the model refused it, as TF Serving's load would fail
            reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise WarmupError(f"{where}: the model failed on it: {reason}") from error
    sentences = sum(request.size for request in requests)
    return (
        f"warmed up with {len(requests)} requests ({sentences} sentences) of {path} in "
        f"{time.monotonic() - start:.1f} s"
    )


def _string_vector_signature(function: Any) -> SignatureInfo | None:
    """The signature's keys if every input is a string tensor of shape [batch]."""
    import tensorflow as tf

    _, inputs = function.structured_input_signature
    if not inputs:
        return None
    for spec in inputs.values():
        if spec.dtype != tf.string or spec.shape.rank != 1:
            return None
    keys = tuple(inputs)
    if INPUTS_KEY in keys:  # the sentences first, whatever the keys' order in the signature
        keys = (INPUTS_KEY, *(key for key in keys if key != INPUTS_KEY))
    return SignatureInfo(input_keys=keys, output_keys=tuple(sorted(function.structured_outputs)))


def _signature_def_protos(path: Path) -> dict[str, Any]:
    """The SavedModel's `SignatureDef` messages by name, as TF Serving reads them."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((path / SAVED_MODEL_FILE).read_bytes())
    return dict(saved_model.meta_graphs[0].signature_def)


def as_json(signature_defs: Mapping[str, Any]) -> dict[str, Any]:
    """SignatureDefs as JSON (proto field names, defaults printed, as TF Serving's REST)."""
    from google.protobuf import json_format

    options: dict[str, Any] = {"preserving_proto_field_name": True}
    try:  # protobuf >= 5.26 renamed the option that prints fields left at their default
        return {
            name: json_format.MessageToDict(
                signature, always_print_fields_with_no_presence=True, **options
            )
            for name, signature in signature_defs.items()
        }
    except TypeError:  # pragma: no cover
        return {
            name: json_format.MessageToDict(
                signature, including_default_value_fields=True, **options
            )
            for name, signature in signature_defs.items()
        }
