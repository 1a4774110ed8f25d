"""A TF Serving REST client for the translator model, standard library only.

    python -m serving.client "A man rides a bike." "Two dogs play in the snow."
    python -m serving.client --n-best < sentences.txt
    python -m serving.client --tag "<2de>" "A man rides a bike."     (a multilingual model)
    python -m serving.client --url http://127.0.0.1:8501 --name translator --status

It speaks TF Serving's REST API only, so the same client works against `translator serve`
and against the `tensorflow/serving` image serving the same export (serving/models.config).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any


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


def translate(
    sentences: list[str],
    url: str,
    name: str = "translator",
    n_best: bool = False,
    tag: str = "",
) -> list[dict[str, Any]]:
    """Translates sentences; one `{"translations": ..., "scores": ...}` per sentence.

    With `n_best`, each entry holds lists, best first (empty slots: "" and -inf). With a
    `tag` (e.g. <2de>, a multilingual model's target language), the tagged signatures
    run, each sentence with that tag.
    """
    body: dict[str, Any] = {"instances": sentences}
    signature = "n_best" if n_best else "serving_default"
    if tag:
        signature = "tagged_n_best" if n_best else "tagged"
        body["instances"] = [{"inputs": sentence, "tags": tag} for sentence in sentences]
    body["signature_name"] = signature
    return call(f"{url}/v1/models/{name}:predict", body)["predictions"]


def main(argv: list[str] | None = None) -> int:
    """Translates the arguments (or stdin lines) and prints one result per line."""
    parser = argparse.ArgumentParser(prog="python -m serving.client", description=__doc__)
    parser.add_argument("sentences", nargs="*", help="sentences (default: read stdin lines)")
    parser.add_argument("--url", default="http://127.0.0.1:8501", help="server address")
    parser.add_argument("--name", default="translator", help="model name (default: translator)")
    parser.add_argument("--n-best", action="store_true", help="print every hypothesis")
    parser.add_argument("--tag", default="", help="tag every sentence, e.g. <2de> (default: none)")
    parser.add_argument("--status", action="store_true", help="print the model status and exit")
    args = parser.parse_args(argv)
    try:
        if args.status:
            print(json.dumps(call(f"{args.url}/v1/models/{args.name}"), indent=2))
            return 0
        sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
        for prediction in translate(sentences, args.url, args.name, args.n_best, args.tag):
            if args.n_best:
                pairs = zip(prediction["scores"], prediction["translations"], strict=True)
                print(" ||| ".join(f"{score:.3f} {text}" for score, text in pairs))
            else:
                print(f"{prediction['scores']:.3f}\t{prediction['translations']}")
    except (RuntimeError, OSError) as error:
        print(f"serving.client: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
