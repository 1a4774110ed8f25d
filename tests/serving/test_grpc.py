"""`translator serve`'s gRPC API, spoken to with TF Serving's own stubs (tensorflow-serving-api).

The session's server (tests/conftest.py) answers REST and gRPC at once. Its answers are
compared with the export run alone in a fresh process (`reference`), which
tests/test_export.py compares with `translator translate`, signature by signature.
"""

import concurrent.futures
import random

import grpc
import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.grpc_client import string_tensor
from tests.support.serving import MAX_REQUEST_SENTENCES, PREFIXES, SENTENCES, TAGS
from translator.markup import parse_html

PREDICT = "/v1/models/translator:predict"
# As tests/serving/test_server.py: scores of a sentence batched with others' sentences
# differ in the last float32 bits; translations are the same.
BATCHING_SCORE_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield channel


@pytest.fixture(scope="module")
def stub(channel):
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def predict_request(signature: str = "", name: str = "translator", **inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    for key, values in inputs.items():
        tensor = values if isinstance(values, tensor_pb2.TensorProto) else string_tensor(values)
        request.inputs[key].CopyFrom(tensor)
    return request


def as_lists(response) -> dict:
    """The response's outputs as the REST API's columns: nested lists of str or float."""
    columns = {}
    for key, tensor in response.outputs.items():
        dims = tuple(dim.size for dim in tensor.tensor_shape.dim)
        if tensor.dtype == types_pb2.DT_STRING:
            values = np.array([v.decode("utf-8") for v in tensor.string_val], dtype=object)
        else:
            assert tensor.dtype == types_pb2.DT_FLOAT
            values = np.array(tensor.float_val, dtype=np.float32)
        columns[key] = values.reshape(dims).tolist()
    return columns


def test_every_signature_answers_as_rest_and_as_the_saved_model(server, stub, reference):
    """A request alone on the server is one batch of exactly its sentences: equal results."""
    tags = reference["tagged_mixed"]["tags"]
    cases = [
        ("", {"inputs": SENTENCES}, reference["batch"]),
        ("serving_default", {"inputs": SENTENCES}, reference["batch"]),
        ("n_best", {"inputs": SENTENCES}, reference["batch_n_best"]),
        ("tagged", {"inputs": SENTENCES, "tags": tags}, reference["tagged_mixed"]),
        ("tagged_n_best", {"inputs": SENTENCES, "tags": tags}, None),
        ("prefixed", {"inputs": SENTENCES, "prefixes": PREFIXES}, reference["prefixed"]),
        ("sample", {"inputs": SENTENCES}, reference["sample"]),
        ("aligned", {"inputs": SENTENCES}, reference["aligned"]),
    ]
    for signature, inputs, want in cases:
        response = stub.Predict(predict_request(signature, **inputs), timeout=120)
        got = as_lists(response)
        assert response.model_spec.name == "translator"
        assert response.model_spec.signature_name == (signature or "serving_default")
        assert response.model_spec.version.value == 1
        body = {"signature_name": signature, "inputs": inputs}
        assert server.post(PREDICT, body) == (200, {"outputs": got}), signature
        if want is not None:  # (the reference's outputs, and what it was given)
            assert got == {key: want[key] for key in got}, signature
            assert set(got) == {"translations", "scores"} | ({"alignments"} & set(want))
    # The server's own `html`: the same over both APIs.
    pages = ["<p>" + SENTENCES[0] + " <b>" + SENTENCES[1] + "</b></p>", "<p><i>x</p>"]
    response = stub.Predict(predict_request("html", inputs=pages), timeout=120)
    body = {"signature_name": "html", "inputs": pages}
    assert server.post(PREDICT, body) == (200, {"outputs": as_lists(response)})
    assert as_lists(response)["repairs"][1].startswith("closed <i>")
    # ... each page rendered from its blocks' `aligned` answer (this server splits nothing).
    parsed = [parse_html(page) for page in pages]
    texts = [block.text for page in parsed for block in page.blocks]
    _, aligned = server.post(PREDICT, {"signature_name": "aligned", "inputs": texts})
    outputs = aligned["outputs"]
    found = iter(zip(outputs["translations"], outputs["alignments"], strict=True))
    rendered = []
    for page in parsed:
        pairs = [next(found) for _ in page.blocks]
        rendered.append(page.render([t for t, _ in pairs], [a for _, a in pairs]))
    assert as_lists(response)["translations"] == rendered
    # The version by number, as TF Serving takes it.
    got = as_lists(stub.Predict(versioned(predict_request(inputs=SENTENCES), 1), timeout=120))
    assert got == {
        "scores": reference["batch"]["scores"],
        "translations": reference["batch"]["translations"],
    }
    # output_filter: only the outputs asked for.
    request = predict_request("n_best", inputs=SENTENCES[:2])
    request.output_filter.append("translations")
    response = stub.Predict(request, timeout=120)
    assert list(response.outputs) == ["translations"]
    assert as_lists(response)["translations"] == reference["batch_n_best"]["translations"][:2]


def test_metadata_and_status_as_tf_serving_gives_them(server, stub, channel):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "translator"
    request.metadata_field.append("signature_def")
    response = stub.GetModelMetadata(request, timeout=60)
    assert response.model_spec.name == "translator" and response.model_spec.version.value == 1
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signatures)
    rest = server.get("/v1/models/translator/metadata")[1]["metadata"]["signature_def"]
    assert set(signatures.signature_def) == set(rest["signature_def"])
    n_best = signatures.signature_def["n_best"]
    assert n_best.method_name == "tensorflow/serving/predict"
    assert n_best.inputs["inputs"].dtype == types_pb2.DT_STRING
    assert [d.size for d in n_best.outputs["scores"].tensor_shape.dim] == [-1, 3]
    html = signatures.signature_def["html"]  # the server's own, from `aligned`
    assert set(html.inputs) == {"inputs"} and set(html.outputs) == {"repairs", "translations"}
    assert rest["signature_def"]["html"]["outputs"]["translations"]["dtype"] == "DT_STRING"

    models = model_service_pb2_grpc.ModelServiceStub(channel)
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "translator"
    (status,) = models.GetModelStatus(request, timeout=60).model_version_status
    available = get_model_status_pb2.ModelVersionStatus.State.AVAILABLE
    assert status.version == 1 and status.state == available and status.status.error_code == 0
    request.model_spec.version.value = 2
    with pytest.raises(grpc.RpcError) as raised:
        models.GetModelStatus(request, timeout=60)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert raised.value.details() == "Could not find version 2 of model translator"


def test_concurrent_grpc_and_rest_clients_share_batches(server, reference):
    """16 gRPC clients (each on its own channel, as separate processes would be) and 4 REST
    clients at once: each gets its own sentences' translations, and requests of both APIs
    are decoded together."""
    single = reference["single"]  # each sentence translated alone
    clients, rounds = 16, 4
    before = server.get("/healthz")[1]

    def check(picks: list[int], translations: list, scores: list) -> None:
        for index, text, score in zip(picks, translations, scores, strict=True):
            assert text == single[index]["translations"][0]
            assert abs(score - single[index]["scores"][0]) <= BATCHING_SCORE_TOLERANCE

    def grpc_client(number: int) -> int:
        rng, sent = random.Random(number), 0
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            for _ in range(rounds):
                picks = rng.sample(range(len(SENTENCES)), rng.randint(1, 3))
                request = predict_request(inputs=[SENTENCES[i] for i in picks])
                got = as_lists(stub.Predict(request, timeout=120))
                check(picks, got["translations"], got["scores"])
                sent += len(picks)
        return sent

    def rest_client(number: int) -> int:
        rng, sent = random.Random(1000 + number), 0
        for _ in range(rounds):
            picks = rng.sample(range(len(SENTENCES)), rng.randint(1, 3))
            status, body = server.post(PREDICT, {"inputs": [SENTENCES[i] for i in picks]})
            assert status == 200, body
            check(picks, body["outputs"]["translations"], body["outputs"]["scores"])
            sent += len(picks)
        return sent

    with concurrent.futures.ThreadPoolExecutor(clients + 4) as pool:
        futures = [pool.submit(grpc_client, n) for n in range(clients)]
        futures += [pool.submit(rest_client, n) for n in range(4)]
        sent = sum(future.result() for future in futures)
    after = server.get("/healthz")[1]
    requests = (clients + 4) * rounds
    assert after["requests"] - before["requests"] == requests
    assert after["sentences"] - before["sentences"] == sent
    # Merged: some batch served several requests (how many depends on the machine's load;
    # with batching off every request is its own batch).
    assert after["batches"] - before["batches"] < requests


def versioned(request, version: int | None = None, label: str = ""):
    if version is not None:
        request.model_spec.version.value = version
    if label:
        request.model_spec.version_label = label
    return request


def _tensor(dtype: int, dims: list[int], **values) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape, **values)


BAD_REQUESTS = [
    (
        predict_request(name="other", inputs=["a"]),
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Latest(other)",
    ),
    (predict_request(name="", inputs=["a"]), grpc.StatusCode.INVALID_ARGUMENT, "Missing model"),
    (
        versioned(predict_request(inputs=["a"]), version=2),
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Specific(translator, 2)",
    ),
    (
        versioned(predict_request(inputs=["a"]), label="stable"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Unrecognized servable version label: stable",
    ),
    (
        predict_request("nope", inputs=["a"]),
        grpc.StatusCode.FAILED_PRECONDITION,
        'Serving signature key "nope" not found.',
    ),
    (
        predict_request("tagged", inputs=["a"]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "input size does not match signature: 1!=2 len({inputs}) != len({inputs,tags}). "
        "Sent extra: {}. Missing but required: {tags}.",
    ),
    (
        predict_request(text=["a"]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Sent extra: {text}. Missing but required: {inputs}.",
    ),
    (
        predict_request(inputs=_tensor(types_pb2.DT_FLOAT, [1], float_val=[1.0])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "input 'inputs': expects a string tensor (DT_STRING) but DT_FLOAT is provided",
    ),
    (
        predict_request(inputs=_tensor(types_pb2.DT_STRING, [1, 2], string_val=[b"a", b"b"])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "input 'inputs': expects shape [batch] (one string per sentence), got [1, 2]",
    ),
    (
        predict_request(inputs=_tensor(types_pb2.DT_STRING, [3], string_val=[b"a"])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "its shape [3] does not match its 1 values",
    ),
    (predict_request(inputs=[]), grpc.StatusCode.INVALID_ARGUMENT, "send at least one sentence"),
    (  # bytes that are not UTF-8: refused as REST refuses them, not read as other text
        predict_request(
            inputs=_tensor(types_pb2.DT_STRING, [2], string_val=[b"a", b"\xff\xfe bad"])
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "sentence 1: not UTF-8 text",
    ),
    (
        predict_request("tagged", inputs=["a", "b"], tags=[""]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "input 'tags' has 1 values and 'inputs' 2; give one per sentence",
    ),
    (
        predict_request("tagged_n_best", inputs=["a"], tags=["<2fr>"]),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"sentence 0: unknown tag '<2fr>'; the model's tags: {', '.join(TAGS)}",
    ),
    (
        predict_request(inputs=["a"] * (MAX_REQUEST_SENTENCES + 1)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"{MAX_REQUEST_SENTENCES + 1} sentences, more than the limit of {MAX_REQUEST_SENTENCES}",
    ),
    # Over --max-request-bytes (4096 here): refused by gRPC itself.
    (predict_request(inputs=["x" * 5000]), grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
]


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    BAD_REQUESTS,
    ids=[f"{i}-{code.name.lower()}" for i, (_, code, _) in enumerate(BAD_REQUESTS)],
)
def test_a_bad_request_gets_tf_servings_code_and_the_next_one_is_answered(
    stub, reference, request_, code, message
):
    with pytest.raises(grpc.RpcError) as raised:
        stub.Predict(request_, timeout=60)
    assert raised.value.code() == code
    assert message in raised.value.details(), raised.value.details()
    got = as_lists(stub.Predict(predict_request(inputs=SENTENCES[:1]), timeout=120))
    assert got["translations"] == reference["single"][0]["translations"]


def test_metadata_requests_name_a_supported_field(stub):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "translator"
    for fields, message in (
        ([], "must specify at least one metadata_field"),
        (["signature_def", "graph"], "Metadata field graph is not supported"),
    ):
        del request.metadata_field[:]
        request.metadata_field.extend(fields)
        with pytest.raises(grpc.RpcError) as raised:
            stub.GetModelMetadata(request, timeout=60)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in raised.value.details()


def test_the_client_prints_the_same_over_grpc_as_over_rest(server, capsys):
    from serving.client import main as client_main

    sentences = [s for s in SENTENCES if "\n" not in s][:5]
    outputs = []
    for transport in (["--url", server.url], ["--grpc", server.grpc_target]):
        for extra in ([], ["--n-best"], ["--tag", TAGS[0]]):
            assert client_main([*transport, *extra, *sentences]) == 0, capsys.readouterr().err
            outputs.append(capsys.readouterr().out)
    assert outputs[:3] == outputs[3:]
    assert len(outputs[0].splitlines()) >= len(sentences)
    assert client_main(["--grpc", server.grpc_target, "--name", "other", "a"]) == 1
    assert "gRPC NOT_FOUND: Servable not found" in capsys.readouterr().err


def test_a_grpc_port_in_use_is_one_clear_error(exported, capsys):
    import socket

    from serving.process import free_port
    from translator.cli import main as cli_main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", "--model", str(exported.base), "--port", str(free_port())]
        code = cli_main([*argv, "--grpc-port", str(port)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"could not listen for gRPC on 127.0.0.1:{port}" in err and "--no-grpc" in err, err
