"""Serving: latency and throughput of `translator serve`, dynamic batching on and off.

    python -m bench.serving [--short] [--model RUN_DIR | --export BASE]

Two `translator serve` processes on the same export, batching on and off, take one-sentence
predict requests from keep-alive clients (Multi30k test English, in order): 1 client and 16
concurrent ones, the servers interleaved over rounds so other load falls on both alike.
Target: batching gives >= 4x the sentences/s at 16 clients. By default the `small` shape
with random weights (every translation runs to its length limit: a pessimistic cost).
"""

from __future__ import annotations

import copy
import gzip
import http.client
import json
import math
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import harness
from serving.process import ServerProcess

render = harness.Template("serving")
REQUIRED_RATIO = 4.0
CLIENTS = 16
PREDICT = "/v1/models/translator:predict"
MAX_BATCH_SIZE = 32


def run_clients(port: int, sentences: list[str], clients: int, per_client: int) -> dict:
    """Each of `clients` threads sends `per_client` one-sentence requests back to back."""
    latencies, translations, failures = [], {}, []
    lock, barrier = threading.Lock(), threading.Barrier(clients + 1)

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        barrier.wait()
        for k in range(per_client):
            index = (number + k * clients) % len(sentences)
            body = json.dumps({"instances": [sentences[index]]})
            started = time.perf_counter()
            connection.request("POST", PREDICT, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data, elapsed = response.read(), time.perf_counter() - started
            with lock:
                if response.status != 200:
                    failures.append(f"{response.status}: {data[:200]!r}")
                    continue
                latencies.append(elapsed)
                translations[index] = json.loads(data)["predictions"][0]["translations"]
        connection.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    return dict(seconds=seconds, latencies=latencies, translations=translations, failures=failures)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values, nearest rank."""
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def measure_rounds(servers: dict, sentences: list[str], args) -> dict:
    """1 client, then CLIENTS clients on each server, interleaved (alternating order):
    {mode: {clients: {requests, throughput, p50_ms, p99_ms, mean_batch, translations}}}."""
    empty = dict(seconds=0.0, latencies=[], sentences=0, batches=0, texts={})
    totals = {mode: {c: copy.deepcopy(empty) for c in (1, CLIENTS)} for mode in servers}
    for server in servers.values():
        run_clients(server.port, sentences, CLIENTS, 2)  # warm-up: several batch sizes
    for number in range(args.rounds):
        order = list(servers)[:: -1 if number % 2 else 1]
        for clients, count in ((1, args.single), (CLIENTS, args.per_client)):
            for mode in order:
                server, total = servers[mode], totals[mode][clients]
                before = server.get("/healthz")[1]
                run = run_clients(server.port, sentences, clients, count)
                after = server.get("/healthz")[1]
                if failures := run["failures"]:
                    raise SystemExit(f"{len(failures)} requests failed: {failures[:3]}")
                total["seconds"] += run["seconds"]
                total["latencies"] += run["latencies"]
                for key in ("sentences", "batches"):
                    total[key] += after[key] - before[key]
                total["texts"].update(run["translations"])
    results = {}
    for mode, by_clients in totals.items():
        for clients, total in by_clients.items():
            latencies = sorted(total["latencies"])
            results.setdefault(mode, {})[clients] = figures = {
                "requests": len(latencies),
                "throughput": len(latencies) / total["seconds"],
                "p50_ms": 1000 * percentile(latencies, 0.50),
                "p99_ms": 1000 * percentile(latencies, 0.99),
                "mean_batch": total["sentences"] / max(total["batches"], 1),
                "translations": total["texts"],
            }
            print(f"batching {mode}, {clients} client(s): {figures['throughput']:.2f} sentences/s")
    return results


def model_ceiling(export_base: Path, sentences: list[str], rounds: int) -> dict[str, float]:
    """Sentences/s of the SavedModel in this process, no HTTP: one by one, and as one batch.

    Their ratio is what batching can give at most for this model on this machine.
    """
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece ops)

    versions = sorted((int(p.name), p) for p in export_base.iterdir() if p.name.isdigit())
    translate = tf.saved_model.load(str(versions[-1][1])).signatures["serving_default"]
    batch = sentences[:CLIENTS]

    def alone():
        for sentence in batch:
            translate(inputs=tf.constant([sentence]))

    alone_seconds, _ = harness.best_of(alone, rounds)
    together_seconds, _ = harness.best_of(lambda: translate(inputs=tf.constant(batch)), rounds)
    return {"alone": len(batch) / alone_seconds, "together": len(batch) / together_seconds}


def build_export(args, data: Path, scratch: Path) -> tuple[Path, str]:
    """An export of --model, or of a random-weights model; returns (base, description)."""
    from translator.export import ExportConfig, export_model
    from translator.search import SearchConfig

    config = ExportConfig(search=SearchConfig(beam_size=4, length_penalty=0.6))
    if args.model:
        version = export_model(args.model, scratch / "export", config)
        return version.parent, render("model-trained", model=args.model)

    import keras

    from translator import Transformer, TransformerConfig
    from translator.artifacts import save_model_dir
    from translator.pipelines import build_vocabulary

    preset, vocab_size = ("tiny", 1000) if args.short else ("small", 8000)
    files = [data / name for name in harness.TRAIN]
    if args.short:  # a quick vocabulary from the first lines
        for i, name in enumerate(harness.TRAIN):
            with gzip.open(data / name, "rt", encoding="utf-8") as file:
                lines = [next(file) for _ in range(5000)]
            files[i] = scratch / name.removesuffix(".gz")
            files[i].write_text("".join(lines), "utf-8")
    build_vocabulary(files[:1], files[1:], scratch / "vocab", vocab_size=vocab_size)
    keras.utils.set_random_seed(0)
    model = Transformer(TransformerConfig.preset(preset, vocab_size=vocab_size, dropout=0.0))
    model.build()
    model_dir = save_model_dir(scratch / "model", model, scratch / "vocab", {"weights": "random"})
    version = export_model(model_dir, scratch / "export", config)
    parameters = model.count_params() / 1e6
    return version.parent, render("model-random", **locals())


def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("serving", __doc__)
    parser.add_argument("--model", help="a trained run or model directory to export and serve")
    parser.add_argument("--export", help="an existing export base to serve (skips exporting)")
    parser.add_argument("--timeout", type=int, help="batch_timeout_micros (server's default)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 2; short 1)")
    parser.add_argument("--single", type=int, help="1-client requests a round (30; short 6)")
    parser.add_argument("--per-client", type=int, help="requests per client a round (8; 2)")
    args = harness.parse(parser, argv, rounds=(2, 1), single=(30, 6), per_client=(8, 2))
    if args.timeout is None:
        from serving.config import BatchingConfig

        args.timeout = BatchingConfig().batch_timeout_micros

    data = harness.find_data(args.data, files=(*harness.TRAIN, harness.TEST_SOURCE))
    with gzip.open(data / harness.TEST_SOURCE, "rt", encoding="utf-8") as file:
        sentences = [line.rstrip("\n") for line in file]
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as scratch_name:
        scratch = Path(scratch_name)
        if args.export:
            export, model_note = Path(args.export), render("model-export", export=args.export)
        else:
            export, model_note = build_export(args, data, scratch)
        batching = f"--max-batch-size={MAX_BATCH_SIZE} --batch-timeout-micros={args.timeout}"
        options = {"on": batching.split(), "off": ["--no-batching"]}
        # Both servers at once (each loads while the other does), measured interleaved.
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
    harness.publish(args, "serving", section_markdown, modes, ceiling, args, model_note)
    return 0


def comparison(modes: dict) -> dict:
    """Batching on over off: sentences/s at CLIENTS clients (`ratio`) and at 1 (`one_client`);
    of the 1-client runs' sentences (`compared`), those with the same translation (`same`)."""
    on, off = modes["on"], modes["off"]
    texts = off[1]["translations"]
    return {
        "ratio": on[CLIENTS]["throughput"] / off[CLIENTS]["throughput"],
        "one_client": on[1]["throughput"] / off[1]["throughput"],
        "same": sum(on[1]["translations"][i] == text for i, text in texts.items()),
        "compared": len(texts),
    }


def section_markdown(modes: dict, ceiling: dict[str, float], args, model: str) -> str:
    """The section: the template filled with this run's figures."""
    figures = comparison(modes)
    labels = {"on": render("label-on", size=MAX_BATCH_SIZE, args=args), "off": render("label-off")}
    rows = [
        render("row", label=labels[mode], clients=c, **modes[mode][c])
        for mode in ("on", "off")
        for c in (1, CLIENTS)
    ]
    model_ratio = ceiling["together"] / ceiling["alone"]
    if figures["ratio"] >= REQUIRED_RATIO:
        why = render("why-batching-pays")
    else:
        # Within 90% of what batching can give: the server adds nothing to the gap.
        near = figures["ratio"] >= 0.9 * model_ratio
        where = ", not in the server" if near else " and in the server"
        why = render("why-row-cost", required_ratio=REQUIRED_RATIO, where=where)
    return render(
        "section",
        **figures,
        **ceiling,
        **harness.footer(),
        rows="\n".join(rows),
        args=args,
        timeout_ms=args.timeout / 1000,
        required_ratio=REQUIRED_RATIO,
        clients=CLIENTS,
        verdict=harness.verdict(figures["ratio"], REQUIRED_RATIO),
        model_ratio=model_ratio,
        share=figures["ratio"] / model_ratio,
        why=why,
        model=model,
    )


if __name__ == "__main__":
    sys.exit(main())
