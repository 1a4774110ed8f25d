"""Serving with sentence splitting on (the default) against --no-split, at 16 clients.

    python -m bench.serving_split --model runs/m30k --data DIR

Two batching servers on one export, one-sentence requests of test_2016_flickr, rounds
interleaved (each server first in every other round). The server splits every string
before its batcher (`serving/splitting.py`), so what that costs shows here.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.serving import CLIENTS, MAX_BATCH_SIZE, run_clients
from serving.process import ServerProcess
from translator.export import ExportConfig, export_model
from translator.io import read_lines
from translator.search import SearchConfig


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, type=Path, help="holds test_2016_flickr.en.gz")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-client", type=int, default=8)
    parser.add_argument("--source", default="test_2016_flickr.en.gz")
    args = parser.parse_args(argv)
    sentences = read_lines(args.data / args.source)
    with tempfile.TemporaryDirectory(prefix="bench-serving-split-") as scratch_name:
        scratch = Path(scratch_name)
        config = ExportConfig(search=SearchConfig(beam_size=4, length_penalty=0.6))
        export = export_model(args.model, scratch / "export", config).parent
        batching = [f"--max-batch-size={MAX_BATCH_SIZE}", "--log-level=warning"]
        options = {"split": batching, "no-split": [*batching, "--no-split"]}
        servers = {
            mode: ServerProcess(export, scratch / f"{mode}.log", *option)
            for mode, option in options.items()
        }
        rates: dict[str, list[float]] = {mode: [] for mode in servers}
        try:
            for server in servers.values():
                server.wait_ready(timeout=600)
            for number in range(args.rounds):
                order = list(servers.items())  # each goes first in every other round
                for mode, server in order if number % 2 == 0 else order[::-1]:
                    result = run_clients(server.port, sentences, CLIENTS, args.per_client)
                    rates[mode].append(len(result["latencies"]) / result["seconds"])
        finally:
            for server in servers.values():
                server.stop()
    print("| server | sentences/s at 16 clients, per round | median |")
    print("|---|---|---:|")
    for mode, values in rates.items():
        listed = ", ".join(f"{value:.1f}" for value in values)
        print(f"| {mode} | {listed} | {statistics.median(values):.1f} |")
    ratio = statistics.median(rates["split"]) / statistics.median(rates["no-split"])
    print(f"\nsplit / no-split: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
