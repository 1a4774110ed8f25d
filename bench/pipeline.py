"""Input pipeline throughput on Multi30k: target tokens per second out of `make_dataset`.

    python -m bench.pipeline [--short] [--vocab DIR] [--epochs N]

The pipeline must deliver at least 20x the 5,400 target tokens/s a training step was set
to consume (issue 4). Real target tokens are counted in Python, epoch after epoch, with
training=True (shuffling, bucketing); epoch 1 starts the iterator, so the steady state is
the later epochs. Without --vocab an 8,000-id joint vocabulary is trained first (timed).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from bench import harness

render = harness.Template("pipeline")
TRAINING_RATE = 5_400  # target tokens/s a training step was set to consume (issue 4's goal)
REQUIRED_RATIO = 20


def parse_args(argv: list[str] | None):
    parser = harness.make_parser("pipeline", __doc__)
    parser.add_argument("--vocab", help="vocabulary directory to use instead of training one")
    parser.add_argument("--vocab-size", type=int, default=8000, help="ids of a trained one")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="token budget per batch")
    parser.add_argument("--epochs", type=int, help="epochs to time (default: 6, --short: 2)")
    args = harness.parse(parser, argv)
    args.epochs = args.epochs or (2 if args.short else 6)
    if args.epochs < 2:
        parser.error("--epochs must be >= 2 (epoch 1 is a warm-up)")
    return args


def time_epochs(dataset, epochs: int) -> list[tuple]:
    """Per epoch: (seconds, target tokens, source tokens, padded target positions, batches)."""
    import numpy as np

    figures = []
    for epoch in range(1, epochs + 1):
        batches = target = source = padded = 0
        start = time.perf_counter()
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from translator import pipelines

    data = harness.find_data(args.data)
    source, target = data / "train.en.gz", data / "train.de.gz"
    vocab_seconds = None
    with tempfile.TemporaryDirectory(prefix="bench-vocab-") as scratch:
        vocab_dir = Path(args.vocab or Path(scratch) / "vocab")
        if not args.vocab:
            start = time.perf_counter()
            pipelines.build_vocabulary([source], [target], vocab_dir, vocab_size=args.vocab_size)
            vocab_seconds = time.perf_counter() - start
        vocabulary = pipelines.load_vocabulary(vocab_dir)
        config = pipelines.PipelineConfig(batch_tokens=args.batch_tokens)
        start = time.perf_counter()
        dataset = pipelines.make_dataset(source, target, vocabulary, config, training=True)
        setup_seconds = time.perf_counter() - start
        stats = pipelines.scan_corpus(source, target, vocabulary, config)  # cached: free
        print(
            f"make_dataset (validation + counting pass): {setup_seconds:.2f} s; {stats.summary()}"
        )
        epochs = time_epochs(dataset, args.epochs)
        assert all(e[1] == stats.target_tokens for e in epochs)  # every pair once an epoch

    figures = steady_state(epochs)
    print(f"steady state (epochs 2-{args.epochs}): {figures['rate']:,.0f} target tok/s")
    harness.report_target(
        "pipeline target tokens/s over the training goal", figures["ratio"], REQUIRED_RATIO, "x"
    )
    size = vocabulary.target_vocab_size
    harness.publish(
        args, "pipeline", section_markdown, args, config, size, vocab_seconds, epochs, setup_seconds
    )
    return 0


def steady_state(epochs: list[tuple]) -> dict[str, float]:
    """Target and source tokens/s after the first epoch, its rate and fill, and the ratio."""
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


def section_markdown(args, config, vocab_size, vocab_seconds, epochs, setup_seconds) -> str:
    """The section: the template filled with this run's figures."""
    figures = steady_state(epochs)
    if vocab_seconds is None:
        vocabulary = render("vocabulary-given", vocab_size=vocab_size, directory=args.vocab)
    else:
        vocabulary = render("vocabulary-trained", vocab_size=vocab_size, seconds=vocab_seconds)
    settings = ("batch_tokens", "bucket_width", "max_source_length", "max_target_length")
    return render(
        "section",
        **figures,
        **{name: getattr(config, name) for name in (*settings, "shuffle_buffer_size")},
        **harness.footer(),
        required_ratio=REQUIRED_RATIO,
        training_rate=TRAINING_RATE,
        goal=REQUIRED_RATIO * TRAINING_RATE,
        epochs=args.epochs,
        verdict=harness.verdict(figures["ratio"], REQUIRED_RATIO),
        epoch_tokens=epochs[0][1],
        epoch_batches=epochs[0][4],
        setup_seconds=setup_seconds,
        vocabulary=vocabulary,
    )


if __name__ == "__main__":
    sys.exit(main())
