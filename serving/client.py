"""A TF Serving client for the translator model: REST (standard library) or gRPC.

    python -m serving.client "A man rides a bike." "Two dogs play in the snow."
    python -m serving.client --n-best < sentences.txt
    python -m serving.client --tag "<2de>" "A man rides a bike."     (a multilingual model)
    python -m serving.client --url http://127.0.0.1:8501 --name translator --status
    python -m serving.client --grpc 127.0.0.1:8500 "A man rides a bike."

It speaks TF Serving's APIs only, so the same client works against `translator serve`
and against TF Serving's image serving the same export (serving/models.config). Over
gRPC (`--grpc`) it uses the stubs of tensorflow-serving-api (`serving.grpc_client`).
It sends the sentences in requests of at most --chunk-size, by default the largest request
both accept with serving/batching_parameters.txt (its max_batch_size), in order.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from translator.constants import NBEST_SEPARATOR
from translator.signatures import signature_of

# The servers' batching parameters, whose max_batch_size is the largest request they take.
BATCHING_PARAMETERS = Path(__file__).resolve().with_name("batching_parameters.txt")
# A top-level `max_batch_size { value: N }` of that text proto, comments removed.
_MAX_BATCH_SIZE = re.compile(r"(?<![\w.])max_batch_size\s*:?\s*\{\s*value\s*:\s*(\d+)\s*\}")


def call(url: str, body: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
    """GET (no body) or POST a JSON body; returns the JSON answer.

    Raises:
        RuntimeError: with the server's `{"error": ...}` message and HTTP status.
    """
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            text = error.read().decode("utf-8", errors="replace")
        try:
            message = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            message = text
        raise RuntimeError(f"HTTP {error.code}: {message}") from None


def default_chunk_size(path: Path = BATCHING_PARAMETERS) -> int:
    """The largest request the servers take: `max_batch_size` of their batching parameters.

    Read with a regular expression (the standard library has no protobuf text format);
    the tests check it against the file read by its schema.

    Raises:
        RuntimeError: the file is missing or sets no max_batch_size.
    """
    try:
        text = path.read_text("utf-8")
    except OSError as error:
        raise RuntimeError(f"{path}: {error.strerror}; pass --chunk-size") from None
    found = _MAX_BATCH_SIZE.search(re.sub(r"#[^\n]*", "", text))
    if found is None:
        raise RuntimeError(f"{path}: no max_batch_size {{ value: N }}; pass --chunk-size")
    return int(found.group(1))


def translate(
    sentences: list[str],
    url: str,
    name: str = "translator",
    n_best: bool = False,
    tag: str = "",
    chunk_size: int | None = None,
) -> list[dict[str, Any]]:
    """Translates sentences; one `{"translations": ..., "scores": ...}` per sentence.

    With `n_best`, each entry holds lists, best first (empty slots: "" and -inf). With a
    `tag` (e.g. <2de>, a multilingual model's target language), the tagged signatures
    run, each sentence with that tag. With a `chunk_size`, the sentences go in requests
    of at most that many, one after another (None: one request).
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    step = chunk_size or max(len(sentences), 1)
    signature = signature_of(n_best, bool(tag))
    predictions: list[dict[str, Any]] = []
    for start in range(0, len(sentences), step):
        chunk = sentences[start : start + step]
        instances: list[Any] = [{"inputs": s, "tags": tag} for s in chunk] if tag else chunk
        body = {"signature_name": signature, "instances": instances}
        predictions += call(f"{url}/v1/models/{name}:predict", body)["predictions"]
    return predictions


def main(argv: list[str] | None = None) -> int:
    """Translates the arguments (or stdin lines) and prints one result per line."""
    parser = argparse.ArgumentParser(prog="python -m serving.client", description=__doc__)
    parser.add_argument("sentences", nargs="*", help="sentences (default: read stdin lines)")
    parser.add_argument("--url", default="http://127.0.0.1:8501", help="server address")
    parser.add_argument(
        "--grpc",
        metavar="HOST:PORT",
        help="send over TF Serving's gRPC API instead, e.g. 127.0.0.1:8500",
    )
    parser.add_argument("--name", default="translator", help="model name (default: translator)")
    parser.add_argument("--n-best", action="store_true", help="print every hypothesis")
    parser.add_argument("--tag", default="", help="tag every sentence, e.g. <2de> (default: none)")
    parser.add_argument(
        "--chunk-size",
        type=int,
        metavar="N",
        help="most sentences per request (default: max_batch_size in "
        f"{BATCHING_PARAMETERS.name}, the largest request the servers take with it)",
    )
    parser.add_argument("--status", action="store_true", help="print the model status and exit")
    args = parser.parse_args(argv)
    try:
        if args.status and args.grpc:
            from serving.grpc_client import status

            print(json.dumps(status(args.grpc, args.name), indent=2))
            return 0
        if args.status:
            print(json.dumps(call(f"{args.url}/v1/models/{args.name}"), indent=2))
            return 0
        if args.chunk_size is not None and args.chunk_size < 1:
            parser.error(f"--chunk-size must be >= 1, got {args.chunk_size}")
        sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
        chunk_size = args.chunk_size or default_chunk_size()
        if args.grpc:
            from serving.grpc_client import translate as translate_grpc

            predictions = translate_grpc(
                sentences, args.grpc, args.name, args.n_best, args.tag, chunk_size
            )
        else:
            predictions = translate(
                sentences, args.url, args.name, args.n_best, args.tag, chunk_size
            )
        for prediction in predictions:
            if args.n_best:
                pairs = zip(prediction["scores"], prediction["translations"], strict=True)
                print(NBEST_SEPARATOR.join(f"{score:.3f} {text}" for score, text in pairs))
            else:
                print(f"{prediction['scores']:.3f}\t{prediction['translations']}")
    except (RuntimeError, OSError) as error:
        print(f"serving.client: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
