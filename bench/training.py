"""Training step speed on Multi30k: the ways to a faster step, measured side by side.

Two shapes: the comparison shape (`small`: 3+3 layers, d_model 256, 4 heads, FFN 1024)
and the narrow shape the planner picks for Multi30k (`training/plan.py`: 4+4 layers, d_model
128, FFN 256), a joint 8,000-piece SentencePiece vocabulary, 4,096-token batches, the
real pipeline and the real training step (`TranslationTrainer` under `fit`), one process,
one variant after another: float32 and mixed_bfloat16, an XLA-compiled step (static
shapes from the bucket boundaries), several steps per execution, finer and coarser
length buckets. What wins is what the defaults do (precision `auto`).

MFU = model FLOPs/s (`translator.flops`, padding excluded) / the matrix-multiply FLOP/s
of this machine in the same compute dtype, both measured in this run.

    python -m bench.training            # full run, writes bench/RESULTS.md
    python -m bench.training --short    # a quick check, prints only

The section's words are in bench/templates/training.md; this module measures the figures
and fills them in.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bench.pipeline import find_data
from bench.results import TEMPLATES, command_line, machine_summary, today, update_section
from bench.results import (
    render as render_template,
)
from bench.results import (
    template_parts as results_template_parts,
)

# The words of the section, filled in by `render`.
TEMPLATE = TEMPLATES / "training.md"

NARROW = (
    "model.overrides={num_encoder_layers: 4, num_decoder_layers: 4, d_model: 128, "
    "ffn_dim: 256, num_heads: 4}"
)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of running the training step."""

    # Which shape: "small" (the comparison shape) or "narrow" (the short budgets').
    shape: str
    # What differs from the default, for the table.
    label: str
    # Keras dtype policy.
    precision: str
    # `--set` overrides of the default run config.
    overrides: tuple[str, ...] = ()


def variants(auto: str, short: bool) -> list[Variant]:
    """The variants in the order they run; `auto` is the precision `auto` picks here."""
    static = (
        "train.jit_compile=true",
        "data.pipeline.static_shapes=true",
        "data.pipeline.bucket_boundaries=[16, 24, 32, 48, 64]",
    )
    if short:
        return [Variant("tiny", "default", "float32")]
    return [
        Variant("small", "float32", "float32"),
        Variant("small", "mixed_bfloat16", "mixed_bfloat16"),
        Variant("narrow", "float32", "float32", (NARROW,)),
        Variant("narrow", "mixed_bfloat16", "mixed_bfloat16", (NARROW,)),
        Variant("narrow", f"{auto}, XLA step, 6 static shapes", auto, (NARROW, *static)),
        Variant(
            "narrow",
            f"{auto}, 4 steps per execution",
            auto,
            (NARROW, "train.steps_per_execution=4"),
        ),
        Variant("narrow", f"{auto}, buckets of 2", auto, (NARROW, "data.pipeline.bucket_width=2")),
        Variant("narrow", f"{auto}, buckets of 8", auto, (NARROW, "data.pipeline.bucket_width=8")),
    ]


def matmul_flops_per_second(dtype: str, size: int = 2048, repeats: int = 8) -> float:
    """Sustained FLOP/s of a square matmul in `dtype` (the MFU denominator)."""
    import tensorflow as tf

    a = tf.random.normal((size, size), dtype=tf.float32)
    a = tf.cast(a, dtype)

    @tf.function
    def run(x):
        for _ in range(repeats):
            x = tf.matmul(x, a) * tf.cast(1e-3, dtype)  # scaled to stay finite
        return x

    run(a).numpy()  # trace and warm up
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        run(a).numpy()
        best = max(best, 2.0 * size**3 * repeats / (time.perf_counter() - started))
    return best


def train_throughput(variant: Variant, data, vocabulary, warmup: int, steps: int) -> dict:
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
    run_config = load_config(
        None,
        [
            f"model.preset={preset}",
            "data.pipeline.max_source_length=128",
            "data.pipeline.max_target_length=128",
            *variant.overrides,
        ],
    )
    pipeline = run_config.data.pipeline
    config = run_config.model.transformer_config(
        vocabulary.source_vocab_size, vocabulary.target_vocab_size
    )
    trainer = TranslationTrainer(Transformer(config))
    trainer.compile(
        optimizer=make_optimizer(run_config, config.d_model),
        jit_compile=run_config.train.jit_compile,
        steps_per_execution=run_config.train.steps_per_execution,
    )
    source, target = data / "train.en.gz", data / "train.de.gz"
    dataset = make_dataset(source, target, vocabulary, pipeline, training=True).repeat()

    # Model FLOPs per target token at the corpus' mean lengths (EOS/BOS included).
    stats = scan_corpus(source, target, vocabulary, pipeline)
    mean_source = stats.source_tokens / stats.kept
    mean_target = stats.target_tokens / stats.kept
    flops_per_target_token = float(training_flops(config, mean_source, mean_target)) / mean_target

    marks = {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks[batch + 1] = (time.perf_counter(), float(logs["tokens"]))

    per_call = run_config.train.steps_per_execution
    total = warmup + steps
    total += -total % per_call  # whole executions
    started = time.perf_counter()
    trainer.fit(dataset, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[Clock()])
    first = min(step for step in marks if step >= warmup)
    (t0, tokens0), (t1, tokens1) = marks[first], marks[max(marks)]
    tokens_per_second = (tokens1 - tokens0) / (t1 - t0)
    keras.config.set_dtype_policy("float32")
    return {
        "variant": variant,
        "tokens_per_second": tokens_per_second,
        "model_flops_per_second": tokens_per_second * flops_per_target_token,
        "warmup_seconds": t0 - started,
        "steps": max(marks) - first,
        "flops_per_target_token": flops_per_target_token,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; writes its RESULTS.md section unless --short."""
    parser = argparse.ArgumentParser(prog="bench.training", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory with Multi30k train.{en,de}.gz")
    parser.add_argument("--vocab", help="vocabulary directory (default: train an 8,000-piece one)")
    parser.add_argument("--steps", type=int, help="timed steps per variant (default 40, short 2)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 10, short 1)")
    parser.add_argument(
        "--short",
        action="store_true",
        help="quick check of the code path with the tiny model; does not write RESULTS.md",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("translator.pipelines").setLevel(logging.ERROR)
    steps = args.steps or (2 if args.short else 40)
    warmup = args.warmup or (1 if args.short else 10)

    import tensorflow as tf

    from training.strategy import select_precision
    from translator.pipelines import build_vocabulary, load_vocabulary

    auto = select_precision("auto", tf.distribute.get_strategy())
    data = find_data(args.data)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_dir = args.vocab
        if vocab_dir is None:
            vocab_dir = os.path.join(scratch, "vocab")
            build_vocabulary(
                [data / "train.en.gz"], [data / "train.de.gz"], vocab_dir, vocab_size=8000
            )
        vocabulary = load_vocabulary(vocab_dir)
        peaks = {
            p: matmul_flops_per_second(d)
            for p, d in (("float32", "float32"), ("mixed_bfloat16", "bfloat16"))
        }
        runs = []
        for variant in variants(auto, args.short):
            runs.append(train_throughput(variant, data, vocabulary, warmup, steps))
            print(
                f"{variant.shape} {variant.label}: {runs[-1]['tokens_per_second']:,.0f} tok/s",
                flush=True,
            )
    table = throughput_table(runs, peaks)
    print(table)
    if args.short:
        return 0
    update_section("training", training_markdown(runs, peaks, auto, warmup, steps, table))
    return 0


def throughput_table(runs: list[dict], peaks: dict[str, float]) -> str:
    """One row per variant: tokens/s, against the shape's float32 row, MFU, warm-up."""
    baseline = {}
    rows = []
    for run in runs:
        variant = run["variant"]
        baseline.setdefault(variant.shape, run["tokens_per_second"])
        peak = peaks["mixed_bfloat16" if "bfloat16" in variant.precision else "float32"]
        rows.append(
            render(
                "table-row",
                shape=variant.shape,
                label=variant.label,
                rate=run["tokens_per_second"],
                vs_first=run["tokens_per_second"] / baseline[variant.shape],
                model_gflops=run["model_flops_per_second"] / 1e9,
                matmul_gflops=peak / 1e9,
                mfu=run["model_flops_per_second"] / peak,
                warmup=run["warmup_seconds"],
            )
        )
    return render("table", rows="\n".join(rows))


def variant_verdict(runs: list[dict], auto: str) -> str:
    """Each narrow variant against the default step (the narrow shape in `auto`)."""
    narrow = [run for run in runs if run["variant"].shape == "narrow"]
    default = next(
        (
            run
            for run in narrow
            if run["variant"].label == auto and run["variant"].precision == auto
        ),
        None,
    )
    if default is None:
        return ""
    others = [
        render(
            "verdict-other",
            label=run["variant"].label.removeprefix(auto + ", "),
            ratio=run["tokens_per_second"] / default["tokens_per_second"],
        )
        for run in narrow
        if run is not default and run["variant"].precision == auto
    ]
    kept = [run for run in narrow if run["tokens_per_second"] > 1.03 * default["tokens_per_second"]]
    if kept:
        faster = render("verdict-faster", labels=", ".join(run["variant"].label for run in kept))
    else:
        faster = render("verdict-none-faster")
    return render(
        "verdict",
        auto=auto,
        rate=default["tokens_per_second"],
        others=", ".join(others),
        faster=faster,
    )


def training_markdown(runs, peaks, auto, warmup, steps, table) -> str:
    """The RESULTS.md section: the template filled with this run's figures."""
    from training.strategy import cpu_has_native_bfloat16

    flops = {run["variant"].shape: run["flops_per_target_token"] / 1e6 for run in runs}
    return render(
        "section",
        steps=steps,
        warmup=warmup,
        table=table,
        auto=auto,
        native_bfloat16=render(
            "native-bfloat16" if cpu_has_native_bfloat16() else "no-native-bfloat16"
        ),
        bfloat16_gflops=peaks["mixed_bfloat16"] / 1e9,
        float32_gflops=peaks["float32"] / 1e9,
        verdict=variant_verdict(runs, auto),
        flops=", ".join(
            render("flops-item", shape=shape, value=value) for shape, value in flops.items()
        ),
        command=command_line(),
        date=today(),
        machine=machine_summary(),
    )


def template_parts() -> dict[str, str]:
    """{name: text} of this benchmark's template parts."""
    return results_template_parts(TEMPLATE)


def render(part: str, **figures) -> str:
    """This benchmark's template `part`, filled from `figures`."""
    return render_template(TEMPLATE, part, **figures)


if __name__ == "__main__":
    sys.exit(main())
