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

The section's words are in bench/templates/pipeline.md; this module measures the figures
and fills them in.
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

from bench.results import (
    TEMPLATES,
    bind_template,
    command_line,
    machine_summary,
    report_target,
    today,
    update_section,
)

REPO = Path(__file__).resolve().parents[1]
# The words of the section, filled in by `render`.
TEMPLATE = TEMPLATES / "pipeline.md"
template_parts, render = bind_template(TEMPLATE)
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

    figures = steady_state(epochs)
    rate, ratio = figures["rate"], figures["ratio"]
    verdict = "meets" if ratio >= REQUIRED_RATIO else "MISSES"
    print(
        f"steady state (epochs 2-{args.epochs}): {rate:,.0f} target tok/s "
        f"({figures['source_rate']:,.0f} source tok/s) = {ratio:.1f}x the training rate of "
        f"{TRAINING_RATE:,} target tok/s; {verdict} the {REQUIRED_RATIO}x target "
        f"({REQUIRED_RATIO * TRAINING_RATE:,} tok/s)"
    )

    report_target("pipeline target tokens/s over the training goal", ratio, REQUIRED_RATIO, "x")

    if args.write:
        markdown = section_markdown(
            args, config, vocabulary.target_vocab_size, vocab_seconds, epochs, setup_seconds, load
        )
        path = update_section("pipeline", markdown)
        print(f"wrote the pipeline section of {path}")
    return 0


def steady_state(epochs: list[tuple]) -> dict[str, float]:
    """The run's figures from its epochs.

    Args:
        epochs: Per epoch (seconds, target tokens, source tokens, padded target positions,
            batches, pairs); the first is the warm-up.

    Returns:
        Target and source tokens/s of the later epochs (`rate`, `source_rate`), the first
        epoch's target tokens/s (`first_rate`), its share of real target positions
        (`fill`) and `rate` over the training rate (`ratio`).
    """
    steady = epochs[1:]
    steady_seconds = sum(e[0] for e in steady)
    rate = sum(e[1] for e in steady) / steady_seconds
    return {
        "rate": rate,
        "source_rate": sum(e[2] for e in steady) / steady_seconds,
        "first_rate": epochs[0][1] / epochs[0][0],
        "fill": epochs[0][1] / epochs[0][3],
        "ratio": rate / TRAINING_RATE,
    }


def section_markdown(
    args,
    config,
    vocab_size: int,
    vocab_seconds: float | None,
    epochs: list[tuple],
    setup_seconds: float,
    load: str,
) -> str:
    """The RESULTS.md section: the template filled with this run's figures.

    Args:
        args: The options (`epochs`, `vocab`).
        config: The `PipelineConfig` measured.
        vocab_size: Target ids of the vocabulary.
        vocab_seconds: Seconds the vocabulary took to train, None if --vocab gave it.
        epochs: Per epoch, as `steady_state` takes them.
        setup_seconds: Seconds of `make_dataset`'s validation and counting pass.
        load: The load average at the start.
    """
    figures = steady_state(epochs)
    if vocab_seconds is not None:
        vocabulary = render("vocabulary-trained", vocab_size=vocab_size, seconds=vocab_seconds)
    else:
        vocabulary = render("vocabulary-given", vocab_size=vocab_size, directory=args.vocab)
    return render(
        "section",
        **figures,
        required_ratio=REQUIRED_RATIO,
        training_rate=TRAINING_RATE,
        goal=REQUIRED_RATIO * TRAINING_RATE,
        epochs=args.epochs,
        verdict="meets" if figures["ratio"] >= REQUIRED_RATIO else "MISSES",
        epoch_tokens=epochs[0][1],
        epoch_batches=epochs[0][4],
        setup_seconds=setup_seconds,
        batch_tokens=config.batch_tokens,
        bucket_width=config.bucket_width,
        max_source_length=config.max_source_length,
        max_target_length=config.max_target_length,
        shuffle_buffer_size=config.shuffle_buffer_size,
        vocabulary=vocabulary,
        command=command_line(),
        date=today(),
        machine=machine_summary(),
        load=load,
    )


if __name__ == "__main__":
    sys.exit(main())
