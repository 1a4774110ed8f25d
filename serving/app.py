"""The HTTP application: TF Serving's REST API for one model, on Starlette.

    GET  /v1/models/<name>[/versions/<v>]             model status
    GET  /v1/models/<name>[/versions/<v>]/metadata    signatures (SignatureDef JSON)
    POST /v1/models/<name>[/versions/<v>]:predict     translate (see serving.protocol)
    GET  /healthz                                     200 while the model can serve

Predict requests go through the `Batcher`; the event loop only parses, waits and formats.
Every error is `{"error": "..."}` with a 4xx status for a bad request (404 unknown model or
version, 405 wrong method, 413 over a size limit), 503 when the queue is full or the
server is stopping, and 500 if the model itself fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from serving.batching import Batcher, BatcherStoppedError, QueueFullError
from serving.model import ServedModel
from serving.protocol import RequestError, RequestLimits, dumps, format_predict, parse_predict
from serving.protocol import too_large as body_too_large

logger = logging.getLogger(__name__)

# TF Serving's URL grammar after /v1/models/.
_MODEL_PATH = re.compile(
    r"(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<verb>:[a-z]+|/metadata)?"
)


# The most bytes of an over-limit request body read (and dropped) so that the client,
# still sending, gets the 413 rather than a reset connection.
DRAIN_BYTES = 64 << 20


def json_response(body: Any, status: int = 200) -> Response:
    """A JSON response that allows -Infinity (TF Serving's encoding of non-finite floats)."""
    return Response(dumps(body), status_code=status, media_type="application/json")


def error_response(message: str, status: int) -> Response:
    """TF Serving's error shape."""
    return json_response({"error": message}, status)


def create_app(model: ServedModel, batcher: Batcher, limits: RequestLimits) -> Starlette:
    """The Starlette application serving `model` through `batcher`.

    The batcher is started with the application (if not yet running) and stopped when the
    application shuts down, after the server has finished the requests in flight.
    """
    input_keys = {name: info.input_key for name, info in model.signatures.items()}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        if not batcher.alive:
            batcher.start()
        yield
        stopped = await asyncio.to_thread(batcher.stop)
        stats = batcher.stats
        logger.info(
            "batcher %s: %d requests, %d sentences in %d batches (mean size %.1f)",
            "stopped" if stopped else "did not stop in time",
            stats.requests,
            stats.sentences,
            stats.batches,
            stats.mean_batch_size(),
        )

    async def health(request: Request) -> Response:
        if not batcher.alive:
            return error_response("the batching thread is not running", 503)
        return json_response(
            {
                "status": "ok",
                "model": model.name,
                "version": str(model.version),
                "requests": batcher.stats.requests,
                "batches": batcher.stats.batches,
                "sentences": batcher.stats.sentences,
            }
        )

    async def models(request: Request) -> Response:
        path = request.path_params["path"]
        match = _MODEL_PATH.fullmatch(path)
        if match is None:
            return error_response(f"malformed URL: /v1/models/{path}", 404)
        name, version, label, verb = match.group("name", "version", "label", "verb")
        wanted = "POST" if verb and verb.startswith(":") else "GET"
        if request.method != wanted:
            what = verb or "model status"
            return error_response(f"{what} takes {wanted}, not {request.method}", 405)
        spec = f"Specific({name}, {version})" if version else f"Latest({name})"
        if label is not None:
            return error_response(f"Servable not found for request: label {label!r}", 404)
        if name != model.name or (version is not None and version != str(model.version)):
            return error_response(f"Servable not found for request: {spec}", 404)
        if verb is None:
            return json_response(status_body())
        if verb == "/metadata":
            return json_response(metadata_body())
        if verb != ":predict":
            return error_response(
                f"{verb[1:]} is not supported by this model (its signatures take strings); "
                "use :predict",
                400,
            )
        return await predict(request)

    def status_body() -> dict[str, Any]:
        return {
            "model_version_status": [
                {
                    "version": str(model.version),
                    "state": "AVAILABLE" if batcher.alive else "END",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        }

    def metadata_body() -> dict[str, Any]:
        return {
            "model_spec": {"name": model.name, "signature_name": "", "version": str(model.version)},
            "metadata": {"signature_def": {"signature_def": model.signature_defs}},
        }

    async def predict(request: Request) -> Response:
        try:
            body = await read_body(request, limits.max_bytes)
            parsed = parse_predict(body, input_keys, limits)
            future = batcher.submit(parsed.signature, parsed.inputs)
        except RequestError as error:
            return error_response(error.message, error.status)
        except (QueueFullError, BatcherStoppedError) as error:
            return error_response(str(error), 503)
        try:
            outputs = await asyncio.wrap_future(future)
        except Exception as error:  # the model failed on this batch
            return error_response(f"the model failed: {error}", 500)
        keys = model.signatures[parsed.signature].output_keys
        return json_response(format_predict(outputs, keys, parsed.columnar))

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        return error_response(
            f"{error.detail}: {request.method} {request.url.path}", error.status_code
        )

    return Starlette(
        routes=[
            Route("/healthz", health, methods=["GET"]),
            Route("/v1/models/{path:path}", models, methods=["GET", "POST"]),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) more than `limit` bytes without keeping them.

    An over-limit body is still read to its end (and dropped) before the answer, up to
    `DRAIN_BYTES`: a server that answers and closes while the client is still sending
    makes the client see its connection reset instead of the 413.
    """
    declared = request.headers.get("content-length")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > DRAIN_BYTES:  # not worth reading: the connection is dropped
            raise body_too_large(size, limit, exact=False)
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise body_too_large(int(declared), limit)
    if size > limit:
        raise body_too_large(size, limit)
    return b"".join(chunks)
