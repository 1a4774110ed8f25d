"""Training step speed on Multi30k: the ways to a faster step, measured side by side.

    python -m bench.training [--short] [--vocab DIR] [--steps N] [--warmup N]

Two shapes, `small` (the comparison shape) and `narrow` (what the planner picks for
Multi30k), the real pipeline and step (`TranslationTrainer` under `fit`), one variant
after another: float32 and mixed_bfloat16, an XLA step, steps per execution, bucket
widths. MFU = model FLOPs/s (`translator.flops`) over this machine's matmul FLOP/s in
the same dtype, both measured in this run.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

from bench import harness

render = harness.Template("training")
NARROW = (
    "model.overrides={num_encoder_layers: 4, num_decoder_layers: 4, d_model: 128, "
    "ffn_dim: 256, num_heads: 4}"
)
STATIC = (
    "train.jit_compile=true",
    "data.pipeline.static_shapes=true",
    "data.pipeline.bucket_boundaries=[16, 24, 32, 48, 64]",
)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of running the training step: its shape, table label, precision, `--set`s."""

    shape: str
    label: str
    precision: str
    overrides: tuple[str, ...] = ()


def variants(auto: str, short: bool) -> list[Variant]:
    """The variants in the order they run; `auto` is the precision `auto` picks here."""
    if short:
        return [Variant("tiny", "default", "float32")]
    narrow = [
        (f"{auto}, XLA step, 6 static shapes", STATIC),
        (f"{auto}, 4 steps per execution", ("train.steps_per_execution=4",)),
        (f"{auto}, buckets of 2", ("data.pipeline.bucket_width=2",)),
        (f"{auto}, buckets of 8", ("data.pipeline.bucket_width=8",)),
    ]
    return [
        *(
            Variant(s, p, p, o)
            for s, o in (("small", ()), ("narrow", (NARROW,)))
            for p in PRECISIONS
        ),
        *(Variant("narrow", label, auto, (NARROW, *overrides)) for label, overrides in narrow),
    ]


PRECISIONS = ("float32", "mixed_bfloat16")


def matmul_flops_per_second(dtype: str, size: int = 2048, repeats: int = 8) -> float:
    """Sustained FLOP/s of a square matmul in `dtype` (the MFU denominator), best of 3."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal((size, size)), dtype)

    @tf.function
    def run(x):
        for _ in range(repeats):
            x = tf.matmul(x, a) * tf.cast(1e-3, dtype)  # scaled to stay finite
        return x

    seconds, _ = harness.best_of(lambda: run(a).numpy(), 3)
    return 2.0 * size**3 * repeats / seconds


def train_throughput(variant: Variant, data: Path, vocabulary, warmup: int, steps: int) -> dict:
    """Trains `variant` for warmup + steps updates; times the last `steps`."""
    import keras

    from training.config import load_config
    from training.run import make_optimizer
    from training.trainer import TranslationTrainer
    from translator import Transformer
    from translator.flops import training_flops
    from translator.pipelines import make_dataset, scan_corpus

    keras.config.set_dtype_policy(variant.precision)
    keras.utils.set_random_seed(1)
    preset = "tiny" if variant.shape == "tiny" else "small"
    lengths = ("data.pipeline.max_source_length=128", "data.pipeline.max_target_length=128")
    run_config = load_config(None, [f"model.preset={preset}", *lengths, *variant.overrides])
    pipeline, train = run_config.data.pipeline, run_config.train
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    config = run_config.model.transformer_config(*sizes)
    trainer = TranslationTrainer(Transformer(config))
    optimizer = make_optimizer(run_config, config.d_model)
    per_call = train.steps_per_execution
    trainer.compile(
        optimizer=optimizer, jit_compile=train.jit_compile, steps_per_execution=per_call
    )
    source, target = data / "train.en.gz", data / "train.de.gz"
    dataset = make_dataset(source, target, vocabulary, pipeline, training=True).repeat()
    # Model FLOPs per target token at the corpus' mean lengths (EOS/BOS included).
    stats = scan_corpus(source, target, vocabulary, pipeline)
    mean_source, mean_target = stats.source_tokens / stats.kept, stats.target_tokens / stats.kept
    flops_per_token = float(training_flops(config, mean_source, mean_target)) / mean_target

    marks = {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks[batch + 1] = (time.perf_counter(), float(logs["tokens"]))

    total = warmup + steps
    total += -total % per_call  # whole executions
    started = time.perf_counter()
    trainer.fit(dataset, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[Clock()])
    (t0, tokens0), (t1, tokens1) = marks[min(s for s in marks if s >= warmup)], marks[max(marks)]
    rate = (tokens1 - tokens0) / (t1 - t0)
    keras.config.set_dtype_policy("float32")
    return {
        "variant": variant,
        "tokens_per_second": rate,
        "model_flops_per_second": rate * flops_per_token,
        "warmup_seconds": t0 - started,
        "flops_per_target_token": flops_per_token,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; writes its RESULTS.md section unless --short."""
    parser = harness.make_parser("training", __doc__)
    parser.add_argument("--vocab", help="vocabulary directory (default: train an 8,000-piece one)")
    parser.add_argument("--steps", type=int, help="timed steps per variant (default 40, short 2)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 10, short 1)")
    args = harness.parse(parser, argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("translator.pipelines").setLevel(logging.ERROR)
    steps = args.steps or (2 if args.short else 40)
    warmup = args.warmup or (1 if args.short else 10)

    import tensorflow as tf

    from training.strategy import select_precision
    from translator.pipelines import build_vocabulary, load_vocabulary

    auto = select_precision("auto", tf.distribute.get_strategy())
    data = harness.find_data(args.data)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_dir = args.vocab or Path(scratch) / "vocab"
        if args.vocab is None:
            build_vocabulary(
                [data / "train.en.gz"], [data / "train.de.gz"], vocab_dir, vocab_size=8000
            )
        vocabulary = load_vocabulary(vocab_dir)
        peaks = {p: matmul_flops_per_second(p.removeprefix("mixed_")) for p in PRECISIONS}
        runs = []
        for variant in variants(auto, args.short):
            runs.append(train_throughput(variant, data, vocabulary, warmup, steps))
            rate = runs[-1]["tokens_per_second"]
            print(f"{variant.shape} {variant.label}: {rate:,.0f} tok/s", flush=True)
    table = throughput_table(runs, peaks)
    print(table)
    harness.publish(args, "training", training_markdown, runs, peaks, auto, warmup, steps, table)
    return 0


def throughput_table(runs: list[dict], peaks: dict[str, float]) -> str:
    """One row per variant: tokens/s, against the shape's first row, MFU, warm-up."""
    first, rows = {}, []
    for run in runs:
        variant, rate = run["variant"], run["tokens_per_second"]
        first.setdefault(variant.shape, rate)
        peak = peaks["mixed_bfloat16" if "bfloat16" in variant.precision else "float32"]
        model = run["model_flops_per_second"]
        rows.append(
            render(
                "table-row",
                shape=variant.shape,
                label=variant.label,
                rate=rate,
                vs_first=rate / first[variant.shape],
                model_gflops=model / 1e9,
                matmul_gflops=peak / 1e9,
                mfu=model / peak,
                warmup=run["warmup_seconds"],
            )
        )
    return render("table", rows="\n".join(rows))


def variant_verdict(runs: list[dict], auto: str) -> str:
    """Each narrow variant against the default step (the first narrow run in `auto`)."""
    narrow = [run for run in runs if run["variant"].shape == "narrow"]
    default, *others = [run for run in narrow if run["variant"].precision == auto] or [None]
    if default is None:
        return ""
    rate = default["tokens_per_second"]
    ratios = ", ".join(
        f"{run['variant'].label.removeprefix(auto + ', ')} {run['tokens_per_second'] / rate:.2f}x"
        for run in others
    )
    kept = [run["variant"].label for run in narrow if run["tokens_per_second"] > 1.03 * rate]
    faster = render("verdict-faster", labels=", ".join(kept)) if kept else render("verdict-none")
    return render("verdict", auto=auto, rate=rate, others=ratios, faster=faster)


def training_markdown(runs, peaks, auto, warmup, steps, table) -> str:
    """The section: the template filled with this run's figures."""
    from training.strategy import cpu_has_native_bfloat16

    flops = {run["variant"].shape: run["flops_per_target_token"] / 1e6 for run in runs}
    return render(
        "section",
        **harness.footer(),
        steps=steps,
        warmup=warmup,
        table=table,
        auto=auto,
        native_bfloat16="has" if cpu_has_native_bfloat16() else "does not have",
        bfloat16_gflops=peaks["mixed_bfloat16"] / 1e9,
        float32_gflops=peaks["float32"] / 1e9,
        verdict=variant_verdict(runs, auto),
        flops=", ".join(f"{shape} {value:.1f}" for shape, value in flops.items()),
    )


if __name__ == "__main__":
    sys.exit(main())
