"""Serving: latency and throughput of `translator serve`, dynamic batching on and off, both
servers at once on one export, measured interleaved; REST, and gRPC to the batching server.
Without --model, random `small` weights."""

import concurrent.futures
import http.client
import json
import math
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SentencePiece ops)

from bench import harness
from serving.config import BatchingConfig
from serving.process import ServerProcess
from translator.artifacts import load_model_dir
from translator.export import ExportConfig, export_model
from translator.io import read_lines
from translator.search import SearchConfig

render = harness.Template("serving")
REQUIRED_RATIO = 4.0
CLIENTS = 16
PREDICT = "/v1/models/translator:predict"
MAX_BATCH_SIZE = 32


def run_clients(port: int, sentences: list[str], clients: int, per_client: int) -> dict:
    """Each of `clients` threads sends `per_client` one-sentence requests back to back."""

    def client(number: int, ready: Callable[[], object]) -> list[tuple[int, float, str]]:
        connection, done = http.client.HTTPConnection("127.0.0.1", port, timeout=600), []
        ready()
        for index in picks(number, clients, per_client, len(sentences)):
            body, started = json.dumps({"instances": [sentences[index]]}), time.perf_counter()
            connection.request("POST", PREDICT, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data, elapsed = response.read(), time.perf_counter() - started
            if response.status != 200:
                raise SystemExit(f"a request failed: {response.status}: {data[:200]!r}")
            done.append((index, elapsed, json.loads(data)["predictions"][0]["translations"]))
        connection.close()
        return done

    return timed(clients, client)


def run_grpc_clients(target: str, sentences: list[str], clients: int, per_client: int) -> dict:
    """`run_clients` over gRPC (TF Serving's stubs), each client on its own channel."""
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from serving.grpc_client import string_tensor

    def client(number: int, ready: Callable[[], object]) -> list[tuple[int, float, str]]:
        done = []
        with grpc.insecure_channel(target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=60)
            ready()
            for index in picks(number, clients, per_client, len(sentences)):
                request = predict_pb2.PredictRequest()
                request.model_spec.name = "translator"
                request.inputs["inputs"].CopyFrom(string_tensor([sentences[index]]))
                started = time.perf_counter()
                response = stub.Predict(request, timeout=600)
                elapsed = time.perf_counter() - started
                text = response.outputs["translations"].string_val[0].decode("utf-8")
                done.append((index, elapsed, text))
        return done

    return timed(clients, client)


def picks(number: int, clients: int, per_client: int, count: int) -> list[int]:
    """The sentences client `number` sends, in order: every client a different one."""
    return [(number + k * clients) % count for k in range(per_client)]


def timed(clients: int, client: Callable) -> dict:
    """Runs `client(number, ready)` on `clients` threads, timed from when all are `ready()`.

    Each returns its requests as (sentence index, seconds, translation).
    """
    barrier = threading.Barrier(clients + 1)
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, number, barrier.wait) for number in range(clients)]
        barrier.wait()
        started = time.perf_counter()
        done = [request for future in futures for request in future.result()]
    latencies, texts = [seconds for _, seconds, _ in done], {i: text for i, _, text in done}
    return dict(seconds=time.perf_counter() - started, latencies=latencies, texts=texts)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def measure_rounds(servers: dict, sentences: list[str], args) -> dict:
    """{mode: {clients: figures}}: 1 client, then CLIENTS, on each server in turn, alternating.

    The modes are the servers' (REST) and "grpc": gRPC clients of the "on" server."""

    def run(mode: str, clients: int, count: int) -> dict:
        if mode == "grpc":
            return run_grpc_clients(servers["on"].grpc_target, sentences, clients, count)
        return run_clients(servers[mode].port, sentences, clients, count)

    modes = [*servers, "grpc"]
    runs = {mode: {1: [], CLIENTS: []} for mode in modes}
    for mode in modes:
        run(mode, CLIENTS, 2)  # warm-up: several batch sizes
    for number in range(args.rounds):
        for clients, count in ((1, args.single), (CLIENTS, args.per_client)):
            for mode in modes[:: -1 if number % 2 else 1]:
                server = servers["on" if mode == "grpc" else mode]
                before = server.get("/healthz")[1]
                run_ = run(mode, clients, count)
                after = server.get("/healthz")[1]
                run_ |= {key: after[key] - before[key] for key in ("sentences", "batches")}
                runs[mode][clients].append(run_)
    results = {mode: {} for mode in runs}
    for mode, by_clients in runs.items():
        for clients, done in by_clients.items():
            latencies = sorted(x for run in done for x in run["latencies"])
            total = {
                key: sum(run[key] for run in done) for key in ("seconds", "sentences", "batches")
            }
            results[mode][clients] = figures = {
                "requests": len(latencies),
                "throughput": len(latencies) / total["seconds"],
                "p50_ms": 1000 * percentile(latencies, 0.50),
                "p99_ms": 1000 * percentile(latencies, 0.99),
                "mean_batch": total["sentences"] / max(total["batches"], 1),
                "translations": {i: text for run in done for i, text in run["texts"].items()},
            }
            print(f"{mode}, {clients} client(s): {figures['throughput']:.2f} sentences/s")
    return results


def model_ceiling(export_base: Path, sentences: list[str], rounds: int) -> dict[str, float]:
    """Sentences/s of the SavedModel in this process, no HTTP, one by one and as one batch:
    their ratio is what batching can give at most for this model on this machine."""
    versions = sorted((int(p.name), p) for p in export_base.iterdir() if p.name.isdigit())
    translate = tf.saved_model.load(str(versions[-1][1])).signatures["serving_default"]
    batch = sentences[:CLIENTS]
    alone, _ = harness.best_of(lambda: [translate(inputs=tf.constant([s])) for s in batch], rounds)
    together, _ = harness.best_of(lambda: translate(inputs=tf.constant(batch)), rounds)
    return {"alone": len(batch) / alone, "together": len(batch) / together}


def build_export(args, data: Path, scratch: Path) -> tuple[Path, str]:
    """An export of --model, or of a random-weights model; returns (base, description)."""
    config = ExportConfig(search=SearchConfig(beam_size=4, length_penalty=0.6))
    if args.model:
        model, note = args.model, render("model-trained", model=args.model)
    else:
        preset, vocab_size = ("tiny", 1000) if args.short else ("small", 8000)
        model = harness.random_model(scratch, data, preset, vocab_size)
        parameters = load_model_dir(model).model.count_params() / 1e6
        note = render("model-random", preset=preset, parameters=parameters, vocab_size=vocab_size)
    return export_model(model, scratch / "export", config).parent, note


def comparison(modes: dict) -> dict:
    """Batching on over off: sentences/s at CLIENTS clients (`ratio`) and at 1 (`one_client`);
    the 1-client median latencies (`p50_on`, `p50_off`); of the 1-client runs' sentences
    (`compared`), those with the same translation (`same`)."""
    on, off, grpc = modes["on"], modes["off"], modes["grpc"]
    texts = off[1]["translations"]
    return {
        "grpc_ratio": grpc[CLIENTS]["throughput"] / on[CLIENTS]["throughput"],
        "grpc_one": grpc[1]["throughput"] / on[1]["throughput"],
        "p50_grpc": grpc[1]["p50_ms"],
        "same_grpc": sum(grpc[1]["translations"][i] == text for i, text in texts.items()),
        "ratio": on[CLIENTS]["throughput"] / off[CLIENTS]["throughput"],
        "one_client": on[1]["throughput"] / off[1]["throughput"],
        "p50_on": on[1]["p50_ms"],
        "p50_off": off[1]["p50_ms"],
        "same": sum(on[1]["translations"][i] == text for i, text in texts.items()),
        "compared": len(texts),
    }


def section_markdown(modes: dict, ceiling: dict[str, float], args, model: str) -> str:
    """The section: the template filled with this run's figures (its local names)."""
    figures, required_ratio, clients = comparison(modes), REQUIRED_RATIO, CLIENTS
    labels = {
        "on": render("label-on", size=MAX_BATCH_SIZE, args=args),
        "off": render("label-off"),
        "grpc": render("label-grpc", size=MAX_BATCH_SIZE, args=args),
    }
    rows = "\n".join(
        render("row", label=labels[mode], clients=c, **modes[mode][c])
        for mode in ("on", "grpc", "off")
        for c in (1, CLIENTS)
    )
    model_ratio, timeout_ms = ceiling["together"] / ceiling["alone"], args.timeout / 1000
    share = figures["ratio"] / model_ratio
    verdict = harness.verdict(figures["ratio"], REQUIRED_RATIO)
    if figures["ratio"] >= REQUIRED_RATIO:
        why = render("why-batching-pays")
    else:  # within 90% of what batching can give: the server adds nothing to the gap
        where = ", not in the server" if share >= 0.9 else " and in the server"
        why = render("why-row-cost", required_ratio=REQUIRED_RATIO, where=where)
    return render("section", **figures, **ceiling, **harness.footer(), **locals())


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("serving", __doc__, model=True)
    parser.add_argument("--single", type=int, help="1-client requests a round (30; short 6)")
    # Interleaved rounds, requests per client a round at CLIENTS clients.
    args = harness.parse(parser, argv, rounds=(2, 1), single=(30, 6), per_client=(8, 2))
    args.timeout = BatchingConfig().batch_timeout_micros
    data = harness.find_data(args.data, files=(*harness.TRAIN, harness.TEST_SOURCE))
    sentences = read_lines(data / harness.TEST_SOURCE)
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as scratch_name:
        scratch = Path(scratch_name)
        export, model_note = build_export(args, data, scratch)
        batching = f"--max-batch-size={MAX_BATCH_SIZE} --batch-timeout-micros={args.timeout}"
        options = {"on": batching.split(), "off": ["--no-batching"]}
        servers = {
            mode: ServerProcess(export, scratch / f"{mode}.log", "--log-level=warning", *option)
            for mode, option in options.items()
        }
        try:
            for server in servers.values():
                server.wait_ready(timeout=600)
            modes = measure_rounds(servers, sentences, args)
        finally:
            codes = {mode: server.stop() for mode, server in servers.items()}
        if any(codes.values()):
            raise SystemExit(f"server exit codes on SIGTERM: {codes}")
        ceiling = model_ceiling(export, sentences, args.rounds) if args.write else None
    figures = comparison(modes)
    print(f"{figures['same']}/{figures['compared']} sequential translations identical across modes")
    name = f"serving sentences/s, batching on / off at {CLIENTS} clients"
    harness.report_target(name, figures["ratio"], REQUIRED_RATIO, "x")
    return harness.publish(args, "serving", section_markdown, modes, ceiling, args, model_note)
