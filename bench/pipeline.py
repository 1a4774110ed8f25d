"""Input pipeline throughput on Multi30k: target tokens/s out of `make_dataset`; epoch 1
starts the iterator (shuffle buffer, first traces), the steady state is the rest."""

import tempfile
import time
from pathlib import Path

import numpy as np

from bench import harness
from translator import pipelines

render = harness.Template("pipeline")
TRAINING_RATE = 5_400  # target tokens/s a training step was set to consume (issue 4's goal)
REQUIRED_RATIO = 20
VOCAB_SIZE, BATCH_TOKENS = 8000, 4096


def time_epochs(dataset, epochs: int) -> list[tuple]:
    """Per epoch: (seconds, target tokens, source tokens, padded target positions, batches)."""
    figures = []
    for epoch in range(1, epochs + 1):
        start, batches, target, source, padded = time.perf_counter(), 0, 0, 0, 0
        for features, labels in dataset:
            labels = labels.numpy()
            batches += 1
            target += int(np.count_nonzero(labels))
            padded += labels.size
            source += int(np.count_nonzero(features["source_ids"].numpy()))
        figures.append((time.perf_counter() - start, target, source, padded, batches))
        rate = target / figures[-1][0]
        print(f"epoch {epoch}: {target:,} target tokens in {batches} batches, {rate:,.0f} tok/s")
    return figures


def steady_state(epochs: list[tuple]) -> dict[str, float]:
    steady = epochs[1:]
    seconds = sum(e[0] for e in steady)
    rate = sum(e[1] for e in steady) / seconds
    return {
        "rate": rate,
        "source_rate": sum(e[2] for e in steady) / seconds,
        "first_rate": epochs[0][1] / epochs[0][0],
        "fill": epochs[0][1] / epochs[0][3],
        "ratio": rate / TRAINING_RATE,
    }


def section_markdown(config, vocab_size, vocab_seconds, epochs, setup_seconds) -> str:
    """The section: the template filled with this run's figures (its local names)."""
    figures, last_epoch = steady_state(epochs), len(epochs)
    epoch_tokens, epoch_batches = epochs[0][1], epochs[0][4]
    required_ratio, training_rate = REQUIRED_RATIO, TRAINING_RATE
    goal = REQUIRED_RATIO * TRAINING_RATE
    verdict = harness.verdict(figures["ratio"], REQUIRED_RATIO)
    return render("section", **figures, **harness.footer(), **locals())


@harness.command
def main(argv: list[str] | None = None) -> int:
    args = harness.parse(harness.make_parser("pipeline", __doc__), argv, epochs=(6, 2))
    data = harness.find_data(args.data)
    source, target = data / "train.en.gz", data / "train.de.gz"
    with tempfile.TemporaryDirectory(prefix="bench-vocab-") as scratch:
        start = time.perf_counter()
        vocabulary = harness.vocabulary(Path(scratch) / "vocab", data, VOCAB_SIZE)
        vocab_seconds = time.perf_counter() - start  # the load included: milliseconds
        config = pipelines.PipelineConfig(batch_tokens=BATCH_TOKENS)
        start = time.perf_counter()
        dataset = pipelines.make_dataset(source, target, vocabulary, config, training=True)
        setup_seconds = time.perf_counter() - start
        stats = pipelines.scan_corpus(source, target, vocabulary, config)  # cached: free
        print(f"make_dataset: {setup_seconds:.2f} s; {stats.summary()}", flush=True)
        epochs = time_epochs(dataset, args.epochs)
        assert all(e[1] == stats.target_tokens for e in epochs)  # every pair once an epoch
    figures = steady_state(epochs)
    print(f"steady state (epochs 2-{args.epochs}): {figures['rate']:,.0f} target tok/s")
    name = "pipeline target tokens/s over the training goal"
    harness.report_target(name, figures["ratio"], REQUIRED_RATIO, "x")
    figures = (config, vocabulary.target_vocab_size, vocab_seconds, epochs, setup_seconds)
    return harness.publish(args, "pipeline", section_markdown, *figures)
