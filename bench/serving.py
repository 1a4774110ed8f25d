"""Serving: latency and throughput of `translator serve`, dynamic batching on and off.

    python -m bench.serving                  # full run, writes its section of RESULTS.md
    python -m bench.serving --short          # quick check (tiny model, few requests), prints only
    python -m bench.serving --model runs/m30k   # a trained model instead of random weights

Two servers run as real processes on 127.0.0.1 (`translator serve`), on the same export:
one with dynamic batching (max_batch_size 32, batch_timeout_micros 10000), one with
`--no-batching` (each request is one model call, through the same single worker).
Clients are threads with keep-alive HTTP connections, each sending one-sentence TF
Serving predict requests back to back; the sentences are the Multi30k test set
(English), in order. Measured: 1 client (latency p50/p99, sentences/s) and 16 concurrent
clients (sentences/s, latency under load), the two servers interleaved over rounds so
that load from other processes falls on both alike. Target: batching gives >= 4x the
sentences/s of no batching at 16 clients.

Model: by default the recipe's architecture (`small`: 3+3 layers, d_model 256) with random
weights and a joint 8,000-piece vocabulary trained on Multi30k; random weights never
choose EOS, so every translation runs to the length limit (1.2 x source + 10 tokens), a
pessimistic cost per sentence. `--model` exports a trained model instead. The export
uses beam 4 and length penalty 0.6, like `translator translate`'s defaults.

The section's words are in bench/templates/serving.md; this module measures the figures
and fills them in.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/serving.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bench.pipeline import find_data
from bench.results import (
    TEMPLATES,
    bind_template,
    command_line,
    machine_summary,
    report_target,
    today,
    update_section,
)

# The words of the section, filled in by `render`.
TEMPLATE = TEMPLATES / "serving.md"
template_parts, render = bind_template(TEMPLATE)
REQUIRED_RATIO = 4.0
CLIENTS = 16
PREDICT = "/v1/models/translator:predict"
MAX_BATCH_SIZE = 32


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`translator serve` in a subprocess; stopped with SIGTERM."""

    def __init__(self, export_base: Path, log_path: Path, options: tuple[str, ...]):
        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 (lives as long as the process)
        command = [sys.executable, "-m", "translator", "serve", "--model", str(export_base)]
        self.process = subprocess.Popen(
            [*command, "--port", str(self.port), "--log-level", "warning", *options],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"server exited:\n{self.log_path.read_text(errors='replace')}")
            try:
                if self.get("/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"server not ready after {timeout} s")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._log.close()
        return code


def run_clients(port: int, sentences: list[str], clients: int, per_client: int) -> dict:
    """Each client sends `per_client` one-sentence requests back to back.

    Returns:
        Seconds, latencies (s), translations by sentence index, and failures.
    """
    latencies: list[float] = []
    translations: dict[int, str] = {}
    failures: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        barrier.wait()
        for k in range(per_client):
            index = (number + k * clients) % len(sentences)
            body = json.dumps({"instances": [sentences[index]]})
            started = time.perf_counter()
            connection.request("POST", PREDICT, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
            elapsed = time.perf_counter() - started
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
    return {
        "seconds": seconds,
        "latencies": sorted(latencies),
        "translations": translations,
        "failures": failures,
    }


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values, nearest rank."""
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def measure_rounds(
    servers: dict[str, Server], sentences: list[str], rounds: int, single: int, per_client: int
) -> dict[str, dict[int, dict]]:
    """Runs 1 client then CLIENTS clients on each server, interleaved over `rounds`.

    Interleaving the modes (in alternating order) spreads changes in the machine's load
    evenly over both, so their ratio stays fair on a shared machine.
    """
    totals = {
        mode: {
            c: {"seconds": 0.0, "latencies": [], "sentences": 0, "batches": 0, "texts": {}}
            for c in (1, CLIENTS)
        }
        for mode in servers
    }
    for server in servers.values():
        run_clients(server.port, sentences, CLIENTS, 2)  # warm-up: several batch sizes
    for number in range(rounds):
        order = list(servers) if number % 2 == 0 else list(reversed(servers))
        for clients, count in ((1, single), (CLIENTS, per_client)):
            for mode in order:
                server, total = servers[mode], totals[mode][clients]
                before = server.get("/healthz")[1]
                run = run_clients(server.port, sentences, clients, count)
                after = server.get("/healthz")[1]
                if run["failures"]:
                    raise SystemExit(
                        f"{len(run['failures'])} requests failed: {run['failures'][:3]}"
                    )
                total["seconds"] += run["seconds"]
                total["latencies"] += run["latencies"]
                total["sentences"] += after["sentences"] - before["sentences"]
                total["batches"] += after["batches"] - before["batches"]
                total["texts"].update(run["translations"])
                print(
                    f"  round {number + 1}, batching {mode}, {clients:2d} client(s): "
                    f"{len(run['latencies'])} requests in {run['seconds']:.1f} s",
                    flush=True,
                )
    results: dict[str, dict[int, dict]] = {}
    for mode, by_clients in totals.items():
        results[mode] = {}
        for clients, total in by_clients.items():
            latencies = sorted(total["latencies"])
            results[mode][clients] = {
                "requests": len(latencies),
                "throughput": len(latencies) / total["seconds"],
                "p50_ms": 1000 * percentile(latencies, 0.50),
                "p99_ms": 1000 * percentile(latencies, 0.99),
                "mean_batch": total["sentences"] / max(total["batches"], 1),
                "translations": total["texts"],
            }
            r = results[mode][clients]
            print(
                f"batching {mode}, {clients:2d} client(s): {r['requests']} requests, "
                f"{r['throughput']:.2f} sentences/s; latency p50 {r['p50_ms']:.0f} ms, "
                f"p99 {r['p99_ms']:.0f} ms; mean batch {r['mean_batch']:.1f}",
                flush=True,
            )
    return results


def model_ceiling(export_base: Path, sentences: list[str], rounds: int) -> dict[str, float]:
    """The SavedModel in this process, no HTTP: CLIENTS sentences one by one vs one batch.

    The ratio is what batching can give at most for this model on this machine.
    """
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece ops)

    versions = sorted((int(p.name), p) for p in export_base.iterdir() if p.name.isdigit())
    translate = tf.saved_model.load(str(versions[-1][1])).signatures["serving_default"]
    batch = sentences[:CLIENTS]
    translate(inputs=tf.constant(batch))  # warm-up
    translate(inputs=tf.constant(batch[:1]))
    alone = together = 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        for sentence in batch:
            translate(inputs=tf.constant([sentence]))
        alone += time.perf_counter() - started
        started = time.perf_counter()
        translate(inputs=tf.constant(batch))
        together += time.perf_counter() - started
    return {"alone": rounds * len(batch) / alone, "together": rounds * len(batch) / together}


def build_export(args: argparse.Namespace, data: Path, scratch: Path) -> tuple[Path, str]:
    """An export of --model, or of a random-weights model; returns (base, description)."""
    from translator.export import ExportConfig, export_model
    from translator.search import SearchConfig

    config = ExportConfig(search=SearchConfig(beam_size=4, length_penalty=0.6))
    if args.model:
        started = time.perf_counter()
        version = export_model(args.model, scratch / "export", config)
        print(f"exported {args.model} in {time.perf_counter() - started:.1f} s")
        return version.parent, render("model-trained", model=args.model)

    import keras

    from translator import Transformer, TransformerConfig
    from translator.artifacts import save_model_dir
    from translator.pipelines import build_vocabulary, load_vocabulary

    preset, vocab_size = ("tiny", 1000) if args.short else ("small", 8000)
    lines = 5000 if args.short else None
    source, target = data / "train.en.gz", data / "train.de.gz"
    if lines:  # a quick vocabulary from the first lines
        source, target = scratch / "train.en", scratch / "train.de"
        for name, path in (("train.en.gz", source), ("train.de.gz", target)):
            with gzip.open(data / name, "rt", encoding="utf-8") as file:
                path.write_text("".join(next(file) for _ in range(lines)), "utf-8")
    started = time.perf_counter()
    build_vocabulary([source], [target], scratch / "vocab", vocab_size=vocab_size)
    vocabulary = load_vocabulary(scratch / "vocab")
    keras.utils.set_random_seed(0)
    model = Transformer(
        TransformerConfig.preset(preset, vocab_size=vocabulary.target_vocab_size, dropout=0.0)
    )
    model.build()
    model_dir = save_model_dir(scratch / "model", model, scratch / "vocab", {"weights": "random"})
    version = export_model(model_dir, scratch / "export", config)
    print(
        f"vocabulary, random `{preset}` model and export in {time.perf_counter() - started:.1f} s"
    )
    parameters = model.count_params() / 1e6
    description = render(
        "model-random", preset=preset, parameters=parameters, vocab_size=vocab_size
    )
    return version.parent, description


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.serving", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory with Multi30k (train and test_2016_flickr)")
    parser.add_argument("--model", help="a trained run or model directory to export and serve")
    parser.add_argument("--export", help="an existing export base to serve (skips exporting)")
    parser.add_argument(
        "--timeout",
        type=int,
        default=None,
        help="batch_timeout_micros of the batching server (default: the server's default)",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 2; short 1)")
    parser.add_argument(
        "--single", type=int, help="1-client requests per round and mode (default 30; short 6)"
    )
    parser.add_argument(
        "--per-client",
        type=int,
        help=f"requests per client of the {CLIENTS}-client runs, per round (default 8; short 2)",
    )
    parser.add_argument(
        "--short", action="store_true", help="quick check; does not write RESULTS.md"
    )
    args = parser.parse_args(argv)
    if args.timeout is None:
        from serving.config import BatchingConfig

        args.timeout = BatchingConfig().batch_timeout_micros
    rounds = args.rounds or (1 if args.short else 2)
    single = args.single or (6 if args.short else 30)
    per_client = args.per_client or (2 if args.short else 8)

    data = find_data(args.data, files=("train.en.gz", "train.de.gz", "test_2016_flickr.en.gz"))
    with gzip.open(data / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as file:
        sentences = [line.rstrip("\n") for line in file]
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {machine_summary()}; load average {load}", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-serving-") as scratch_name:
        scratch = Path(scratch_name)
        if args.export:
            export_base, model_note = Path(args.export), render("model-export", export=args.export)
        else:
            export_base, model_note = build_export(args, data, scratch)
        batching = ("--max-batch-size", str(MAX_BATCH_SIZE), "--batch-timeout-micros")
        batching += (str(args.timeout),)
        # Both servers at once (each loads while the other does), measured interleaved.
        servers = {
            "on": Server(export_base, scratch / "serve-on.log", batching),
            "off": Server(export_base, scratch / "serve-off.log", ("--no-batching",)),
        }
        try:
            for server in servers.values():
                server.wait_ready()
            modes = measure_rounds(servers, sentences, rounds, single, per_client)
        finally:
            codes = {mode: server.stop() for mode, server in servers.items()}
        if any(codes.values()):
            raise SystemExit(f"server exit codes on SIGTERM: {codes}")

        ceiling = None if args.short else model_ceiling(export_base, sentences, rounds)

    figures = comparison(modes)
    ratio = figures["ratio"]
    verdict = "meets" if ratio >= REQUIRED_RATIO else "MISSES"
    print(
        f"batching at {CLIENTS} clients: {ratio:.1f}x the throughput of no batching "
        f"({verdict} the {REQUIRED_RATIO:.0f}x target); at 1 client {figures['one_client']:.2f}x; "
        f"{figures['same']}/{figures['compared']} sequential translations identical across modes"
    )
    report_target(
        f"serving sentences/s, batching on / off at {CLIENTS} clients", ratio, REQUIRED_RATIO, "x"
    )
    if args.short:
        return 0
    model_ratio = ceiling["together"] / ceiling["alone"]
    print(
        f"in-process, no HTTP: {CLIENTS} sentences one by one {ceiling['alone']:.2f} "
        f"sentences/s, as one batch {ceiling['together']:.2f} sentences/s = {model_ratio:.1f}x"
    )

    markdown = section_markdown(modes, ceiling, rounds, args.timeout, model_note, load)
    path = update_section("serving", markdown)
    print(f"wrote the serving section of {path}")
    return 0


def comparison(modes: dict[str, dict[int, dict]]) -> dict:
    """Batching on over off: sentences/s at CLIENTS clients (`ratio`) and at 1 client
    (`one_client`); of the 1-client runs' sentences (`compared`), how many got the same
    translation (`same`)."""
    on, off = modes["on"], modes["off"]
    return {
        "ratio": on[CLIENTS]["throughput"] / off[CLIENTS]["throughput"],
        "one_client": on[1]["throughput"] / off[1]["throughput"],
        "same": sum(
            on[1]["translations"][i] == off[1]["translations"][i] for i in off[1]["translations"]
        ),
        "compared": len(off[1]["translations"]),
    }


def results_rows(modes: dict[str, dict[int, dict]], timeout: int) -> str:
    """The table's rows: per server (batching on, off), 1 client then CLIENTS."""
    rows = []
    for mode, label in (
        ("on", render("label-on", max_batch_size=MAX_BATCH_SIZE, timeout=timeout)),
        ("off", render("label-off")),
    ):
        for clients in (1, CLIENTS):
            # requests, throughput, p50_ms, p99_ms, mean_batch (and translations, unused)
            rows.append(render("row", label=label, clients=clients, **modes[mode][clients]))
    return "\n".join(rows)


def section_markdown(
    modes: dict[str, dict[int, dict]],
    ceiling: dict[str, float],
    rounds: int,
    timeout: int,
    model_note: str,
    load: str,
) -> str:
    """The RESULTS.md section: the template filled with this run's figures.

    Args:
        modes: `measure_rounds`' figures, {"on" | "off": {clients: figures}}.
        ceiling: `model_ceiling`'s sentences/s, one by one ("alone") and as one batch.
        rounds: Interleaved rounds.
        timeout: batch_timeout_micros of the batching server.
        model_note: What was served (a model-* part).
        load: The load average at the start.
    """
    figures = comparison(modes)
    ratio = figures["ratio"]
    model_ratio = ceiling["together"] / ceiling["alone"]
    if ratio >= REQUIRED_RATIO:
        why = render("why-batching-pays")
    else:
        why = render(
            "why-row-cost" if ratio >= 0.9 * model_ratio else "why-row-cost-and-server",
            required_ratio=REQUIRED_RATIO,
        )
    return render(
        "section",
        **figures,
        rows=results_rows(modes, timeout),
        rounds=rounds,
        required_ratio=REQUIRED_RATIO,
        clients=CLIENTS,
        verdict="meets" if ratio >= REQUIRED_RATIO else "MISSES",
        timeout_ms=timeout / 1000,
        alone=ceiling["alone"],
        together=ceiling["together"],
        model_ratio=model_ratio,
        share=ratio / model_ratio,
        why=why,
        model=model_note,
        command=command_line(),
        date=today(),
        machine=machine_summary(),
        load=load,
    )


if __name__ == "__main__":
    sys.exit(main())
