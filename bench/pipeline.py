"""Input pipeline throughput on Multi30k: target tokens per second out of `make_dataset`.

    python -m bench.pipeline            # full: 6 epochs, writes its section of RESULTS.md
    python -m bench.pipeline --short    # 2 epochs, prints only (CI smoke run)
    python bench/pipeline.py --data DIR --vocab DIR

The pipeline must outpace training by a wide margin: it must deliver at least 20x the
5,400 target tokens/s that a training step was set to consume (issue 4's goal for the
step), i.e. 108,000 target tokens/s. The figure counts real target tokens (labels that
are not padding) arriving in Python, one full epoch after another, with training=True
(shuffling, bucketing). Epoch 1 includes starting the iterator; the steady-state figure
is over the later epochs. The one-off validation and counting pass of `make_dataset`
(`scan_corpus`) is timed apart.

Data: --data, else $TRANSLATOR_DATA_MIRROR (or its multi30k/ subdirectory), else
<repo>/../shared/data/multi30k. Vocabulary: --vocab, else a joint 8,000-id unigram model
is trained into a temporary directory first (timed as well).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/pipeline.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import command_line, machine_summary, report_target, today, update_section

REPO = Path(__file__).resolve().parents[1]
TRAINING_RATE = 5_400  # target tokens/s a training step was set to consume (issue 4's goal)
REQUIRED_RATIO = 20


def find_data(
    explicit: str | None, files: tuple[str, ...] = ("train.en.gz", "train.de.gz")
) -> Path:
    """The Multi30k directory holding `files`: --data, else $TRANSLATOR_DATA_MIRROR (or its
    multi30k/), else <repo>/../shared/data/multi30k; exits with a message if none has them."""
    candidates = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get("TRANSLATOR_DATA_MIRROR"):
        mirror = Path(os.environ["TRANSLATOR_DATA_MIRROR"])
        candidates += [mirror / "multi30k", mirror]
    else:
        candidates.append(REPO.parent / "shared" / "data" / "multi30k")
    for directory in candidates:
        if all((directory / name).is_file() for name in files):
            return directory
    raise SystemExit(
        f"bench: Multi30k {'/'.join(files)} not found in "
        f"{', '.join(map(str, candidates))}; pass --data DIR or set TRANSLATOR_DATA_MIRROR"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory with Multi30k train.{en,de}.gz")
    parser.add_argument("--vocab", help="vocabulary directory to use instead of training one")
    parser.add_argument(
        "--vocab-size", type=int, default=8000, help="ids of the trained vocabulary"
    )
    parser.add_argument("--batch-tokens", type=int, default=4096, help="token budget per batch")
    parser.add_argument("--epochs", type=int, help="epochs to time (default: 6, --short: 2)")
    parser.add_argument("--short", action="store_true", help="quick run: 2 epochs, no RESULTS.md")
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="update bench/RESULTS.md (default: yes for full runs, no with --short)",
    )
    args = parser.parse_args(argv)
    args.epochs = args.epochs or (2 if args.short else 6)
    if args.epochs < 2:
        parser.error("--epochs must be >= 2 (epoch 1 is a warm-up)")
    if args.write is None:
        args.write = not args.short
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    from translator.pipelines import (
        PipelineConfig,
        build_vocabulary,
        load_vocabulary,
        make_dataset,
        scan_corpus,
    )

    load = "/".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    data = find_data(args.data)
    source, target = data / "train.en.gz", data / "train.de.gz"
    print(f"data: {data}")
    print(f"machine: {machine_summary()}; load average {load}")

    vocab_seconds = None
    with tempfile.TemporaryDirectory(prefix="bench-vocab-") as scratch:
        vocab_dir = Path(args.vocab) if args.vocab else Path(scratch) / "vocab"
        if not args.vocab:
            start = time.perf_counter()
            build_vocabulary([source], [target], vocab_dir, vocab_size=args.vocab_size)
            vocab_seconds = time.perf_counter() - start
            print(f"vocabulary: joint unigram {args.vocab_size} trained in {vocab_seconds:.1f} s")
        vocabulary = load_vocabulary(vocab_dir)
        config = PipelineConfig(batch_tokens=args.batch_tokens)

        start = time.perf_counter()
        dataset = make_dataset(source, target, vocabulary, config, training=True)
        setup_seconds = time.perf_counter() - start
        stats = scan_corpus(source, target, vocabulary, config)  # cached: free
        print(
            f"make_dataset (validation + counting pass): {setup_seconds:.2f} s; {stats.summary()}"
        )

        epochs = []
        for epoch in range(1, args.epochs + 1):
            batches = target_tokens = source_tokens = padded = pairs = 0
            start = time.perf_counter()
            for features, labels in dataset:
                labels = labels.numpy()
                batches += 1
                pairs += labels.shape[0]
                target_tokens += int(np.count_nonzero(labels))
                padded += labels.size
                source_tokens += int(np.count_nonzero(features["source_ids"].numpy()))
            seconds = time.perf_counter() - start
            epochs.append((seconds, target_tokens, source_tokens, padded, batches, pairs))
            print(
                f"epoch {epoch}: {pairs:,} pairs in {batches} batches, {target_tokens:,} target "
                f"tokens in {seconds:.2f} s = {target_tokens / seconds:,.0f} target tok/s"
            )
            assert pairs == stats.kept and target_tokens == stats.target_tokens  # exactly once

    steady = epochs[1:]
    steady_seconds = sum(e[0] for e in steady)
    rate = sum(e[1] for e in steady) / steady_seconds
    source_rate = sum(e[2] for e in steady) / steady_seconds
    first_rate = epochs[0][1] / epochs[0][0]
    fill = epochs[0][1] / epochs[0][3]
    ratio = rate / TRAINING_RATE
    verdict = "meets" if ratio >= REQUIRED_RATIO else "MISSES"
    print(
        f"steady state (epochs 2-{args.epochs}): {rate:,.0f} target tok/s "
        f"({source_rate:,.0f} source tok/s) = {ratio:.1f}x the training rate of "
        f"{TRAINING_RATE:,} target tok/s; {verdict} the {REQUIRED_RATIO}x target "
        f"({REQUIRED_RATIO * TRAINING_RATE:,} tok/s)"
    )

    report_target("pipeline target tokens/s over the training goal", ratio, REQUIRED_RATIO, "x")

    if args.write:
        vocab_line = f"- Vocabulary: joint unigram, {vocabulary.target_vocab_size:,} ids" + (
            f", trained in {vocab_seconds:.1f} s"
            if vocab_seconds is not None
            else f" ({args.vocab})"
        )
        goal, goal_x = REQUIRED_RATIO * TRAINING_RATE, f"{REQUIRED_RATIO}x"
        settings = (
            f"PipelineConfig(batch_tokens={config.batch_tokens}, "
            f"bucket_width={config.bucket_width}, max_source_length={config.max_source_length}, "
            f"max_target_length={config.max_target_length}, "
            f"shuffle_buffer_size={config.shuffle_buffer_size})"
        )
        markdown = f"""
## Input pipeline (`bench/pipeline.py`)

Target tokens per second delivered by `make_dataset(..., training=True)` on the Multi30k
training set (29,000 pairs), read from gzip, tokenized in-graph, shuffled, bucketed and
padded, counted in Python as the batches arrive. Goal: at least {REQUIRED_RATIO}x the
training step's consumption of {TRAINING_RATE:,} target tok/s, i.e. {goal:,} target tok/s.

| figure | value |
|---|---|
| **steady state, target tokens/s** (epochs 2-{args.epochs}) | **{rate:,.0f}** |
| ratio to the training rate ({TRAINING_RATE:,} tok/s) | **{ratio:.1f}x** ({verdict} {goal_x}) |
| steady state, source tokens/s | {source_rate:,.0f} |
| epoch 1 (cold iterator), target tokens/s | {first_rate:,.0f} |
| target tokens per epoch (labels, EOS included) | {epochs[0][1]:,} in {epochs[0][4]} batches |
| real / padded target positions | {fill:.1%} |
| `make_dataset` setup (validation + counting pass, once) | {setup_seconds:.2f} s |

- Settings: `{settings}`
{vocab_line}
- Command: `{command_line()}`
- Date: {today()}
- Machine: {machine_summary()}; load average {load} at the start (other processes
  sharing the cores lower the figure)
"""
        path = update_section("pipeline", markdown)
        print(f"wrote the pipeline section of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
