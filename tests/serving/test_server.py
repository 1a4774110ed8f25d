"""`translator serve` as a real process on 127.0.0.1, spoken to with the stdlib only.

The shutdown test stops the session's server, so it comes last in this file.
"""

import concurrent.futures
import http.client
import json
import random
import re
import signal
import time

import pytest

from serving.process import ServerProcess, free_port
from tests.support.serving import MAX_REQUEST_SENTENCES, PREFIXES, SENTENCES, TAGS
from translator.cli import main as cli_main

PREDICT = "/v1/models/translator:predict"
# Scores of a sentence decoded in a batch with other requests' sentences differ from
# those of the sentence alone in the last float32 bits (other padding widths and shapes
# change the order of floating-point sums); translations are the same.
BATCHING_SCORE_TOLERANCE = 1e-4


def test_status_metadata_and_health(server):
    available = {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert server.get("/v1/models/translator") == (200, available)
    assert server.get("/v1/models/translator/versions/1") == (200, available)

    status, body = server.get("/v1/models/translator/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": "translator", "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    for name, width in (("serving_default", None), ("n_best", "3")):
        signature = signatures[name]
        assert signature["method_name"] == "tensorflow/serving/predict"
        assert signature["inputs"]["inputs"]["dtype"] == "DT_STRING"
        assert signature["outputs"]["translations"]["dtype"] == "DT_STRING"
        assert signature["outputs"]["scores"]["dtype"] == "DT_FLOAT"
        dims = [d["size"] for d in signature["outputs"]["scores"]["tensor_shape"]["dim"]]
        assert dims == (["-1"] if width is None else ["-1", width])

    status, body = server.get("/healthz")
    assert status == 200 and body["status"] == "ok" and body["version"] == "1"


def test_predictions_equal_the_saved_model(server, reference):
    """A request alone on the server is one batch of exactly its sentences: equal results."""
    batch, n_best = reference["batch"], reference["batch_n_best"]
    rows = [
        {"scores": s, "translations": t}
        for s, t in zip(batch["scores"], batch["translations"], strict=True)
    ]
    assert server.post(PREDICT, {"instances": SENTENCES}) == (200, {"predictions": rows})
    assert server.post(PREDICT, {"inputs": SENTENCES}) == (200, {"outputs": batch})
    # The other spellings TF Serving accepts give the same answer.
    import base64

    as_objects = [{"inputs": s} for s in SENTENCES]
    as_b64 = [{"b64": base64.b64encode(s.encode()).decode()} for s in SENTENCES]
    for body in (
        {"instances": as_objects, "signature_name": "serving_default"},
        {"instances": as_b64},
        {"inputs": {"inputs": SENTENCES}},
    ):
        assert server.post(PREDICT, body)[1] in ({"predictions": rows}, {"outputs": batch})
    assert server.post("/v1/models/translator/versions/1:predict", {"inputs": SENTENCES}) == (
        200,
        {"outputs": batch},
    )
    # The n-best signature; empty slots and empty sentences carry -Infinity scores.
    status, body = server.post(PREDICT, {"signature_name": "n_best", "inputs": SENTENCES})
    assert status == 200 and body == {"outputs": n_best}
    assert body["outputs"]["scores"][SENTENCES.index("")][1] == float("-inf")


def test_tagged_requests_equal_the_saved_model(server, reference):
    """The `tagged` signature, each sentence with its own tag, in both request formats."""
    mixed = reference["tagged_mixed"]
    tags = mixed["tags"]
    rows = [{"inputs": s, "tags": t} for s, t in zip(SENTENCES, tags, strict=True)]
    want = {"scores": mixed["scores"], "translations": mixed["translations"]}
    status, body = server.post(PREDICT, {"signature_name": "tagged", "instances": rows})
    assert status == 200
    assert [p["translations"] for p in body["predictions"]] == want["translations"]
    assert [p["scores"] for p in body["predictions"]] == want["scores"]
    columns = {"inputs": SENTENCES, "tags": tags}
    body = {"signature_name": "tagged", "inputs": columns}
    assert server.post(PREDICT, body) == (200, {"outputs": want})
    # "" is the export's own tag (none here): the untagged translation.
    untagged = {"inputs": SENTENCES, "tags": [""] * len(SENTENCES)}
    body = {"signature_name": "tagged", "inputs": untagged}
    assert server.post(PREDICT, body) == (200, {"outputs": reference["batch"]})


def test_prefixed_and_sample_requests_equal_the_saved_model(server, reference):
    rows = [{"inputs": s, "prefixes": p} for s, p in zip(SENTENCES, PREFIXES, strict=True)]
    status, body = server.post(PREDICT, {"signature_name": "prefixed", "instances": rows})
    want = reference["prefixed"]
    assert status == 200
    assert [p["translations"] for p in body["predictions"]] == want["translations"]
    assert [p["scores"] for p in body["predictions"]] == want["scores"]
    body = {"signature_name": "sample", "inputs": SENTENCES}
    assert server.post(PREDICT, body) == (200, {"outputs": reference["sample"]})


def test_serve_tag_tags_the_requests_that_name_no_tag(exported, reference, tmp_path):
    log, options = tmp_path / "serve.log", ("--target-lang", "en", "--no-split")
    with ServerProcess(exported.base, log, *options) as tagged:
        tagged.wait_ready()
        status, body = tagged.post(PREDICT, {"inputs": SENTENCES})
        assert (status, body) == (200, {"outputs": reference["tagged"]["<2en>"]})
        assert body["outputs"] != reference["batch"]  # not what the untagged model says
        rows = [{"inputs": s, "tags": "<2de>"} for s in SENTENCES]  # a request's own tag wins
        status, body = tagged.post(PREDICT, {"signature_name": "tagged", "instances": rows})
        want = reference["tagged"]["<2de>"]["translations"]
        assert status == 200 and [p["translations"] for p in body["predictions"]] == want
    assert "untagged requests tagged <2en>" in tagged.log()


def test_concurrent_clients_get_their_own_answers(server, reference):
    single = reference["single"]  # each sentence translated alone
    clients, rounds = 16, 6
    before = server.get("/healthz")[1]

    def client(number: int) -> int:
        rng = random.Random(number)
        sent = 0
        for _ in range(rounds):
            picks = rng.sample(range(len(SENTENCES)), rng.randint(1, 3))
            status, body = server.post(PREDICT, {"instances": [SENTENCES[i] for i in picks]})
            assert status == 200, body
            assert len(body["predictions"]) == len(picks)
            for index, prediction in zip(picks, body["predictions"], strict=True):
                want = single[index]
                assert prediction["translations"] == want["translations"][0]
                assert abs(prediction["scores"] - want["scores"][0]) <= BATCHING_SCORE_TOLERANCE
            sent += len(picks)
        return sent

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        sent = sum(pool.map(client, range(clients)))
    after = server.get("/healthz")[1]
    # Every sentence was decoded exactly once, and requests were merged into batches.
    assert after["sentences"] - before["sentences"] == sent
    assert after["requests"] - before["requests"] == clients * rounds
    assert after["batches"] - before["batches"] < clients * rounds
    # The translations differ from sentence to sentence, so a mix-up could not pass.
    texts = [s["translations"][0] for s in single]
    assert len(set(texts) - {""}) == sum(1 for t in texts if t)


BAD_REQUESTS = [
    (b'{"instances": ["a"', 400, "malformed JSON in the request body"),
    (b'{"instances": ["\xff"]}', 400, "not UTF-8"),
    (b'["a"]', 400, "must be a JSON object"),
    (
        {"instance": ["a"]},
        400,
        "missing 'instances' or 'inputs' key in the request; got key(s) 'instance'",
    ),
    ({"instances": ["a"], "input": ["b"]}, 400, "unknown key(s) 'input'"),
    ({"instances": ["a"], "inputs": ["a"]}, 400, "not both"),
    ({"instances": "a"}, 400, "'instances' must be a list of strings, got a string"),
    ({"instances": ["a", 5]}, 400, "instances[1]: expected a string, got number 5"),
    ({"instances": [None]}, 400, "instances[0]: expected a string, got null"),
    ({"inputs": [["a"]]}, 400, "inputs[0]: expected a string, got a list of 1"),
    ({"instances": [{"text": "a"}]}, 400, "exactly the key 'inputs', got 'text'"),
    ({"inputs": {"text": ["a"]}}, 400, "exactly the key 'inputs', got 'text'"),
    ({"instances": [{"b64": "*"}]}, 400, "instances[0]: invalid base64"),
    # Bytes that are not UTF-8 (b"\xff\xfe bad"): refused, not read as some other text.
    ({"instances": ["a", {"b64": "//4gYmFk"}]}, 400, "sentence 1: not UTF-8 text"),
    ({"instances": []}, 400, "'instances' is an empty list"),
    ({"inputs": []}, 400, "inputs is an empty list"),
    ({"instances": ["a"], "signature_name": "nope"}, 400, 'signature name: "nope" not found'),
    (
        {"instances": ["a"], "signature_name": "tagged"},
        400,
        "instances[0]: the signature takes 2 inputs, so it must be an object with the keys "
        "'inputs', 'tags'; got a string",
    ),
    (
        {"inputs": {"inputs": ["a", "b"], "tags": [""]}, "signature_name": "tagged"},
        400,
        "inputs.tags has 1 values and inputs.inputs 2; give one per sentence",
    ),
    (
        {"instances": [{"inputs": "a", "tags": "<2fr>"}], "signature_name": "tagged_n_best"},
        400,
        "sentence 0: unknown tag '<2fr>'; the model's tags: <2de>, <2en>",
    ),
    (
        {"instances": ["a"] * (MAX_REQUEST_SENTENCES + 1)},
        413,
        f"{MAX_REQUEST_SENTENCES + 1} sentences, more than the limit of {MAX_REQUEST_SENTENCES}",
    ),
    ({"instances": ["x" * 5000]}, 413, "more than the limit of 4,096 bytes"),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD_REQUESTS)
def test_bad_request_gets_a_4xx_error_saying_what_is_wrong(server, body, status, message):
    got_status, got = server.post(PREDICT, body)
    assert got_status == status
    assert list(got) == ["error"] and message in got["error"], got


def test_bad_urls_and_the_server_keeps_serving(server, reference):
    assert server.get("/v1/models/other") == (
        404,
        {"error": "Servable not found for request: Latest(other)"},
    )
    status, body = server.post("/v1/models/translator/versions/2:predict", {"inputs": ["a"]})
    assert status == 404 and "Specific(translator, 2)" in body["error"]
    assert server.get("/v1/models/translator/labels/stable") == (
        400,
        {"error": "Unrecognized servable version label: stable"},
    )
    assert server.get(PREDICT)[0] == 405
    assert server.post("/v1/models/translator:classify", {"examples": []})[0] == 400
    status, body = server.get("/no/such/path")
    assert status == 404 and "error" in body
    # Still healthy, and still right.
    assert server.get("/healthz")[0] == 200
    status, body = server.post(PREDICT, {"instances": SENTENCES[:1]})
    assert status == 200 and body["predictions"][0] == {
        "scores": reference["single"][0]["scores"][0],
        "translations": reference["single"][0]["translations"][0],
    }


def test_client_example_talks_to_the_server(server, reference):
    from serving.client import call, translate

    predictions = translate(SENTENCES[:3], server.url)
    assert [p["translations"] for p in predictions] == [
        s["translations"][0] for s in reference["single"][:3]
    ]
    n_best = translate(SENTENCES[:1], server.url, n_best=True)
    assert len(n_best[0]["translations"]) == 3
    tagged = translate(SENTENCES[:3], server.url, tag=TAGS[1])
    assert [p["translations"] for p in tagged] == reference["tagged"][TAGS[1]]["translations"][:3]
    with pytest.raises(RuntimeError, match=r"HTTP 404: Servable not found"):
        call(f"{server.url}/v1/models/other:predict", {"instances": ["a"]})


def test_client_sends_stdin_in_requests_the_server_takes_and_prints_in_order(
    server, reference, monkeypatch, capsys
):
    """More lines than the server takes in one request: each chunk within its limit."""
    import io

    from serving.client import main as client_main

    # The sentences that are one line each, three times over: 42 lines, 3 requests.
    picks = [i for i, s in enumerate(SENTENCES) if "\n" not in s] * 3
    assert len(picks) > 2 * MAX_REQUEST_SENTENCES
    before = server.get("/healthz")[1]
    lines = "".join(SENTENCES[i] + "\n" for i in picks)
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    argv = ["--url", server.url, "--chunk-size", str(MAX_REQUEST_SENTENCES)]
    assert client_main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    after = server.get("/healthz")[1]
    # Every request was taken (one over the limit would have failed the client with 413).
    assert after["requests"] - before["requests"] == -(-len(picks) // MAX_REQUEST_SENTENCES)
    assert after["sentences"] - before["sentences"] == len(picks)
    # "SCORE\tTRANSLATION\n" per line, in input order; the random model's translations may
    # hold any character, newlines too, so the whole output is matched at once.
    want = [reference["single"][index] for index in picks]
    pattern = "".join(r"(-?\d+\.\d{3})\t" + re.escape(w["translations"][0]) + "\n" for w in want)
    match = re.fullmatch(pattern, out, flags=re.DOTALL)
    assert match is not None, out
    for score, w in zip(match.groups(), want, strict=True):
        assert abs(float(score) - w["scores"][0]) <= 1e-3  # printed to 3 decimals


def test_serve_warmed_up_with_the_exports_warmup_requests(server, exported):
    path = exported.version_dir / "assets.extra" / "tf_serving_warmup_requests"
    log = server.log()
    assert f"warmed up with 7 requests (21 sentences) of {path} in " in log, log
    assert log.index("warmed up with") < log.index("serving model")


def test_serve_refuses_a_directory_without_a_valid_export(exported, tmp_path, capsys):
    import tensorflow as tf

    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage" / "1").mkdir(parents=True)
    (tmp_path / "garbage" / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    module = tf.Module()
    module.double = tf.function(lambda x: 2 * x, input_signature=[tf.TensorSpec([None])])
    tf.saved_model.save(module, str(tmp_path / "numbers" / "1"), signatures=module.double)
    cases = [
        (tmp_path / "missing", "no such directory"),
        (tmp_path / "empty", "no version directory (a number such as 1/) with a saved_model.pb"),
        (exported.version_dir, "is a SavedModel itself; pass its parent directory"),
        (tmp_path / "garbage", "cannot load the SavedModel"),
        (tmp_path / "numbers", "no 'serving_default' signature taking string tensors"),
    ]
    for path, message in cases:
        code = cli_main(["serve", "--model", str(path), "--port", str(free_port())])
        err = capsys.readouterr().err
        assert code == 2 and "translator serve: error:" in err and message in err, err
    code = cli_main(["serve", "--model", str(exported.base), "--target-lang", "fr"])
    err = capsys.readouterr().err
    assert code == 2 and "--tag <2fr>: unknown tag '<2fr>'; the model's tags: <2de>, <2en>" in err


def test_an_oversized_body_gets_413_and_the_server_keeps_serving(server, reference):
    """10 MB: answered with TF Serving's error shape, not a reset connection.

    urllib sends the whole body before it reads the answer: a server that answers and
    closes early resets its connection. http.client then sends two requests on one
    connection, which stays usable after the refused one.
    """
    body = b'{"instances": ["' + b"x" * (10 << 20) + b'"]}'
    status, answer = server.post(PREDICT, body)
    assert status == 413 and list(answer) == ["error"], answer
    assert f"{len(body):,} bytes, more than the limit of 4,096 bytes" in answer["error"]
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        for request_body, expected in (
            (body, 413),
            (json.dumps({"instances": SENTENCES[:1]}), 200),
        ):
            connection.request("POST", PREDICT, body=request_body)
            response = connection.getresponse()
            answer = json.loads(response.read())
            assert response.status == expected, answer
        assert (
            answer["predictions"][0]["translations"] == (reference["single"][0]["translations"][0])
        )
    finally:
        connection.close()


def test_sigterm_answers_requests_in_flight_then_exits_cleanly(exported, reference, tmp_path):
    """A server of its own: the session's serves the tests that run after this one (under
    `-n 2`, in any order). Started with the defaults, it splits a string into sentences."""
    from serving.grpc_client import translate as translate_grpc
    from serving.process import ServerProcess

    with ServerProcess(
        exported.base, tmp_path / "serve.log", "--batch-timeout-micros", "20000"
    ) as server:
        server.wait_ready()
        # Two sentences of SENTENCES ending in a full stop, as one string: rejoined.
        first, second = [i for i, s in enumerate(SENTENCES) if s.strip().count(".") == 1][:2]
        paragraph = f"{SENTENCES[first].strip()} {SENTENCES[second].strip()}"
        status, body = server.post(PREDICT, {"instances": [paragraph]})
        single = [r["translations"][0] for r in reference["single"]]
        want = f"{single[first]} {single[second]}"
        assert status == 200 and body["predictions"][0]["translations"] == want
        _sigterm_in_flight(server, translate_grpc)


def _sigterm_in_flight(server, translate_grpc) -> None:
    before = server.get("/healthz")[1]["requests"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        future = pool.submit(server.post, PREDICT, {"instances": SENTENCES[:8]})
        over_grpc = pool.submit(translate_grpc, SENTENCES[:6], server.grpc_target)
        deadline = time.monotonic() + 60
        while server.get("/healthz")[1]["requests"] < before + 2:  # both queued
            assert time.monotonic() < deadline
            time.sleep(0.01)
        server.process.send_signal(signal.SIGTERM)
        status, body = future.result(timeout=60)
        answered = over_grpc.result(timeout=60)
    assert status == 200 and len(body["predictions"]) == 8
    assert len(answered) == 6  # the gRPC request in flight was answered too
    assert server.process.wait(timeout=60) == 0
    log = server.log()
    assert "batcher stopped" in log and "Traceback" not in log
