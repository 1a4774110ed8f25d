"""The HTTP application: TF Serving's REST API for one model, on Starlette.

    GET  /                                            a page to try the model (serving.page)
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
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from serving.page import render_page
from serving.protocol import RequestError, dumps, format_predict, parse_predict
from serving.protocol import too_large as body_too_large
from serving.service import Predictor

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


class ModelService:
    """The request handlers of one model: TF Serving's REST routes and a health check.

    Args:
        predictor: The model behind its batcher, as the gRPC API reaches it too.
        before_stop: Called at shutdown before the batcher stops (the gRPC server's
            graceful stop), so that its requests in flight are still answered.
    """

    def __init__(self, predictor: Predictor, before_stop: Callable[[], None] | None = None):
        self.predictor = predictor
        self.model = predictor.model
        self.batcher = predictor.batcher
        self.before_stop = before_stop

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette):
        """Starts the batcher (if not running); stops it after the requests in flight."""
        if not self.batcher.alive:
            self.batcher.start()
        yield
        if self.before_stop is not None:
            await asyncio.to_thread(self.before_stop)
        stopped = await asyncio.to_thread(self.batcher.stop)
        stats = self.batcher.stats
        logger.info(
            "batcher %s: %d requests, %d sentences in %d batches (mean size %.1f)",
            "stopped" if stopped else "did not stop in time",
            stats.requests,
            stats.sentences,
            stats.batches,
            stats.mean_batch_size(),
        )

    async def health(self, request: Request) -> Response:
        """GET /healthz: 200 while the batching thread runs, with its counts."""
        if not self.batcher.alive:
            return error_response("the batching thread is not running", 503)
        stats = self.batcher.stats
        return json_response(
            {
                "status": "ok",
                "model": self.model.name,
                "version": str(self.model.version),
                "requests": stats.requests,
                "batches": stats.batches,
                "sentences": stats.sentences,
            }
        )

    async def page(self, request: Request) -> Response:
        """GET /: the page to try the model, which calls the predict route below."""
        return HTMLResponse(render_page(self.predictor))

    async def models(self, request: Request) -> Response:
        """Everything under /v1/models/: resolves name, version and verb as TF Serving."""
        path = request.path_params["path"]
        match = _MODEL_PATH.fullmatch(path)
        if match is None:
            return error_response(f"malformed URL: /v1/models/{path}", 404)
        name, version, label, verb = match.group("name", "version", "label", "verb")
        wanted = "POST" if verb and verb.startswith(":") else "GET"
        if request.method != wanted:
            what = verb or "model status"
            return error_response(f"{what} takes {wanted}, not {request.method}", 405)
        try:
            self.predictor.find(name, version, label)
        except RequestError as error:
            return error_response(error.message, error.status)
        if verb is None:
            return json_response(self.status_body())
        if verb == "/metadata":
            return json_response(self.metadata_body())
        if verb != ":predict":
            return error_response(
                f"{verb[1:]} is not supported by this model (its signatures take strings); "
                "use :predict",
                400,
            )
        return await self.predict(request)

    def status_body(self) -> dict[str, Any]:
        """TF Serving's model status response."""
        return {
            "model_version_status": [
                {
                    "version": str(self.model.version),
                    "state": "AVAILABLE" if self.batcher.alive else "END",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        }

    def metadata_body(self) -> dict[str, Any]:
        """TF Serving's metadata response: the SignatureDefs as JSON (`html`'s too)."""
        model, defs = self.model, self.predictor.signature_defs
        return {
            "model_spec": {"name": model.name, "signature_name": "", "version": str(model.version)},
            "metadata": {"signature_def": {"signature_def": defs}},
        }

    async def predict(self, request: Request) -> Response:
        """:predict: parse, submit to the batcher, wait, format."""
        predictor = self.predictor
        try:
            body = await read_body(request, predictor.limits.max_bytes)
            parsed = parse_predict(body, predictor.input_keys, predictor.limits)
            future = predictor.submit(parsed.signature, parsed.inputs)
        except RequestError as error:
            return error_response(error.message, error.status)
        try:
            outputs = await asyncio.wrap_future(future)
        except Exception as error:  # the model failed on this batch
            return error_response(f"the model failed: {error}", 500)
        keys = predictor.signatures[parsed.signature].output_keys
        return json_response(format_predict(outputs, keys, parsed.columnar))

    async def http_error(self, request: Request, error: Exception) -> Response:
        """Starlette's own errors (unknown route, wrong method) in TF Serving's shape."""
        assert isinstance(error, HTTPException)
        return error_response(
            f"{error.detail}: {request.method} {request.url.path}", error.status_code
        )


def create_app(predictor: Predictor, before_stop: Callable[[], None] | None = None) -> Starlette:
    """The Starlette application serving `predictor`'s model.

    The batcher is started with the application (if not yet running) and stopped when the
    application shuts down, after the server has finished the requests in flight (and
    after `before_stop`: see `ModelService`).
    """
    service = ModelService(predictor, before_stop)
    return Starlette(
        routes=[
            Route("/", service.page, methods=["GET"]),
            Route("/healthz", service.health, methods=["GET"]),
            Route("/v1/models/{path:path}", service.models, methods=["GET", "POST"]),
        ],
        exception_handlers={HTTPException: service.http_error},
        lifespan=service.lifespan,
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
