"""`translator serve`: TF Serving's REST API for an exported model (plugged in by entry point)."""

from __future__ import annotations

import argparse
from pathlib import Path

from serving.config import MAX_REQUEST_SENTENCES, BatchingConfig
from translator.documents import NO_SPLIT_HELP, SOURCE_LANG_HELP

# The batching parameters' defaults, for --help (the values live in BatchingConfig).
DEFAULTS = {
    name: getattr(BatchingConfig(), name)
    for name in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches")
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `serve` subcommand."""
    # Long but flat: one declaration per option, in the order `--help` lists them.
    parser = subparsers.add_parser(
        "serve",
        help="serve an exported model with TF Serving's REST and gRPC APIs",
        description=(
            "Loads the newest version under EXPORT_BASE (as written by `translator export`)\n"
            "and serves it with TF Serving's two APIs, so TF Serving clients work unchanged.\n"
            "REST (--port, 8501):\n"
            "  GET  /                          a page to try the model in a browser\n"
            "  GET  /v1/models/NAME            model status\n"
            "  GET  /v1/models/NAME/metadata   signatures\n"
            '  POST /v1/models/NAME:predict    {"instances": [...]} or {"inputs": [...]}\n'
            "  GET  /healthz                   200 while serving\n"
            "gRPC (--grpc-port, 8500; the stubs of the tensorflow-serving-api package):\n"
            "  tensorflow.serving.PredictionService  Predict, GetModelMetadata\n"
            "  tensorflow.serving.ModelService       GetModelStatus\n"
            "Before serving, it replays the export's warm-up requests\n"
            "(assets.extra/tf_serving_warmup_requests), as TF Serving does.\n"
            "Concurrent requests of both APIs are decoded together (dynamic batching).\n"
            "A request's string is a paragraph: its sentences, and the pieces of one over\n"
            "the model's limit, are translated apart and rejoined (--no-split: as it is).\n"
            'The signature "html" (the server\'s own) takes HTML pages: their text is\n'
            "translated, their markup put back by the word alignments.\n"
            "SIGTERM or Ctrl-C"
            " stops the server after it has answered the requests in flight."
        ),
        epilog=(
            "Example: translator serve --model exports/m30k --port 8501\n"
            '  curl -d \'{"instances": ["A man rides a bike."]}\' '
            "http://127.0.0.1:8501/v1/models/translator:predict"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        required=True,
        type=Path,
        metavar="EXPORT_BASE",
        help="directory of numbered SavedModel versions; the highest is served",
    )
    parser.add_argument(
        "--name", default="translator", help="model name in the URLs (default: translator)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=8501, help="TCP port of the REST API (default: 8501)"
    )
    grpc = parser.add_mutually_exclusive_group()
    grpc.add_argument(
        "--grpc-port",
        type=int,
        default=8500,
        metavar="PORT",
        help="TCP port of the gRPC API, on the same --host (default: 8500, as TF Serving)",
    )
    grpc.add_argument("--no-grpc", action="store_true", help="serve REST only")
    tags = parser.add_argument_group(
        "tags (a model trained on tagged corpora; requests may also name the 'tagged' "
        'signature and give {"inputs": ..., "tags": ...} per sentence)'
    )
    choice = tags.add_mutually_exclusive_group()
    choice.add_argument(
        "--tag",
        default="",
        metavar="TAG",
        help="tag every sentence of a request that names no tag with TAG, as training "
        "tagged a corpus (one of the export's tags)",
    )
    choice.add_argument(
        "--target-lang",
        metavar="XX",
        help="translate requests that name no tag into language XX (a multilingual "
        "model): the same as --tag <2XX>",
    )
    documents = parser.add_argument_group(
        "documents (a request's string is a paragraph, as a line of `translator translate`)"
    )
    documents.add_argument("--no-split", dest="split", action="store_false", help=NO_SPLIT_HELP)
    documents.add_argument("--source-lang", default="", metavar="LANG", help=SOURCE_LANG_HELP)
    batching = parser.add_argument_group(
        "dynamic batching (TF Serving's batching parameters; flags override --batching-parameters)"
    )
    batching.add_argument(
        "--batching-parameters",
        type=Path,
        metavar="FILE",
        help=(
            "TF Serving batching parameters file, e.g. serving/batching_parameters.txt, read "
            "as TF Serving reads it: its max_batch_size is the largest request, and with "
            "enable_large_batch_splitting its max_execution_batch_size the largest model call"
        ),
    )
    batching.add_argument(
        "--max-batch-size",
        type=int,
        metavar="N",
        help=(
            "most sentences per model call; a larger request is split over several "
            f"(default: {DEFAULTS['max_batch_size']})"
        ),
    )
    batching.add_argument(
        "--batch-timeout-micros",
        type=int,
        metavar="US",
        help=(
            "longest wait for a batch to fill, from its first sentence's arrival or from "
            f"when the worker became free (default: {DEFAULTS['batch_timeout_micros']})"
        ),
    )
    batching.add_argument(
        "--max-enqueued-batches",
        type=int,
        metavar="N",
        help=(
            "queue capacity in full batches; requests beyond it get 503 "
            f"(default: {DEFAULTS['max_enqueued_batches']})"
        ),
    )
    batching.add_argument(
        "--no-batching",
        action="store_true",
        help="run each request alone, as one model call (no merging or splitting)",
    )
    limits = parser.add_argument_group("request limits (larger requests get 413)")
    limits.add_argument(
        "--max-request-sentences",
        type=int,
        metavar="N",
        help=f"most sentences in one request (default: {MAX_REQUEST_SENTENCES})",
    )
    limits.add_argument(
        "--max-request-bytes",
        type=int,
        default=1 << 20,
        metavar="N",
        help="largest request body in bytes (default: 1048576)",
    )
    parser.add_argument(
        "--access-log", action="store_true", help="log every request (default: off)"
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="server log level (default: info; -v shows every library's logs too)",
    )
    parser.set_defaults(handler=run)


def serving_config(args: argparse.Namespace) -> tuple[BatchingConfig, int]:
    """The `BatchingConfig` and the most sentences per request.

    Each value from its flag, else from --batching-parameters (read as TF Serving reads
    it: `serving.batching.read_batching_parameters`), else the default.
    """
    from serving.batching import read_batching_parameters

    values: dict[str, int] = {**DEFAULTS, "max_request_sentences": MAX_REQUEST_SENTENCES}
    if args.batching_parameters is not None:
        applied, ignored = read_batching_parameters(args.batching_parameters)
        if ignored:
            print(
                f"{args.batching_parameters}: not applied (one batch thread, any batch size): "
                f"{', '.join(ignored)}"
            )
        values.update(applied)
    for name in values:
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    max_request_sentences = values.pop("max_request_sentences")
    return BatchingConfig(**values, enabled=not args.no_batching), max_request_sentences


def run(args: argparse.Namespace) -> int:
    """Runs `translator serve` until SIGTERM or Ctrl-C."""
    from translator.errors import CommandError

    config, max_request_sentences = serving_config(args)
    if max_request_sentences < 1 or args.max_request_bytes < 1:
        raise CommandError("--max-request-sentences and --max-request-bytes must be >= 1")

    import uvicorn

    from serving.app import create_app

    predictor = _load(args, config, max_request_sentences)
    batcher = predictor.batcher
    # The warm-up requests take a real request's way to the model, through the batcher
    # (which the application then finds running); they count in its statistics.
    batcher.start()
    try:
        model = predictor.model
        print(model.warm_up(lambda sig, rows: batcher.submit(sig, rows).result()), flush=True)
        grpc_server = _start_grpc(args, predictor)
    except BaseException:
        batcher.stop()
        raise

    def stop_grpc() -> None:  # before the batcher stops: gRPC requests in flight finish
        if grpc_server is not None:
            grpc_server.stop(grace=30).wait()

    app = create_app(predictor, before_stop=stop_grpc)
    server = _server_class(uvicorn)(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=args.access_log,
            timeout_graceful_shutdown=30,
        )
    )
    grpc_line = "" if grpc_server is None else f"; gRPC at {args.host}:{args.grpc_port}"
    print(
        f"serving model {args.name!r} at http://{args.host}:{args.port}/v1/models/{args.name}"
        f"{grpc_line}; try it at http://{args.host}:{args.port}/",
        flush=True,
    )
    try:
        server.run()
    finally:
        stop_grpc()  # at once where uvicorn never started (its lifespan did not run)
        batcher.stop()
    if not server.started:
        raise CommandError(f"could not listen on {args.host}:{args.port} (see the log above)")
    return 0


def _load(args: argparse.Namespace, config, max_request_sentences: int):
    """The served model behind its batcher (not started), as `Predictor`; says so."""
    import time

    from serving.batching import Batcher
    from serving.model import ServedModel
    from serving.protocol import RequestLimits
    from serving.service import Predictor
    from serving.splitting import Splitting

    start = time.monotonic()
    model = ServedModel(args.name, args.model)
    tag = _served_tag(args, model)
    batching = (
        f"batching max_batch_size={config.max_batch_size} "
        f"batch_timeout_micros={config.batch_timeout_micros} "
        f"max_enqueued_batches={config.max_enqueued_batches}"
        if config.enabled
        else "batching off"
    )
    limits = RequestLimits(max_sentences=max_request_sentences, max_bytes=args.max_request_bytes)
    splitting = Splitting.of_export(model.path, model.metadata, args.split, args.source_lang)
    predictor = Predictor(model, Batcher(model.run, config), limits, tag, splitting)
    print(
        f"loaded {model.path} (version {model.version}; signatures "
        f"{', '.join(sorted(predictor.signatures))}) in {time.monotonic() - start:.1f} s; "
        f"{batching}; at most {max_request_sentences} sentences per request"
        + (f"; untagged requests tagged {tag}" if tag else ""),
        flush=True,
    )
    return predictor


def _served_tag(args: argparse.Namespace, model) -> str:
    """The tag `--tag` or `--target-lang` gives untagged requests ("": none), checked."""
    from translator.constants import language_tag
    from translator.errors import CommandError
    from translator.signatures import SERVING_SIGNATURE

    tag = language_tag(args.target_lang, tuple(model.tags)) if args.target_lang else args.tag
    if tag and model.tagged(SERVING_SIGNATURE) is None:
        raise CommandError(
            f"--tag {tag}: {model.path} has no tagged signatures (export a model whose "
            "vocabulary has tags, or pass the tag to `translator export --tag`)"
        )
    if tag and (why := model.unknown_tag(tag.encode("utf-8"))):
        raise CommandError(f"--tag {tag}: {why}")
    return tag


def _start_grpc(args: argparse.Namespace, predictor):
    """The gRPC server, started (None with --no-grpc)."""
    if args.no_grpc:
        return None
    from serving.grpc_api import start_grpc_server
    from translator.errors import CommandError

    try:
        return start_grpc_server(predictor, args.host, args.grpc_port)
    except OSError as error:
        raise CommandError(f"{error} (--grpc-port, or --no-grpc)") from None


def _server_class(uvicorn):
    """The uvicorn Server class, except that SIGTERM ends the process with status 0.

    uvicorn shuts down gracefully on SIGTERM, then raises the signal again so the process
    dies of it; here a graceful SIGTERM shutdown is a normal exit. Ctrl-C (SIGINT) keeps
    uvicorn's behaviour (`translator` then reports "interrupted", status 130).
    """
    import signal

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", None)
            if sig == signal.SIGTERM and isinstance(captured, list) and sig in captured:
                captured.remove(sig)

    return Server
